// The completer: matches response packets to outstanding WQEs in PSN order,
// places READ data and atomic results into local memory, writes send CQEs,
// and handles NAKs: RNR (retry after the timer, up to rnr_retry; 7 = for
// ever), PSN sequence errors (go back N), and the class B/C errors that end
// the QP (IBA 9.9.2). A state machine as rxe's rxe_comp.c: one small
// function per state, each returning the next.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "hca/copy.h"
#include "hca/cq.h"
#include "hca/delivery_scope.h"
#include "hca/completer.h"
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

std::string_view Completer::state_str(State s) {
  switch (s) {
    case State::kCheckPsn: return "check_psn";
    case State::kImpliedAcks: return "implied_acks";
    case State::kCheckOpcode: return "check_opcode";
    case State::kAck: return "ack";
    case State::kReadData: return "read_data";
    case State::kAtomicData: return "atomic_data";
    case State::kComplete: return "complete";
    case State::kRetryRead: return "retry_read";
    case State::kRnrNak: return "rnr_nak";
    case State::kSequenceNak: return "sequence_nak";
    case State::kFatalNak: return "fatal_nak";
    case State::kDrop: return "drop";
    case State::kDropOpcode: return "drop_opcode";
    case State::kDone: return "done";
  }
  return "?";
}

namespace {

std::uint32_t wc_byte_len(const SendWqe& w) {
  const std::uint32_t fixed = wr_row(w.opcode).wc_byte_len;
  return fixed != 0 ? fixed : w.length;
}

}  // namespace

void Completer::complete_send(SendWqe& w, WcStatus status, bool force, std::uint32_t byte_len) {
  w.state = status == WcStatus::kSuccess ? WqeState::kDone : WqeState::kError;
  // A WQE the device posted (signaled, so that every way out comes here)
  // completes a tag, or nothing, never as a send.
  if (w.device != DeviceWqe::kNone) [[unlikely]] return qp_.rndv_done(w, status);
  const bool signaled = qp_.init_.sq_sig_all || (w.flags & SEND_SIGNALED);
  if (!(signaled || force || status != WcStatus::kSuccess)) return;
  Wc wc;
  wc.wr_id = w.wr_id;
  wc.status = status;
  wc.opcode = wr_row(w.opcode).wc;
  wc.byte_len = byte_len;
  wc.qp_num = qp_.qpn_;
  wc.qp_context = qp_.init_.qp_context;
  wc.is_send_cqe = true;
  qp_.push_cqe(*qp_.init_.send_cq, wc, false);
}

bool Completer::outstanding() const {
  const Requester& req = qp_.requester_;
  return consumer_ != req.next() || req.mid_wqe();
}

// (Inlined into its loops: it runs for every WQE an ACK retires.)
[[gnu::always_inline]] inline void Completer::retire_oldest(SendWqe& w) {
  // (The common unsignaled one costs no call: CQ moderation leaves runs of them.)
  if (qp_.init_.sq_sig_all || (w.flags & SEND_SIGNALED))
    complete_send(w, WcStatus::kSuccess, false, wc_byte_len(w));
  else
    w.state = WqeState::kDone;
  if (is_rd_atomic(w.opcode)) [[unlikely]] qp_.requester_.rd_atomic_retired();
  psn_ = psn_add(w.psn, w.npsn);
  ++consumer_;
}

void Completer::note_retired() {
  rnr_retries_left_ = qp_.path_.rnr_retry;
  retries_left_ = qp_.path_.retry_cnt;
  if (rtt_sampling_ && psn_diff(psn_, rtt_psn_) > 0) [[unlikely]] end_rtt_sample();
}

void Completer::end_rtt_sample() {
  rtt_sampling_ = false;
  const Clock::duration rtt = qp_.engine_.clock().now() - rtt_sent_at_;
  rtt_.add(rtt);
  backoff_ = 0;  // (Karn: a round trip measured on a request sent once)
  if (qp_.congestion_control_) qp_.requester_.on_rtt(rtt);  // the delay signal's input
}

