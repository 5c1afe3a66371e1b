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
// Rotation. mthca's `top` starts at 0 and steps by `num`, so a fresh device's
// first key and QPN are known to anyone (rkey 0x100, QPN 2 on both sides of
// every run) and the next ones follow. TopRotation::random() starts `top` at
// a random multiple of `num` within `mask` and moves it, on every alloc and
// free, by a random non-zero multiple: the index stays mthca's (lowest free),
// the high bits are unguessable. A slot is never handed out again with the
// value it had last time (a stale key or QPN still fails). The steps come
// from the kernel's CSPRNG, or from a seed where a run must replay (tests,
// `srdma sim`, SRDMA_DETERMINISTIC_IDS): sequential() is mthca's rotation,
// value for value.
//
// Cost: alloc and free are O(log64 num) through a summary bitmap.
// Not thread-safe: the owner serialises access (as mthca's spinlock does).
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "alloc/summary_bitmap.h"
#include "alloc/zeroed_array.h"
#include "srdma/status.h"

namespace srdma::alloc {

// How `top` moves (see above).
struct TopRotation {
  enum class Mode : std::uint8_t { kSequential, kRandom };
  Mode mode = Mode::kSequential;
  // kRandom: the steps' source; none = the kernel's CSPRNG.
  std::optional<std::uint64_t> seed;

  static TopRotation sequential() { return {}; }
  static TopRotation random() { return {Mode::kRandom, std::nullopt}; }
  // Random-looking and replayable: the same seed, the same values.
  static TopRotation seeded(std::uint64_t seed) { return {Mode::kRandom, seed}; }
};

class IndexAllocator {
 public:
  static constexpr std::uint32_t kMaxNum = 1u << 30;

  // A `num` that is not a power of two in 1..kMaxNum, or reserved > num, is
  // EINVAL.
  static Result<IndexAllocator> create(std::uint32_t num, std::uint32_t mask,
                                       std::uint32_t reserved, TopRotation rotation = TopRotation::sequential());

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
  bool random_top() const { return random_; }

 private:
  IndexAllocator(std::uint32_t num, std::uint32_t mask, std::uint32_t reserved, TopRotation rotation);
  // The errors alloc() / free(value) return; off the hot path.
  [[gnu::cold, gnu::noinline]] std::unexpected<Error> alloc_error() const;
  [[gnu::cold, gnu::noinline]] std::unexpected<Error> free_error(std::uint32_t value) const;
  // `top` one step on: mthca's `num`, or a random non-zero multiple of it.
  void advance_top() {
    if (random_) [[unlikely]]
      return advance_top_randomly();
    top_ = (top_ + num_) & mask_;
  }
  void advance_top_randomly();
  [[gnu::noinline]] Result<std::uint32_t> alloc_random();
  std::uint32_t next_random();  // 32 bits from the seeded generator or the CSPRNG pool

  std::uint32_t num_ = 0;
  std::uint32_t mask_ = 0;
  std::uint32_t reserved_ = 0;
  std::uint32_t last_ = 0;
  std::uint32_t top_ = 0;
  std::uint32_t used_ = 0;
  SummaryBitmap free_;               // set bit = free index
  // The value handed out, per allocated index; a freed index keeps its last
  // one (random rotation: the next value there must differ from it).
  ZeroedArray<std::uint32_t> issued_;
  // Random rotation: the number of distinct tops (mask's span over num),
  // and the steps' source: a seeded splitmix64, or CSPRNG words fetched a
  // pool at a time (one getrandom per 16 steps).
  bool random_ = false;
  bool seeded_ = false;
  std::uint64_t periods_ = 1;
  std::uint64_t rng_state_ = 0;
  std::array<std::uint32_t, 16> pool_{};
  std::uint32_t pool_left_ = 0;
};

// The hot paths, inline.

inline Result<std::uint32_t> IndexAllocator::alloc() {
  if (random_) return alloc_random();
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
  advance_top();
  return {};
}

}  // namespace srdma::alloc
