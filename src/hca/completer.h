// The completer (completer.cc): matches responses to the send queue's
// outstanding WQEs in PSN order, places READ data and atomic results,
// writes send CQEs and handles NAKs and the transport timer. It owns the
// consumer index, the oldest unacknowledged PSN, the retry counts and the
// transport timer's deadline. It moves the requester only through the
// requester's calls (rewind_to, wait_rnr, rd_atomic_retired, stop).
//
// Every call REQUIRES the QP's sq_mu_.
#pragma once

#include <cstdint>
#include <string_view>

#include "hca/engine_clock.h"
#include "common/thread_annotations.h"
#include "hca/packet.h"
#include "hca/qp_locks.h"
#include "hca/rtt_estimator.h"
#include "hca/send_queue.h"
#include "srdma/wc.h"

namespace srdma::hca {

class Qp;

class Completer {
 public:
  explicit Completer(Qp& qp) : qp_(qp) {}
  Completer(const Completer&) = delete;
  Completer& operator=(const Completer&) = delete;

  // The state machine, as rxe's rxe_comp.c: one small function per state,
  // each returning the next; named for tracing.
  enum class State : std::uint8_t {
    kCheckPsn, kImpliedAcks, kCheckOpcode, kAck, kReadData, kAtomicData, kComplete, kRetryRead, kRnrNak,
    kSequenceNak, kFatalNak,
    kDrop,          // outside the PSN window (DropReason::kBadPsn)
    kDropOpcode,    // does not answer the WQE its PSN names (DropReason::kBadOpcode)
    kDone,
  };
  static std::string_view state_str(State s);

  // A response from the connected peer.
  void handle(Packet& pkt) REQUIRES(sq_mutex(qp_));
  // A plain ACK by its compact header (no Packet built): the same machine
  // as handle() runs (run<Ack>), its states inlined into it (flatten: one
  // ACK retires a run of WQEs at 20 M messages a second).
  [[gnu::flatten]] void handle_ack(const Ack& ack) REQUIRES(sq_mutex(qp_));
  // Without the early entries (QpInit::fast_entries): as a packet, through
  // handle() (out of line: not flattened into handle_ack).
  [[gnu::noinline]] void handle_as_packet(const Ack& ack) REQUIRES(sq_mutex(qp_));
  // The engine timer ran: a lost request or response is sent again.
  void check_timeout() REQUIRES(sq_mutex(qp_));

  // The requester's calls.
  // A request went out: time it, unless its answer is already here.
  // (Defined in requester.cc, its caller's unit.)
  void request_sent() REQUIRES(sq_mutex(qp_));
  // WQEs at the head that have nothing left to wait for (local operations
  // executed, UC/UD messages handed to the link) retire, in order.
  void retire_acknowledged() REQUIRES(sq_mutex(qp_));

  // The QP's calls. The QP failed at the WQE `index` (IBA 10.8.3.3): the
  // WQEs before it flush, it completes with `status`.
  void fail(std::uint64_t index, WcStatus status) REQUIRES(sq_mutex(qp_));
  // ERR: every WQE still queued completes with a flush error.
  void flush() REQUIRES(sq_mutex(qp_));
  std::uint64_t consumer() const REQUIRES(sq_mutex(qp_)) { return consumer_; }  // the oldest WQE not completed
  // The round-trip estimate (for tests and reports).
  const RttEstimator& rtt() const REQUIRES(sq_mutex(qp_)) { return rtt_; }
  std::uint32_t oldest_unacked_psn() const REQUIRES(sq_mutex(qp_)) { return psn_; }

  // modify_qp's calls (every lock held).
  void set_sq_psn(std::uint32_t psn) REQUIRES(sq_mutex(qp_)) { psn_ = psn; }
  void set_retry_cnt(std::uint8_t n) REQUIRES(sq_mutex(qp_)) { retries_left_ = n; }
  void set_rnr_retry(std::uint8_t n) REQUIRES(sq_mutex(qp_)) { rnr_retries_left_ = n; }
  void reset() REQUIRES(sq_mutex(qp_));  // RESET: the queue is empty

