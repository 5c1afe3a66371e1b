// The completer: matches response packets to outstanding WQEs in PSN order,
// places READ data and atomic results into local memory, writes send CQEs,
// and handles NAKs: RNR (retry after the timer, up to rnr_retry; 7 = for
// ever), PSN sequence errors (go back N), and the class B/C errors that end
// the QP (IBA 9.9.2). A state machine as rxe's rxe_comp.c: one small
// function per state, each returning the next.
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

WcStatus nak_status(Syndrome c) {
  switch (c) {
    case Syndrome::kInvalidRequest:
    case Syndrome::kInvalidRdRequest: return WcStatus::kRemInvReqErr;
    case Syndrome::kRemoteAccessError: return WcStatus::kRemAccessErr;
    case Syndrome::kRemoteOperationalError: return WcStatus::kRemOpErr;
    case Syndrome::kAck:
    case Syndrome::kPsnSequenceError:
    case Syndrome::kRnrNak: return WcStatus::kGeneralErr;  // handled before
  }
  return WcStatus::kGeneralErr;
}

static_assert(static_cast<int>(Syndrome::kInvalidRdRequest) - static_cast<int>(Syndrome::kInvalidRequest) ==
              static_cast<int>(NakCode::kInvalidRdRequest));
static_assert(static_cast<int>(Syndrome::kRemoteAccessError) - static_cast<int>(Syndrome::kInvalidRequest) ==
              static_cast<int>(NakCode::kRemoteAccessError));

constexpr std::uint32_t last_psn(std::uint32_t psn, std::uint32_t npsn) { return psn_add(psn, npsn - 1); }

}  // namespace

std::string_view Qp::comp_state_str(CompState s) {
  switch (s) {
    case CompState::kCheckPsn: return "check_psn";
    case CompState::kImpliedAcks: return "implied_acks";
    case CompState::kCheckOpcode: return "check_opcode";
    case CompState::kAck: return "ack";
    case CompState::kReadData: return "read_data";
    case CompState::kAtomicData: return "atomic_data";
    case CompState::kComplete: return "complete";
    case CompState::kRetryRead: return "retry_read";
    case CompState::kRnrNak: return "rnr_nak";
    case CompState::kSequenceNak: return "sequence_nak";
    case CompState::kFatalNak: return "fatal_nak";
    case CompState::kDrop: return "drop";
    case CompState::kDropOpcode: return "drop_opcode";
    case CompState::kDone: return "done";
  }
  return "?";
}

void Qp::complete_send(SendWqe& w, WcStatus status, bool force, std::uint32_t byte_len) {
  bool signaled = init_.sq_sig_all || (w.flags & SEND_SIGNALED);
  if (!(signaled || force || status != WcStatus::kSuccess)) return;
  Wc wc;
  wc.wr_id = w.wr_id;
  wc.status = status;
  wc.opcode = wr_row(w.opcode).wc;
  wc.byte_len = byte_len;
  wc.qp_num = qpn_;
  wc.qp_context = init_.qp_context;
  wc.is_send_cqe = true;
  push_cqe(*init_.send_cq, wc, false);
}

void Qp::rewind_to(std::uint64_t index, std::uint32_t psn) {
  // The READs and atomics from `index` on are to be sent again: they are
  // counted again then.
  for (std::uint64_t i = index; i < req_.next; ++i)
    if (is_rd_atomic(wqe(i).opcode) && !wqe(i).local_done) --req_.rd_atomic_outstanding;
  SendWqe& w = wqe(index);
  req_.next = index;
  req_.next_psn = psn;
  // The resume point inside it: a SEND or WRITE resends from the packet
  // `psn`, a READ asks for the rest from there (IBA 9.7.5.2.1).
  // (An atomic has one PSN, so the product is 0 for it.)
  req_.offset = static_cast<std::uint32_t>(psn_diff(psn, w.psn)) * req_.mtu;
}

void Qp::retire_wqe() {
  retire_oldest(wqe(comp_.consumer));
  // in order: local operations executed behind it complete now
  if (comp_.consumer != req_.next && wqe(comp_.consumer).local_done) retire_local_wqes();
  note_retired();
}

