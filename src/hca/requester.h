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

#include "hca/engine_clock.h"
#include "hca/packet.h"
#include "hca/send_queue.h"
#include "hca/transport_limits.h"

namespace srdma::hca {

class Qp;

class Requester {
 public:
  explicit Requester(Qp& qp) : qp_(qp) {}
  Requester(const Requester&) = delete;
  Requester& operator=(const Requester&) = delete;

  // The requester's states (IBA 9.7: what the send side does next).
  enum class Step {
    kIdle,     // nothing to send: the queue is drained, the window or a fence holds it, or the QP is not in RTS
    kSend,     // the WQE at next() (or its next packet) goes out
    kWaitRnr,  // an RNR NAK holds every send until rnr_until()
    kFlush,    // the QP is in ERR: the queue flushes
  };
  Step next_step();
  // Sends the next WQE, or its next packet or train (kSend).
  void send_one();

  // Where it is: the next WQE index to send, the next PSN, and whether it
  // stopped inside a WQE (a resume point after a NAK, or a message longer
  // than the window).
  std::uint64_t next() const { return next_; }
  std::uint32_t next_psn() const { return next_psn_; }
  bool mid_wqe() const { return offset_ != 0; }
  bool waiting_rnr() const { return rnr_until_ != Clock::time_point{}; }
  Clock::time_point rnr_until() const { return rnr_until_; }

  // The completer's calls.
  // Go-back-N (IBA 9.7.5.2): the next send is the packet `psn` of the WQE at
  // `index` (index < next() and that WQE holds `psn`).
  void rewind_to(std::uint64_t index, std::uint32_t psn);
  // RNR NAK (IBA 9.7.5.2.8): go back to `psn` of `index`, sending nothing before `until`.
  void wait_rnr(std::uint64_t index, std::uint32_t psn, Clock::time_point until);
  // A READ or atomic completed: one more may go out (max_rd_atomic).
  void rd_atomic_retired() { --rd_atomic_outstanding_; }
  // The QP failed or flushed every WQE before `from`: nothing of them is
  // sent again.
  void stop(std::uint64_t from);

  // modify_qp's calls (every lock held).
  void set_sq_psn(std::uint32_t psn) { next_psn_ = sent_end_psn_ = psn; }
  void reset();  // RESET: the queue is empty

 private:
  // PSNs the window has left while something is outstanding:
  // kMaxUnackedPsns less those sent since the oldest unacknowledged one.
  std::int32_t window_room() const;
  bool outstanding() const;  // a WQE before next() has not completed
  // An RC SEND or WRITE sent whole from its start: in one packet (n == 1,
  // every message of a small-message stream, so what it calls is inlined
  // into it: flatten), or as one train of all its n packets where the link
  // carries trains and the window has room for them.
  [[gnu::flatten]] void send_whole(SendWqe& w, std::uint32_t n);
  // Whether the packet ending at `last_psn` (the WQE's last if `last`)
  // asks for an ACK.
  bool wants_ack(const SendWqe& w, std::uint32_t last_psn, bool last) const;
  // `p` went out taking `psns` PSNs: the counters and the next PSN move.
  void note_sent(const Packet& p, std::uint32_t psns);
  // A request's BTH fields from the QP (its next PSN).
  void start_request(Packet& p) const;
  // The rest of an ONLY packet carrying the whole WQE `w`: false if its
  // memory does not translate.
  bool fill_only(const SendWqe& w, Packet& p) const;
  // The next packet (or train) of a SEND or WRITE longer than the MTU, or
  // resumed in its middle: false if its memory does not translate.
  [[gnu::noinline]] bool segment(const SendWqe& w, Packet& p, std::uint32_t& psns, bool& last);
  void execute_local(SendWqe& w);
  // UD: the WQE as one datagram (ud_responder.cc's counterpart).
  void send_datagram(SendWqe& w);
  // UC and UD: the WQE's last packet is with the link; nothing answers it.
  void handed_over(SendWqe& w);

  Qp& qp_;
  std::uint64_t next_ = 0;       // next WQE index to send
  std::uint32_t next_psn_ = 0;
  std::uint32_t offset_ = 0;     // bytes of WQE next_ already sent (a resume point after a NAK)
  // PSNs before this one were sent before: sending one again is a
  // retransmission (go-back-N after a timeout, a NAK or an RNR wait).
  std::uint32_t sent_end_psn_ = 0;
  Clock::time_point rnr_until_{};  // no sends before this
  std::uint32_t rd_atomic_outstanding_ = 0;  // READ and atomic WQEs sent and not completed
  PieceList pieces_;             // scratch for translations
};

}  // namespace srdma::hca
