// The MTT buddy allocator of mthca (mthca_buddy), with a search that does not
// scan.
//
// Semantics, identical to the kernel's for every sequence of valid calls:
//   - The table has 2^max_order segments, initially one free block of order
//     max_order. bits[o] marks the free blocks of order o.
//   - alloc(order) takes the lowest order o >= order that has a free block,
//     and in it the block with the lowest address; it splits it down to
//     `order`, freeing the upper halves, and returns its first segment. A
//     block of order o starts at a multiple of 2^o segments, so it never
//     crosses a boundary of its own size (FMRs rely on that).
//   - free(seg, order) merges with the free buddy while there is one, up to
//     max_order (the kernel has no guard there; we do).
// Unlike the kernel: an order outside 0..max_order is EINVAL, a full table is
// ENOMEM, and freeing a block that is not allocated, or with an order other
// than it was allocated with, is EINVAL with the state unchanged.
//
// Cost: the kernel scans bitmaps linearly. Here each order's bitmap carries a
// summary tree, so alloc and free are O(max_order * log64 n) however
// fragmented the table is.
// Not thread-safe: the owner serialises access.
#pragma once

#include <cstdint>
#include <vector>

#include "alloc/summary_bitmap.h"
#include "alloc/zeroed_array.h"
#include "srdma/status.h"

namespace srdma::alloc {

class BuddyAllocator {
 public:
  static constexpr int kMaxOrder = 30;

  // max_order outside 0..kMaxOrder is EINVAL.
  static Result<BuddyAllocator> create(int max_order);

  // The first segment of a block of 2^order segments.
  Result<std::uint32_t> alloc(int order);

  // Returns a block alloc() or reserve() gave out, with the same order.
  Result<void> free(std::uint32_t seg, int order);

  // Takes the given block (seg aligned to 2^order) out of the free space, as
  // if allocated; free() returns it. EINVAL for a misaligned or out-of-range
  // block, EBUSY if any part of it is not free.
  Result<void> reserve(std::uint32_t seg, int order);

  int max_order() const { return max_order_; }
  std::uint32_t num_segments() const { return std::uint32_t{1} << max_order_; }
  // Free blocks of exactly this order.
  std::uint32_t num_free(int order) const { return num_free_[order]; }
  // Free segments in all orders.
  std::uint64_t free_segments() const;
  // The order `seg` was allocated with, or -1 if no block starts there.
  int allocated_order(std::uint32_t seg) const;
  std::size_t bytes() const;

 private:
  explicit BuddyAllocator(int max_order);
  Result<void> check_block(std::uint32_t seg, int order) const;
  // The error alloc(order) / free(seg, order) returns; off the hot path.
  [[gnu::cold, gnu::noinline]] std::unexpected<Error> alloc_error(int order) const;
  [[gnu::cold, gnu::noinline]] std::unexpected<Error> free_error(std::uint32_t seg, int order) const;
  void mark_free(int order, std::uint32_t block) {
    bits_[order].set(block);
    ++num_free_[order];
  }
  void mark_used(int order, std::uint32_t block) {
    bits_[order].clear(block);
    --num_free_[order];
  }

  int max_order_ = 0;
  std::vector<SummaryBitmap> bits_;      // bits_[o]: set = free block of order o at index
  std::vector<std::uint32_t> num_free_;  // free blocks per order
  ZeroedArray<std::uint8_t> alloc_order_;  // per first segment: order + 1 if allocated
};

// The hot paths, inline: a handful of word operations each.

inline Result<std::uint32_t> BuddyAllocator::alloc(int order) {
  if (static_cast<unsigned>(order) > static_cast<unsigned>(max_order_)) [[unlikely]]
    return alloc_error(order);
  for (int o = order; o <= max_order_; ++o) {
    if (num_free_[o] == 0) continue;  // skip empty orders, as mthca does
    std::uint32_t block = static_cast<std::uint32_t>(bits_[o].find_first_set());
    mark_used(o, block);
    while (o > order) {  // split: keep the lower half, free the upper
      --o;
      block <<= 1;
      mark_free(o, block ^ 1);
    }
    std::uint32_t seg = block << order;
    alloc_order_[seg] = static_cast<std::uint8_t>(order + 1);
    return seg;
  }
  return alloc_error(order);
}

inline Result<void> BuddyAllocator::free(std::uint32_t seg, int order) {
  // One test for every misuse: order in range, seg in the table and aligned,
  // and a block of exactly this order allocated at seg.
  if (static_cast<unsigned>(order) > static_cast<unsigned>(max_order_) || (seg >> max_order_) != 0 ||
      (seg & ((std::uint32_t{1} << order) - 1)) != 0 || alloc_order_[seg] != order + 1) [[unlikely]]
    return free_error(seg, order);
  alloc_order_[seg] = 0;
  std::uint32_t block = seg >> order;
  // Merge with the free buddy while there is one: one word read per order.
  while (order < max_order_ && bits_[order].test_and_clear(block ^ 1)) {
    --num_free_[order];
    block >>= 1;
    ++order;
  }
  mark_free(order, block);
  return {};
}

}  // namespace srdma::alloc