void Qp::completer_handle(Packet& pkt) {
  QpCounters::SendSide& c = send_counters_;
  // Header validation (IBA 9.6.1.5): only the connected peer answers us.
  if (pkt.src_addr != req_.dest_addr || pkt.src_qpn != req_.dest_qpn) return c.dropped_bad_source.bump();
  if (state() == QpState::kErr) return c.dropped_bad_state.bump();  // responses after an error
  CompState s = CompState::kCheckPsn;
  while (s != CompState::kDone) {
    switch (s) {
      case CompState::kCheckPsn: s = comp_check_psn(pkt); break;
      case CompState::kImpliedAcks: s = comp_implied_acks(pkt); break;
      case CompState::kCheckOpcode: s = comp_check_opcode(pkt); break;
      case CompState::kAck: s = comp_ack(pkt); break;
      case CompState::kReadData: s = comp_read_data(pkt); break;
      case CompState::kAtomicData: s = comp_atomic_data(pkt); break;
      case CompState::kComplete: s = comp_complete(pkt); break;
      case CompState::kRetryRead: s = comp_retry_read(pkt); break;
      case CompState::kRnrNak: s = comp_rnr_nak(pkt); break;
      case CompState::kSequenceNak: s = comp_sequence_nak(pkt); break;
      case CompState::kFatalNak: s = comp_fatal_nak(pkt); break;
      case CompState::kDrop:
        c.dropped_bad_psn.bump();
        s = CompState::kDone;
        break;
      case CompState::kDropOpcode:
        c.dropped_bad_opcode.bump();
        s = CompState::kDone;
        break;
      case CompState::kDone: break;
    }
  }
  // Whatever this response did (or did not: a drop), work still outstanding
  // is timed, unless an RNR wait holds the requester.
  if (comp_.timeout_at == Clock::time_point{} && !comp_.timeout_unstamped &&
      req_.rnr_until == Clock::time_point{} && state() != QpState::kErr &&
      (comp_.consumer != req_.next || req_.offset != 0))
    start_transport_timer();
}

void Qp::completer_handle_ack(const Ack& ack) {
  // What completer_handle's states do for an ACK of the last PSN of an
  // outstanding WQE (check_psn; implied_acks, which retires the SENDs and
  // WRITEs before it: the unsignaled run that CQ moderation leaves;
  // check_opcode, ack, complete), each check of theirs made here too.
  // Anything else (a READ or an atomic before it or in it, an ACK inside a
  // WQE) goes on through them as a packet from where implied_acks left it,
  // which check_psn and implied_acks then pass as they would have.
  const bool common = ack.src_addr == req_.dest_addr && ack.src_qpn == req_.dest_qpn &&
                      state() != QpState::kErr && comp_.consumer != req_.next && !comp_.read_retry_pending &&
                      !psn_before(ack.psn, comp_.psn) && psn_before(ack.psn, req_.next_psn);
  if (common && comp_implied_acks_before(ack.psn) == CompState::kCheckOpcode) [[likely]] {
    const SendWqe& w = wqe(comp_.consumer);
    if (comp_.consumer != req_.next && !is_rd_atomic(w.opcode) && ack.psn == last_psn(w.psn, w.npsn)) [[likely]] {
      send_counters_.responses_received.bump();
      (void)comp_complete_now();
      return;
    }
  }
  completer_handle_packet(ack);
}

void Qp::completer_handle_packet(const Ack& ack) {
  Packet p = ack.packet();
  completer_handle(p);
}

// IBA 9.7.5.1.3 (the requester's PSN checks): a response answers a PSN
// between the oldest unacknowledged one and the last one sent; an older one
// is a duplicate (late, or answering a resend) and is dropped, so that no
// data is placed twice into a buffer whose WQE may have completed.
Qp::CompState Qp::comp_check_psn(Packet& pkt) {
  if (comp_.consumer == req_.next && req_.offset == 0) return CompState::kDrop;  // nothing outstanding
  if (psn_before(pkt.psn, comp_.psn) || !psn_before(pkt.psn, req_.next_psn)) return CompState::kDrop;
  // After asking a READ again, responses to the first request that are
  // still arriving beyond the gap are dropped without asking once more.
  if (comp_.read_retry_pending && pkt.psn != comp_.psn && pkt.op != Opcode::kAck) return CompState::kDrop;
  if (!psn_before(last_psn_of(pkt), req_.next_psn)) return CompState::kDrop;  // a train beyond what was asked
  send_counters_.responses_received.bump(pkt.count);
  return CompState::kImpliedAcks;
}

// IBA 9.7.5.1.2 (coalesced acknowledgement): a response for PSN p
// acknowledges every SEND and WRITE before p. A READ or atomic before p
// cannot be implied (its data did not arrive): it is asked again.
// One ACK usually retires a run of unsignaled WQEs: each costs a look at
// its PSNs and flags, nothing more. Every WQE in [consumer, next) has
// been sent or is a local operation that executed (the requester executes
// one as it reaches it), so a local one met here retires in its turn.
Qp::CompState Qp::comp_implied_acks_before(std::uint32_t psn) {
  const std::uint64_t first = comp_.consumer;
  CompState next = req_.offset != 0 ? CompState::kCheckOpcode : CompState::kDone;
  while (comp_.consumer != req_.next) {
    SendWqe& w = wqe(comp_.consumer);
    if (w.local_done) [[unlikely]] {
      complete_send(w, WcStatus::kSuccess, false, 0);
      ++comp_.consumer;
      continue;
    }
    if (!psn_before(last_psn(w.psn, w.npsn), psn)) {  // w holds psn
      next = CompState::kCheckOpcode;
      break;
    }
    if (is_rd_atomic(w.opcode)) {
      next = CompState::kRetryRead;
      break;
    }
    retire_oldest(w);
  }
  // (Otherwise only the WQE being sent is left, and it holds psn.)
  if (comp_.consumer != first) note_retired();
  return next;
}

