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
#include "hca/packet.h"
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
  void handle(Packet& pkt);
  // A plain ACK: its common case, the last PSN of an outstanding WQE with
  // only SENDs and WRITEs before it, without building a packet; any other
  // as a packet through handle(). (The same machine: the states it passes
  // are check_psn, implied_acks, check_opcode, ack and complete, each
  // check of theirs made.)
  void handle_ack(const Ack& ack);
  // The engine timer ran: a lost request or response is sent again.
  void check_timeout();

  // The requester's calls.
  // A request went out: time it, unless its answer is already here.
  // (Defined in requester.cc, its caller's unit.)
  void request_sent();
  // WQEs at the head that have nothing left to wait for (local operations
  // executed, UC/UD messages handed to the link) retire, in order.
  void retire_acknowledged();

  // The QP's calls. The QP failed at the WQE `index` (IBA 10.8.3.3): the
  // WQEs before it flush, it completes with `status`.
  void fail(std::uint64_t index, WcStatus status);
  // ERR: every WQE still queued completes with a flush error.
  void flush();
  std::uint64_t consumer() const { return consumer_; }  // the oldest WQE not completed
  std::uint32_t oldest_unacked_psn() const { return psn_; }

  // modify_qp's calls (every lock held).
  void set_sq_psn(std::uint32_t psn) { psn_ = psn; }
  void set_retry_cnt(std::uint8_t n) { retries_left_ = n; }
  void set_rnr_retry(std::uint8_t n) { rnr_retries_left_ = n; }
  void reset();  // RESET: the queue is empty

 private:
  // The states.
  State check_psn(Packet& pkt);
  State implied_acks(Packet& pkt) { return implied_acks_before(pkt.psn); }
  State implied_acks_before(std::uint32_t psn);  // implied_acks' work
  State check_opcode(Packet& pkt);
  State ack(Packet& pkt);
  State read_data(Packet& pkt);
  State atomic_data(Packet& pkt);
  State complete(Packet&) { return complete_now(); }
  State complete_now();  // complete's work
  State retry_read(Packet& pkt);
  State rnr_nak(Packet& pkt);
  State sequence_nak(Packet& pkt);
  State fatal_nak(Packet& pkt);
  // handle_ack's uncommon case, out of line (a Packet would widen the
  // frame of the common one).
  [[gnu::noinline, gnu::cold]] void handle_packet(const Ack& ack);

  bool outstanding() const;  // a WQE sent (or being sent) has not completed
  void retire_wqe();         // the oldest outstanding WQE completed successfully
  // retire_wqe's step: the WQE `w` (the oldest) completes and leaves the queue.
  void retire_oldest(SendWqe& w);
  // After one or more retired, the retry counters start again (IBA
  // 9.7.5.2.8: progress).
  void note_retired();
  void note_progress();  // a response moved the window: retry count and timer restart
  // One retry of `retries_left_` (a timeout, a sequence NAK, a READ asked
  // again): false, and the QP fails, when none is left.
  bool spend_retry();
  void complete_send(SendWqe& w, WcStatus status, bool force, std::uint32_t byte_len = 0);
  // The transport timer for what is outstanding.
  void start_transport_timer();
  void stop_transport_timer() {
    timeout_at_ = {};
    timeout_unstamped_ = false;
  }

  Qp& qp_;
  std::uint64_t consumer_ = 0;  // next WQE index to retire
  std::uint32_t psn_ = 0;       // oldest PSN not acknowledged yet
  std::uint8_t retries_left_ = 7;
  std::uint8_t rnr_retries_left_ = 7;
  // A READ was asked again from `psn_` because a response went missing;
  // responses after the gap that are still on their way are dropped
  // without asking again, until the response at `psn_` arrives.
  bool read_retry_pending_ = false;
  // An answer is outstanding but its deadline is not stamped yet: a
  // transport timer armed at most one timeout ago is pending and stamps
  // it when it runs (see start_transport_timer).
  bool timeout_unstamped_ = false;
  Clock::time_point timeout_at_{};
  PieceList pieces_;  // scratch for translations
};

}  // namespace srdma::hca
