// The completer: matches responses to outstanding WQEs in PSN order, finishes
// READs and atomics into local memory, writes send CQEs, and handles NAKs:
// RNR (retry after the timer, up to rnr_retry; 7 = for ever), PSN sequence
// errors (resend), and the class B/C errors that end the QP (IBA 9.9.2).
#include <algorithm>
#include <cstring>

#include "hca/copy.h"
#include "hca/cq.h"
#include "hca/delivery_scope.h"
#include "hca/qp.h"
#include "hca/queue_engine.h"
#include "hca/translation_tables.h"
#include "srdma/access.h"

namespace srdma::hca {
namespace {

WcOpcode wc_opcode(WrOpcode op) {
  switch (op) {
    case WrOpcode::kSend:
    case WrOpcode::kSendWithImm:
    case WrOpcode::kSendWithInv: return WcOpcode::kSend;
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm: return WcOpcode::kRdmaWrite;
    case WrOpcode::kRdmaRead: return WcOpcode::kRdmaRead;
    case WrOpcode::kAtomicCmpAndSwp: return WcOpcode::kCompSwap;
    case WrOpcode::kAtomicFetchAndAdd: return WcOpcode::kFetchAdd;
    case WrOpcode::kRegMr: return WcOpcode::kRegMr;
    case WrOpcode::kLocalInv: return WcOpcode::kLocalInv;
  }
  return WcOpcode::kSend;
}

WcStatus nak_status(NakCode c) {
  switch (c) {
    case NakCode::kInvalidRequest: return WcStatus::kRemInvReqErr;
    case NakCode::kRemoteAccessError: return WcStatus::kRemAccessErr;
    case NakCode::kRemoteOperationalError: return WcStatus::kRemOpErr;
    case NakCode::kPsnSequenceError:
    case NakCode::kRnr: return WcStatus::kGeneralErr;  // handled before
  }
  return WcStatus::kGeneralErr;
}

// PSNs are 24 bits; a precedes b within half the space.
bool psn_before(std::uint32_t a, std::uint32_t b) { return ((b - a) & 0xffffff) - 1 < 0x7fffff; }

}  // namespace

void Qp::complete_send(SendWqe& w, WcStatus status, bool force, std::uint32_t byte_len) {
  bool signaled = init_.sq_sig_all || (w.flags & SEND_SIGNALED);
  if (!(signaled || force || status != WcStatus::kSuccess)) return;
  Wc wc;
  wc.wr_id = w.wr_id;
  wc.status = status;
  wc.opcode = wc_opcode(w.opcode);
  wc.byte_len = byte_len;
  wc.qp_num = qpn_;
  wc.qp_context = init_.qp_context;
  wc.is_send_cqe = true;
  push_cqe(*init_.send_cq, wc, false);
}

void Qp::rewind_to(std::uint64_t index) {
  req_.resend_until = std::max(req_.resend_until, req_.next);
  req_.next = index;
  req_.next_psn = wqe(index).psn;
}

void Qp::completer_handle(Message& msg) {
  QpCounters::SendSide& c = send_counters_;
  // Header validation (IBA 9.6.1.5): only the connected peer answers us.
  if (msg.src_addr != req_.dest_addr || msg.src_qpn != req_.dest_qpn) return c.dropped_bad_source.bump();
  if (state() == QpState::kErr) return c.dropped_bad_state.bump();  // responses after an error
  // Find the WQE this response is for: the oldest outstanding one.
  if (comp_.consumer == req_.next) return c.dropped_bad_psn.bump();  // nothing outstanding: stray or duplicate
  SendWqe& w = wqe(comp_.consumer);
  if (msg.psn != w.psn) {
    // A response for an older PSN is a duplicate; for a newer one, it
    // implicitly acknowledges the WQEs before it (only SENDs and WRITEs
    // can be implied, IBA 9.7.5.1.2).
    if (psn_before(msg.psn, w.psn)) return c.dropped_bad_psn.bump();
    // A PSN beyond everything sent answers nothing we asked.
    if (!psn_before(msg.psn, req_.next_psn)) return c.dropped_bad_psn.bump();
    c.responses_received.bump();
    while (comp_.consumer != req_.next && wqe(comp_.consumer).psn != msg.psn) {
      SendWqe& old = wqe(comp_.consumer);
      if (old.opcode == WrOpcode::kRdmaRead || old.opcode == WrOpcode::kAtomicCmpAndSwp ||
          old.opcode == WrOpcode::kAtomicFetchAndAdd) {
        // A READ or atomic cannot be implied: resend from it.
        rewind_to(comp_.consumer);
        return;
      }
      complete_send(old, WcStatus::kSuccess, false, old.length);
      ++comp_.consumer;
      retire_local_wqes();  // executed local operations behind it are done too
    }
    if (comp_.consumer == req_.next) return;
  } else {
    c.responses_received.bump();
  }
  SendWqe& cur = wqe(comp_.consumer);
  switch (msg.op) {
    case MsgOp::kAck:
      break;
    case MsgOp::kReadResponse:
    case MsgOp::kAtomicAck: {
      // Translate and place in one translation window (see delivery_scope.h).
      const bool placed = [&] {
        TranslationWindow window(cur.sges.size() == 1 ? cur.sges[0].lkey : detail::kAnyKey);
        PieceList dst;
        if (!translate_local(cur.sges, ACCESS_LOCAL_WRITE, dst)) return false;
        if (msg.op == MsgOp::kReadResponse) {
          copy_pieces(dst, msg.payload);
        } else {
          MemPiece src{reinterpret_cast<std::byte*>(&msg.atomic_orig), 8};
          copy_pieces(dst, std::span<const MemPiece>(&src, 1));
        }
        return true;
      }();
      if (!placed) {
        fail_wqe(comp_.consumer, WcStatus::kLocProtErr);
        return;
      }
      break;
    }
    case MsgOp::kNak:
      switch (msg.nak) {
        case NakCode::kRnr: {
          c.rnr_naks_received.bump();
          if (req_.rnr_retry != 7 && req_.rnr_retries_left == 0) {
            fail_wqe(comp_.consumer, WcStatus::kRnrRetryExcErr);
            return;
          }
          if (req_.rnr_retry != 7) --req_.rnr_retries_left;
          c.rnr_retries.bump();
          // Resend from this WQE once the responder's timer has run.
          rewind_to(comp_.consumer);
          req_.rnr_until = engine_.clock().now() + std::chrono::microseconds(rnr_timer_usec(msg.rnr_timer));
          comp_.timeout_at = {};
          comp_.timeout_unstamped = false;
          return;
        }
        case NakCode::kPsnSequenceError:
          // Go back to the PSN the responder expects. Like a timeout, a
          // retry that makes no progress spends retry_cnt (as rxe does):
          // a responder that NAKs for ever cannot keep us resending for ever.
          c.seq_naks_received.bump();
          if (req_.retries_left == 0) {
            fail_wqe(comp_.consumer, WcStatus::kRetryExcErr);
            return;
          }
          --req_.retries_left;
          rewind_to(comp_.consumer);
          return;
        case NakCode::kInvalidRequest:
        case NakCode::kRemoteAccessError:
        case NakCode::kRemoteOperationalError:
          fail_wqe(comp_.consumer, nak_status(msg.nak));
          return;
      }
      return;
    case MsgOp::kSend:
    case MsgOp::kSendWithImm:
    case MsgOp::kSendWithInv:
    case MsgOp::kWrite:
    case MsgOp::kWriteWithImm:
    case MsgOp::kReadRequest:
    case MsgOp::kCmpSwap:
    case MsgOp::kFetchAdd:
      return;  // requests never reach the completer
  }
  // Success: progress resets the retry counters (IBA 9.7.5.2.8).
  req_.rnr_retries_left = req_.rnr_retry;
  req_.retries_left = req_.retry_cnt;
  std::uint32_t byte_len = cur.opcode == WrOpcode::kAtomicCmpAndSwp || cur.opcode == WrOpcode::kAtomicFetchAndAdd
                               ? 8
                               : cur.length;
  complete_send(cur, WcStatus::kSuccess, false, byte_len);
  ++comp_.consumer;
  retire_local_wqes();  // in order: local operations executed behind it complete now
  comp_.timeout_at = {};
  comp_.timeout_unstamped = false;
  if (comp_.consumer != req_.next) start_transport_timer();
}

void Qp::completer_check_timeout() {
  if (comp_.consumer == req_.next) {
    comp_.timeout_unstamped = false;
    return;
  }
  if (comp_.timeout_unstamped) {  // the pending timer this send counted on is us
    start_transport_timer();      // stamps now + timeout
    return;
  }
  if (comp_.timeout_at == Clock::time_point{}) return;
  if (engine_.clock().now() < comp_.timeout_at) {
    arm_timer(comp_.timeout_at, /*transport=*/true);
    return;
  }
  // Lost request or response: go back to the oldest outstanding WQE.
  send_counters_.timeouts.bump();
  comp_.timeout_at = {};
  if (req_.retries_left == 0) {
    fail_wqe(comp_.consumer, WcStatus::kRetryExcErr);
    return;
  }
  --req_.retries_left;
  rewind_to(comp_.consumer);
}

void Qp::flush_send_queue() {
  // IBA 10.3.1.2 (QP error state): every outstanding send WR completes with
  // a flush error, signaled or not, in order.
  while (comp_.consumer != sq_prod_) complete_send(wqe(comp_.consumer++), WcStatus::kWrFlushErr, true);
  req_.next = sq_prod_;
}

}  // namespace srdma::hca