void Completer::back_off() {
  // In process the responder answers inside the requester's send: no delay
  // hides there, and a request unanswered past the floor was lost, not
  // late. Backing off further only idles the QP.
  const std::uint8_t most = qp_.engine_.link_is_polled() ? kMaxBackoff : kMaxBackoffInProcess;
  if (backoff_ < most) ++backoff_;
  if (!rtt_sampling_) rtt_countdown_ = 1;  // what ends it: the next request sent once is timed
}

void Completer::drop_rtt_sample() {
  // The next request sent for the first time is timed instead: under loss
  // most samples are dropped, and waiting kRttSampleEvery requests for the
  // next one left a QP without an estimate (only IBA timeouts) for long.
  if (rtt_sampling_) rtt_sampling_ = false, rtt_countdown_ = 1;
}

void Completer::go_back(std::uint64_t index, std::uint32_t psn) {
  // Karn: a sample whose request is sent again is dropped. One before the
  // go-back's first PSN is not resent, and its answer (often the NAK that
  // caused this, whose implied ACK covers it) still times it: dropped at
  // every go-back, under steady loss no sample ever completed, and the QP
  // had only IBA timeouts.
  if (!psn_before(rtt_psn_, psn)) drop_rtt_sample();
  loss_seen_ = true;
  qp_.requester_.rewind_to(index, psn);
}

void Completer::retire_wqe() {
  retire_oldest(qp_.sq_[consumer_]);
  // in order: what has nothing left to wait for behind it completes now
  if (consumer_ != qp_.requester_.next() && qp_.sq_[consumer_].acknowledged()) retire_acknowledged();
  note_retired();
}

void Completer::retire_acknowledged() {
  const std::uint64_t next = qp_.requester_.next();
  while (consumer_ != next && qp_.sq_[consumer_].acknowledged()) retire_acknowledged_head();
}

void Completer::retire_acknowledged_head() {
  SendWqe& w = qp_.sq_[consumer_];
  // A UC or UD message: nothing acknowledges it, the window stays open.
  if (!is_local_op(w.opcode)) psn_ = psn_add(w.psn, w.npsn);
  complete_send(w, WcStatus::kSuccess, false, wc_byte_len(w));
  ++consumer_;
}

void Completer::fail(std::uint64_t index, WcStatus status) {
  while (consumer_ < index) complete_send(qp_.sq_[consumer_++], WcStatus::kWrFlushErr, true);
  complete_send(qp_.sq_[consumer_++], status, true);
}

void Completer::flush() {
  // IBA 10.3.1.2 (QP error state): every outstanding send WR completes with
  // a flush error, signaled or not, in order.
  while (consumer_ != qp_.sq_.prod()) complete_send(qp_.sq_[consumer_++], WcStatus::kWrFlushErr, true);
}

void Completer::reset() {
  consumer_ = 0;
  read_retry_pending_ = false;
  nak_acted_ = false;
  free_repeat_naks_ = kFreeRepeatNaks;
  rtt_sampling_ = false;
  rtt_.reset();
  loss_seen_ = false;
  backoff_ = 0;
  stop_transport_timer();
}

bool Completer::spend_retry() {
  if (retries_left_ == 0) {
    qp_.fail_wqe(consumer_, WcStatus::kRetryExcErr);
    return false;
  }
  --retries_left_;
  return true;
}

bool Completer::admit(std::uint64_t src_addr, std::uint32_t src_qpn) {
  QpCounters::SendSide& c = qp_.send_counters_;
  // Header validation (IBA 9.6.1.5): only the connected peer answers us.
  if (src_addr != qp_.path_.dest_addr || src_qpn != qp_.path_.dest_qpn) return c.dropped_bad_source.bump(), false;
  if (qp_.state() == QpState::kErr) return c.dropped_bad_state.bump(), false;  // responses after an error
  return true;
}

