// The requester (requester.cc): turns the send queue's WQEs into request
// packets, in order, one PSN per packet. It owns where it is in the queue
// (the next WQE, the next PSN, the resume point inside a WQE), the RNR wait
// and the count of READs and atomics outstanding. The completer moves it
// only through the calls below (rewind_to, wait_rnr, rd_atomic_retired,
// stop); modify_qp through set_sq_psn and reset.
//
// Every call REQUIRES the QP's sq_mu_.
#pragma once

#include <cstdint>
#include <vector>

#include "common/thread_annotations.h"
#include "hca/dcqcn.h"
#include "hca/engine_clock.h"
#include "hca/packet.h"
#include "hca/qp_locks.h"
#include "hca/send_queue.h"
#include "hca/transport_limits.h"

namespace srdma::hca {

class Qp;

class Requester {
 public:
  explicit Requester(Qp& qp);
  Requester(const Requester&) = delete;
  Requester& operator=(const Requester&) = delete;

  // The requester's states (IBA 9.7: what the send side does next).
  enum class Step {
    kIdle,     // nothing to send: the queue is drained, the window or a fence holds it, or the QP is not in RTS
    kSend,     // the WQE at next() (or its next packet) goes out
    kWaitRnr,  // an RNR NAK holds every send until rnr_until()
    kWaitRate, // the congestion control's pacer holds the next send until rate_until()
    kFlush,    // the QP is in ERR: the queue flushes
  };
  Step next_step() REQUIRES(sq_mutex(qp_));
  // Sends the next WQE, or its next packet or train (kSend).
  void send_one() REQUIRES(sq_mutex(qp_));

  // Where it is: the next WQE index to send, the next PSN, and whether it
  // stopped inside a WQE (a resume point after a NAK, or a message longer
  // than the window).
  std::uint64_t next() const REQUIRES(sq_mutex(qp_)) { return next_; }
  std::uint32_t next_psn() const REQUIRES(sq_mutex(qp_)) { return next_psn_; }
  bool mid_wqe() const REQUIRES(sq_mutex(qp_)) { return offset_ != 0; }
  // The request just sent went out before (a go-back-N's or a probe's):
  // its answer may be the first one's (Karn).
  bool sent_again() const REQUIRES(sq_mutex(qp_)) { return sent_again_; }
  bool waiting_rnr() const REQUIRES(sq_mutex(qp_)) { return rnr_until_ != Clock::time_point{}; }
  Clock::time_point rnr_until() const REQUIRES(sq_mutex(qp_)) { return rnr_until_; }
  Clock::time_point rate_until() const REQUIRES(sq_mutex(qp_)) { return rate_until_; }

  // Congestion control's reaction point (dcqcn.h), where the QP has it: a
  // CNP from the peer (the completer admitted its source), a round-trip
  // sample for the delay signal.
  void on_cnp() REQUIRES(sq_mutex(qp_));
  void on_rtt(Clock::duration rtt) REQUIRES(sq_mutex(qp_));

  // The completer's calls.
  // Go-back-N (IBA 9.7.5.2): the next send is the packet `psn` of the WQE at
  // `index` (index < next() and that WQE holds `psn`).
  void rewind_to(std::uint64_t index, std::uint32_t psn) REQUIRES(sq_mutex(qp_));
  // RNR NAK (IBA 9.7.5.2.8): go back to `psn` of `index`, sending nothing before `until`.
  void wait_rnr(std::uint64_t index, std::uint32_t psn, Clock::time_point until) REQUIRES(sq_mutex(qp_));
  // A tail-loss probe: the next send is the last request sent again (a
  // SEND's or WRITE's last packet sent, a READ asked from its first
  // response not received, an atomic), with AckReq; then the requester is
  // where it was. REQUIRES something outstanding.
  void probe_last() REQUIRES(sq_mutex(qp_));
  // The completer saw a loss at `psn` (a sequence NAK, an early or IBA
  // timeout). On a wire, the first of an episode halves the window: what
  // is in flight past a loss is resent (go-back-N), and a full window of
  // 256 PSNs queued in the peer's socket was resent for every loss.
  void note_loss(std::uint32_t psn) REQUIRES(sq_mutex(qp_));
  // A READ or atomic completed: one more may go out (max_rd_atomic).
  void rd_atomic_retired() REQUIRES(sq_mutex(qp_)) { --rd_atomic_outstanding_; }
  // The QP failed or flushed every WQE before `from`: nothing of them is
  // sent again.
  void stop(std::uint64_t from) REQUIRES(sq_mutex(qp_));

  // modify_qp's calls (every lock held).
  void set_sq_psn(std::uint32_t psn) REQUIRES(sq_mutex(qp_)) { next_psn_ = sent_end_psn_ = window_mark_ = psn; }
  void reset() REQUIRES(sq_mutex(qp_));  // RESET: the queue is empty

