// The in-process link: connects the devices of one process (or a device to
// itself). Devices register under their address; send() finds the
// destination and delivers in the sender's thread, passing the payload by
// reference.
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "hca/link.h"

namespace srdma::hca {

class SoftHca;

// Deliveries in progress. The link's and the device's per-thread route
// caches hold plain pointers (a hit takes no lock and touches no reference
// count, which every thread would otherwise bounce between cores); what
// keeps the target alive is that a thread marks itself inside a delivery
// (this scope) before it checks the cache's generation, and whoever
// unpublishes a target (InprocLink::detach, SoftHca::destroy_qp) bumps the
// generation and then waits (quiesce_deliveries) until every thread that
// was inside has left. Either the reader sees the new generation (and
// takes the locked path) or the writer sees it inside: a store-load
// barrier on both sides. It is asymmetric where Linux offers membarrier
// (private expedited): the reader's mark is a plain store, and the writer
// (rare: a detach, a destroy_qp) makes every running thread of the process
// execute a full barrier; elsewhere both sides use seq_cst. Scopes nest;
// only the outermost one publishes, on a line only this thread writes.
class DeliveryScope {
 public:
  DeliveryScope();
  ~DeliveryScope();
  DeliveryScope(const DeliveryScope&) = delete;
  DeliveryScope& operator=(const DeliveryScope&) = delete;
};
// Waits until every other thread that is inside a delivery now has left its
// outermost scope. The calling thread's own scope (when it unpublishes from
// inside a delivery) is not waited for. REQUIRES: no engine lock held.
void quiesce_deliveries();

class InprocLink final : public Link {
 public:
  static InprocLink& instance();

  void attach(std::uint64_t addr, std::weak_ptr<SoftHca> dev);
  void detach(std::uint64_t addr);
  bool knows(std::uint64_t addr) const;
  bool send(Message&& msg) override;
};

}  // namespace srdma::hca
