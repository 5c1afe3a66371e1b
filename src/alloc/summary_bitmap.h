// A bitmap with a summary tree: find the first (or next) set bit in
// O(log64 n) word operations instead of a linear scan.
//
// Level 0 holds the bits; bit i of level k+1 is set iff word i of level k is
// non-zero. The top level is a single word. set/clear update at most one word
// per level (and usually only level 0: a summary bit changes only when a word
// goes from zero to non-zero or back); find_next_set climbs until it finds a
// non-empty word to the right and descends along the lowest set bits;
// find_first_set reads a hinted word (a lower bound on the first non-empty
// word, kept by set/clear) and descends from the top word only when that word
// turns out empty.
//
// The hot paths are inline here: the allocators call them several times per
// operation, and an out-of-line call per bit costs more than the bit work.
//
// Memory: n/8 bytes plus about 1/63 of that for the summaries, allocated
// zeroed and touched only where bits are set.
// Not thread-safe: the owner serialises access.
#pragma once

#include <array>
#include <bit>
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

  // Move-only (the level pointers point into words_, which moves with them).
  SummaryBitmap(SummaryBitmap&&) noexcept = default;
  SummaryBitmap& operator=(SummaryBitmap&&) noexcept = default;

  std::size_t size() const { return nbits_; }
  std::size_t bytes() const { return words_.bytes(); }

  // REQUIRES: i < size().
  bool test(std::size_t i) const { return (level_[0][i >> 6] >> (i & 63)) & 1; }

  // Clears bit i and says whether it was set (one word read for both).
  // REQUIRES: i < size().
  bool test_and_clear(std::size_t i) {
    std::uint64_t* w = &level_[0][i >> 6];
    std::uint64_t bit = std::uint64_t{1} << (i & 63);
    std::uint64_t old = *w;
    if ((old & bit) == 0) return false;
    std::uint64_t now = old & ~bit;
    *w = now;
    if (now == 0) [[unlikely]] word_emptied(i >> 6);
    return true;
  }

  // REQUIRES: i < size().
  void set(std::size_t i) {
    std::uint64_t* w = &level_[0][i >> 6];
    std::uint64_t old = *w;
    *w = old | (std::uint64_t{1} << (i & 63));
    if (old != 0) [[likely]] return;  // the word was already non-empty
    std::size_t word = i >> 6;
    if (word < first_) first_ = word;
    set_summary(word);
  }

  // Sets every bit in [from, size()): a word at a time, for initialisation.
  void set_from(std::size_t from) {
    for (std::size_t i = from; i < nbits_;) {
      if ((i & 63) == 0 && i + 64 <= nbits_) {
        std::size_t word = i >> 6;
        bool was_empty = level_[0][word] == 0;
        level_[0][word] = ~std::uint64_t{0};
        if (was_empty) {
          if (word < first_) first_ = word;
          set_summary(word);
        }
        i += 64;
      } else {
        set(i++);
      }
    }
  }

  // REQUIRES: i < size().
  void clear(std::size_t i) {
    std::uint64_t* w = &level_[0][i >> 6];
    std::uint64_t now = *w & ~(std::uint64_t{1} << (i & 63));
    *w = now;
    if (now != 0) [[likely]] return;  // the word is still non-empty
    word_emptied(i >> 6);
  }

  // The lowest set bit at or after `from`, or npos.
  std::size_t find_next_set(std::size_t from) const {
    if (from >= nbits_) return npos;
    // Fast path: a set bit in from's own word.
    std::uint64_t w = level_[0][from >> 6] & (~std::uint64_t{0} << (from & 63));
    if (w != 0) [[likely]] {
      std::size_t i = (from & ~std::size_t{63}) + static_cast<std::size_t>(std::countr_zero(w));
      return i < nbits_ ? i : npos;
    }
    return find_next_set_slow(from);
  }

  // The lowest set bit, or npos: the hinted word if it is non-empty, else a
  // descent from the top word.
  std::size_t find_first_set() const {
    if (first_ < nwords_[0]) {
      std::uint64_t w = level_[0][first_];
      if (w != 0) [[likely]] {
        std::size_t i = (first_ << 6) + static_cast<std::size_t>(std::countr_zero(w));
        return i < nbits_ ? i : npos;
      }
    }
    if (levels_ == 0) return npos;
    int k = levels_ - 1;
    std::uint64_t top = level_[k][0];
    if (top == 0) return npos;
    std::size_t i = static_cast<std::size_t>(std::countr_zero(top));
    while (k > 0) {
      --k;
      i = (i << 6) + static_cast<std::size_t>(std::countr_zero(level_[k][i]));
    }
    return i < nbits_ ? i : npos;
  }

 private:
  static constexpr int kMaxLevels = 12;  // 64^11 > 2^64

  void word_emptied(std::size_t word) {
    if (word == first_) first_ = word + 1;  // every word below word + 1 is now empty
    clear_summary(word);
  }

  // Word `word` of level 0 became non-empty / empty: update the levels above.
  void set_summary(std::size_t word) {
    for (int k = 1; k < levels_; ++k) {
      std::uint64_t* w = &level_[k][word >> 6];
      std::uint64_t old = *w;
      *w = old | (std::uint64_t{1} << (word & 63));
      if (old != 0) return;
      word >>= 6;
    }
  }
  void clear_summary(std::size_t word) {
    for (int k = 1; k < levels_; ++k) {
      std::uint64_t* w = &level_[k][word >> 6];
      std::uint64_t now = *w & ~(std::uint64_t{1} << (word & 63));
      *w = now;
      if (now != 0) return;
      word >>= 6;
    }
  }
  std::size_t find_next_set_slow(std::size_t from) const;

  std::size_t nbits_ = 0;
  int levels_ = 0;
  // A hint for find_first_set: every level-0 word below first_ is zero
  // (lowered by set, advanced past a word that clear empties).
  std::size_t first_ = 0;
  std::array<std::uint64_t*, kMaxLevels> level_{};  // first word of each level, in words_
  std::array<std::size_t, kMaxLevels> nwords_{};    // words in each level
  ZeroedArray<std::uint64_t> words_;
};

}  // namespace srdma::alloc
