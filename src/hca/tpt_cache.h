// The translation cache: recently used MPT entries, like the HCA's TPT cache.
//
// Direct-mapped by MPT index. A hit spares the walk to the MPT table; it is
// also what makes the hardware's lazy invalidation real: an entry stays
// cached until the MPT is deregistered through the control path (which
// invalidates that index) or sync_tpt() drops everything. FMR unmap only
// flips the MPT to SW, so an unmapped FMR key keeps working until sync_tpt(),
// exactly as on mthca.
//
// Invariants / memory ordering: each line is a seqlock (see seqlock.h).
// fill() is best effort (skipped when another thread is writing the line);
// invalidate() and clear() always take effect. A filler re-checks the MPT
// version after filling and undoes a fill that raced with an MPT change, so
// a deregistered key never stays cached.
// Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>

#include "hca/mpt_table.h"
#include "hca/seqlock.h"

namespace srdma::hca {

class TptCache {
 public:
  static constexpr std::size_t kLines = 256;

  std::optional<MptFields> lookup(std::uint32_t index) const;
  void fill(std::uint32_t index, const MptFields& f);
  void invalidate(std::uint32_t index);
  void clear();  // sync_tpt

  std::uint64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  std::uint64_t misses() const { return misses_.load(std::memory_order_relaxed); }
  std::uint64_t syncs() const { return syncs_.load(std::memory_order_relaxed); }

 private:
  struct Line {
    std::uint32_t index = 0;
    std::uint32_t valid = 0;
    MptFields fields;
  };
  static std::size_t slot(std::uint32_t index) { return index % kLines; }

  std::array<Seqlock<Line>, kLines> lines_{};
  mutable std::atomic<std::uint64_t> hits_{0};
  mutable std::atomic<std::uint64_t> misses_{0};
  std::atomic<std::uint64_t> syncs_{0};
};

}  // namespace srdma::hca