void Completer::handle(Packet& pkt) {
  if (!admit(pkt.src_addr, pkt.src_qpn)) return;
  // A CNP retires nothing: it slows the requester (dcqcn.h).
  if (pkt.op == Opcode::kCnp) [[unlikely]]
    return qp_.requester_.on_cnp();
  run(pkt);
}

void Completer::handle_ack(const Ack& ack) {
  if (!qp_.init_.fast_entries) [[unlikely]] return handle_as_packet(ack);
  if (admit(ack.src_addr, ack.src_qpn)) run(ack);
}

void Completer::handle_as_packet(const Ack& ack) {
  Packet p = ack.packet();
  handle(p);
}

// The machine, for a response packet or for a plain ACK's compact header
// (Ack): the same states, each written once for both. An ACK's opcode and
// syndrome are constants, so check_opcode sends it to ack(), and the
// states only a packet reaches (READ data, atomic data, the NAKs) are not
// compiled into its instance.
template <class Response>
void Completer::run(Response& r) {
  constexpr bool kPacket = std::is_same_v<Response, Packet>;
  State s = State::kCheckPsn;
  while (s != State::kDone) {
    switch (s) {
      case State::kCheckPsn: s = check_psn(r); break;
      case State::kImpliedAcks: s = implied_acks_before(r.psn); break;
      case State::kCheckOpcode: s = check_opcode(r); break;
      case State::kAck: s = ack(r.psn); break;
      case State::kComplete: s = complete_now(); break;
      case State::kRetryRead: s = retry_read(); break;
      case State::kReadData:
      case State::kAtomicData:
      case State::kRnrNak:
      case State::kSequenceNak:
      case State::kFatalNak:
        if constexpr (kPacket) s = packet_state(s, r);
        else s = State::kDone;  // (never: an ACK's check_opcode answers kAck)
        break;
      case State::kDrop:
        qp_.send_counters_.dropped_bad_psn.bump();
        s = State::kDone;
        break;
      case State::kDropOpcode:
        qp_.send_counters_.dropped_bad_opcode.bump();
        s = State::kDone;
        break;
      case State::kDone: break;
    }
  }
  // Whatever this response did (or did not: a drop), work still outstanding
  // is timed, unless an RNR wait holds the requester.
  if (timeout_at_ == Clock::time_point{} && !timeout_unstamped_ && !qp_.requester_.waiting_rnr() &&
      qp_.state() != QpState::kErr && outstanding())
    start_transport_timer();
}

Completer::State Completer::packet_state(State s, Packet& pkt) {
  if (s == State::kReadData) return read_data(pkt);
  if (s == State::kAtomicData) return atomic_data(pkt);
  if (s == State::kRnrNak) return rnr_nak(pkt);
  if (s == State::kSequenceNak) return sequence_nak(pkt);
  return fatal_nak(pkt);  // (run() calls it for these five only)
}

// IBA 9.7.5.1.3 (the requester's PSN checks): a response answers a PSN
// between the oldest unacknowledged one and the last one sent; an older one
// is a duplicate (late, or answering a resend) and is dropped, so that no
// data is placed twice into a buffer whose WQE may have completed.
template <class Response>
Completer::State Completer::check_psn(const Response& pkt) {
  const std::uint32_t next_psn = qp_.requester_.next_psn();
  if (!outstanding()) return State::kDrop;  // nothing outstanding
  if (psn_before(pkt.psn, psn_) || !psn_before(pkt.psn, next_psn)) return State::kDrop;
  // After asking a READ again, responses to the first request that are
  // still arriving beyond the gap are dropped without asking once more.
  if (read_retry_pending_ && pkt.psn != psn_ && pkt.op != Opcode::kAck) return State::kDrop;
  if (!psn_before(last_psn_of(pkt), next_psn)) return State::kDrop;  // a train beyond what was asked
  qp_.send_counters_.responses_received.bump(pkt.count);
  return State::kImpliedAcks;
}

