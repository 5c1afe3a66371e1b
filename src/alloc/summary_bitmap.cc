#include "alloc/summary_bitmap.h"

#include <bit>

namespace srdma::alloc {

SummaryBitmap::SummaryBitmap(std::size_t nbits) : nbits_(nbits) {
  std::size_t bits = nbits == 0 ? 1 : nbits;
  std::array<std::size_t, kMaxLevels> offset{};
  std::size_t total = 0;
  for (;;) {
    std::size_t words = (bits + 63) / 64;
    offset[levels_] = total;
    nwords_[levels_] = words;
    total += words;
    ++levels_;
    if (words == 1) break;
    bits = words;
  }
  words_ = ZeroedArray<std::uint64_t>(total);
  for (int k = 0; k < levels_; ++k) level_[k] = words_.data() + offset[k];
}

std::size_t SummaryBitmap::find_next_set_slow(std::size_t from) const {
  // from's own word (level 0) is known empty at and after from: climb from
  // the next word.
  std::size_t i = (from >> 6) + 1;
  int k = 1;
  if (k == levels_) return npos;
  // Climb: look for a set bit at or after i in the current word of level k.
  for (;;) {
    std::size_t word = i >> 6;
    if (word < nwords_[k]) {
      std::uint64_t w = level_[k][word] & (~std::uint64_t{0} << (i & 63));
      if (w != 0) {
        i = (word << 6) + static_cast<std::size_t>(std::countr_zero(w));
        break;
      }
    }
    if (k + 1 == levels_) return npos;
    i = word + 1;  // the next word of level k is bit word+1 of level k+1
    ++k;
  }
  // Descend along the lowest set bits; every summary bit promises a set bit.
  while (k > 0) {
    --k;
    i = (i << 6) + static_cast<std::size_t>(std::countr_zero(level_[k][i]));
  }
  return i < nbits_ ? i : npos;
}

}  // namespace srdma::alloc
