// Deliveries and translation windows in progress, and waiting for them.
//
// DeliveryScope: the link's and the device's per-thread route caches hold
// plain pointers (a hit takes no lock and touches no reference count, which
// every thread would otherwise bounce between cores); what keeps the target
// alive is that a thread marks itself inside a delivery (this scope) before
// it checks the cache's generation, and whoever unpublishes a target
// (InprocLink::detach, QueueEngine::destroy_qp) bumps the generation and then
// waits (quiesce_deliveries) until every thread that was inside has left.
// Either the reader sees the new generation (and takes the locked path) or
// the writer sees it inside: a store-load barrier on both sides. It is
// asymmetric where Linux offers membarrier (private expedited): the
// reader's mark is a plain store, and the writer (rare: a detach, a
// destroy_qp) makes every running thread of the process execute a full
// barrier; elsewhere both sides use seq_cst. Scopes nest; only the
// outermost one publishes, on a line only this thread writes.
//
// TranslationWindow: the same handshake for memory keys. A role opens a
// window before it translates a key and closes it after its last store
// through that translation; whoever takes a key away (dereg_mr, an FMR
// unmap or remap, LOCAL_INV, SEND_WITH_INV) first makes the key fail
// translate() and then calls quiesce_translations(key), which waits for
// every window open at that moment on that key (a window names its key, or
// any key when it translates several). So when the invalidation returns, no store
// through the old key is still to land (and no MTT entry it read is reused
// under it). A window holds no lock and takes none: translate, copy,
// close. That is what lets the invalidator wait with its own locks held.
// The window's handshake is symmetric (a full fence on both sides, one
// locked instruction per window): invalidations come once per I/O with
// remote invalidation, and a membarrier each cost the NVMe-oF target five
// times its IOPS (docs/BENCHMARKS.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

#include "common/asymmetric_fence.h"

namespace srdma::hca {

namespace detail {
// One per thread that ever entered a scope or window, on a line of its own:
// `word` is odd while the thread is inside a delivery, `window` while it is
// inside a translation window. Slots are never freed (an exiting thread
// gives its slot back for reuse), so a quiescer may read any slot it saw.
struct alignas(64) ScopeSlot {
  std::atomic<std::uint64_t> word{0};
  std::atomic<std::uint64_t> window{0};
  // The key the open window translates (kAnyKey: more than one), written
  // before the window opens (release), read after it is seen open.
  std::atomic<std::uint32_t> window_key{0};
  bool in_use = false;        // guarded by the slot registry's mutex
  ScopeSlot* next = nullptr;  // the registry's list; fixed once published
};
// Plain thread_locals, trivially destructible, so that an access is a
// direct TLS load on the data path (the scopes below are inline).
inline thread_local ScopeSlot* tls_slot = nullptr;
inline thread_local unsigned tls_depth = 0;
inline thread_local unsigned tls_window_depth = 0;
inline constexpr std::uint32_t kAnyKey = ~0u;
ScopeSlot* take_slot();  // the thread's first scope: registers its slot
// One marker step: odd on entry, even on exit; the entry is ordered before
// the loads that follow by the light half of the asymmetric fence pair.
inline void mark_enter(std::atomic<std::uint64_t>& w) {
  w.store(w.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  asymmetric_light_fence();
}
inline void mark_exit(std::atomic<std::uint64_t>& w) {
  w.store(w.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}
}  // namespace detail

class DeliveryScope {
 public:
  DeliveryScope() {
    if (detail::tls_depth++ != 0) return;
    detail::ScopeSlot* s = detail::tls_slot;
    if (s == nullptr) [[unlikely]] s = detail::take_slot();
    detail::mark_enter(s->word);
  }
  ~DeliveryScope() {
    if (--detail::tls_depth != 0) return;
    detail::mark_exit(detail::tls_slot->word);
  }
  DeliveryScope(const DeliveryScope&) = delete;
  DeliveryScope& operator=(const DeliveryScope&) = delete;
};
// Waits until every other thread that is inside a delivery now has left its
// outermost scope. The calling thread's own scope (when it unpublishes from
// inside a delivery) is not waited for. REQUIRES: no engine lock held.
void quiesce_deliveries();

// REQUIRES: no lock is taken while the window is open (translate and store
// only). Windows nest.
class TranslationWindow {
 public:
  // A window for the one key `key` (an invalidation of another key does not
  // wait for it), or, without an argument, for any number of keys.
  explicit TranslationWindow(std::uint32_t key = detail::kAnyKey) {
    detail::ScopeSlot* s = detail::tls_slot;
    if (detail::tls_window_depth++ != 0) {
      // Nested with another key: the open window now covers any key.
      if (s->window_key.load(std::memory_order_relaxed) != key)
        s->window_key.store(detail::kAnyKey, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      return;
    }
    if (s == nullptr) [[unlikely]] s = detail::take_slot();
    s->window_key.store(key, std::memory_order_relaxed);
    // Open (release: the key above is seen with it), then a full fence
    // before translate()'s MPT reads, paired with quiesce_translations'.
    s->window.store(s->window.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  ~TranslationWindow() {
    if (--detail::tls_window_depth != 0) return;
    detail::mark_exit(detail::tls_slot->window);  // the stores through the translation happen before
  }
  TranslationWindow(const TranslationWindow&) = delete;
  TranslationWindow& operator=(const TranslationWindow&) = delete;
};
// Waits until every translation window open on another thread now for one
// of `keys` (or for any key) has closed. Call it after the keys stop
// translating. May be called with any lock held (a window never waits for
// one). Costs a fence and a walk over the threads' slots, no lock and no
// system call; it waits only for threads that may be storing through one of
// these keys.
void quiesce_translations(std::span<const std::uint32_t> keys);
inline void quiesce_translations(std::uint32_t key) { quiesce_translations(std::span(&key, 1)); }

}  // namespace srdma::hca
