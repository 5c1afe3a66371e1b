#include "hca/delivery_scope.h"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "common/asymmetric_fence.h"

namespace srdma::hca {
namespace {

using detail::ScopeSlot;
using detail::tls_depth;
using detail::tls_slot;

struct ScopeRegistry {
  std::mutex mu;
  std::vector<ScopeSlot*> slots;
};
ScopeRegistry& scope_registry() {
  static auto* r = new ScopeRegistry;  // never destroyed: threads may exit late
  return *r;
}

// Gives the thread's slot back when it exits; touched only when the thread
// takes its slot (the data path's thread_locals have no destructor).
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

}  // namespace

[[gnu::noinline]] ScopeSlot* detail::take_slot() {
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


void quiesce_translations() {
  // The caller made the key fail (an MPT store, then a cache invalidation
  // or a new epoch) before calling: a window we do not see open will read
  // that.
  asymmetric_heavy_fence();
  const ScopeSlot* self = tls_slot;
  std::vector<std::pair<const ScopeSlot*, std::uint64_t>> open;
  {
    ScopeRegistry& r = scope_registry();
    std::lock_guard lock(r.mu);
    for (const ScopeSlot* s : r.slots) {
      if (s == self) continue;
      const std::uint64_t w = s->window.load(std::memory_order_seq_cst);
      if (w & 1) open.emplace_back(s, w);
    }
  }
  // Acquire: the window's stores are visible once we see it closed.
  for (auto [s, w] : open)
    while (s->window.load(std::memory_order_acquire) == w) std::this_thread::yield();
}

}  // namespace srdma::hca
