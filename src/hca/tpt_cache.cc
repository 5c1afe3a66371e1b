#include "hca/tpt_cache.h"

#include <mutex>
#include <vector>

namespace srdma::hca {

namespace {

// Process-wide counter slot ids: each live thread owns one id below
// TptCache::kCounterSlots (the same id in every cache), or the shared one.
// An id is handed back when its thread exits; the mutex orders the old
// owner's last increments before the new owner's first.
constexpr unsigned kNoSlot = ~0u;

struct SlotPool {
  std::mutex mu;
  std::vector<unsigned> free_ids;
  unsigned next = 0;
};
SlotPool& pool() {
  static SlotPool* p = new SlotPool;  // never destroyed: threads may exit after static destruction
  return *p;
}


struct SlotOwner {
  unsigned id = kNoSlot;
  ~SlotOwner() {
    if (id >= TptCache::kCounterSlots) return;
    SlotPool& p = pool();
    std::lock_guard lock(p.mu);
    p.free_ids.push_back(id);
    tpt_counter_slot = kNoSlot;
  }
};

[[gnu::noinline]] unsigned acquire_slot() {
  static thread_local SlotOwner owner;
  SlotPool& p = pool();
  unsigned id = TptCache::kCounterSlots;  // the shared slot
  {
    std::lock_guard lock(p.mu);
    if (!p.free_ids.empty()) {
      id = p.free_ids.back();
      p.free_ids.pop_back();
    } else if (p.next < TptCache::kCounterSlots) {
      id = p.next++;
    }
  }
  owner.id = id;
  tpt_counter_slot = id;
  return id;
}

}  // namespace

void TptCache::count_slow(bool hit) const {
  unsigned s = tpt_counter_slot;
  if (s == kNoSlot) s = acquire_slot();
  std::atomic<std::uint64_t>& c = hit ? counters_[s].hits : counters_[s].misses;
  if (s < kCounterSlots)
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // sole writer
  else
    c.fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t TptCache::hits() const {
  std::uint64_t n = 0;
  for (const Counters& c : counters_) n += c.hits.load(std::memory_order_relaxed);
  return n;
}

std::uint64_t TptCache::misses() const {
  std::uint64_t n = 0;
  for (const Counters& c : counters_) n += c.misses.load(std::memory_order_relaxed);
  return n;
}

void TptCache::fill(std::uint32_t index, const MptFields& f, const FillTicket& ticket) {
  (void)lines_[slot(index)].try_store_if_unchanged(ticket.line_version, Line{index, ticket.epoch, f});
}

void TptCache::invalidate(std::uint32_t index) {
  // Unconditional: the store itself is what defeats a racing fill.
  lines_[slot(index)].store(Line{});
}

void TptCache::clear() {
  // A new epoch invalidates every line at once. Epoch 0 is never used (an
  // all-zero line must stay invalid); when the 32-bit epoch wraps, the lines
  // are swept first, so that a line untouched for 2^32 syncs cannot come
  // back when its epoch number does.
  std::uint32_t old = epoch_.load(std::memory_order_relaxed);
  for (;;) {
    std::uint32_t next = old + 1;
    if (next == 0) [[unlikely]] {
      for (auto& line : lines_) line.store(Line{});
      next = 1;
    }
    if (epoch_.compare_exchange_weak(old, next, std::memory_order_acq_rel, std::memory_order_relaxed)) break;
  }
  syncs_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace srdma::hca
