// The in-process link: connects the devices of one process (or a device to
// itself). Devices register under their address; send() finds the
// destination and delivers in the sender's thread, passing the payload by
// reference.
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "hca/delivery_scope.h"
#include "hca/link.h"

namespace srdma::hca {

class QueueEngine;

class InprocLink final : public Link {
 public:
  static InprocLink& instance();

  void attach(std::uint64_t addr, std::weak_ptr<QueueEngine> dev);
  void detach(std::uint64_t addr);
  bool knows(std::uint64_t addr) const override;
  bool send(Packet&& msg) override;
  bool send_ack(const Ack& ack) override;
  // Packets of one message go together: nothing between the devices
  // would see them apart.
  bool carries_trains() const override { return true; }
  bool answers_inline() const override { return true; }
};

}  // namespace srdma::hca
