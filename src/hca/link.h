// The wire between devices. Roles hand packets to a Link; the link delivers
// them to the device at msg.dst_addr, which dispatches to the QP's responder
// (requests) or completer (responses).
//
// Contract for every link: packets from one QP to one peer QP arrive in the
// order sent (RC ordering needs no more from the wire here); a message whose
// destination does not exist is dropped and reported (the requester's
// retry/timeout logic decides what that means). A link may deliver
// synchronously, in the sender's thread, before send() returns (the
// in-process link does); roles must not depend on it either way.
#pragma once

#include <poll.h>

#include <cstdint>
#include <vector>

#include "hca/packet.h"
#include "srdma/counters.h"

namespace srdma::hca {

class Link {
 public:
  virtual ~Link() = default;
  // false if the destination device is unknown (the message is dropped).
  virtual bool send(Packet&& msg) = 0;
  // send() of ack.packet(): a link that can deliver a plain ACK without
  // the packet (the in-process link) does.
  virtual bool send_ack(const Ack& ack) { return send(ack.packet()); }
  // Whether the roles may hand this link trains (Packet::count > 1): a
  // link that has no per-packet wire between the devices. Every other one
  // gets single packets. Fixed for the link's life.
  virtual bool carries_trains() const { return false; }
  // Whether a QP whose peer is QP `qpn` at `addr` may hand this link trains
  // (asked when the QP's path is set): a link that carries them to some
  // peers only (the UDP link: to those it reaches through a same-host
  // ring). Such a link still takes a train for any peer, and unrolls it
  // where its way there has a per-packet wire.
  virtual bool carries_trains_to(std::uint64_t /*addr*/, std::uint32_t /*qpn*/) { return carries_trains(); }
  // Whether a request's answer comes back on the sending thread before
  // send() returns (the peer's responder runs inside it): then a response
  // from another thread is rare, and the send side's Dekker pair with it
  // is made asymmetric (qp.cc, take_stranded_responses). Fixed for the
  // link's life.
  virtual bool answers_inline() const { return false; }
  // Hands what the calling thread has pending (see SendBatch) to the wire.
  virtual void end_batch() {}
  // Receives what has arrived, in the calling thread (a consumer polling the
  // device); the packets handled. A link that delivers by itself: 0.
  virtual int poll() { return 0; }
  // Whether poll() does anything: a consumer that finds its CQ empty polls
  // the link only then.
  virtual bool polled() const { return false; }
  // A consumer blocked on a completion channel of a polled link sleeps on
  // what this adds to `fds` too (descriptors readable when poll() has
  // something to receive, armed to become so) and receives itself when one
  // fires, instead of waiting for another thread to receive and then wake
  // it. false: something waits already; do not sleep. end_sleep() after,
  // on the same thread, either way.
  virtual bool prepare_sleep(std::vector<pollfd>& /*fds*/) { return true; }
  virtual void end_sleep() {}
  // How long after traffic a receiver keeps polling before it sleeps (the
  // device's busy-poll window; 0: it sleeps at once).
  virtual std::int64_t busy_poll_ns() const { return 0; }
  // Whether a QP may name `addr` as its peer (QP_AV).
  virtual bool knows(std::uint64_t addr) const = 0;
  // The largest path MTU the link carries (the port's active MTU).
  virtual std::uint32_t active_mtu() const { return 4096; }
  // Adds the packets the link itself dropped (ones no QP saw: frames that
  // did not parse) to `c`.
  virtual void add_drops(TransportCounters& /*c*/) const {}
};

// While a thread is inside a SendBatch, a link may keep the packets it
// sends and hand them to its wire together when the thread's outermost
// batch ends (the UDP link does: one sendmmsg). Open one around a stretch
// of sends whose payload stays valid until it ends: the requester's run,
// a receive batch.
//
// A QP's packets must reach the wire in the order it sent them, and two
// threads may take turns sending for one QP (the poster, the receiver that
// acknowledges its WQEs, the timer): a batch opened under the QP's send
// lock is kOrdered and hands over what the thread holds when it ends, even
// nested, before the lock lets the next thread send.
class SendBatch {
 public:
  enum Kind { kOuter, kOrdered };
  explicit SendBatch(Link& link, Kind kind = kOuter) : link_(link), kind_(kind) { ++depth_; }
  ~SendBatch() {
    if (--depth_ == 0 || kind_ == kOrdered) link_.end_batch();
  }
  SendBatch(const SendBatch&) = delete;
  SendBatch& operator=(const SendBatch&) = delete;
  static bool open() { return depth_ > 0; }

 private:
  Link& link_;
  const Kind kind_;
  static inline thread_local int depth_ = 0;
};

}  // namespace srdma::hca
