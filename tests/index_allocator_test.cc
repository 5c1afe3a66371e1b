#include "alloc/index_allocator.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "mthca_models.h"

namespace srdma::alloc {
namespace {

using test::MthcaAllocModel;

TEST(IndexAllocator, RefusesBadParameters) {
  EXPECT_EQ(IndexAllocator::create(0, ~0u, 0).error().code, EINVAL);
  EXPECT_EQ(IndexAllocator::create(3, ~0u, 0).error().code, EINVAL);
  EXPECT_EQ(IndexAllocator::create(1u << 31, ~0u, 0).error().code, EINVAL);
  EXPECT_EQ(IndexAllocator::create(8, ~0u, 9).error().code, EINVAL);
  EXPECT_TRUE(IndexAllocator::create(8, ~0u, 8).has_value());
}

TEST(IndexAllocator, SkipsReservedAndRotatesTheTopBits) {
  auto a = IndexAllocator::create(8, ~0u, 2).value();
  EXPECT_EQ(a.alloc().value(), 2u);
  EXPECT_EQ(a.alloc().value(), 3u);
  ASSERT_TRUE(a.free(2));
  // The slot comes back with the next top: 2 | 8.
  EXPECT_EQ(a.alloc().value(), 2u | 8u);
  EXPECT_EQ(a.used(), 2u);
}

TEST(IndexAllocator, FullTableIsEnomemAndStillAdvancesTop) {
  auto a = IndexAllocator::create(4, 0xff, 1).value();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a.alloc());
  auto r = a.alloc();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ENOMEM);
  EXPECT_EQ(a.top(), 4u);  // the failed search advanced it, as mthca does
}

TEST(IndexAllocator, RefusesMisuseAndLeavesStateUnchanged) {
  auto a = IndexAllocator::create(16, ~0u, 2).value();
  MthcaAllocModel m(16, ~0u, 2);
  std::uint32_t v = a.alloc().value();
  ASSERT_EQ(v, m.alloc());
  ASSERT_TRUE(a.free(v));
  m.free(v);
  std::uint32_t w = a.alloc().value();  // same slot, other high bits
  ASSERT_EQ(w, m.alloc());
  ASSERT_NE(v, w);

  const auto top = a.top();
  const auto used = a.used();
  EXPECT_EQ(a.free(1).error().code, EINVAL);          // reserved
  EXPECT_EQ(a.free(5).error().code, EINVAL);          // not allocated
  EXPECT_EQ(a.free(v).error().code, EINVAL);          // stale high bits
  EXPECT_EQ(a.free(w | (1u << 30)).error().code, EINVAL);  // forged high bits
  EXPECT_EQ(a.top(), top);
  EXPECT_EQ(a.used(), used);
  // The state really is unchanged: we keep matching the kernel.
  for (int i = 0; i < 5; ++i) ASSERT_EQ(a.alloc().value(), m.alloc());
  ASSERT_TRUE(a.free(w));
  m.free(w);
  EXPECT_EQ(a.alloc().value(), m.alloc());
}

struct Params {
  std::uint32_t num, mask, reserved;
};

class IndexAllocatorVsMthca : public ::testing::TestWithParam<Params> {};

// Long random sequences of alloc/free, with refused misuse mixed in: every
// value equals what mthca_alloc returns.
TEST_P(IndexAllocatorVsMthca, ReplaysRandomSequencesExactly) {
  const auto p = GetParam();
  auto a = IndexAllocator::create(p.num, p.mask, p.reserved).value();
  MthcaAllocModel m(p.num, p.mask, p.reserved);
  std::vector<std::uint32_t> live;
  std::mt19937 rng(p.num * 31 + p.reserved);
  for (int step = 0; step < 20000; ++step) {
    unsigned dice = rng() % 100;
    // Bias towards alloc so the table fills and wraps now and then.
    if (dice < 55 || live.empty()) {
      auto ours = a.alloc();
      std::uint32_t theirs = m.alloc();
      if (theirs == ~0u) {
        ASSERT_FALSE(ours) << "step " << step;
        ASSERT_EQ(ours.error().code, ENOMEM);
      } else {
        ASSERT_TRUE(ours) << "step " << step;
        ASSERT_EQ(*ours, theirs) << "step " << step;
        live.push_back(*ours);
      }
    } else if (dice < 95) {
      std::size_t k = rng() % live.size();
      std::uint32_t v = live[k];
      live[k] = live.back();
      live.pop_back();
      ASSERT_TRUE(a.free(v)) << "step " << step;
      m.free(v);
    } else {
      // Misuse: a value never handed out in this form.
      std::uint32_t bogus = rng() % 2 ? (rng() % p.num) : (live.empty() ? 0 : live[0] ^ (p.num << 1));
      bool allocated = a.is_allocated(bogus);
      auto r = a.free(bogus);
      if (allocated) {
        // Happened to be a live value: it was a real free.
        ASSERT_TRUE(r);
        m.free(bogus);
        std::erase(live, bogus);
      } else {
        ASSERT_FALSE(r);
        ASSERT_EQ(r.error().code, EINVAL);
      }
    }
    ASSERT_EQ(a.top(), m.top);
    ASSERT_EQ(a.used(), live.size());
  }
}

INSTANTIATE_TEST_SUITE_P(Tables, IndexAllocatorVsMthca,
                         ::testing::Values(Params{1, ~0u, 0}, Params{16, ~0u, 1}, Params{64, 0xffffff, 2},
                                           Params{256, ~0u, 0}, Params{1024, 0xfff, 8},
                                           Params{128, 0x7, 3}, Params{4096, ~0u, 64}));

}  // namespace
}  // namespace srdma::alloc