// IBA 9.7.5.1.2 (coalesced acknowledgement): a response for PSN p
// acknowledges every SEND and WRITE before p. A READ or atomic before p
// cannot be implied (its data did not arrive): it is asked again.
// One ACK usually retires a run of unsignaled WQEs: each costs a look at
// its PSNs and flags, nothing more. Every WQE in [consumer, next) has
// been sent or is a local operation that executed (the requester executes
// one as it reaches it), so a local one met here retires in its turn.
Completer::State Completer::implied_acks_before(std::uint32_t psn) {
  const std::uint64_t first = consumer_;
  const Requester& req = qp_.requester_;
  State next = req.mid_wqe() ? State::kCheckOpcode : State::kDone;
  while (consumer_ != req.next()) {
    SendWqe& w = qp_.sq_[consumer_];
    if (w.acknowledged()) [[unlikely]] {  // a local operation that executed
      retire_acknowledged_head();
      continue;
    }
    if (!psn_before(last_psn(w.psn, w.npsn), psn)) {  // w holds psn
      next = State::kCheckOpcode;
      break;
    }
    if (is_rd_atomic(w.opcode)) {
      next = State::kRetryRead;
      break;
    }
    retire_oldest(w);
  }
  // (Otherwise only the WQE being sent is left, and it holds psn.)
  if (consumer_ != first) note_retired();
  return next;
}

template <class Response>
Completer::State Completer::check_opcode(const Response& pkt) {
  if (pkt.op == Opcode::kAck) {
    if (pkt.syndrome == Syndrome::kAck) return State::kAck;
    if (pkt.syndrome == Syndrome::kRnrNak) return State::kRnrNak;
    if (pkt.syndrome == Syndrome::kPsnSequenceError) return State::kSequenceNak;
    return State::kFatalNak;
  }
  const SendWqe& w = qp_.sq_[consumer_];
  if (is_read_response(pkt.op))
    return wr_row(w.opcode).cls == WrClass::kRead ? State::kReadData : State::kDropOpcode;
  if (pkt.op == Opcode::kAtomicAck)
    return wr_row(w.opcode).cls == WrClass::kAtomic && pkt.psn == w.psn ? State::kAtomicData : State::kDropOpcode;
  return State::kDropOpcode;  // a request opcode: the engine routes those to the responder
}

// An ACK inside the oldest WQE: a SEND or WRITE completes with its last
// PSN; before that, the ACK moves the window.
Completer::State Completer::ack(std::uint32_t psn) {
  const SendWqe& w = qp_.sq_[consumer_];
  if (is_rd_atomic(w.opcode)) return State::kDropOpcode;  // only its data answers a READ or atomic
  if (psn == last_psn(w.psn, w.npsn) && consumer_ != qp_.requester_.next()) return State::kComplete;
  psn_ = psn_add(psn, 1);
  note_progress();
  return State::kDone;
}

// READ response packets arrive in PSN order, each carrying the MTU's worth
// at its offset (the last one the rest); a gap means one was lost. A train
// of them is placed at once, checked as its packets would be one by one.
Completer::State Completer::read_data(Packet& pkt) {
  if (pkt.psn != psn_) return State::kRetryRead;
  const SendPath& path = qp_.path_;
  const SendWqe& w = qp_.sq_[consumer_];
  const std::uint64_t offset = static_cast<std::uint64_t>(psn_diff(pkt.psn, w.psn)) * path.mtu;
  const std::uint32_t wqe_last = last_psn(w.psn, w.npsn);
  const std::int32_t to_last = psn_diff(wqe_last, last_psn_of(pkt));
  const bool last = to_last == 0;
  const std::uint64_t expect = last ? w.length - offset : std::uint64_t{pkt.count} * path.mtu;
  if (to_last < 0 || offset > w.length || pkt.payload_length != expect || ends_message(last_opcode(pkt)) != last ||
      (pkt.count > 1 && path.packets_at_mtu(pkt.payload_length) != pkt.count)) {
    qp_.send_counters_.dropped_bad_length.bump();
    return State::kDone;
  }
  // Translate and place in one translation window (see delivery_scope.h).
  const bool placed = [&] {
    sq_mutex(qp_).assert_held();  // (run here, inside the lock)
    TranslationWindow window(Qp::window_key(w.sges));
    if (!qp_.translate_slice(w.sges, offset, expect, ACCESS_LOCAL_WRITE, qp_.local_pdn(w), pieces_)) return false;
    copy_pieces(pieces_, pkt.payload);
    return true;
  }();
  if (!placed) {
    qp_.fail_wqe(consumer_, WcStatus::kLocProtErr);
    return State::kDone;
  }
  psn_ = psn_add(pkt.psn, pkt.count);
  read_retry_pending_ = false;
  note_progress();
  return last ? State::kComplete : State::kDone;
}

