// Queue pair: creation, modify_qp and its state machine, posting, and the
// glue that runs the roles (see qp.h for the locking rules).
#include "hca/qp.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "common/asymmetric_fence.h"
#include "hca/cq.h"
#include "hca/qp_rules.h"
#include "hca/queue_engine.h"
#include "hca/srq.h"
#include "hca/translation_tables.h"
#include "srdma/access.h"

namespace srdma::hca {

Qp::Qp(QueueEngine& engine, TranslationTables& tables, std::uint32_t qpn, QpInit init)
    : engine_(engine), tables_(tables), qpn_(qpn), init_(std::move(init)), trains_(engine.link().carries_trains()),
      answers_inline_(engine.link().answers_inline()),
      udp_sport_(entropy_port(qpn)), recv_pdn_(init_.srq ? init_.srq->pdn() : init_.pdn) {
  sq_.resize(std::bit_ceil(sq_depth()));
  sq_mask_ = sq_.size() - 1;
  for (auto& w : sq_) {
    w.sges.reserve(init_.caps.max_send_sge);
    w.inline_data.reserve(init_.caps.max_inline_data);
  }
  // With an SRQ the QP has no receive queue of its own.
  rq_.resize(init_.srq ? 1 : std::bit_ceil(std::max<std::uint64_t>(init_.caps.max_recv_wr, 1)));
  rq_mask_ = rq_.size() - 1;
  if (!init_.srq)
    for (auto& r : rq_) r.sges.reserve(init_.caps.max_recv_sge);
}

Qp::~Qp() = default;

QpAttr Qp::attr() const {
  std::lock_guard lock(attr_mu_);
  QpAttr a = attr_;
  a.qp_state = a.cur_qp_state = state();
  return a;
}

Result<void> Qp::modify_locked(const QpAttr& in, std::uint32_t mask) {
  // Every enum and flag word from the caller is range-checked before it is
  // used (the transition table is indexed by state): unknown values are
  // EINVAL and change nothing.
  if (mask & ~kQpAttrMaskAll)
    return make_error(EINVAL, fmt::format("unknown attr_mask bits {:#x}", mask & ~kQpAttrMaskAll));
  if ((mask & QP_STATE) && !is_valid(in.qp_state))
    return make_error(EINVAL, fmt::format("qp_state {} is not a QP state", static_cast<unsigned>(in.qp_state)));
  if ((mask & QP_CUR_STATE) && !is_valid(in.cur_qp_state))
    return make_error(EINVAL, fmt::format("cur_qp_state {} is not a QP state", static_cast<unsigned>(in.cur_qp_state)));
  std::lock_guard sq(sq_mu_);
  std::lock_guard rq(rq_mu_);
  const QpState cur = state();
  const QpState next = mask & QP_STATE ? in.qp_state : cur;
  if ((mask & QP_CUR_STATE) && in.cur_qp_state != cur)
    return make_error(EINVAL, fmt::format("cur_qp_state {} but the QP is in {}", qp_state_str(in.cur_qp_state),
                                          qp_state_str(cur)));
  if (auto ok = check_qp_transition(init_.type, cur, next, mask); !ok) return ok;
  if ((mask & QP_ACCESS_FLAGS) && (in.qp_access_flags & ~kAccessAll))
    return make_error(EINVAL, "unknown bits in qp_access_flags");
  if ((mask & QP_MIN_RNR_TIMER) && in.min_rnr_timer > 31)
    return make_error(EINVAL, "min_rnr_timer is a 5-bit field");
  if ((mask & (QP_RETRY_CNT | QP_RNR_RETRY)) && (in.retry_cnt > 7 || in.rnr_retry > 7))
    return make_error(EINVAL, "retry_cnt and rnr_retry are 3-bit fields");
  if ((mask & QP_TIMEOUT) && in.timeout > 31) return make_error(EINVAL, "timeout is a 5-bit field");
  if ((mask & QP_PORT) && in.port_num != 1) return make_error(EINVAL, "the device has one port, port 1");
  if ((mask & QP_PATH_MTU) && (in.path_mtu < 256 || in.path_mtu > 4096 || (in.path_mtu & (in.path_mtu - 1))))
    return make_error(EINVAL, "path_mtu must be 256, 512, 1024, 2048 or 4096");
  if ((mask & QP_DEST_QPN) && in.dest_qp_num > 0xffffff) return make_error(EINVAL, "dest_qp_num is 24 bits");
  if ((mask & QP_MAX_QP_RD_ATOMIC) && in.max_rd_atomic > kMaxRdAtomic)
    return make_error(EINVAL, fmt::format("max_rd_atomic {} beyond the device's max_qp_init_rd_atom {}",
                                          in.max_rd_atomic, kMaxRdAtomic));
  if ((mask & QP_MAX_DEST_RD_ATOMIC) && in.max_dest_rd_atomic > kMaxRdAtomic)
    return make_error(EINVAL, fmt::format("max_dest_rd_atomic {} beyond the device's max_qp_rd_atom {}",
                                          in.max_dest_rd_atomic, kMaxRdAtomic));
  if ((mask & QP_PATH_MTU) && in.path_mtu > engine_.link().active_mtu())
    return make_error(EINVAL, fmt::format("path_mtu {} beyond the port's active MTU {}", in.path_mtu,
                                          engine_.link().active_mtu()));
  if ((mask & QP_AV) && !engine_.link_knows(in.dest_addr))
    return make_error(EINVAL, fmt::format("no device at address {:#x}", in.dest_addr));

  {
    std::lock_guard lock(attr_mu_);
    if (mask & QP_ACCESS_FLAGS) attr_.qp_access_flags = in.qp_access_flags;
    if (mask & QP_PKEY_INDEX) attr_.pkey_index = in.pkey_index;
    if (mask & QP_PORT) attr_.port_num = in.port_num;
    if (mask & QP_AV) attr_.dest_addr = in.dest_addr;
    if (mask & QP_PATH_MTU) attr_.path_mtu = in.path_mtu;
    if (mask & QP_TIMEOUT) attr_.timeout = in.timeout;
    if (mask & QP_RETRY_CNT) attr_.retry_cnt = in.retry_cnt;
    if (mask & QP_RNR_RETRY) attr_.rnr_retry = in.rnr_retry;
    if (mask & QP_RQ_PSN) attr_.rq_psn = in.rq_psn & 0xffffff;
    if (mask & QP_SQ_PSN) attr_.sq_psn = in.sq_psn & 0xffffff;
    if (mask & QP_MAX_QP_RD_ATOMIC) attr_.max_rd_atomic = in.max_rd_atomic;
    if (mask & QP_MAX_DEST_RD_ATOMIC) attr_.max_dest_rd_atomic = in.max_dest_rd_atomic;
    if (mask & QP_MIN_RNR_TIMER) attr_.min_rnr_timer = in.min_rnr_timer;
    if (mask & QP_DEST_QPN) attr_.dest_qp_num = in.dest_qp_num;
    if (mask & QP_QKEY) attr_.qkey = in.qkey;
  }
  {
    std::lock_guard lock(attr_mu_);
    req_.dest_addr = attr_.dest_addr;
    req_.dest_qpn = attr_.dest_qp_num;
    req_.timeout = attr_.timeout;
    req_.retry_cnt = attr_.retry_cnt;
    req_.rnr_retry = attr_.rnr_retry;
    // A UD datagram is one packet of at most the port's MTU (no path MTU).
    const std::uint32_t mtu = init_.type == QpType::kUd ? engine_.active_mtu() : attr_.path_mtu;
    req_.mtu = mtu;
    req_.mtu_shift = static_cast<std::uint8_t>(std::countr_zero(mtu));
    req_.qkey = attr_.qkey;
    resp_.qkey.store(attr_.qkey, std::memory_order_relaxed);
    req_.max_rd_atomic = attr_.max_rd_atomic;
    resp_.mtu.store(mtu, std::memory_order_relaxed);
    if (resp_.resources.size() != attr_.max_dest_rd_atomic) {
      resp_.resources.assign(attr_.max_dest_rd_atomic, RdAtomicResource{});
      resp_.next_resource = 0;
    }
    resp_.access.store(attr_.qp_access_flags, std::memory_order_relaxed);
    resp_.peer_addr.store(attr_.dest_addr, std::memory_order_relaxed);
    resp_.peer_qpn.store(attr_.dest_qp_num, std::memory_order_relaxed);
    resp_.min_rnr_timer = attr_.min_rnr_timer;
  }
  if (mask & QP_RQ_PSN) {
    resp_.expected_psn.store(in.rq_psn & kPsnMask, std::memory_order_release);
    resp_.nak_sent.store(false, std::memory_order_relaxed);
  }
  if (mask & QP_SQ_PSN) req_.next_psn = comp_.psn = req_.sent_end_psn = in.sq_psn & kPsnMask;
  if (mask & QP_RETRY_CNT) req_.retries_left = in.retry_cnt;
  if (mask & QP_RNR_RETRY) req_.rnr_retries_left = in.rnr_retry;

  if (next == QpState::kReset) {
    // RESET empties both queues without completions (IBA 10.3.1).
    sq_prod_ = req_.next = comp_.consumer = 0;
    req_.offset = req_.rd_atomic_outstanding = 0;
    comp_.read_retry_pending = false;
    rq_head_ = rq_tail_ = 0;
    srq_wqe_held_ = false;  // a WQE taken from the SRQ is lost with the QP's state (as on RESET of any QP)
    last_wqe_reported_ = false;
    resp_.in_message.store(ResponderState::InMessage::kNone, std::memory_order_relaxed);
    for (auto& r : resp_.resources) r.valid = false;
    respq_.queued.clear();  // a turn that is sending finds the queue empty and ends it
    if (!respq_.turn_sending) resp_.answers_queued.store(false, std::memory_order_release);
    respq_.dup_read_tokens = kDupReadBudget;
    req_.rnr_until = {};
    comp_.timeout_at = {};
    comp_.timeout_unstamped = false;
  }
  state_.store(next, std::memory_order_release);
  if (next == QpState::kErr && cur != QpState::kErr) {
    flush_recv_queue();
    flush_send_queue();
  }
  if (next == QpState::kRts && cur == QpState::kSqd) run_send_side();
  return {};
}

Result<void> Qp::modify(const QpAttr& in, std::uint32_t mask) {
  auto r = modify_locked(in, mask);
  take_stranded_responses();
  return r;
}

Result<void> Qp::post_send(const SendWr* wr, const SendWr** bad_wr, FastRegResolver resolve, AhResolver resolve_ah) {
  std::unique_lock lock(sq_mu_);
  const QpState s = state();
  Result<void> result;
  for (; wr; wr = wr->next) {
    if (s == QpState::kReset || s == QpState::kInit || s == QpState::kRtr) [[unlikely]] {
      result = make_error(EINVAL, fmt::format("cannot post sends in state {}", qp_state_str(s)));
    } else if (sq_prod_ - comp_.consumer >= sq_depth()) [[unlikely]] {
      result = make_error(ENOMEM, fmt::format("send queue full ({} WRs outstanding)", sq_depth()));
    } else if (std::uint64_t length; plain_data_wr(*wr, length)) [[likely]] {
      fill_data_wqe(wqe(sq_prod_), *wr, length);
      ++sq_prod_;
      continue;
    } else {
      result = post_one_checked(*wr, resolve, resolve_ah);
      if (result) continue;
    }
    if (bad_wr) *bad_wr = wr;
    break;
  }
  run_send_side();
  lock.unlock();
  take_stranded_responses();
  return result;
}

bool Qp::plain_data_wr(const SendWr& wr, std::uint64_t& length) const {
  // What most WRs are: an RC SEND or WRITE (with or without immediate or
  // invalidate) whose flags, SGE count and length pass every check below
  // in post_one_checked by construction.
  if (init_.type != QpType::kRc || !is_wr_opcode(wr.opcode) || wr_row(wr.opcode).cls != WrClass::kMessage ||
      (wr.send_flags & ~kSendFlagsAll) ||
      wr.num_sge < 0 || static_cast<std::uint32_t>(wr.num_sge) > init_.caps.max_send_sge ||
      (wr.num_sge > 0 && wr.sg_list == nullptr))
    return false;
  length = 0;
  for (int i = 0; i < wr.num_sge; ++i) length += wr.sg_list[i].length;
  return length <= ((wr.send_flags & SEND_INLINE) ? init_.caps.max_inline_data : 0x80000000ull);
}

void Qp::fill_data_wqe(SendWqe& w, const SendWr& wr, std::uint64_t length) {
  w.wr_id = wr.wr_id;
  w.opcode = wr.opcode;
  w.flags = wr.send_flags;
  w.imm = wr.opcode == WrOpcode::kSendWithInv ? wr.invalidate_rkey : wr.imm_data;
  w.remote_addr = wr.remote_addr;
  w.rkey = wr.rkey;
  w.local_done = false;
  w.compare_add = wr.compare_add;
  w.swap = wr.swap;
  w.length = static_cast<std::uint32_t>(length);
  w.is_inline = wr.send_flags & SEND_INLINE;
  // (Element by element: assign() calls memmove, dearer than one SGE.)
  w.sges.resize(static_cast<std::size_t>(wr.num_sge));
  for (int i = 0; i < wr.num_sge; ++i) w.sges[i] = wr.sg_list[i];
  w.inline_data.clear();
  if (w.is_inline) {
    // Inline data is copied now; its lkeys are not looked at.
    for (int i = 0; i < wr.num_sge; ++i) {
      const auto* p = reinterpret_cast<const std::byte*>(wr.sg_list[i].addr);
      w.inline_data.insert(w.inline_data.end(), p, p + wr.sg_list[i].length);
    }
  }
}

// Every check a WR must pass, for the WRs plain_data_wr does not vouch
// for; then the WR is queued.
Result<void> Qp::post_one_checked(const SendWr& wr, FastRegResolver resolve, AhResolver resolve_ah) {
  if (wr.num_sge < 0 || static_cast<std::uint32_t>(wr.num_sge) > init_.caps.max_send_sge)
    return make_error(EINVAL, fmt::format("num_sge {} beyond max_send_sge {}", wr.num_sge, init_.caps.max_send_sge));
  if (wr.num_sge > 0 && wr.sg_list == nullptr)
    return make_error(EINVAL, fmt::format("num_sge {} with a NULL sg_list", wr.num_sge));
  if (!is_wr_opcode(wr.opcode))
    return make_error(EINVAL, fmt::format("unknown opcode {}", static_cast<unsigned>(wr.opcode)));
  const WrOpcodeRow& row = wr_row(wr.opcode);
  if (wr.send_flags & ~kSendFlagsAll)
    return make_error(EINVAL, fmt::format("unknown send_flags bits {:#x}", wr.send_flags & ~kSendFlagsAll));
  // UD sends datagrams (IBA 9.8.4: SEND, SEND with immediate); UC has
  // no responder that answers (no READ, no atomics) and no invalidation.
  if (!row.valid_on(init_.type))
    return make_error(EINVAL, fmt::format("a {} QP does not send {}", qp_type_str(init_.type), row.name));
  UdAddress ud;
  if (init_.type == QpType::kUd) {
    if (!wr.ud.ah || !resolve_ah || !resolve_ah(wr.ud.ah, ud))
      return make_error(EINVAL, "a UD send needs a live address handle (wr.ud.ah)");
    if (ud.pdn != init_.pdn) return make_error(EINVAL, "the address handle is of another PD than the QP");
    if (wr.ud.remote_qpn > kPsnMask) return make_error(EINVAL, "remote_qpn is 24 bits");
  }
  if (wr.opcode == WrOpcode::kRegMr && (wr.access & ~kAccessAll))
    return make_error(EINVAL, fmt::format("unknown access bits {:#x} in REG_MR", wr.access & ~kAccessAll));
  const bool local_op = row.cls == WrClass::kLocal;
  if (local_op && (wr.send_flags & SEND_INLINE))
    return make_error(EINVAL, "REG_MR and LOCAL_INV carry no data: SEND_INLINE makes no sense");
  FastRegView mapping;
  if (wr.opcode == WrOpcode::kRegMr && (!wr.mr || !resolve || !resolve(wr.mr, mapping)))
    return make_error(EINVAL, "REG_MR needs a live MR from alloc_mr(kMemReg)");
  std::uint64_t length = 0;
  if (!local_op)  // local operations have no scatter/gather list
    for (int i = 0; i < wr.num_sge; ++i) length += wr.sg_list[i].length;
  const bool inl = wr.send_flags & SEND_INLINE;
  if (row.rd_atomic() && req_.max_rd_atomic == 0)
    return make_error(EINVAL, "max_rd_atomic is 0: this QP may not issue RDMA READs or atomics");
  if (inl && (length > init_.caps.max_inline_data || row.cls != WrClass::kMessage))
    return make_error(EINVAL, length > init_.caps.max_inline_data
                                  ? fmt::format("{} inline bytes beyond max_inline_data {}", length,
                                                init_.caps.max_inline_data)
                                  : std::string("inline data only with SEND and RDMA WRITE"));
  if (length > 0x80000000ull) return make_error(EINVAL, "a message is at most 2^31 bytes (IBA 9.4.4)");
  if (init_.type == QpType::kUd && length > req_.mtu)
    return make_error(EINVAL, fmt::format("a UD message of {} bytes is beyond the port's MTU {}", length, req_.mtu));

  SendWqe& w = wqe(sq_prod_);
  if (!local_op) {
    fill_data_wqe(w, wr, length);
  } else {
    w.wr_id = wr.wr_id;
    w.opcode = wr.opcode;
    w.flags = wr.send_flags;
    w.local_done = false;
    w.rkey = wr.opcode == WrOpcode::kRegMr ? wr.key : wr.invalidate_rkey;
    w.length = 0;
    w.is_inline = false;
    w.sges.clear();
    w.inline_data.clear();
    w.pages.clear();
    if (wr.opcode == WrOpcode::kRegMr) {
      // The mapping is the MR's now, not when the WQE executes: the
      // consumer may map the MR again as soon as this returns.
      w.access = wr.access;
      w.page_shift = mapping.page_shift;
      w.iova = mapping.iova;
      w.mr_length = mapping.length;
      w.pages.assign(mapping.pages.begin(), mapping.pages.end());
    }
  }
  if (init_.type == QpType::kUd) {
    w.ud_dest_addr = ud.dest_addr;
    w.ud_qpn = wr.ud.remote_qpn;
    w.ud_qkey = wr.ud.remote_qkey;
    w.ud_own_qkey = (wr.ud.remote_qkey & 0x80000000u) != 0;
    w.ud_hop_limit = ud.hop_limit;
    w.ud_traffic_class = ud.traffic_class;
  }
  ++sq_prod_;
  return {};
}

Result<void> Qp::post_recv(const RecvWr* wr, const RecvWr** bad_wr) {
  if (init_.srq) {
    if (bad_wr) *bad_wr = wr;
    return make_error(EINVAL, "the QP takes its receives from an SRQ: post them there");
  }
  std::lock_guard lock(rq_mu_);
  const QpState s = state();
  for (; wr; wr = wr->next) {
    auto refuse = [&](int code, std::string why) -> Result<void> {
      if (bad_wr) *bad_wr = wr;
      return make_error(code, std::move(why));
    };
    if (s == QpState::kReset) return refuse(EINVAL, "cannot post receives in state RESET");
    if (rq_tail_ - rq_head_ >= init_.caps.max_recv_wr)
      return refuse(ENOMEM, fmt::format("receive queue full ({} WRs)", init_.caps.max_recv_wr));
    if (wr->num_sge < 0 || static_cast<std::uint32_t>(wr->num_sge) > init_.caps.max_recv_sge)
      return refuse(EINVAL, fmt::format("num_sge {} beyond max_recv_sge {}", wr->num_sge, init_.caps.max_recv_sge));
    if (wr->num_sge > 0 && wr->sg_list == nullptr)
      return refuse(EINVAL, fmt::format("num_sge {} with a NULL sg_list", wr->num_sge));
    RecvWqe& r = rq_[rq_tail_ & rq_mask_];
    r.assign(*wr);
    if (s == QpState::kErr) {
      complete_recv(r.wr_id, WcStatus::kWrFlushErr, WcOpcode::kRecv, 0, 0, 0, 0);
      continue;
    }
    ++rq_tail_;
  }
  return {};
}

void Qp::receive_response(Packet&& pkt) {
  // An answer delivered by the thread whose send side is running (the
  // in-process link answers a request before send() returns) is that send
  // side's to take: it holds sq_mu_, so no inbox lock and no kick.
  if (SendSideHere::runs(this)) {
    if (!own_answers_pending() && Ack::is(pkt)) {
      own_ack_ = Ack::of(pkt);
      own_ack_valid_ = true;
      return;
    }
    own_inbox_.push_back(std::move(pkt));
    return;
  }
  {
    std::lock_guard lock(inbox_mu_);
    inbox_.push_back(std::move(pkt));
    inbox_ready_.store(true, std::memory_order_release);
  }
  kick();
}

void Qp::receive_ack(const Ack& ack) {
  if (SendSideHere::runs(this) && !own_answers_pending()) [[likely]] {
    own_ack_ = ack;
    own_ack_valid_ = true;
    return;
  }
  receive_response_packet(ack);
}

void Qp::receive_response_packet(const Ack& ack) { receive_response(ack.packet()); }

void Qp::take_stranded_responses() {
  // A response that arrived while we held sq_mu_, after run_send_side()
  // last looked, found kick() locked out: take it now, or it would wait for
  // the next post or timer (the send side arms no timer for an answer it
  // saw arrive). Our unlock (a plain store) must be ordered before the
  // load: a Dekker pair with kick(). Where answers come back on the
  // sending thread (answers_inline_), kick()'s side is the rare one
  // (another thread's response found us holding sq_mu_): the poster pays
  // the light half of an asymmetric fence and kick() the heavy one. Where
  // they come from a wire's receive thread, that happens all the time: a
  // full fence here, against kick()'s locked try_lock.
  poster_fence();
  if (inbox_ready_.load(std::memory_order_relaxed)) kick();
}

void Qp::poster_fence() const {
  if (answers_inline_)
    asymmetric_light_fence();
  else
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

void Qp::kick() {
  // Whoever holds sq_mu_ drains the inbox before it lets go; re-check after
  // unlocking so that a response that arrived just then is not stranded.
  for (;;) {
    {
      std::unique_lock lock(sq_mu_, std::try_to_lock);
      if (!lock.owns_lock()) {
        // A send side running on this thread (its request was answered
        // synchronously) drains the inbox in its loop, before it returns;
        // without answers_inline_ the holder's full fence after it lets
        // go pairs with our locked try_lock.
        if (SendSideHere::runs(this) || !answers_inline_) return;
        // Another thread holds it, and looks at the inbox after it lets go
        // behind only the light half: after the heavy half, either it sees
        // our response or we see it gone.
        asymmetric_heavy_fence();
        if (sq_mu_.locked()) return;
        continue;
      }
      run_send_side();
    }
    poster_fence();  // as in take_stranded_responses
    if (!inbox_ready_.load(std::memory_order_relaxed)) return;
  }
}

void Qp::set_error() {
  {
    std::lock_guard lock(rq_mu_);
    if (state() == QpState::kErr) return;
    state_.store(QpState::kErr, std::memory_order_release);
    flush_recv_queue();
  }
  engine_.kick_later(shared_from_this());
}

void Qp::push_cqe(Cq& cq, const Wc& wc, bool solicited) {
  if (!cq.push(wc, solicited)) {
    // Overrun: the CQ is now in error and the device moves every QP on it
    // to ERR (IBA 11.4.2.1); this CQE is lost with the CQ.
  }
}

void Qp::arm_timer(Clock::time_point at, bool transport) {
  // One pending timer per QP is enough: an earlier one re-arms as needed.
  if (timer_armed_ != Clock::time_point{} && timer_armed_ <= at) return;
  timer_armed_ = at;
  timer_armed_timeout_ = transport ? req_.timeout : 0xff;
  engine_.schedule_timer(weak_from_this(), at);
}

void Qp::start_transport_timer() {
  comp_.timeout_at = {};
  comp_.timeout_unstamped = false;
  if (req_.timeout == 0) return;  // infinite
  // IBA 9.7.6.1.3 lets the timer expire between the timeout and four times
  // it. A pending transport timer of the same timeout was armed at most one
  // timeout ago, so it runs within one timeout from now; it stamps the
  // deadline then (completer_check_timeout), which expires at most two
  // timeouts after this send. That saves a clock read per request.
  if (timer_armed_ != Clock::time_point{} && timer_armed_timeout_ == req_.timeout) {
    comp_.timeout_unstamped = true;
    return;
  }
  comp_.timeout_at = transport_deadline();
  arm_timer(comp_.timeout_at, /*transport=*/true);
}

void Qp::on_timer() {
  {
    std::lock_guard lock(sq_mu_);
    timer_armed_ = {};
    timer_armed_timeout_ = 0xff;
    run_send_side(/*check_timeout=*/true);
  }
  take_stranded_responses();
}

}  // namespace srdma::hca
