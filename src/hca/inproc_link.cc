#include "hca/inproc_link.h"

#include <array>
#include <atomic>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/asymmetric_fence.h"
#include "hca/soft_hca.h"

namespace srdma::hca {
namespace {

struct Registry {
  mutable std::shared_mutex mu;  // guards devices
  std::unordered_map<std::uint64_t, std::weak_ptr<SoftHca>> devices;
  // Bumped (under mu) by every attach and detach; a sender's cached route
  // is good while the generation it was taken at is current.
  std::atomic<std::uint64_t> generation{1};
};

// Each thread remembers the last destinations it sent to (one per slot of a
// small direct-mapped table, so that a request/response pair of devices
// does not evict itself): a stream of messages to one peer then costs a
// generation check instead of the registry's lock and lookup. The pointer
// is good while the generation is current, inside a DeliveryScope.
struct Route {
  std::uint64_t addr = 0;
  std::uint64_t generation = 0;
  SoftHca* dev = nullptr;
};
constexpr std::size_t kRoutes = 4;
thread_local std::array<Route, kRoutes> tls_routes;

Registry& registry() {
  static Registry r;
  return r;
}

// One word per thread: odd while the thread is inside a delivery. Slots are
// never freed (a thread that exits gives its slot back for reuse), so the
// quiescer may read any slot it saw registered. Each on its own line.
struct alignas(64) ScopeSlot {
  std::atomic<std::uint64_t> word{0};
  bool in_use = false;  // guarded by ScopeRegistry::mu
};
struct ScopeRegistry {
  std::mutex mu;
  std::vector<ScopeSlot*> slots;
};
ScopeRegistry& scope_registry() {
  static auto* r = new ScopeRegistry;  // never destroyed: threads may exit late
  return *r;
}

// The thread's slot and nesting depth: plain thread_locals (trivially
// destructible, so an access is a direct TLS load); the releaser, which has
// a destructor, is touched only when the thread takes its slot.
thread_local ScopeSlot* tls_slot = nullptr;
thread_local unsigned tls_depth = 0;
struct SlotReleaser {
  bool armed = false;
  ~SlotReleaser() {
    if (tls_slot == nullptr) return;
    std::lock_guard lock(scope_registry().mu);
    tls_slot->in_use = false;  // even (outside): a quiescer never waits on it
    tls_slot = nullptr;
  }
};
thread_local SlotReleaser tls_releaser;

[[gnu::noinline]] ScopeSlot* take_slot() {
  ScopeSlot* slot = nullptr;
  {
    ScopeRegistry& r = scope_registry();
    std::lock_guard lock(r.mu);
    for (ScopeSlot* s : r.slots)
      if (!s->in_use) {
        slot = s;
        break;
      }
    if (slot == nullptr) {
      slot = new ScopeSlot;
      r.slots.push_back(slot);
    }
    slot->in_use = true;
  }
  tls_releaser.armed = true;  // first use: registers its destructor for this thread
  tls_slot = slot;
  return slot;
}

}  // namespace

DeliveryScope::DeliveryScope() {
  if (tls_depth++ != 0) return;
  ScopeSlot* s = tls_slot;
  if (s == nullptr) [[unlikely]] s = take_slot();
  // Ordered before the generation loads that follow (StoreLoad) by the
  // pair of asymmetric fences: the light one here, the quiescer's heavy one.
  s->word.store(s->word.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  asymmetric_light_fence();
}

DeliveryScope::~DeliveryScope() {
  if (--tls_depth != 0) return;
  ScopeSlot* s = tls_slot;
  s->word.store(s->word.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

void quiesce_deliveries() {
  // The caller bumped a generation (seq_cst RMW) before calling: a thread
  // whose odd word we do not see will see that generation.
  asymmetric_heavy_fence();
  const ScopeSlot* self = tls_depth != 0 ? tls_slot : nullptr;
  std::vector<std::pair<const ScopeSlot*, std::uint64_t>> inside;
  {
    ScopeRegistry& r = scope_registry();
    std::lock_guard lock(r.mu);
    for (const ScopeSlot* s : r.slots) {
      if (s == self) continue;
      const std::uint64_t w = s->word.load(std::memory_order_seq_cst);
      if (w & 1) inside.emplace_back(s, w);
    }
  }
  for (auto [s, w] : inside)
    while (s->word.load(std::memory_order_acquire) == w) std::this_thread::yield();
}

InprocLink& InprocLink::instance() {
  static InprocLink link;
  return link;
}

void InprocLink::attach(std::uint64_t addr, std::weak_ptr<SoftHca> dev) {
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

bool InprocLink::send(Message&& msg) {
  DeliveryScope scope;  // before the generation check: see DeliveryScope
  Route& route = tls_routes[msg.dst_addr % kRoutes];
  if (route.dev != nullptr && route.addr == msg.dst_addr &&
      route.generation == registry().generation.load(std::memory_order_seq_cst)) [[likely]] {
    route.dev->receive(std::move(msg));  // detach waits for this scope to end
    return true;
  }
  std::shared_ptr<SoftHca> dst;
  {
    std::shared_lock lock(registry().mu);
    auto it = registry().devices.find(msg.dst_addr);
    if (it != registry().devices.end()) dst = it->second.lock();
    // Only a live device is cached: one whose last reference is gone is
    // about to detach (its destructor's first step).
    if (dst) route = Route{msg.dst_addr, registry().generation.load(std::memory_order_relaxed), dst.get()};
  }
  if (!dst) return false;
  dst->receive(std::move(msg));  // the shared_ptr keeps the peer open meanwhile
  return true;
}

}  // namespace srdma::hca
