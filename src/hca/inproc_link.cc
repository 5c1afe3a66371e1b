#include "hca/inproc_link.h"

#include <array>
#include <atomic>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "hca/queue_engine.h"

namespace srdma::hca {
namespace {

struct Registry {
  mutable std::shared_mutex mu;  // guards devices
  std::unordered_map<std::uint64_t, std::weak_ptr<QueueEngine>> devices;
  // Bumped (under mu) by every attach and detach; a sender's cached route
  // is good while the generation it was taken at is current.
  std::atomic<std::uint64_t> generation{1};
};

// Each thread remembers the last QPs it sent to (one per slot of a small
// direct-mapped table, so that a request/response pair does not evict
// itself): a stream of packets to one QP then costs two generation checks
// instead of the registry's lock and lookup and the device's QP lookup.
// The device pointer is good while the link's generation is current, the
// QP pointer while the QP tables' is (queue_engine.h), inside a
// DeliveryScope.
struct Route {
  std::uint64_t addr = 0;
  std::uint32_t qpn = 0;
  std::uint64_t generation = 0;
  std::uint64_t qp_generation = 0;
  QueueEngine* dev = nullptr;
  Qp* qp = nullptr;
};
constexpr std::size_t kRoutes = 4;
thread_local std::array<Route, kRoutes> tls_routes;

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

InprocLink& InprocLink::instance() {
  static InprocLink link;
  return link;
}

void InprocLink::attach(std::uint64_t addr, std::weak_ptr<QueueEngine> dev) {
  std::unique_lock lock(registry().mu);
  registry().devices[addr] = std::move(dev);
  registry().generation.fetch_add(1, std::memory_order_release);
}

void InprocLink::detach(std::uint64_t addr) {
  {
    std::unique_lock lock(registry().mu);
    registry().devices.erase(addr);
    registry().generation.fetch_add(1, std::memory_order_seq_cst);
  }
  // A sender that found the device through its route cache may still be
  // delivering to it: wait until it is out.
  quiesce_deliveries();
}

bool InprocLink::knows(std::uint64_t addr) const {
  std::shared_lock lock(registry().mu);
  return registry().devices.count(addr) != 0;
}

namespace {
// The route cache's entry for (addr, qpn) if it is current, else null.
// REQUIRES: inside a DeliveryScope opened before the call.
Route* cached_route(std::uint64_t addr, std::uint32_t qpn) {
  Route& route = tls_routes[(addr ^ qpn) % kRoutes];
  if (route.qp != nullptr && route.addr == addr && route.qpn == qpn &&
      route.generation == registry().generation.load(std::memory_order_seq_cst) &&
      route.qp_generation == qp_table_generation()) [[likely]]
    return &route;
  return nullptr;
}

// Out of line: its Packet would widen send_ack's stack frame.
[[gnu::noinline, gnu::cold]] bool send_uncached_ack(InprocLink& link, const Ack& ack) {
  return link.send(ack.packet());  // finds (and caches) the route
}
}  // namespace

bool InprocLink::send_ack(const Ack& ack) {
  DeliveryScope scope;
  if (Route* route = cached_route(ack.dst_addr, ack.dst_qpn)) [[likely]] {
    route->dev->deliver_ack(*route->qp, ack);
    return true;
  }
  return send_uncached_ack(*this, ack);
}

bool InprocLink::send(Packet&& msg) {
  DeliveryScope scope;  // before the generation checks: see DeliveryScope
  if (Route* route = cached_route(msg.dst_addr, msg.dst_qpn)) [[likely]] {
    route->dev->deliver(*route->qp, std::move(msg));  // detach and destroy_qp wait for this scope to end
    return true;
  }
  Route& route = tls_routes[(msg.dst_addr ^ msg.dst_qpn) % kRoutes];
  std::shared_ptr<QueueEngine> dst;
  std::uint64_t generation = 0;
  {
    std::shared_lock lock(registry().mu);
    auto it = registry().devices.find(msg.dst_addr);
    if (it != registry().devices.end()) dst = it->second.lock();
    generation = registry().generation.load(std::memory_order_relaxed);
  }
  if (!dst) return false;
  // Only a live device is cached (one whose last reference is gone is about
  // to detach: its destructor's first step), and a QP it has.
  const std::uint64_t qp_generation = qp_table_generation();  // before the lookup
  if (auto qp = dst->find_qp(msg.dst_qpn))
    route = Route{msg.dst_addr, msg.dst_qpn, generation, qp_generation, dst.get(), qp.get()};
  dst->receive(std::move(msg));  // the shared_ptr keeps the peer open meanwhile
  return true;
}

}  // namespace srdma::hca
