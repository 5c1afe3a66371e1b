// The index (bitmap) allocator of mthca (mthca_alloc): hands out table
// indices for MPTs (memory keys), QPs, CQs and PDs.
//
// Semantics, identical to the kernel's for every sequence of valid calls:
//   - `num` entries (a power of two); indices below `reserved` are never
//     handed out.
//   - alloc() takes the first free index at or after the `last` hint; if
//     there is none it advances `top` and searches again from 0. It returns
//     `index | top`.
//   - free(v) clears index v & (num - 1), lowers `last` to it, and advances
//     `top`. `top` advances as (top + num) & mask, so a slot that is reused
//     comes back with different high bits: successive keys, QPNs and CQNs of
//     one slot differ. (mthca never raises `last`, so in effect the search
//     always starts at 0; we keep the hint to stay exact.)
// Unlike the kernel, free() refuses misuse with EINVAL and leaves the state
// unchanged: a reserved index, an index that is not allocated, or high bits
// other than those alloc() returned for it.
//
// Cost: alloc and free are O(log64 num) through a summary bitmap.
// Not thread-safe: the owner serialises access (as mthca's spinlock does).
#pragma once

#include <cstdint>

#include "alloc/summary_bitmap.h"
#include "alloc/zeroed_array.h"
#include "srdma/status.h"

namespace srdma::alloc {

class IndexAllocator {
 public:
  static constexpr std::uint32_t kMaxNum = 1u << 30;

  // A `num` that is not a power of two in 1..kMaxNum, or reserved > num, is
  // EINVAL.
  static Result<IndexAllocator> create(std::uint32_t num, std::uint32_t mask,
                                       std::uint32_t reserved);

  // `index | top`, or ENOMEM when every unreserved index is in use (which
  // still advances `top`, as the kernel does).
  Result<std::uint32_t> alloc();

  // Returns a value alloc() gave out. EINVAL (state unchanged) if `value` is
  // not currently allocated with exactly these high bits.
  Result<void> free(std::uint32_t value);

  // Whether `value` is currently allocated with exactly these high bits.
  bool is_allocated(std::uint32_t value) const;

  std::uint32_t num() const { return num_; }
  std::uint32_t mask() const { return mask_; }
  std::uint32_t reserved() const { return reserved_; }
  std::uint32_t used() const { return used_; }  // excluding reserved
  std::uint32_t top() const { return top_; }
  std::uint32_t last() const { return last_; }
  std::size_t bytes() const { return free_.bytes() + issued_.bytes(); }

 private:
  IndexAllocator(std::uint32_t num, std::uint32_t mask, std::uint32_t reserved);
  // The errors alloc() / free(value) return; off the hot path.
  [[gnu::cold, gnu::noinline]] std::unexpected<Error> alloc_error() const;
  [[gnu::cold, gnu::noinline]] std::unexpected<Error> free_error(std::uint32_t value) const;

  std::uint32_t num_ = 0;
  std::uint32_t mask_ = 0;
  std::uint32_t reserved_ = 0;
  std::uint32_t last_ = 0;
  std::uint32_t top_ = 0;
  std::uint32_t used_ = 0;
  SummaryBitmap free_;               // set bit = free index
  ZeroedArray<std::uint32_t> issued_;  // the value handed out, per allocated index
};

// The hot paths, inline.

inline Result<std::uint32_t> IndexAllocator::alloc() {
  std::size_t obj = free_.find_next_set(last_);
  if (obj == SummaryBitmap::npos) [[unlikely]] {
    top_ = (top_ + num_) & mask_;
    obj = free_.find_first_set();
    if (obj == SummaryBitmap::npos) return alloc_error();
  }
  free_.clear(obj);
  ++used_;
  std::uint32_t value = static_cast<std::uint32_t>(obj) | top_;
  issued_[obj] = value;
  return value;
}

inline Result<void> IndexAllocator::free(std::uint32_t value) {
  std::uint32_t obj = value & (num_ - 1);
  if (obj < reserved_ || free_.test(obj) || issued_[obj] != value) [[unlikely]] return free_error(value);
  free_.set(obj);
  --used_;
  if (obj < last_) last_ = obj;
  top_ = (top_ + num_) & mask_;
  return {};
}

}  // namespace srdma::alloc
