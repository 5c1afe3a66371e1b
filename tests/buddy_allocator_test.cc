#include "alloc/buddy_allocator.h"

#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

#include "mthca_models.h"

namespace srdma::alloc {
namespace {

using test::MthcaBuddyModel;

TEST(BuddyAllocator, RefusesBadMaxOrder) {
  EXPECT_EQ(BuddyAllocator::create(-1).error().code, EINVAL);
  EXPECT_EQ(BuddyAllocator::create(BuddyAllocator::kMaxOrder + 1).error().code, EINVAL);
  EXPECT_TRUE(BuddyAllocator::create(0).has_value());
}

TEST(BuddyAllocator, SplitsLowestFirstAndMergesBack) {
  auto b = BuddyAllocator::create(4).value();
  EXPECT_EQ(b.alloc(0).value(), 0u);
  EXPECT_EQ(b.alloc(1).value(), 2u);
  EXPECT_EQ(b.alloc(0).value(), 1u);
  EXPECT_EQ(b.alloc(2).value(), 4u);
  EXPECT_EQ(b.alloc(3).value(), 8u);
  EXPECT_EQ(b.alloc(0).error().code, ENOMEM);
  ASSERT_TRUE(b.free(0, 0));
  ASSERT_TRUE(b.free(1, 0));
  ASSERT_TRUE(b.free(2, 1));
  ASSERT_TRUE(b.free(4, 2));
  ASSERT_TRUE(b.free(8, 3));
  EXPECT_EQ(b.num_free(4), 1u);  // one block again, merged up to max_order
  EXPECT_EQ(b.free_segments(), 16u);
}

TEST(BuddyAllocator, WholeTableAtMaxOrderAndGuardThere) {
  auto b = BuddyAllocator::create(3).value();
  EXPECT_EQ(b.alloc(3).value(), 0u);
  EXPECT_EQ(b.alloc(0).error().code, ENOMEM);
  ASSERT_TRUE(b.free(0, 3));  // no buddy beyond max_order to look at
  EXPECT_EQ(b.num_free(3), 1u);
}

TEST(BuddyAllocator, ErrorsLeaveStateUnchanged) {
  auto b = BuddyAllocator::create(5).value();
  MthcaBuddyModel m(5);
  ASSERT_EQ(b.alloc(2).value(), m.alloc(2));  // 0
  ASSERT_EQ(b.alloc(0).value(), m.alloc(0));  // 4
  EXPECT_EQ(b.alloc(-1).error().code, EINVAL);
  EXPECT_EQ(b.alloc(6).error().code, EINVAL);
  EXPECT_EQ(b.free(0, 1).error().code, EINVAL);   // allocated with order 2
  EXPECT_EQ(b.free(0, 3).error().code, EINVAL);
  EXPECT_EQ(b.free(8, 3).error().code, EINVAL);   // free, never allocated
  EXPECT_EQ(b.free(5, 0).error().code, EINVAL);   // inside a split, free
  EXPECT_EQ(b.free(2, 1).error().code, EINVAL);   // inside an allocated block
  EXPECT_EQ(b.free(6, 2).error().code, EINVAL);   // misaligned
  EXPECT_EQ(b.free(32, 0).error().code, EINVAL);  // beyond the table
  EXPECT_EQ(b.free(0, -1).error().code, EINVAL);
  EXPECT_EQ(b.free(0, 6).error().code, EINVAL);
  for (int i = 0; i < 10; ++i) {
    int order = i % 3;
    auto ours = b.alloc(order);
    auto theirs = m.alloc(order);
    ASSERT_EQ(ours.has_value(), theirs >= 0);
    if (ours) {
      ASSERT_EQ(*ours, theirs);
    }
  }
  // A double free is refused too.
  ASSERT_TRUE(b.free(4, 0));
  EXPECT_EQ(b.free(4, 0).error().code, EINVAL);
}

TEST(BuddyAllocator, ReserveTakesAGivenBlock) {
  auto b = BuddyAllocator::create(4).value();
  ASSERT_TRUE(b.reserve(8, 2));
  EXPECT_EQ(b.allocated_order(8), 2);
  EXPECT_EQ(b.free_segments(), 12u);
  EXPECT_EQ(b.reserve(8, 2).error().code, EBUSY);
  EXPECT_EQ(b.reserve(8, 3).error().code, EBUSY);  // overlaps
  EXPECT_EQ(b.reserve(9, 0).error().code, EBUSY);  // inside it
  EXPECT_EQ(b.reserve(6, 2).error().code, EINVAL); // misaligned
  // The rest is still handed out lowest first, around the hole.
  EXPECT_EQ(b.alloc(3).value(), 0u);
  EXPECT_EQ(b.alloc(2).value(), 12u);
  EXPECT_EQ(b.alloc(0).error().code, ENOMEM);
  ASSERT_TRUE(b.free(8, 2));
  ASSERT_TRUE(b.free(12, 2));
  ASSERT_TRUE(b.free(0, 3));
  EXPECT_EQ(b.num_free(4), 1u);
}

// Long random sequences: every segment equals what mthca_buddy returns, every
// block is aligned to its size, and no two live blocks overlap.
class BuddyVsMthca : public ::testing::TestWithParam<int> {};

TEST_P(BuddyVsMthca, ReplaysRandomSequencesExactly) {
  const int max_order = GetParam();
  auto b = BuddyAllocator::create(max_order).value();
  MthcaBuddyModel m(max_order);
  std::vector<std::pair<std::uint32_t, int>> live;
  std::vector<int> owner(std::size_t{1} << max_order, -1);  // segment -> live block start or -1
  std::mt19937 rng(max_order * 7919);
  for (int step = 0; step < 20000; ++step) {
    unsigned dice = rng() % 100;
    if (dice < 50 || live.empty()) {
      int order = static_cast<int>(rng() % (max_order + 1));
      if (rng() % 4) order = std::min(order, 3);  // mostly small, some large
      auto ours = b.alloc(order);
      std::int64_t theirs = m.alloc(order);
      if (theirs < 0) {
        ASSERT_FALSE(ours);
        ASSERT_EQ(ours.error().code, ENOMEM);
        continue;
      }
      ASSERT_TRUE(ours) << "step " << step;
      ASSERT_EQ(*ours, theirs) << "step " << step;
      ASSERT_EQ(*ours % (1u << order), 0u) << "aligned to its own size";
      for (std::uint32_t s = *ours; s < *ours + (1u << order); ++s) {
        ASSERT_EQ(owner[s], -1) << "overlap at segment " << s;
        owner[s] = static_cast<int>(*ours);
      }
      live.emplace_back(*ours, order);
    } else if (dice < 95) {
      std::size_t k = rng() % live.size();
      auto [seg, order] = live[k];
      live[k] = live.back();
      live.pop_back();
      ASSERT_TRUE(b.free(seg, order));
      m.free(seg, order);
      for (std::uint32_t s = seg; s < seg + (1u << order); ++s) owner[s] = -1;
    } else {
      // Misuse: a wrong order for a live block, or a block that is free.
      auto [seg, order] = live[rng() % live.size()];
      int wrong = order == 0 ? 1 : order - 1;
      if (seg % (1u << wrong) == 0) {
        ASSERT_EQ(b.free(seg, wrong).error().code, EINVAL);
      }
      std::uint32_t probe = static_cast<std::uint32_t>(rng() % (1u << max_order));
      if (owner[probe] == -1) {
        ASSERT_EQ(b.free(probe, 0).error().code, EINVAL);
      }
    }
    std::uint64_t used = 0;
    for (auto& [s, o] : live) used += 1u << o;
    ASSERT_EQ(b.free_segments(), (std::uint64_t{1} << max_order) - used);
    for (int o = 0; o <= max_order; ++o) ASSERT_EQ(b.num_free(o), static_cast<std::uint32_t>(m.num_free[o]));
  }
}

INSTANTIATE_TEST_SUITE_P(Orders, BuddyVsMthca, ::testing::Values(0, 1, 3, 6, 10));

}  // namespace
}  // namespace srdma::alloc