 private:
  // Admission, shared by both entries: the connected peer's response, to a
  // QP not in error (dropped and counted otherwise).
  bool admit(std::uint64_t src_addr, std::uint32_t src_qpn) REQUIRES(sq_mutex(qp_));
  // The machine, run for a Packet or an Ack (completer.cc).
  template <class Response>
  void run(Response& r) REQUIRES(sq_mutex(qp_));
  // The states. Those an ACK passes read only its header (op, syndrome,
  // psn, count), which an Ack has too; the rest take the packet.
  template <class Response>
  State check_psn(const Response& pkt) REQUIRES(sq_mutex(qp_));
  State implied_acks_before(std::uint32_t psn) REQUIRES(sq_mutex(qp_));
  template <class Response>
  State check_opcode(const Response& pkt) REQUIRES(sq_mutex(qp_));
  State ack(std::uint32_t psn) REQUIRES(sq_mutex(qp_));
  State complete_now() REQUIRES(sq_mutex(qp_));
  State retry_read() REQUIRES(sq_mutex(qp_));
  // The states only a packet reaches.
  State packet_state(State s, Packet& pkt) REQUIRES(sq_mutex(qp_));
  State read_data(Packet& pkt) REQUIRES(sq_mutex(qp_));
  State atomic_data(Packet& pkt) REQUIRES(sq_mutex(qp_));
  State rnr_nak(Packet& pkt) REQUIRES(sq_mutex(qp_));
  State sequence_nak(Packet& pkt) REQUIRES(sq_mutex(qp_));
  State fatal_nak(Packet& pkt) REQUIRES(sq_mutex(qp_));

  bool outstanding() const REQUIRES(sq_mutex(qp_));  // a WQE sent (or being sent) has not completed
  void retire_wqe() REQUIRES(sq_mutex(qp_));  // the oldest outstanding WQE completed successfully
  // retire_acknowledged's step: the WQE at the head, acknowledged already
  // (a local operation executed, a UC or UD message handed over), completes.
  void retire_acknowledged_head() REQUIRES(sq_mutex(qp_));
  // retire_wqe's step: the WQE `w` (the oldest) completes and leaves the queue.
  void retire_oldest(SendWqe& w) REQUIRES(sq_mutex(qp_));
  // After one or more retired, the retry counters start again (IBA
  // 9.7.5.2.8: progress).
  void note_retired() REQUIRES(sq_mutex(qp_));
  void note_progress() REQUIRES(sq_mutex(qp_));  // a response moved the window: retry count and timer restart
  // One retry of `retries_left_` (a timeout, a sequence NAK, a READ asked
  // again): false, and the QP fails, when none is left.
  bool spend_retry() REQUIRES(sq_mutex(qp_));
  void complete_send(SendWqe& w, WcStatus status, bool force, std::uint32_t byte_len = 0) REQUIRES(sq_mutex(qp_));
  // The transport timer for what is outstanding.
  void start_transport_timer() REQUIRES(sq_mutex(qp_));
  void stop_transport_timer() REQUIRES(sq_mutex(qp_)) {
    timeout_at_ = {};
    timeout_unstamped_ = false;
    early_at_ = {};
    probe_at_ = {};
  }
  // Go back N to `psn` of the WQE `index` (the requester's rewind_to): a
  // retransmission, so the round-trip sample in flight is dropped (Karn).
  void go_back(std::uint64_t index, std::uint32_t psn) REQUIRES(sq_mutex(qp_));
  // The RTO expired before the IBA timeout: resend from the oldest
  // unacknowledged PSN, spend no retry, and wait twice as long next.
  void retransmit_early(Clock::time_point now) REQUIRES(sq_mutex(qp_));
  // PTO passed without an answer: the last request goes again with AckReq
  // (a tail-loss probe); its answer, an ACK or a sequence NAK, tells what
  // was lost. Spends no retry; at most one until the window moves.
  void send_tail_probe() REQUIRES(sq_mutex(qp_));
  // The transport timer's next deadline: the probe's, the early
  // retransmission's, or the IBA timeout's.
  Clock::time_point next_deadline() const REQUIRES(sq_mutex(qp_)) {
    return probe_at_ != Clock::time_point{} ? probe_at_ : early_at_ != Clock::time_point{} ? early_at_ : timeout_at_;
  }
  // Karn: a resend makes the sample in flight ambiguous; the next request
  // sent once is timed instead.
  void drop_rtt_sample() REQUIRES(sq_mutex(qp_));
  // The round trip of the request at rtt_psn_ is over once psn_ passed it.
  void end_rtt_sample() REQUIRES(sq_mutex(qp_));
  // An early go-back-N (at PTO or RTO): PTO and RTO double from the next
  // deadline on, until end_rtt_sample. A slow peer (a process that did not
  // run for milliseconds) is no loss: without it every period after one
  // started at the same short RTO, and spurious go-back-Ns kept both
  // sides busy with duplicates and their ACKs.
  void back_off() REQUIRES(sq_mutex(qp_));
  // The countdown reached zero: time this request if none is being timed.
  void start_rtt_sample() REQUIRES(sq_mutex(qp_));