// A response that moved the window: the retry count starts again and so
// does the transport timer (IBA 9.7.6.1.1 times the oldest unacknowledged
// PSN, as rxe's completer restarts its retransmit timer on every ACK). A
// READ whose response train outlasts one timeout is then not asked again
// while its data keeps arriving (asking would restart the train: a
// live-lock on a slow link).
void Completer::note_progress() {
  retries_left_ = qp_.path_.retry_cnt;
  nak_acted_ = false;
  free_repeat_naks_ = kFreeRepeatNaks;
  if (rtt_sampling_ && psn_diff(psn_, rtt_psn_) > 0) end_rtt_sample();
  start_transport_timer();
}

Completer::State Completer::atomic_data(Packet& pkt) {
  const SendWqe& w = qp_.sq_[consumer_];
  const bool placed = [&] {
    sq_mutex(qp_).assert_held();  // (run here, inside the lock)
    TranslationWindow window(Qp::window_key(w.sges));
    if (!qp_.translate_local(w.sges, ACCESS_LOCAL_WRITE, pieces_)) return false;
    MemPiece src{reinterpret_cast<std::byte*>(&pkt.atomic_orig), 8};
    copy_pieces(pieces_, std::span<const MemPiece>(&src, 1));
    return true;
  }();
  if (!placed) {
    qp_.fail_wqe(consumer_, WcStatus::kLocProtErr);
    return State::kDone;
  }
  read_retry_pending_ = false;
  return State::kComplete;
}

Completer::State Completer::complete_now() {
  retire_wqe();
  stop_transport_timer();
  // (Work still outstanding is timed: what handle()'s end would do.)
  if (outstanding()) start_transport_timer();
  return State::kDone;
}

// A READ response went missing (a gap in its PSNs, or a response for a
// later PSN arrived first): ask for the rest of the READ again from the
// first PSN not received. Like a sequence-error NAK it spends retry_cnt.
Completer::State Completer::retry_read() {
  if (read_retry_pending_) return State::kDrop;
  if (!spend_retry()) return State::kDone;
  go_back(consumer_, psn_);
  read_retry_pending_ = true;
  return State::kDone;
}

// RNR NAK (IBA 9.7.5.2.8): resend from the NAKed PSN once the responder's
// timer has run, up to rnr_retry times (7: for ever).
Completer::State Completer::rnr_nak(Packet& pkt) {
  qp_.send_counters_.rnr_naks_received.bump();
  const bool forever = qp_.path_.rnr_retry == 7;
  if (!forever && rnr_retries_left_ == 0) {
    qp_.fail_wqe(consumer_, WcStatus::kRnrRetryExcErr);
    return State::kDone;
  }
  if (!forever) --rnr_retries_left_;
  qp_.send_counters_.rnr_retries.bump();
  // An RNR NAK past the oldest unacknowledged PSN is progress, as a
  // sequence NAK's is: the responder took what came before it. Moving
  // psn_ without saying so left the retry count where it was, and the
  // next sequence NAK for that PSN spent one more (send_bw under loss and
  // a slow receiver: RETRY_EXC_ERR after no timeout at all).
  if (psn_before(psn_, pkt.psn)) {
    psn_ = pkt.psn;
    note_progress();
  }
  psn_ = pkt.psn;
  drop_rtt_sample();  // (Karn: what follows is a resend)
  qp_.requester_.wait_rnr(consumer_, pkt.psn,
                          qp_.engine_.clock().now() + std::chrono::microseconds(rnr_timer_usec(pkt.rnr_timer)));
  stop_transport_timer();
  return State::kDone;
}

