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

#include "hca/packet.h"

namespace srdma::hca {

class Link {
 public:
  virtual ~Link() = default;
  // false if the destination device is unknown (the message is dropped).
  virtual bool send(Packet&& msg) = 0;
  // Whether the roles may hand this link trains (Packet::count > 1): a
  // link that has no per-packet wire between the devices. Every other one
  // gets single packets. Fixed for the link's life.
  virtual bool carries_trains() const { return false; }
};

}  // namespace srdma::hca