  Qp& qp_;
  std::uint64_t consumer_ GUARDED_BY(sq_mutex(qp_)) = 0;  // next WQE index to retire
  std::uint32_t psn_ GUARDED_BY(sq_mutex(qp_)) = 0;       // oldest PSN not acknowledged yet
  std::uint8_t retries_left_ GUARDED_BY(sq_mutex(qp_)) = 7;
  std::uint8_t rnr_retries_left_ GUARDED_BY(sq_mutex(qp_)) = 7;
  // Sequence NAKs that repeat the one acted on (its PSN, no progress
  // since) and may still go back without spending a retry (sequence_nak).
  static constexpr std::uint8_t kFreeRepeatNaks = 8;
  bool nak_acted_ GUARDED_BY(sq_mutex(qp_)) = false;  // went back for a NAK at psn_
  std::uint8_t free_repeat_naks_ GUARDED_BY(sq_mutex(qp_)) = kFreeRepeatNaks;
  // A READ was asked again from `psn_` because a response went missing;
  // responses after the gap that are still on their way are dropped
  // without asking again, until the response at `psn_` arrives.
  bool read_retry_pending_ GUARDED_BY(sq_mutex(qp_)) = false;
  // An answer is outstanding but its deadline is not stamped yet: a
  // transport timer armed at most one timeout ago is pending and stamps
  // it when it runs (see start_transport_timer).
  bool timeout_unstamped_ GUARDED_BY(sq_mutex(qp_)) = false;
  Clock::time_point timeout_at_ GUARDED_BY(sq_mutex(qp_)){};
  // Adaptive retransmission (rtt_estimator.h): the estimate; the request
  // being timed (its last PSN, when it went out) and the requests left
  // before the next sample; the next early retransmission ({}: none before the
  // IBA timeout) and the wait before it, doubled at each; the tail-loss
  // probe ({}: none due).
  RttEstimator rtt_ GUARDED_BY(sq_mutex(qp_));
  bool rtt_sampling_ GUARDED_BY(sq_mutex(qp_)) = false;
  std::uint32_t rtt_psn_ GUARDED_BY(sq_mutex(qp_)) = 0;
  std::uint32_t rtt_countdown_ GUARDED_BY(sq_mutex(qp_)) = 1;  // the first request is timed
  Clock::time_point rtt_sent_at_ GUARDED_BY(sq_mutex(qp_)){};
  Clock::time_point early_at_ GUARDED_BY(sq_mutex(qp_)){};
  Clock::duration early_wait_ GUARDED_BY(sq_mutex(qp_)){};
  Clock::time_point probe_at_ GUARDED_BY(sq_mutex(qp_)){};
  // PTO and RTO are multiplied by 2^backoff_ (back_off).
  static constexpr std::uint8_t kMaxBackoff = 6;
  static constexpr std::uint8_t kMaxBackoffInProcess = 2;
  std::uint8_t backoff_ GUARDED_BY(sq_mutex(qp_)) = 0;
  bool loss_seen_ GUARDED_BY(sq_mutex(qp_)) = false;  // a go-back-N happened (start_transport_timer)
  PieceList pieces_ GUARDED_BY(sq_mutex(qp_));  // scratch for translations
};

}  // namespace srdma::hca
