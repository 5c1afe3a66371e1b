#include "alloc/summary_bitmap.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace srdma::alloc {
namespace {

std::size_t model_next(const std::vector<bool>& m, std::size_t from) {
  for (std::size_t i = from; i < m.size(); ++i)
    if (m[i]) return i;
  return SummaryBitmap::npos;
}

class SummaryBitmapSizes : public ::testing::TestWithParam<std::size_t> {};

TEST_P(SummaryBitmapSizes, FindNextSetMatchesALinearScan) {
  const std::size_t n = GetParam();
  SummaryBitmap b(n);
  std::vector<bool> m(n, false);
  std::mt19937_64 rng(n);
  EXPECT_EQ(b.find_first_set(), SummaryBitmap::npos);
  for (int step = 0; step < 4000; ++step) {
    std::size_t i = rng() % n;
    if (rng() % 3 == 0) {
      b.clear(i);
      m[i] = false;
    } else {
      b.set(i);
      m[i] = true;
    }
    std::size_t from = rng() % (n + 1);
    ASSERT_EQ(b.find_next_set(from), model_next(m, from)) << "n=" << n << " from=" << from;
    ASSERT_EQ(b.test(i), m[i]);
  }
  // Drain: every set bit found in order, then nothing.
  std::size_t from = 0;
  while ((from = b.find_next_set(from)) != SummaryBitmap::npos) {
    ASSERT_TRUE(m[from]);
    b.clear(from);
    m[from] = false;
  }
  EXPECT_EQ(model_next(m, 0), SummaryBitmap::npos);
}

INSTANTIATE_TEST_SUITE_P(Sizes, SummaryBitmapSizes,
                         ::testing::Values(1, 2, 63, 64, 65, 4095, 4096, 4097, 262144 + 3));

TEST(SummaryBitmap, FindNextSetPastTheEndIsNpos) {
  SummaryBitmap b(100);
  b.set(99);
  EXPECT_EQ(b.find_next_set(99), 99u);
  EXPECT_EQ(b.find_next_set(100), SummaryBitmap::npos);
  EXPECT_EQ(b.find_next_set(~std::size_t{0}), SummaryBitmap::npos);
}

}  // namespace
}  // namespace srdma::alloc
