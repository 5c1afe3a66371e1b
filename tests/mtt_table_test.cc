#include "hca/mtt_table.h"

#include <gtest/gtest.h>

namespace srdma::hca {
namespace {

TEST(MttTable, OrderForEntries) {
  EXPECT_EQ(mtt_order_for(1, 3), 0);
  EXPECT_EQ(mtt_order_for(8, 3), 0);
  EXPECT_EQ(mtt_order_for(9, 3), 1);
  EXPECT_EQ(mtt_order_for(512, 3), 6);  // the research notes' example
  EXPECT_EQ(mtt_order_for(513, 3), 7);
  EXPECT_EQ(mtt_order_for(2, 1), 0);
  EXPECT_EQ(mtt_order_for(3, 1), 1);
}

TEST(MttTable, FmrRegionIsTheFirstBlockOfTheMainBuddy) {
  // Defaults: 2^20 segments, 2^18 for FMRs, one reserved segment.
  auto t = MttTable::create(1 << 20, 3, 1 << 18, 1).value();
  EXPECT_EQ(t.main_buddy().max_order(), 20);
  ASSERT_NE(t.fmr_buddy(), nullptr);
  EXPECT_EQ(t.fmr_buddy()->max_order(), 18);
  EXPECT_EQ(t.fmr_base_seg(), 0u);
  // The main buddy lost [0, 2^18): free blocks of order 18 (at 2^18) and 19.
  EXPECT_EQ(t.main_buddy().num_free(18), 1u);
  EXPECT_EQ(t.main_buddy().num_free(19), 1u);
  EXPECT_EQ(t.main_buddy().num_free(20), 0u);
  // The firmware's segment came out of the FMR buddy.
  EXPECT_EQ(t.fmr_buddy()->allocated_order(0), 0);
  EXPECT_EQ(t.used_segs(), 1u);
  // Regular MRs never land in the FMR region.
  auto r = t.alloc(8).value();
  EXPECT_EQ(r.first_seg, 1u << 18);
  auto f = t.alloc(8, MttPool::kFmr).value();
  EXPECT_EQ(f.first_seg, 1u);
  EXPECT_EQ(t.used_segs(), 3u);
  t.free(r);
  t.free(f);
  EXPECT_EQ(t.used_segs(), 1u);
}

TEST(MttTable, WithoutReservationFmrsShareTheMainBuddy) {
  auto t = MttTable::create(1 << 4, 3, 0, 1).value();
  EXPECT_EQ(t.fmr_buddy(), nullptr);
  EXPECT_EQ(t.main_buddy().allocated_order(0), 0);  // the firmware segment
  auto f = t.alloc(8, MttPool::kFmr).value();
  EXPECT_EQ(f.pool, MttPool::kMain);
  EXPECT_EQ(f.first_seg, 1u);
}

TEST(MttTable, ExhaustionIsEnomemNamingTheTable) {
  auto t = MttTable::create(1 << 4, 3, 1 << 2, 0).value();
  auto big = t.alloc(std::uint64_t{1} << 10);  // 128 segments: more than there are
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code, ENOMEM);
  EXPECT_NE(big.error().reason.find("MTT table"), std::string::npos);
  // 12 main segments are left: orders 2 and 3.
  ASSERT_TRUE(t.alloc(64));
  ASSERT_TRUE(t.alloc(32));
  auto full = t.alloc(1);
  ASSERT_FALSE(full);
  EXPECT_EQ(full.error().code, ENOMEM);
  auto fmr_full = t.alloc(64, MttPool::kFmr);
  ASSERT_FALSE(fmr_full);
  EXPECT_NE(fmr_full.error().reason.find("FMR MTT table"), std::string::npos);
}

TEST(MttTable, EntriesCarryThePresentBit) {
  auto t = MttTable::create(1 << 4, 3, 0, 0).value();
  auto r = t.alloc(2).value();
  std::uint64_t pages[] = {0x1000, 0x5000};
  t.write(t.first_entry(r), pages);
  EXPECT_EQ(t.read(t.first_entry(r)), 0x1000 | kMttPresent);
  EXPECT_EQ(t.read(t.first_entry(r) + 1), 0x5000 | kMttPresent);
}

}  // namespace
}  // namespace srdma::hca