Qp::CompState Qp::comp_check_opcode(Packet& pkt) {
  const SendWqe& w = wqe(comp_.consumer);
  if (pkt.op == Opcode::kAck) {
    if (pkt.syndrome == Syndrome::kAck) return CompState::kAck;
    if (pkt.syndrome == Syndrome::kRnrNak) return CompState::kRnrNak;
    if (pkt.syndrome == Syndrome::kPsnSequenceError) return CompState::kSequenceNak;
    return CompState::kFatalNak;
  }
  if (is_read_response(pkt.op))
    return wr_row(w.opcode).cls == WrClass::kRead ? CompState::kReadData : CompState::kDropOpcode;
  if (pkt.op == Opcode::kAtomicAck)
    return wr_row(w.opcode).cls == WrClass::kAtomic && pkt.psn == w.psn ? CompState::kAtomicData
                                                                         : CompState::kDropOpcode;
  return CompState::kDropOpcode;  // a request opcode: the engine routes those to the responder
}

// An ACK inside the oldest WQE: a SEND or WRITE completes with its last
// PSN; before that, the ACK moves the window.
Qp::CompState Qp::comp_ack(Packet& pkt) {
  const SendWqe& w = wqe(comp_.consumer);
  if (is_rd_atomic(w.opcode)) return CompState::kDropOpcode;  // only its data answers a READ or atomic
  if (pkt.psn == last_psn(w.psn, w.npsn) && comp_.consumer != req_.next) return CompState::kComplete;
  comp_.psn = psn_add(pkt.psn, 1);
  note_progress();
  return CompState::kDone;
}

// READ response packets arrive in PSN order, each carrying the MTU's worth
// at its offset (the last one the rest); a gap means one was lost. A train
// of them is placed at once, checked as its packets would be one by one.
Qp::CompState Qp::comp_read_data(Packet& pkt) {
  if (pkt.psn != comp_.psn) return CompState::kRetryRead;
  const SendWqe& w = wqe(comp_.consumer);
  const std::uint64_t offset = static_cast<std::uint64_t>(psn_diff(pkt.psn, w.psn)) * req_.mtu;
  const std::uint32_t wqe_last = last_psn(w.psn, w.npsn);
  const std::int32_t to_last = psn_diff(wqe_last, last_psn_of(pkt));
  const bool last = to_last == 0;
  const std::uint64_t expect = last ? w.length - offset : std::uint64_t{pkt.count} * req_.mtu;
  if (to_last < 0 || offset > w.length || pkt.payload_length != expect || ends_message(last_opcode(pkt)) != last ||
      (pkt.count > 1 && packets_at_mtu(pkt.payload_length) != pkt.count)) {
    send_counters_.dropped_bad_length.bump();
    return CompState::kDone;
  }
  // Translate and place in one translation window (see delivery_scope.h).
  const bool placed = [&] {
    TranslationWindow window(window_key(w.sges));
    if (!translate_slice(w.sges, offset, expect, ACCESS_LOCAL_WRITE, init_.pdn, comp_pieces_)) return false;
    copy_pieces(comp_pieces_, pkt.payload);
    return true;
  }();
  if (!placed) {
    fail_wqe(comp_.consumer, WcStatus::kLocProtErr);
    return CompState::kDone;
  }
  comp_.psn = psn_add(pkt.psn, pkt.count);
  comp_.read_retry_pending = false;
  note_progress();
  return last ? CompState::kComplete : CompState::kDone;
}

// A response that moved the window: the retry count starts again and so
// does the transport timer (IBA 9.7.6.1.1 times the oldest unacknowledged
// PSN, as rxe's completer restarts its retransmit timer on every ACK). A
// READ whose response train outlasts one timeout is then not asked again
// while its data keeps arriving (asking would restart the train: a
// live-lock on a slow link).
void Qp::note_progress() {
  req_.retries_left = req_.retry_cnt;
  start_transport_timer();
}

