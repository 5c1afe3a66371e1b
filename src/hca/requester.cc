// The requester: turns send WQEs into request messages, in order, one PSN
// each, and keeps RC ordering: nothing is sent while an RNR wait is pending,
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
  // The transport timeout is checked only when the engine timer runs us
  // (once, after draining the responses already here):
  // whenever comp_.timeout_at is set (or timeout_unstamped), a timer at or
  // before it is pending (arm_timer), so checking on every post would only
  // cost a clock read.
  for (;;) {
    // Completer first: responses retire WQEs and may stop the requester.
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
  // Fence: wait for the completions of everything before (a response runs
  // the send side again; the transport timer is armed while it waits).
  const SendWqe& w = wqe(req_.next);
  if ((w.flags & SEND_FENCE) && !w.local_done && comp_.consumer != req_.next) [[unlikely]]
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

void Qp::requester_send_one() {
  SendWqe& w = wqe(req_.next);
  if (is_local_op(w.opcode)) [[unlikely]]
    return requester_execute_local(w);
  Message m;
  m.src_addr = engine_.address();
  m.dst_addr = req_.dest_addr;
  m.src_qpn = qpn_;
  m.dst_qpn = req_.dest_qpn;
  m.psn = w.psn = req_.next_psn;
  m.solicited = w.flags & SEND_SOLICITED;
  m.length = w.length;
  // Ask for an acknowledgement when the WQE will need its completion, every
  // 16 PSNs, and when half the send queue waits for one; the responder
  // coalesces the rest (an ACK acknowledges every PSN before it).
  const bool signaled = init_.sq_sig_all || (w.flags & SEND_SIGNALED);
  m.ack_req = signaled || (m.psn & 15) == 15 || (req_.next + 1 - comp_.consumer) * 2 >= sq_depth();
  // A local operation or a fenced WR right behind waits for this one's
  // completion: ask for it rather than wait for the transport timer.
  if (!m.ack_req && req_.next + 1 != sq_prod_) {
    const SendWqe& after = wqe(req_.next + 1);
    m.ack_req = is_local_op(after.opcode) || (after.flags & SEND_FENCE);
  }

  // Gather the payload of SENDs and WRITEs: every local byte through
  // translate() (IBA 10.6.3: local read access is implied by the lkey).
  auto gather = [&]() {
    if (w.is_inline) {
      m.payload.push_back(MemPiece{w.inline_data.data(), w.inline_data.size()});
      return true;
    }
    return translate_local(w.sges, 0, m.payload);
  };
  switch (w.opcode) {
    case WrOpcode::kSend: m.op = MsgOp::kSend; break;
    case WrOpcode::kSendWithImm: m.op = MsgOp::kSendWithImm; m.imm = w.imm; break;
    case WrOpcode::kSendWithInv: m.op = MsgOp::kSendWithInv; m.imm = w.imm; break;
    case WrOpcode::kRdmaWrite: m.op = MsgOp::kWrite; break;
    case WrOpcode::kRdmaWriteWithImm: m.op = MsgOp::kWriteWithImm; m.imm = w.imm; break;
    case WrOpcode::kRdmaRead: m.op = MsgOp::kReadRequest; break;
    case WrOpcode::kAtomicCmpAndSwp: m.op = MsgOp::kCmpSwap; break;
    case WrOpcode::kAtomicFetchAndAdd: m.op = MsgOp::kFetchAdd; break;
    case WrOpcode::kRegMr:
    case WrOpcode::kLocalInv: return;  // executed above
  }
  switch (w.opcode) {
    case WrOpcode::kSend:
    case WrOpcode::kSendWithImm:
    case WrOpcode::kSendWithInv:
      if (!gather()) return fail_wqe(req_.next, WcStatus::kLocProtErr);
      break;
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm:
      if (!gather()) return fail_wqe(req_.next, WcStatus::kLocProtErr);
      m.va = w.remote_addr;
      m.rkey = w.rkey;
      break;
    case WrOpcode::kRdmaRead:
      // The local SGEs are checked for LOCAL_WRITE before the request goes
      // out, so a bad lkey never costs the responder a read.
      if (!translate_local(w.sges, ACCESS_LOCAL_WRITE, req_pieces_)) return fail_wqe(req_.next, WcStatus::kLocProtErr);
      m.va = w.remote_addr;
      m.rkey = w.rkey;
      break;
    case WrOpcode::kAtomicCmpAndSwp:
    case WrOpcode::kAtomicFetchAndAdd:
      if (w.length != 8 || !translate_local(w.sges, ACCESS_LOCAL_WRITE, req_pieces_))
        return fail_wqe(req_.next, w.length != 8 ? WcStatus::kLocLenErr : WcStatus::kLocProtErr);
      m.va = w.remote_addr;
      m.rkey = w.rkey;
      m.compare_add = w.compare_add;
      m.swap = w.swap;
      break;
    case WrOpcode::kRegMr:
    case WrOpcode::kLocalInv:
      return;
  }
  send_counters_.requests_sent.bump();
  if (req_.next < req_.resend_until) [[unlikely]] send_counters_.retransmissions.bump();
  req_.next_psn = (req_.next_psn + 1) & 0xffffff;
  ++req_.next;
  // An unknown destination loses the request; the transport timer retries.
  (void)engine_.link().send(std::move(m));
  // Start the transport timer only if the answer is not already here (a
  // synchronous link usually has delivered it by now).
  if (comp_.timeout_at == Clock::time_point{} && !comp_.timeout_unstamped &&
      !inbox_ready_.load(std::memory_order_acquire) && comp_.consumer != req_.next)
    start_transport_timer();
}

void Qp::fail_wqe(std::uint64_t index, WcStatus status) {
  // The first error ends the QP (IBA 10.8.3.3): the WQEs before this one
  // can no longer be acknowledged and flush, this one completes with the
  // error, and the rest flush when the send side next runs.
  state_.store(QpState::kErr, std::memory_order_release);
  while (comp_.consumer < index) complete_send(wqe(comp_.consumer++), WcStatus::kWrFlushErr, true);
  complete_send(wqe(comp_.consumer++), status, true);
  req_.next = std::max(req_.next, comp_.consumer);
  std::lock_guard lock(rq_mu_);  // lock order: sq_mu_ then rq_mu_
  flush_recv_queue();
}

}  // namespace srdma::hca