// PSN sequence error NAK (IBA 9.7.5.2.2): the responder expects pkt.psn;
// everything before it is acknowledged (done above), go back N from there.
// Like a timeout, a retry that makes no progress spends retry_cnt (as rxe
// does): a responder that NAKs for ever cannot keep us resending for ever.
// A NAK past the oldest unacknowledged PSN is progress too (the responder
// took what came before it, inside a WQE implied_acks did not retire):
// the count starts again first, or under steady loss a run of NAKs, each
// a few packets further into a long message, ended the QP.
Completer::State Completer::sequence_nak(Packet& pkt) {
  qp_.send_counters_.seq_naks_received.bump();
  // The requester went back to this PSN already and has sent nothing since
  // (a NAK only follows a packet past it): a repeat of the NAK it acted on
  // (the responder NAKs again for a resend it finds lost, responder.cc
  // renak, and a stale packet can draw one). Neither a go-back nor a retry.
  if (pkt.psn == psn_ && qp_.requester_.next_psn() == pkt.psn) return State::kDone;
  if (psn_before(psn_, pkt.psn)) {
    psn_ = pkt.psn;
    note_progress();
  }
  qp_.requester_.note_loss(pkt.psn);
  // A NAK that repeats the one acted on, after more was sent (the
  // responder's answer to a resend it found lost, or to a stale reordered
  // packet: responder.cc renak) goes back again, but spends a retry only
  // past kFreeRepeatNaks of them: a few stale ones in a row ended live QPs
  // under loss and reordering (RETRY_EXC_ERR after 3 timeouts and a run of
  // repeats), and a responder that NAKs for ever still ends the QP.
  const bool repeat = nak_acted_ && pkt.psn == psn_;
  if (repeat && free_repeat_naks_ > 0) {
    --free_repeat_naks_;
  } else if (!spend_retry()) {
    return State::kDone;
  }
  nak_acted_ = true;
  psn_ = pkt.psn;
  go_back(consumer_, pkt.psn);
  return State::kDone;
}

// Invalid request, remote access and remote operational errors (class C,
// IBA 9.9.2): the WQE completes with the error and the QP ends.
Completer::State Completer::fatal_nak(Packet& pkt) {
  // (Syndrome's class C codes follow NakCode's order from kInvalidRequest.)
  const auto code = static_cast<std::size_t>(pkt.syndrome) - static_cast<std::size_t>(Syndrome::kInvalidRequest);
  if (code < kNumNakCodes) qp_.send_counters_.naks_received[code].bump();
  qp_.fail_wqe(consumer_, nak_status(pkt.syndrome));
  return State::kDone;
}

