// A bitmap with a summary tree: find the first (or next) set bit in
// O(log64 n) word operations instead of a linear scan.
//
// Level 0 holds the bits; bit i of level k+1 is set iff word i of level k is
// non-zero. The top level is a single word. set/clear update at most one word
// per level; find_next_set climbs until it finds a non-empty word to the right
// and descends along the lowest set bits.
//
// Memory: n/8 bytes plus about 1/63 of that for the summaries, allocated
// zeroed and touched only where bits are set.
// Not thread-safe: the owner serialises access.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "alloc/zeroed_array.h"

namespace srdma::alloc {

class SummaryBitmap {
 public:
  static constexpr std::size_t npos = ~std::size_t{0};

  SummaryBitmap() = default;
  // All bits start clear.
  explicit SummaryBitmap(std::size_t nbits);

  std::size_t size() const { return nbits_; }
  std::size_t bytes() const { return words_.bytes(); }

  // REQUIRES: i < size().
  bool test(std::size_t i) const { return (level(0)[i >> 6] >> (i & 63)) & 1; }
  void set(std::size_t i);
  void clear(std::size_t i);

  // The lowest set bit at or after `from`, or npos.
  std::size_t find_next_set(std::size_t from) const;
  std::size_t find_first_set() const { return find_next_set(0); }

 private:
  static constexpr int kMaxLevels = 12;  // 64^11 > 2^64

  const std::uint64_t* level(int k) const { return words_.data() + offset_[k]; }
  std::uint64_t* level(int k) { return words_.data() + offset_[k]; }

  std::size_t nbits_ = 0;
  int levels_ = 0;
  std::array<std::size_t, kMaxLevels> offset_{};  // first word of each level
  std::array<std::size_t, kMaxLevels> nwords_{};  // words in each level
  ZeroedArray<std::uint64_t> words_;
};

}  // namespace srdma::alloc
