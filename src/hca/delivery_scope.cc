#include "hca/delivery_scope.h"

#include <algorithm>
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

// Every slot ever taken, on a list that only grows (pushed at the front
// under `mu`, walked without it): the quiescers read it lock-free.
struct ScopeRegistry {
  std::mutex mu;  // guards taking and giving back slots
  std::atomic<ScopeSlot*> head{nullptr};
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
    for (ScopeSlot* s = r.head.load(std::memory_order_relaxed); s != nullptr; s = s->next)
      if (!s->in_use) {
        slot = s;
        break;
      }
    if (slot == nullptr) {
      slot = new ScopeSlot;
      slot->next = r.head.load(std::memory_order_relaxed);
      r.head.store(slot, std::memory_order_release);
    }
    slot->in_use = true;
  }
  tls_releaser.armed = true;  // first use: registers its destructor for this thread
  tls_slot = slot;
  return slot;
}

namespace {
using OpenSlots = std::vector<std::pair<const ScopeSlot*, std::uint64_t>>;
// Acquire: what the thread did inside is visible once we see it left.
template <class Word>
void wait_closed(const OpenSlots& open, Word which) {
  for (auto [s, w] : open)
    while ((s->*which).load(std::memory_order_acquire) == w) std::this_thread::yield();
}
}  // namespace

void quiesce_deliveries() {
  // The caller bumped a generation (seq_cst RMW) before calling: a thread
  // whose odd word we do not see will see that generation.
  asymmetric_heavy_fence();
  const ScopeSlot* self = tls_depth != 0 ? tls_slot : nullptr;
  OpenSlots inside;
  for (const ScopeSlot* s = scope_registry().head.load(std::memory_order_acquire); s != nullptr; s = s->next) {
    if (s == self) continue;
    const std::uint64_t w = s->word.load(std::memory_order_seq_cst);
    if (w & 1) inside.emplace_back(s, w);
  }
  wait_closed(inside, &ScopeSlot::word);
}

void quiesce_translations(std::span<const std::uint32_t> keys) {
  // The caller made the keys fail (an MPT store, then a cache invalidation
  // or a new epoch) before calling; this fence pairs with the window's: a
  // window we do not see open will read the failed key.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  OpenSlots open;
  for (const ScopeSlot* s = scope_registry().head.load(std::memory_order_acquire); s != nullptr; s = s->next) {
    if (s == tls_slot) continue;
    const std::uint64_t w = s->window.load(std::memory_order_seq_cst);
    if (!(w & 1)) continue;
    const std::uint32_t k = s->window_key.load(std::memory_order_relaxed);  // ordered by the acquire above
    if (k == detail::kAnyKey || std::find(keys.begin(), keys.end(), k) != keys.end()) open.emplace_back(s, w);
  }
  wait_closed(open, &ScopeSlot::window);
}

}  // namespace srdma::hca
