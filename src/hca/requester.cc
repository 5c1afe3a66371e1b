// The requester: turns send WQEs into request packets, in order, one PSN
// per packet (IBA 9.7.1): a SEND or WRITE in packets of the path MTU (ONLY,
// or FIRST, MIDDLE..., LAST), a READ as one request that takes a PSN per
// response packet, an atomic as one. It keeps RC ordering: nothing is sent while an RNR wait is pending,
// and after an error nothing more is sent (the QP flushes instead).
//
// Local operations (REG_MR, LOCAL_INV) execute here, at their turn in the
// send queue: after every earlier WR has been handed to the link, before any
// later one. They take no PSN and send nothing; the completer retires them
// in order, so their CQEs never overtake those of earlier WRs. A WR with
// SEND_FENCE waits until every earlier WR has completed (IBA 10.8.3.3), which
// is what makes a LOCAL_INV safe after RDMA READs into the same MR.
#include <algorithm>
#include <cstring>

#include "hca/cq.h"
#include "hca/link.h"
#include "hca/qp.h"
#include "hca/queue_engine.h"
#include "hca/translation_tables.h"
#include "srdma/access.h"

namespace srdma::hca {

void Qp::run_send_side(bool check_timeout) {
  SendSideHere here(this);  // a response this thread delivers meanwhile is ours to drain (kick)
  // A link with a wire sends what we send here together, before sq_mu_
  // (held by our callers) lets another thread send for this QP.
  SendBatch batch(engine_.link(), SendBatch::kOrdered);
  // The transport timeout is checked only when the engine timer runs us
  // (once, after draining the responses already here):
  // whenever comp_.timeout_at is set (or timeout_unstamped), a timer at or
  // before it is pending (arm_timer), so checking on every post would only
  // cost a clock read.
  for (;;) {
    // Completer first: responses retire WQEs and may stop the requester.
    // (Handling them sends nothing, so none arrives meanwhile; and every
    // way out of this loop below sends nothing either: own_ack_ and
    // own_inbox_ are empty when it returns.)
    if (own_ack_valid_) {  // older than own_inbox_
      own_ack_valid_ = false;
      const Ack ack = own_ack_;
      completer_handle_ack(ack);
      continue;
    }
    if (!own_inbox_.empty()) {
      drain_.swap(own_inbox_);
      for (auto& m : drain_) completer_handle(m);
      drain_.clear();
      continue;
    }
    if (inbox_ready_.load(std::memory_order_acquire)) {
      {
        std::lock_guard lock(inbox_mu_);
        drain_.swap(inbox_);
        inbox_ready_.store(false, std::memory_order_relaxed);
      }
      for (auto& m : drain_) completer_handle(m);
      drain_.clear();
      continue;
    }
    if (check_timeout) {  // once, after the responses that are here
      check_timeout = false;
      completer_check_timeout();
    }
    switch (requester_next_step()) {
      case ReqStep::kIdle:
        return;
      case ReqStep::kWaitRnr:
        arm_timer(req_.rnr_until);
        return;
      case ReqStep::kFlush:
        flush_send_queue();
        return;
      case ReqStep::kSend:
        requester_send_one();
        // The usual end of a post: nothing came back, nothing is left to
        // send (what the next turn would find, one turn sooner).
        if (req_.next == sq_prod_ && !own_answers_pending() && !inbox_ready_.load(std::memory_order_acquire) &&
            state() == QpState::kRts)
          return;
        break;
    }
  }
}

Qp::ReqStep Qp::requester_next_step() {
  QpState s = state();
  if (s == QpState::kErr) return ReqStep::kFlush;
  // SQD drains: what is outstanding completes, nothing new is sent.
  if (s != QpState::kRts) return ReqStep::kIdle;
  if (req_.next == sq_prod_) return ReqStep::kIdle;
  if (req_.rnr_until != Clock::time_point{}) [[unlikely]] {
    if (engine_.clock().now() < req_.rnr_until) return ReqStep::kWaitRnr;
    req_.rnr_until = {};  // the wait is over: no more clock reads
  }
  const bool outstanding = comp_.consumer != req_.next;
  // The window: an ACK (asked for every kAckEveryPsns packets) reopens it.
  if (outstanding && window_room() <= 0) [[unlikely]]
    return ReqStep::kIdle;
  const SendWqe& w = wqe(req_.next);
  // Fence: wait for the completions of everything before (a response runs
  // the send side again; the transport timer is armed while it waits).
  if ((w.flags & SEND_FENCE) && !w.local_done && comp_.consumer != req_.next) [[unlikely]]
    return ReqStep::kIdle;
  // max_rd_atomic (IBA 9.4.5): a READ or atomic waits while that many are
  // outstanding; the completion of one sends it.
  if (is_rd_atomic(w.opcode) && req_.offset == 0 && req_.rd_atomic_outstanding >= req_.max_rd_atomic) [[unlikely]]
    return ReqStep::kIdle;
  return ReqStep::kSend;
}

bool Qp::translate_local(const std::vector<Sge>& sges, std::uint32_t access, PieceList& out) const {
  out.clear();
  for (const Sge& s : sges) {
    auto t = tables_.translate(s.lkey, s.addr, s.length, access, init_.pdn);
    if (!t) return false;
    t->for_each_piece([&](MemPiece p) { out.push_back(p); });
  }
  return true;
}

bool Qp::translate_slice(const std::vector<Sge>& sges, std::uint64_t offset, std::uint64_t len, std::uint32_t access,
                         std::uint32_t pdn, PieceList& out) const {
  out.clear();
  for (const Sge& s : sges) {
    if (len == 0) break;
    if (offset >= s.length) {
      offset -= s.length;
      continue;
    }
    const std::uint64_t n = std::min<std::uint64_t>(s.length - offset, len);
    auto t = tables_.translate(s.lkey, s.addr + offset, n, access, pdn);
    if (!t) return false;
    t->for_each_piece([&](MemPiece p) { out.push_back(p); });
    offset = 0;
    len -= n;
  }
  return len == 0;
}

std::uint32_t Qp::packets_at_mtu(std::uint64_t bytes) const {
  // (The MTU is a power of two: a shift, not a division, per packet.)
  return bytes == 0 ? 1 : static_cast<std::uint32_t>((bytes + req_.mtu - 1) >> req_.mtu_shift);
}

Clock::time_point Qp::transport_deadline() const {
  // 4.096 us * 2^timeout (IBA 9.7.6.1.3); timeout 0 means infinite.
  if (req_.timeout == 0) return {};
  return engine_.clock().now() + std::chrono::nanoseconds(4096LL << std::min<int>(req_.timeout, 31));
}

void Qp::requester_execute_local(SendWqe& w) {
  // Executed once: a resend from an earlier WQE (RNR, sequence error,
  // timeout) walks past it.
  if (!w.local_done) {
    Result<void> r = w.opcode == WrOpcode::kRegMr
                         ? tables_.fast_reg(w.rkey, init_.pdn, w.access, w.iova, w.mr_length, w.page_shift, w.pages)
                         : tables_.local_invalidate(w.rkey, init_.pdn);
    // IBA 10.6.3.3 / 10.6.6: a refused fast register or invalidate is a
    // memory management operation error; like every local error it ends
    // the QP and flushes the rest.
    if (!r) return fail_wqe(req_.next, WcStatus::kMemMgmtOpErr);
    w.local_done = true;
  }
  ++req_.next;
  retire_local_wqes();  // completes now if nothing earlier is outstanding
}

void Qp::retire_local_wqes() {
  // Keeps the invariant the completer relies on: the oldest outstanding WQE
  // is never an executed local operation (those have no PSN to match).
  while (comp_.consumer != req_.next && wqe(comp_.consumer).local_done) {
    complete_send(wqe(comp_.consumer), WcStatus::kSuccess, false, 0);
    ++comp_.consumer;
  }
}

namespace {

// The opcode of a SEND or WRITE packet by its place in the message (IBA
// 9.2): the WR opcode table's.
Opcode send_opcode(WrOpcode op, bool first, bool last) { return wr_row(op).packet(first, last); }

}  // namespace

bool Qp::segment(const SendWqe& w, Packet& p, std::uint32_t& psns, bool& last) {
  // The next packet of a SEND or WRITE longer than the MTU, or a train of
  // them where the link carries trains: as many as the message has left
  // and the window allows.
  const std::uint32_t left = w.length - req_.offset;
  std::uint32_t n = 1;
  if (trains_ && left > req_.mtu) {
    n = packets_at_mtu(left);
    if (comp_.consumer != req_.next) n = std::clamp<std::int64_t>(window_room(), 1, n);
  }
  const std::uint32_t len = static_cast<std::uint32_t>(std::min<std::uint64_t>(left, std::uint64_t{n} * req_.mtu));
  const bool first = req_.offset == 0;
  last = req_.offset + len == w.length;
  p.op = send_opcode(w.opcode, first, last && n == 1);
  if (n > 1) {
    p.count = n;
    p.last_op = send_opcode(w.opcode, false, last);
    psns = n;
  }
  if (w.is_inline) {
    if (len) p.payload.push_back(MemPiece{const_cast<std::byte*>(w.inline_data.data()) + req_.offset, std::uint64_t{len}});
  } else if (!translate_slice(w.sges, req_.offset, len, 0, init_.pdn, p.payload)) {
    return false;
  }
  p.payload_length = len;
  if (has_reth(p.op)) {
    p.va = w.remote_addr;
    p.rkey = w.rkey;
    p.dma_length = w.length;
  }
  if (has_imm(last_opcode(p)) || has_ieth(last_opcode(p))) p.imm = w.imm;
  p.solicited = last && (w.flags & SEND_SOLICITED);
  return true;
}

bool Qp::wants_ack(const SendWqe& w, std::uint32_t last_psn, bool last) const {
  // The AckReq policy (IBA 9.7.5.1.2 lets the requester choose): a READ or
  // atomic is always answered; otherwise ask on the last packet of a WQE
  // that will need its completion, every kAckEveryPsns PSNs (so the window
  // reopens), when half the send queue waits for completions, and when a
  // local operation or a fenced WR right behind waits for this one. The
  // responder coalesces the rest: an ACK acknowledges every PSN before it.
  // (A train's packets before its last ask by the PSN rule: unroll().)
  if (is_rd_atomic(w.opcode)) return true;
  if (last && (init_.sq_sig_all || (w.flags & SEND_SIGNALED))) return true;
  if ((last_psn & (kAckEveryPsns - 1)) == kAckEveryPsns - 1) return true;
  if (!last) return false;
  if ((req_.next + 1 - comp_.consumer) * 2 >= sq_depth()) return true;
  if (req_.next + 1 == sq_prod_) return false;
  const SendWqe& after = wqe(req_.next + 1);
  return is_local_op(after.opcode) || (after.flags & SEND_FENCE);
}

void Qp::note_sent(const Packet& p, std::uint32_t psns) {
  send_counters_.requests_sent.bump(p.count);
  if (psn_before(p.psn, req_.sent_end_psn)) [[unlikely]]
    send_counters_.retransmissions.bump(std::min<std::uint32_t>(psn_diff(req_.sent_end_psn, p.psn), p.count));
  req_.next_psn = psn_add(req_.next_psn, psns);
  if (!psn_before(req_.next_psn, req_.sent_end_psn)) req_.sent_end_psn = req_.next_psn;
}

void Qp::time_if_unanswered() {
  // Start the transport timer only if the answer is not already here (a
  // synchronous link usually has delivered it by now).
  if (comp_.timeout_at == Clock::time_point{} && !comp_.timeout_unstamped &&
      !own_answers_pending() && !inbox_ready_.load(std::memory_order_acquire) && comp_.consumer != req_.next)
    start_transport_timer();
}

void Qp::start_request(Packet& p) const {
  p.transport = init_.type;
  p.src_addr = engine_.address();
  p.dst_addr = req_.dest_addr;
  p.src_qpn = qpn_;
  p.dst_qpn = req_.dest_qpn;
  p.udp_sport = udp_sport_;
  p.psn = req_.next_psn;
}

bool Qp::fill_only(const SendWqe& w, Packet& p) const {
  // Every local byte through translate() (IBA 10.6.3: local read access is
  // implied by the lkey).
  p.op = send_opcode(w.opcode, true, true);
  if (w.is_inline) {
    if (w.length) p.payload.push_back(MemPiece{const_cast<std::byte*>(w.inline_data.data()), std::uint64_t{w.length}});
  } else if (!translate_local(w.sges, 0, p.payload)) {
    return false;
  }
  p.payload_length = w.length;
  p.va = w.remote_addr;  // RETH (read only for a WRITE)
  p.rkey = w.rkey;
  p.dma_length = w.length;
  p.imm = w.imm;  // ImmDt or IETH (read only where the opcode has one)
  p.solicited = w.flags & SEND_SOLICITED;
  return true;
}

void Qp::requester_send_whole(SendWqe& w, std::uint32_t n) {
  // What requester_send_one (and segment, for a train) does for it,
  // without the branches this case never takes. Every local byte through
  // translate() (IBA 10.6.3: local read access is implied by the lkey).
  w.psn = req_.next_psn;
  w.npsn = n;
  Packet p;
  start_request(p);
  if (!fill_only(w, p)) return fail_wqe(req_.next, WcStatus::kLocProtErr);
  if (n > 1) {  // FIRST, MIDDLE..., LAST: the headers fill_only wrote are theirs
    p.op = send_opcode(w.opcode, true, false);
    p.last_op = send_opcode(w.opcode, false, true);
    p.count = n;
  }
  p.ack_req = wants_ack(w, last_psn_of(p), true);
  note_sent(p, n);
  ++req_.next;
  // An unknown destination loses the request; the transport timer retries.
  (void)engine_.link().send(std::move(p));
  time_if_unanswered();
}

void Qp::requester_send_one() {
  SendWqe& w = wqe(req_.next);
  // The common cases first: an RC SEND or WRITE that fits one packet, or
  // that goes whole as one train.
  const WrOpcodeRow& row = wr_row(w.opcode);
  if (init_.type == QpType::kRc && row.cls == WrClass::kMessage && req_.offset == 0) [[likely]] {
    if (w.length <= req_.mtu) [[likely]]
      return requester_send_whole(w, 1);
    if (trains_) {
      const std::uint32_t n = packets_at_mtu(w.length);
      if (comp_.consumer == req_.next || window_room() >= static_cast<std::int32_t>(n))
        return requester_send_whole(w, n);
    }
  }
  if (row.cls == WrClass::kLocal) [[unlikely]]
    return requester_execute_local(w);
  if (init_.type == QpType::kUd) return requester_send_datagram(w);
  // A WQE takes its PSNs when its first packet goes out. A resend from an
  // earlier WQE reaches it with the same PSN again (every WQE takes the
  // same number of PSNs each time); a resume in its middle (rewind_to)
  // comes with the offset already set.
  if (req_.offset == 0) {
    w.psn = req_.next_psn;
    w.npsn = row.cls == WrClass::kAtomic ? 1 : packets_at_mtu(w.length);
  }
  Packet p;
  start_request(p);
  std::uint32_t psns = 1;  // this packet takes
  bool last = true;        // of the WQE

  switch (row.cls) {
    case WrClass::kMessage:
      // ONLY (a UC WQE; RC's took requester_send_whole), or the next
      // packet or train of a longer one.
      if (const bool only = req_.offset == 0 && w.length <= req_.mtu; !(only ? fill_only(w, p) : segment(w, p, psns, last)))
        return fail_wqe(req_.next, WcStatus::kLocProtErr);
      break;
    case WrClass::kRead:
      // The local SGEs are checked for LOCAL_WRITE before the request goes
      // out, so a bad lkey never costs the responder a read. A resume asks
      // for the rest only, from the PSN where the responses stopped.
      if (!translate_local(w.sges, ACCESS_LOCAL_WRITE, req_pieces_)) return fail_wqe(req_.next, WcStatus::kLocProtErr);
      p.op = row.only;
      p.va = w.remote_addr + req_.offset;
      p.rkey = w.rkey;
      p.dma_length = w.length - req_.offset;
      psns = packets_at_mtu(p.dma_length);
      break;
    case WrClass::kAtomic:
      if (w.length != 8 || !translate_local(w.sges, ACCESS_LOCAL_WRITE, req_pieces_))
        return fail_wqe(req_.next, w.length != 8 ? WcStatus::kLocLenErr : WcStatus::kLocProtErr);
      p.op = row.only;
      p.va = w.remote_addr;
      p.rkey = w.rkey;
      p.compare_add = w.compare_add;
      p.swap = w.swap;
      break;
    case WrClass::kLocal:
      return;  // executed above
  }

  // Nothing answers UC; the rest ask as wants_ack() says.
  p.ack_req = init_.type != QpType::kUc && wants_ack(w, last_psn_of(p), last);
  note_sent(p, psns);
  if (last) {
    if (row.rd_atomic()) ++req_.rd_atomic_outstanding;
    ++req_.next;
    req_.offset = 0;
  } else {
    req_.offset += p.payload_length;
  }
  // An unknown destination loses the request; the transport timer retries.
  (void)engine_.link().send(std::move(p));
  if (init_.type == QpType::kUc) {  // no answer, no timer: done once sent
    if (last) retire_sent_wqe();
    return;
  }
  time_if_unanswered();
}

void Qp::requester_send_datagram(SendWqe& w) {
  Packet p;
  p.transport = QpType::kUd;
  p.op = wr_row(w.opcode).only;
  p.src_addr = engine_.address();
  p.dst_addr = w.ud_dest_addr;
  p.src_qpn = qpn_;
  p.dst_qpn = w.ud_qpn;
  p.qkey = w.ud_own_qkey ? req_.qkey : w.ud_qkey;  // IBA 10.2.4: the high bit asks for the QP's
  p.udp_sport = udp_sport_;
  p.psn = req_.next_psn;
  p.imm = w.imm;
  p.solicited = w.flags & SEND_SOLICITED;
  p.hop_limit = w.ud_hop_limit;
  p.traffic_class = w.ud_traffic_class;
  if (w.is_inline) {
    if (w.length) p.payload.push_back(MemPiece{w.inline_data.data(), std::uint64_t{w.length}});
  } else if (!translate_local(w.sges, 0, p.payload)) {
    return fail_wqe(req_.next, WcStatus::kLocProtErr);
  }
  p.payload_length = w.length;
  w.psn = req_.next_psn;
  w.npsn = 1;
  send_counters_.requests_sent.bump();
  req_.next_psn = req_.sent_end_psn = psn_add(req_.next_psn, 1);
  ++req_.next;
  // A destination no device answers for loses the datagram, as a wire
  // would; nothing tells the sender.
  (void)engine_.link().send(std::move(p));
  retire_sent_wqe();
}

void Qp::retire_sent_wqe() {
  // The link reads a batched packet's payload when the batch ends: hand it
  // to the wire now, before the completion lets the consumer reuse it.
  engine_.link().end_batch();
  SendWqe& w = wqe(comp_.consumer);
  comp_.psn = psn_add(w.psn, w.npsn);  // nothing acknowledges it: the window stays open
  complete_send(w, WcStatus::kSuccess, false, w.length);
  ++comp_.consumer;
  retire_local_wqes();
}

void Qp::fail_wqe(std::uint64_t index, WcStatus status) {
  // The first error ends the QP (IBA 10.8.3.3): the WQEs before this one
  // can no longer be acknowledged and flush, this one completes with the
  // error, and the rest flush when the send side next runs.
  state_.store(QpState::kErr, std::memory_order_release);
  while (comp_.consumer < index) complete_send(wqe(comp_.consumer++), WcStatus::kWrFlushErr, true);
  complete_send(wqe(comp_.consumer++), status, true);
  req_.next = std::max(req_.next, comp_.consumer);
  req_.offset = 0;
  req_.rd_atomic_outstanding = 0;
  std::lock_guard lock(rq_mu_);  // lock order: sq_mu_ then rq_mu_
  flush_recv_queue();
}

}  // namespace srdma::hca
