// Queue pair: creation, modify_qp and its state machine, posting, and the
// glue that runs the roles (see qp.h for the locking rules).
#include "hca/qp.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "hca/cq.h"
#include "hca/qp_rules.h"
#include "hca/queue_engine.h"
#include "hca/srq.h"
#include "hca/translation_tables.h"
#include "srdma/access.h"

namespace srdma::hca {

Qp::Qp(QueueEngine& engine, TranslationTables& tables, std::uint32_t qpn, QpInit init)
    : engine_(engine), tables_(tables), qpn_(qpn), init_(std::move(init)),
      rc_entries_(init_.type == QpType::kRc && init_.fast_entries), trains_(engine.link().carries_trains()),
      answers_inline_(engine.link().answers_inline()),
      udp_sport_(entropy_port(qpn)),
      congestion_control_(init_.congestion_control && engine.congestion_control() &&
                          (init_.type == QpType::kRc || init_.type == QpType::kUc)),
      // A QP on a tag-matching SRQ has room beyond max_send_wr for the
      // device's own rendezvous WQEs (post_rndv).
      sq_(init_.caps.max_send_wr + (init_.type == QpType::kRc && init_.srq && init_.srq->is_tm() ? kRndvSlots : 0),
          init_.caps.max_send_sge, init_.caps.max_inline_data),
      rq_(init_.srq, init_.caps.max_recv_wr, init_.caps.max_recv_sge, init_.pdn) {}

Qp::~Qp() = default;

bool Qp::claim_cnp(Clock::time_point now, Clock::duration gap) {
  const std::int64_t t = now.time_since_epoch().count();
  std::int64_t last = cnp_sent_ns_.load(std::memory_order_relaxed);
  // Saturating: the first claim's `last` is the minimum.
  if (last > std::numeric_limits<std::int64_t>::min() && t - last < gap.count()) return false;
  return cnp_sent_ns_.compare_exchange_strong(last, t, std::memory_order_relaxed);
}

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
  FastLock sq(sq_mu_);
  FastLock rq(rq_mu_);
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
    path_.dest_addr = attr_.dest_addr;
    path_.dest_qpn = attr_.dest_qp_num;
    path_.timeout = attr_.timeout;
    path_.retry_cnt = attr_.retry_cnt;
    path_.rnr_retry = attr_.rnr_retry;
    // A UD datagram is one packet of at most the port's MTU (no path MTU).
    const std::uint32_t mtu = init_.type == QpType::kUd ? engine_.active_mtu() : attr_.path_mtu;
    path_.mtu = mtu;
    path_.mtu_shift = static_cast<std::uint8_t>(std::countr_zero(mtu));
    path_.qkey = attr_.qkey;
    path_.max_rd_atomic = attr_.max_rd_atomic;
    responder_.configure(attr_, mtu);
    if ((mask & (QP_AV | QP_DEST_QPN)) && init_.type != QpType::kUd)
      trains_.store(engine_.link().carries_trains_to(attr_.dest_addr, attr_.dest_qp_num), std::memory_order_relaxed);
  }
  if (mask & QP_RQ_PSN) responder_.set_rq_psn(in.rq_psn & kPsnMask);
  if (mask & QP_SQ_PSN) {
    requester_.set_sq_psn(in.sq_psn & kPsnMask);
    completer_.set_sq_psn(in.sq_psn & kPsnMask);
  }
  if (mask & QP_RETRY_CNT) completer_.set_retry_cnt(in.retry_cnt);
  if (mask & QP_RNR_RETRY) completer_.set_rnr_retry(in.rnr_retry);

  if (next == QpState::kReset) {
    // RESET empties both queues without completions (IBA 10.3.1).
    sq_.reset();
    requester_.reset();
    completer_.reset();
    rq_.reset();
    responder_.reset();
    // Rendezvous work not yet done is dropped with the queues (no
    // completions, as for the WQEs).
    rndv_pending_.clear();
    rndv_in_sq_ = 0;
    {
      FastLock inbox(inbox_mu_);
      rndv_inbox_.clear();
    }
    // And its unpolled CQEs leave its CQs, as mthca's and mlx5's modify to
    // RESET clean them: a QP reused after RESET hands its consumer nothing
    // of its previous life (a flush from before would read as a new error).
    if (init_.send_cq) init_.send_cq->clean(qpn_);
    if (init_.recv_cq && init_.recv_cq != init_.send_cq) init_.recv_cq->clean(qpn_);
    // A TGT's receives completed on the CQ of the XRC SRQ they came from.
    if (const auto& srq = rq_.srq(); srq && srq->cq() && srq->cq() != init_.send_cq && srq->cq() != init_.recv_cq)
      srq->cq()->clean(qpn_);
  }
  state_.store(next, std::memory_order_release);
  if (next == QpState::kErr && cur != QpState::kErr) {
    responder_.flush();
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

Result<void> Qp::post_send(const SendWr* wr, const SendWr** bad_wr, const PostResolvers* resolvers) {
  FastUniqueLock lock(sq_mu_);
  const QpState s = state();
  Result<void> result;
  for (; wr; wr = wr->next) {
    if (s == QpState::kReset || s == QpState::kInit || s == QpState::kRtr) [[unlikely]] {
      result = make_error(EINVAL, fmt::format("cannot post sends in state {}", qp_state_str(s)));
    } else if (sq_.prod() - completer_.consumer() >= sq_.depth()) [[unlikely]] {
      result = make_error(ENOMEM, fmt::format("send queue full ({} WRs outstanding)", sq_.depth()));
    } else if (std::uint64_t length; plain_data_wr(*wr, length)) [[likely]] {
      fill_data_wqe(sq_[sq_.prod()], *wr, length);
      sq_.produce();
      continue;
    } else {
      static constexpr PostResolvers kNone{};
      result = post_one_checked(*wr, resolvers ? *resolvers : kNone);
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

Qp::WrFault Qp::wr_fault(const SendWr& wr) const {
  if (wr.num_sge < 0 || static_cast<std::uint32_t>(wr.num_sge) > init_.caps.max_send_sge) return WrFault::kNumSge;
  if (wr.num_sge > 0 && wr.sg_list == nullptr) return WrFault::kNullSgList;
  if (!is_wr_opcode(wr.opcode)) return WrFault::kOpcode;
  if (wr.send_flags & ~kSendFlagsAll) return WrFault::kFlags;
  return WrFault::kNone;
}

bool Qp::plain_data_wr(const SendWr& wr, std::uint64_t& length) const {
  // The early entry: an RC SEND or WRITE (with or without immediate or
  // invalidate) that passes the checks every WR takes first. Nothing in
  // post_one_checked's checks by QP type, by local operation, by READ and
  // atomic or by UD applies to it, so it passes every one of them.
  if (!rc_entries_ || wr_fault(wr) != WrFault::kNone || !is_message_op(wr.opcode) ||
      wr.opcode == WrOpcode::kAtomicWrite)
    return false;
  length = sge_length(wr);
  return message_length_fits(wr.send_flags, length);
}

void Qp::fill_data_wqe(SendWqe& w, const SendWr& wr, std::uint64_t length) {
  w.wr_id = wr.wr_id;
  w.opcode = wr.opcode;
  w.flags = wr.send_flags;
  w.imm = wr.opcode == WrOpcode::kSendWithInv ? wr.invalidate_rkey : wr.imm_data;
  w.remote_addr = wr.remote_addr;
  w.rkey = wr.rkey;
  w.compare_add = wr.compare_add;
  w.swap = wr.swap;
  w.xrc_srqn = wr.xrc.remote_srqn;
  w.length = static_cast<std::uint32_t>(length);
  w.is_inline = wr.send_flags & SEND_INLINE;
  w.device = DeviceWqe::kNone;  // (the slot may have held one)
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
Result<void> Qp::post_one_checked(const SendWr& wr, const PostResolvers& resolvers) {
  const FastRegResolver resolve = resolvers.fast_reg;
  const AhResolver resolve_ah = resolvers.ah;
  const MwResolver resolve_mw = resolvers.mw;
  switch (wr_fault(wr)) {
    case WrFault::kNone: break;
    case WrFault::kNumSge:
      return make_error(EINVAL, fmt::format("num_sge {} beyond max_send_sge {}", wr.num_sge, init_.caps.max_send_sge));
    case WrFault::kNullSgList: return make_error(EINVAL, fmt::format("num_sge {} with a NULL sg_list", wr.num_sge));
    case WrFault::kOpcode: return make_error(EINVAL, fmt::format("unknown opcode {}", static_cast<unsigned>(wr.opcode)));
    case WrFault::kFlags:
      return make_error(EINVAL, fmt::format("unknown send_flags bits {:#x}", wr.send_flags & ~kSendFlagsAll));
  }
  const WrOpcodeRow& row = wr_row(wr.opcode);
  // UD sends datagrams (IBA 9.8.4: SEND, SEND with immediate); UC has
  // no responder that answers (no READ, no atomics) and no invalidation.
  if (init_.type == QpType::kXrcTgt) return make_error(EINVAL, "an XRC TGT QP has no send queue");
  if (!row.valid_on(init_.type))
    return make_error(EINVAL, fmt::format("a {} QP does not send {}", qp_type_str(init_.type), row.name));
  // Whether the SRQ exists is the target's to say (a NAK); its number must
  // fit the XRCETH.
  if (init_.type == QpType::kXrcIni && row.cls != WrClass::kLocal && wr.xrc.remote_srqn > kPsnMask)
    return make_error(EINVAL, fmt::format("remote_srqn {:#x} is beyond 24 bits", wr.xrc.remote_srqn));
  UdAddress ud;
  if (init_.type == QpType::kUd) {
    if (!wr.ud.ah || !resolve_ah || !resolve_ah(wr.ud.ah, ud))
      return make_error(EINVAL, "a UD send needs a live address handle (wr.ud.ah)");
    if (ud.pdn != init_.pdn) return make_error(EINVAL, "the address handle is of another PD than the QP");
    if (wr.ud.remote_qpn > kPsnMask) return make_error(EINVAL, "remote_qpn is 24 bits");
  }
  if (wr.opcode == WrOpcode::kRegMr && (wr.access & ~kMrAccessAll))
    return make_error(EINVAL, fmt::format("unknown access bits {:#x} in REG_MR", wr.access & ~kMrAccessAll));
  const bool local_op = row.cls == WrClass::kLocal;
  if (local_op && (wr.send_flags & SEND_INLINE))
    return make_error(EINVAL, "REG_MR, LOCAL_INV and BIND_MW carry no data: SEND_INLINE makes no sense");
  FastRegView mapping;
  if (wr.opcode == WrOpcode::kRegMr && (!wr.mr || !resolve || !resolve(wr.mr, mapping)))
    return make_error(EINVAL, "REG_MR needs a live MR from alloc_mr(kMemReg)");
  MwBindView bind;
  if (wr.opcode == WrOpcode::kBindMw) {
    // (The rules that need the tables' state run when the WR executes.)
    if (wr.bind_mw.info.access & ~kMwAccessAll)
      return make_error(EINVAL,
                        fmt::format("unknown window access bits {:#x}", wr.bind_mw.info.access & ~kMwAccessAll));
    if (wr.bind_mw.info.length > 0 && !wr.bind_mw.info.mr)
      return make_error(EINVAL, "a bind of a non-zero length needs an MR");
    if (!wr.bind_mw.mw || !resolve_mw || !resolve_mw(wr, bind))
      return make_error(EINVAL, "BIND_MW needs a live type 2 window (and a live MR)");
  }
  // (Local operations have no scatter/gather list.)
  const std::uint64_t length = local_op ? 0 : sge_length(wr);
  const bool inl = wr.send_flags & SEND_INLINE;
  if (row.rd_atomic() && path_.max_rd_atomic == 0)
    return make_error(EINVAL, "max_rd_atomic is 0: this QP may not issue RDMA READs or atomics");
  if (inl && row.cls != WrClass::kMessage) return make_error(EINVAL, "inline data only with SEND and RDMA WRITE");
  // An ATOMIC WRITE's 8 bytes ride in the WQE as an atomic's operands do,
  // inline or not, whatever max_inline_data.
  const bool atomic_write = wr.opcode == WrOpcode::kAtomicWrite;
  if (atomic_write && length != 8)
    return make_error(EINVAL, fmt::format("ATOMIC_WRITE carries exactly 8 bytes, not {}", length));
  if (!atomic_write && !message_length_fits(wr.send_flags, length))
    return make_error(EINVAL, length > kMaxMessageBytes ? std::string("a message is at most 2^31 bytes (IBA 9.4.4)")
                                                        : fmt::format("{} inline bytes beyond max_inline_data {}",
                                                                      length, init_.caps.max_inline_data));
  if (init_.type == QpType::kUd && length > path_.mtu)
    return make_error(EINVAL, fmt::format("a UD message of {} bytes is beyond the port's MTU {}", length, path_.mtu));

  SendWqe& w = sq_[sq_.prod()];
  if (!local_op) {
    fill_data_wqe(w, wr, length);
  } else {
    w.wr_id = wr.wr_id;
    w.opcode = wr.opcode;
    w.flags = wr.send_flags;
    w.rkey = wr.opcode == WrOpcode::kRegMr ? wr.key
             : wr.opcode == WrOpcode::kBindMw ? wr.bind_mw.rkey
                                              : wr.invalidate_rkey;
    w.length = 0;
    w.is_inline = false;
    w.device = DeviceWqe::kNone;
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
    } else if (wr.opcode == WrOpcode::kBindMw) {
      w.access = wr.bind_mw.info.access;
      w.iova = wr.bind_mw.info.addr;
      w.mr_length = wr.bind_mw.info.length;
      w.mw_key = bind.mw_alloc_key;
      w.mr_key = bind.mr_key;
      w.mw_type1_verb = bind.type1_verb;
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
  sq_.produce();
  return {};
}

Result<void> Qp::post_recv(const RecvWr* wr, const RecvWr** bad_wr) {
  if (init_.srq || is_xrc(init_.type)) {
    if (bad_wr) *bad_wr = wr;
    return make_error(EINVAL, init_.srq ? "the QP takes its receives from an SRQ: post them there"
                                        : "an XRC QP has no receive queue: post to the XRC SRQ");
  }
  FastLock lock(rq_mu_);
  const QpState s = state();
  for (; wr; wr = wr->next) {
    auto refuse = [&](int code, std::string why) -> Result<void> {
      if (bad_wr) *bad_wr = wr;
      return make_error(code, std::move(why));
    };
    if (s == QpState::kReset) return refuse(EINVAL, "cannot post receives in state RESET");
    if (rq_.full())
      return refuse(ENOMEM, fmt::format("receive queue full ({} WRs)", init_.caps.max_recv_wr));
    if (wr->num_sge < 0 || static_cast<std::uint32_t>(wr->num_sge) > init_.caps.max_recv_sge)
      return refuse(EINVAL, fmt::format("num_sge {} beyond max_recv_sge {}", wr->num_sge, init_.caps.max_recv_sge));
    if (wr->num_sge > 0 && wr->sg_list == nullptr)
      return refuse(EINVAL, fmt::format("num_sge {} with a NULL sg_list", wr->num_sge));
    RecvWqe& r = rq_.next_slot();
    r.assign(*wr);
    if (s == QpState::kErr) {
      responder_.complete_recv(r.wr_id, WcStatus::kWrFlushErr, WcOpcode::kRecv, 0, 0, 0, 0);
      continue;
    }
    rq_.produce();
  }
  return {};
}

void Qp::set_error() {
  {
    FastLock lock(rq_mu_);
    if (state() == QpState::kErr) return;
    state_.store(QpState::kErr, std::memory_order_release);
    responder_.flush();
  }
  engine_.kick_later(shared_from_this());
}

void Qp::push_cqe(Cq& cq, const Wc& wc, bool solicited) {
  if (!cq.push(wc, solicited)) {
    // Overrun: the CQ is now in error and the device moves every QP on it
    // to ERR (IBA 11.4.2.1); this CQE is lost with the CQ.
  }
}

}  // namespace srdma::hca