 private:
  // PSNs the window has left while something is outstanding: the window
  // (kMaxUnackedPsns, or less on a wire after a loss) less those sent since
  // the oldest unacknowledged one.
  std::int32_t window_room() const REQUIRES(sq_mutex(qp_));
  // The window is full: it grows by what was acknowledged since it last
  // looked (kAckEveryPsns PSNs per window's worth); true if it has room now.
  bool grow_window() REQUIRES(sq_mutex(qp_));
  bool outstanding() const REQUIRES(sq_mutex(qp_));  // a WQE before next() has not completed
  // PSNs sent are unacknowledged (the window applies): a WQE before next()
  // has not completed, or the one at next() is sent in part.
  bool unacknowledged() const REQUIRES(sq_mutex(qp_));
  // The early entry: an RC SEND or WRITE sent whole from its start, in one
  // packet (n == 1, every message of a small-message stream, so what it
  // calls is inlined into it: flatten), or as one train of all its n
  // packets where the link carries trains and the window has room for them.
  [[gnu::flatten]] void send_whole(SendWqe& w, std::uint32_t n) REQUIRES(sq_mutex(qp_));
  // Every other request's packet: the machine's general steps (out of line,
  // so that the early entry's caller keeps a small frame).
  [[gnu::noinline]] void send_packet(SendWqe& w) REQUIRES(sq_mutex(qp_));
  // Whether the packet ending at `last_psn` (the WQE's last if `last`)
  // asks for an ACK.
  bool wants_ack(const SendWqe& w, std::uint32_t last_psn, bool last) const REQUIRES(sq_mutex(qp_));
  // The steps every request takes, whichever entry built it: the WQE's
  // PSNs and state as its (first) packet goes out; then the packet's
  // AckReq, the counters, where the requester is, the link, and the
  // timer (or, on UC, the WQE handed over).
  [[gnu::always_inline]] inline void begin_wqe(SendWqe& w, std::uint32_t npsn) REQUIRES(sq_mutex(qp_));
  // (`type` is the QP's: the RC entry passes it as a constant, so what it
  // decides folds away there.)
  [[gnu::always_inline]] inline void finish_request(SendWqe& w, Packet&& p, std::uint32_t psns, bool last,
                                                    QpType type) REQUIRES(sq_mutex(qp_));
  // `p` went out taking `psns` PSNs: the counters and the next PSN move.
  void note_sent(const Packet& p, std::uint32_t psns) REQUIRES(sq_mutex(qp_));
  // The reaction point's counts into the QP's counters (after it moved).
  void publish_rate() REQUIRES(sq_mutex(qp_));
  // A request's BTH fields from the QP (its next PSN).
  void start_request(Packet& p) const REQUIRES(sq_mutex(qp_));
  // The rest of an ONLY packet carrying the whole WQE `w`: false if its
  // memory does not translate.
  bool fill_only(const SendWqe& w, Packet& p) const REQUIRES(sq_mutex(qp_));
  // The next packet (or train) of a SEND or WRITE longer than the MTU, or
  // resumed in its middle: false if its memory does not translate.
  [[gnu::noinline]] bool segment(const SendWqe& w, Packet& p, std::uint32_t& psns, bool& last) REQUIRES(sq_mutex(qp_));
  void execute_local(SendWqe& w) REQUIRES(sq_mutex(qp_));
  // UD: the WQE as one datagram (ud_responder.cc's counterpart).
  void send_datagram(SendWqe& w) REQUIRES(sq_mutex(qp_));
  // UC and UD: the WQE's last packet is with the link; nothing answers it.
  void handed_over(SendWqe& w) REQUIRES(sq_mutex(qp_));

  Qp& qp_;
  std::uint64_t next_ GUARDED_BY(sq_mutex(qp_)) = 0;       // next WQE index to send
  std::uint32_t next_psn_ GUARDED_BY(sq_mutex(qp_)) = 0;
  std::uint32_t offset_ GUARDED_BY(sq_mutex(qp_)) = 0;     // bytes of WQE next_ already sent (a resume point after a NAK)
  // PSNs before this one were sent before: sending one again is a
  // retransmission (go-back-N after a timeout, a NAK or an RNR wait).
  std::uint32_t sent_end_psn_ GUARDED_BY(sq_mutex(qp_)) = 0;
  Clock::time_point rnr_until_ GUARDED_BY(sq_mutex(qp_)){};  // no sends before this
  ReactionPoint rp_ GUARDED_BY(sq_mutex(qp_));
  Clock::time_point rate_until_ GUARDED_BY(sq_mutex(qp_)){};  // (kWaitRate)
  std::uint32_t rd_atomic_outstanding_ GUARDED_BY(sq_mutex(qp_)) = 0;  // READ and atomic WQEs sent and not completed
  bool sent_again_ GUARDED_BY(sq_mutex(qp_)) = false;  // (sent_again)
  bool probing_ GUARDED_BY(sq_mutex(qp_)) = false;  // the next request is a tail-loss probe: AckReq
  // The window (PSNs), cut on a wire's loss and grown back (note_loss,
  // grow_window): PSNs acknowledged toward its next step and the oldest
  // unacknowledged PSN when they were counted; a loss before
  // recover_psn_ belongs to the episode that cut it already.
  std::uint32_t window_ GUARDED_BY(sq_mutex(qp_)) = kMaxUnackedPsns;
  std::uint32_t window_acked_ GUARDED_BY(sq_mutex(qp_)) = 0;
  std::uint32_t window_mark_ GUARDED_BY(sq_mutex(qp_)) = 0;
  std::uint32_t recover_psn_ GUARDED_BY(sq_mutex(qp_)) = 0;
  bool recovering_ GUARDED_BY(sq_mutex(qp_)) = false;
  PieceList pieces_ GUARDED_BY(sq_mutex(qp_));             // scratch for translations
};

}  // namespace srdma::hca
