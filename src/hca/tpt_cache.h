// The translation cache: recently used MPT entries, like the HCA's TPT cache.
//
// Direct-mapped by MPT index. A hit spares the walk to the MPT table; it is
// also what makes the hardware's lazy invalidation real: an entry stays
// cached until the MPT is deregistered through the control path (which
// invalidates that index) or sync_tpt() drops everything. FMR unmap only
// flips the MPT to SW, so an unmapped FMR key keeps working until sync_tpt(),
// exactly as on mthca. (An FMR remap does drop its line: the cache is
// indexed by MPT index, and a line left holding the previous mapping would
// keep the old key alive while the MTTs under it are rewritten.)
//
// Invariants / memory ordering: each line is a seqlock (see seqlock.h) and
// carries the cache epoch it was filled in. A line is valid only while its
// epoch equals the cache's current epoch, so clear() (sync_tpt) is one
// atomic increment instead of a store to every line: every line filled
// before it, and every fill that read the old epoch and lands after it, is
// invalid from then on. The epoch a line carries is the one the filler read
// BEFORE it read the MPT (FillTicket), never the one current when it
// stores: a fill that read the MPT just before an FMR unmap's sync_tpt and
// stores just after it is dead on arrival. invalidate() and clear() always
// take effect; fill() is conditional: the filler reads the line's version
// BEFORE it reads the MPT, and fills only if no store hit the line since. A deregistration
// writes the MPT and then stores to the line (invalidate, unconditionally),
// so either the fill lands first and is wiped before dereg returns, or the
// filler's CAS fails, or the filler read the line version after the
// invalidation, which (acquire/release on the line's sequence) means its MPT
// read sees the deregistered entry. A deregistered key never translates
// after dereg_mr returns.
//
// Counters: hits and misses are counted in per-thread slots (each on its own
// cache line, owned by one thread at a time, bumped without a locked
// instruction), so concurrent translations do not share a written cache
// line; hits()/misses() sum the slots. A thread beyond the first
// kCounterSlots live ones counts in a shared slot with fetch_add.
// Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>

#include "hca/mpt_table.h"
#include "hca/seqlock.h"

namespace srdma::hca {

// This thread's counter slot (see Counters below); ~0u until its first count.
inline thread_local unsigned tpt_counter_slot = ~0u;

class TptCache {
 public:
  static constexpr std::size_t kLines = 256;
  static constexpr unsigned kCounterSlots = 32;

  std::optional<MptFields> lookup(std::uint32_t index) const {
    MptFields f;
    if (lookup_into(index, f)) return f;
    return std::nullopt;
  }
  // The same lookup (and count) for the data path: fills `out` on a hit.
  bool lookup_into(std::uint32_t index, MptFields& out) const {
    Line l = lines_[slot(index)].load();
    const bool hit = l.index == index && l.epoch == epoch_.load(std::memory_order_acquire);
    count(hit);
    if (hit) out = l.fields;
    return hit;
  }
  // What a fill must have seen before it read the MPT: the line's version
  // and the cache's epoch. Take it BEFORE reading the MPT.
  struct FillTicket {
    std::uint64_t line_version = 0;
    std::uint32_t epoch = 0;
  };
  FillTicket begin_fill(std::uint32_t index) const {
    FillTicket t;
    t.line_version = lines_[slot(index)].version();
    t.epoch = epoch_.load(std::memory_order_acquire);
    return t;
  }
  // Stores the line, tagged with the ticket's epoch, if nothing stored to
  // it since the ticket was taken. A clear() after the ticket leaves the
  // line dead on arrival.
  void fill(std::uint32_t index, const MptFields& f, const FillTicket& ticket);

  // Tests only: runs between a miss's MPT read and its fill, so a test can
  // hold a filler there while another thread unmaps or deregisters.
  using FillHook = void (*)(std::uint32_t index);
  static void set_fill_hook_for_test(FillHook hook) { fill_hook_.store(hook, std::memory_order_release); }
  static void run_fill_hook(std::uint32_t index) {
    if (FillHook h = fill_hook_.load(std::memory_order_acquire)) [[unlikely]] h(index);
  }
  void invalidate(std::uint32_t index);
  void clear();  // sync_tpt

  std::uint64_t hits() const;
  std::uint64_t misses() const;
  std::uint64_t syncs() const { return syncs_.load(std::memory_order_relaxed); }

 private:
  struct Line {
    std::uint32_t index = 0;
    std::uint32_t epoch = 0;  // 0: never valid (the cache's epoch is never 0)
    MptFields fields;
  };
  static_assert(sizeof(Line) == 56, "a line and its sequence word fill one cache line");
  struct alignas(64) Counters {
    std::atomic<std::uint64_t> hits{0};
    std::atomic<std::uint64_t> misses{0};
  };
  static std::size_t slot(std::uint32_t index) { return index % kLines; }
  void count(bool hit) const {
    unsigned s = tpt_counter_slot;
    if (s >= kCounterSlots) [[unlikely]] return count_slow(hit);
    std::atomic<std::uint64_t>& c = hit ? counters_[s].hits : counters_[s].misses;
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // sole writer
  }
  void count_slow(bool hit) const;

  static inline std::atomic<FillHook> fill_hook_{nullptr};
  alignas(64) std::array<Seqlock<Line>, kLines> lines_{};
  alignas(64) std::atomic<std::uint32_t> epoch_{1};
  std::atomic<std::uint64_t> syncs_{0};
  // [kCounterSlots] is the shared overflow slot.
  mutable std::array<Counters, kCounterSlots + 1> counters_{};
};

}  // namespace srdma::hca