void Completer::start_transport_timer() {
  stop_transport_timer();
  const SendPath& path = qp_.path_;
  if (path.timeout == 0) return;  // infinite
  // IBA 9.7.6.1.3 lets the timer expire between the timeout and four times
  // it. A pending transport timer of the same timeout was armed at most one
  // timeout ago, so it runs within one timeout from now; it stamps the
  // deadline then (check_timeout), which expires at most two timeouts
  // after this send. That saves a clock read per request.
  if (qp_.transport_timer_pending()) {
    timeout_unstamped_ = true;
    return;
  }
  const Clock::time_point now = qp_.engine_.clock().now();
  const Clock::duration span = path.timeout_span();
  timeout_at_ = now + span;
  // With a sample of the round trip: a tail-loss probe at PTO and an early
  // retransmission at RTO, each where it leaves room before the next (the
  // IBA timeout last). The floors are a wire's or the in-process link's.
  // Both are backed off (doubled) for each go-back-N they caused, until a
  // round trip is measured again (RFC 6298 5.5-5.7, Karn).
  // In process, once a loss was seen, the floors stand for an estimate
  // that steady loss can keep from ever completing (a 64-packet message at
  // 5% loss is rarely sent whole once): the round trip there is the send
  // itself, and without early timers that QP had only IBA timeouts.
  const bool wire = qp_.engine_.link_is_polled();
  if (rtt_.has_sample() || (!wire && loss_seen_)) {
    const Clock::duration rto = rtt_.rto(wire ? kRtoFloor : kRtoFloorInProcess) * (1 << backoff_);
    const Clock::duration pto = rtt_.pto(wire ? kPtoFloor : kPtoFloorInProcess) * (1 << backoff_);
    if (2 * rto <= span) {
      early_wait_ = rto;
      early_at_ = now + rto;
    }
    if (2 * pto <= (early_at_ != Clock::time_point{} ? rto : span)) probe_at_ = now + pto;
  }
  qp_.arm_timer(next_deadline(), /*transport=*/true);
}

void Completer::retransmit_early(Clock::time_point now) {
  qp_.send_counters_.rto_expiries.bump();
  qp_.requester_.note_loss(psn_);
  read_retry_pending_ = false;
  go_back(consumer_, psn_);
  back_off();
  early_wait_ *= 2;  // (TCP's backoff) until the IBA timeout is nearer
  early_at_ = now + early_wait_ < timeout_at_ ? now + early_wait_ : Clock::time_point{};
  probe_at_ = {};  // (none after a go-back-N until the window moves)
  qp_.arm_timer(next_deadline(), /*transport=*/true);
}

void Completer::send_tail_probe() {
  probe_at_ = {};
  // More than a group of kAckEveryPsns is out: a request that asked for an
  // ACK went unanswered for two round trips. The responder is silent on
  // purpose (it NAKed a gap once, C9-66, and drops all after it until the
  // gap's PSN comes; the NAK was lost), or everything was lost: the last
  // request would be dropped too. Go back N now, as at RTO.
  if (psn_diff(qp_.requester_.next_psn(), psn_) > static_cast<std::int32_t>(kAckEveryPsns)) {
    qp_.send_counters_.rto_expiries.bump();
    qp_.requester_.note_loss(psn_);
    read_retry_pending_ = false;
    go_back(consumer_, psn_);
    back_off();
    return qp_.arm_timer(next_deadline(), /*transport=*/true);
  }
  qp_.send_counters_.tail_probes.bump();
  drop_rtt_sample();  // (Karn: the probe's answer could be the first send's)
  qp_.requester_.probe_last();  // the send side sends it next
  qp_.arm_timer(next_deadline(), /*transport=*/true);
}

void Completer::check_timeout() {
  if (!outstanding()) {
    timeout_unstamped_ = false;
    return;
  }
  if (timeout_unstamped_) {  // the pending timer this send counted on is us
    start_transport_timer();  // stamps now + timeout
    return;
  }
  if (timeout_at_ == Clock::time_point{}) return;
  const Clock::time_point now = qp_.engine_.clock().now();
  if (now < timeout_at_) {
    if (probe_at_ != Clock::time_point{} && now >= probe_at_) return send_tail_probe();
    if (early_at_ != Clock::time_point{} && now >= early_at_) return retransmit_early(now);
    qp_.arm_timer(next_deadline(), /*transport=*/true);
    return;
  }
  // Lost request or response: go back to the oldest unacknowledged PSN,
  // skipping what was acknowledged already.
  qp_.send_counters_.timeouts.bump();
  timeout_at_ = {};
  early_at_ = {};
  probe_at_ = {};
  qp_.requester_.note_loss(psn_);
  if (!spend_retry()) return;
  read_retry_pending_ = false;
  go_back(consumer_, psn_);
}

}  // namespace srdma::hca