Qp::CompState Qp::comp_atomic_data(Packet& pkt) {
  const SendWqe& w = wqe(comp_.consumer);
  const bool placed = [&] {
    TranslationWindow window(window_key(w.sges));
    if (!translate_local(w.sges, ACCESS_LOCAL_WRITE, comp_pieces_)) return false;
    MemPiece src{reinterpret_cast<std::byte*>(&pkt.atomic_orig), 8};
    copy_pieces(comp_pieces_, std::span<const MemPiece>(&src, 1));
    return true;
  }();
  if (!placed) {
    fail_wqe(comp_.consumer, WcStatus::kLocProtErr);
    return CompState::kDone;
  }
  comp_.read_retry_pending = false;
  return CompState::kComplete;
}

Qp::CompState Qp::comp_complete(Packet&) { return comp_complete_now(); }

Qp::CompState Qp::comp_complete_now() {
  retire_wqe();
  comp_.timeout_at = {};
  comp_.timeout_unstamped = false;
  // (Work still outstanding is timed: what completer_handle's end would do.)
  if (comp_.consumer != req_.next || req_.offset != 0) start_transport_timer();
  return CompState::kDone;
}

// A READ response went missing (a gap in its PSNs, or a response for a
// later PSN arrived first): ask for the rest of the READ again from the
// first PSN not received. Like a sequence-error NAK it spends retry_cnt.
Qp::CompState Qp::comp_retry_read(Packet&) {
  if (comp_.read_retry_pending) return CompState::kDrop;
  if (req_.retries_left == 0) {
    fail_wqe(comp_.consumer, WcStatus::kRetryExcErr);
    return CompState::kDone;
  }
  --req_.retries_left;
  rewind_to(comp_.consumer, comp_.psn);
  comp_.read_retry_pending = true;
  return CompState::kDone;
}

// RNR NAK (IBA 9.7.5.2.8): resend from the NAKed PSN once the responder's
// timer has run, up to rnr_retry times (7: for ever).
Qp::CompState Qp::comp_rnr_nak(Packet& pkt) {
  send_counters_.rnr_naks_received.bump();
  if (req_.rnr_retry != 7 && req_.rnr_retries_left == 0) {
    fail_wqe(comp_.consumer, WcStatus::kRnrRetryExcErr);
    return CompState::kDone;
  }
  if (req_.rnr_retry != 7) --req_.rnr_retries_left;
  send_counters_.rnr_retries.bump();
  comp_.psn = pkt.psn;
  rewind_to(comp_.consumer, pkt.psn);
  req_.rnr_until = engine_.clock().now() + std::chrono::microseconds(rnr_timer_usec(pkt.rnr_timer));
  comp_.timeout_at = {};
  comp_.timeout_unstamped = false;
  return CompState::kDone;
}

// PSN sequence error NAK (IBA 9.7.5.2.2): the responder expects pkt.psn;
// everything before it is acknowledged (done above), go back N from there.
// Like a timeout, a retry that makes no progress spends retry_cnt (as rxe
// does): a responder that NAKs for ever cannot keep us resending for ever.
Qp::CompState Qp::comp_sequence_nak(Packet& pkt) {
  send_counters_.seq_naks_received.bump();
  if (req_.retries_left == 0) {
    fail_wqe(comp_.consumer, WcStatus::kRetryExcErr);
    return CompState::kDone;
  }
  --req_.retries_left;
  comp_.psn = pkt.psn;
  rewind_to(comp_.consumer, pkt.psn);
  return CompState::kDone;
}

// Invalid request, remote access and remote operational errors (class C,
// IBA 9.9.2): the WQE completes with the error and the QP ends.
Qp::CompState Qp::comp_fatal_nak(Packet& pkt) {
  // (Syndrome's class C codes follow NakCode's order from kInvalidRequest.)
  const auto code = static_cast<std::size_t>(pkt.syndrome) - static_cast<std::size_t>(Syndrome::kInvalidRequest);
  if (code < kNumNakCodes) send_counters_.naks_received[code].bump();
  fail_wqe(comp_.consumer, nak_status(pkt.syndrome));
  return CompState::kDone;
}

void Qp::completer_check_timeout() {
  if (comp_.consumer == req_.next && req_.offset == 0) {
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
  // Lost request or response: go back to the oldest unacknowledged PSN,
  // skipping what was acknowledged already.
  send_counters_.timeouts.bump();
  comp_.timeout_at = {};
  if (req_.retries_left == 0) {
    fail_wqe(comp_.consumer, WcStatus::kRetryExcErr);
    return;
  }
  --req_.retries_left;
  comp_.read_retry_pending = false;
  rewind_to(comp_.consumer, comp_.psn);
}

void Qp::flush_send_queue() {
  // IBA 10.3.1.2 (QP error state): every outstanding send WR completes with
  // a flush error, signaled or not, in order.
  while (comp_.consumer != sq_prod_) complete_send(wqe(comp_.consumer++), WcStatus::kWrFlushErr, true);
  req_.next = sq_prod_;
  req_.offset = 0;
  req_.rd_atomic_outstanding = 0;
}

}  // namespace srdma::hca
