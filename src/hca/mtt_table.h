// The MTT (memory translation table): page addresses for memory regions, in
// segments of 2^log_mtts_per_seg entries handed out by buddy allocators, as
// in mthca_mr.c.
//
// Layout (mthca_init_mr_table): the main buddy spans all num_mtt_segs
// segments. With an FMR reservation of 2^i segments, a second buddy of
// max_order i manages them, and its region is the first order-i block taken
// out of the main buddy, so regular MRs never use FMR MTTs. The segments
// reserved for firmware are then taken as the first block of the buddy FMRs
// use.
//
// An entry is `page address | kMttPresent`. Entries are written by the
// control path with relaxed atomic stores and published by the release of the
// MPT that points at them; translate() reads them with relaxed loads.
// Not thread-safe for allocation: the owner serialises alloc/free.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

#include "alloc/buddy_allocator.h"
#include "alloc/zeroed_array.h"
#include "srdma/status.h"

namespace srdma::hca {

inline constexpr std::uint64_t kMttPresent = 1;

enum class MttPool : std::uint8_t { kMain, kFmr };

// A block of MTT segments.
struct MttRange {
  std::uint32_t first_seg = 0;  // global segment number
  int order = -1;               // 2^order segments; -1: none
  MttPool pool = MttPool::kMain;
};

class MttTable {
 public:
  static Result<MttTable> create(std::uint32_t num_segs, int log_mtts_per_seg,
                                 std::uint32_t fmr_reserved_segs, std::uint32_t reserved_segs);

  // Segments for `n_entries` entries, from the main buddy or the FMR one.
  // ENOMEM names the table when no block is free.
  Result<MttRange> alloc(std::uint64_t n_entries, MttPool pool = MttPool::kMain);
  void free(const MttRange& r);

  std::uint64_t first_entry(const MttRange& r) const {
    return std::uint64_t{r.first_seg} << log_mtts_per_seg_;
  }
  // REQUIRES: the entries belong to a range the caller owns.
  void write(std::uint64_t entry, std::span<const std::uint64_t> page_addrs);
  std::uint64_t read(std::uint64_t entry) const {
    return std::atomic_ref<const std::uint64_t>(entries_[entry]).load(std::memory_order_relaxed);
  }

  // The entries from `entry` on, for Translation to walk.
  const std::uint64_t* entry_ptr(std::uint64_t entry) const { return &entries_[entry]; }

  int log_mtts_per_seg() const { return log_mtts_per_seg_; }
  std::uint32_t num_segs() const { return main_.num_segments(); }
  const alloc::BuddyAllocator& main_buddy() const { return main_; }
  // Null when FMRs share the main buddy.
  const alloc::BuddyAllocator* fmr_buddy() const { return has_fmr_ ? &fmr_ : nullptr; }
  std::uint32_t fmr_base_seg() const { return fmr_base_; }
  std::uint32_t reserved_segs() const { return reserved_segs_; }
  std::uint64_t used_segs() const;
  std::size_t bytes() const;

 private:
  MttTable(int log_mtts_per_seg, alloc::BuddyAllocator main, alloc::BuddyAllocator fmr, bool has_fmr);
  alloc::BuddyAllocator& buddy(MttPool p) { return p == MttPool::kFmr && has_fmr_ ? fmr_ : main_; }

  int log_mtts_per_seg_;
  alloc::BuddyAllocator main_;
  alloc::BuddyAllocator fmr_;
  bool has_fmr_;
  std::uint32_t fmr_base_ = 0;       // global segment of FMR buddy segment 0
  std::uint32_t fmr_block_segs_ = 0; // segments the FMR region takes from main
  std::uint32_t reserved_segs_ = 0;  // segments taken for "firmware"
  alloc::ZeroedArray<std::uint64_t> entries_;
};

// ceil(log2(ceil(n_entries / 2^log_mtts_per_seg))): the buddy order that
// holds n entries (512 entries, 8 per segment -> order 6).
int mtt_order_for(std::uint64_t n_entries, int log_mtts_per_seg);

}  // namespace srdma::hca
