#include "alloc/summary_bitmap.h"

#include <bit>

namespace srdma::alloc {

SummaryBitmap::SummaryBitmap(std::size_t nbits) : nbits_(nbits) {
  std::size_t bits = nbits == 0 ? 1 : nbits;
  std::size_t total = 0;
  for (;;) {
    std::size_t words = (bits + 63) / 64;
    offset_[levels_] = total;
    nwords_[levels_] = words;
    total += words;
    ++levels_;
    if (words == 1) break;
    bits = words;
  }
  words_ = ZeroedArray<std::uint64_t>(total);
}

void SummaryBitmap::set(std::size_t i) {
  for (int k = 0; k < levels_; ++k) {
    std::uint64_t& w = level(k)[i >> 6];
    bool was_empty = w == 0;
    w |= std::uint64_t{1} << (i & 63);
    if (!was_empty) return;
    i >>= 6;  // this word became non-empty: mark it one level up
  }
}

void SummaryBitmap::clear(std::size_t i) {
  for (int k = 0; k < levels_; ++k) {
    std::uint64_t& w = level(k)[i >> 6];
    w &= ~(std::uint64_t{1} << (i & 63));
    if (w != 0) return;
    i >>= 6;  // this word became empty: clear its summary bit
  }
}

std::size_t SummaryBitmap::find_next_set(std::size_t from) const {
  if (from >= nbits_) return npos;
  std::size_t i = from;
  int k = 0;
  // Climb: look for a set bit at or after i in the current word of level k.
  for (;;) {
    std::size_t word = i >> 6;
    if (word < nwords_[k]) {
      std::uint64_t w = level(k)[word] & (~std::uint64_t{0} << (i & 63));
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
    i = (i << 6) + static_cast<std::size_t>(std::countr_zero(level(k)[i]));
  }
  return i < nbits_ ? i : npos;
}

}  // namespace srdma::alloc
