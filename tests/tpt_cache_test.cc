// stale_rkey_test: the translation cache must never let a deregistered key
// translate once dereg_mr has returned, however translators race with it.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "hca/soft_hca.h"

namespace srdma::hca {
namespace {

TEST(TptCache, DeregisteredKeyNeverTranslatesAfterDeregReturns) {
  Profile p;
  p.num_mpt = 1 << 8;
  p.num_mtt_segs = 1 << 10;
  p.fmr_reserved_mtt_segs = 1 << 8;
  auto dev = SoftHca::open(validate_profile(p).value()).value();
  const std::uint32_t pdn = dev->tables().alloc_pd().value();
  alignas(4096) static std::uint8_t buf[4096];
  const auto va = reinterpret_cast<std::uint64_t>(buf);
  const std::uint64_t pages[] = {va};

  std::atomic<std::uint32_t> live_key{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> translators;
  for (int t = 0; t < 3; ++t) {
    translators.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        std::uint32_t k = live_key.load(std::memory_order_relaxed);
        (void)dev->tables().translate(k, va, 8, 0, pdn);  // misses and fills, racing dereg
      }
    });
  }
  int violations = 0;
  const int iterations = 300000;
  for (int i = 0; i < iterations; ++i) {
    std::uint32_t key = dev->tables().reg_mr(MrAttr{pdn, va, 64, 0, 12}, pages).value();
    live_key.store(key, std::memory_order_relaxed);
    ASSERT_TRUE(dev->tables().dereg_mr(key));
    if (dev->tables().translate(key, va, 8, 0, pdn)) ++violations;
  }
  stop = true;
  for (auto& t : translators) t.join();
  EXPECT_EQ(violations, 0) << "of " << iterations;
}

TEST(TptCache, SyncDropsEveryLineAndDeregDropsItsOwn) {
  TptCache c;
  MptFields f;
  f.flags = MPT_FLAG_REGION;
  c.fill(7, f, c.begin_fill(7));
  ASSERT_TRUE(c.lookup(7));
  c.clear();
  EXPECT_FALSE(c.lookup(7));
  c.fill(7, f, c.begin_fill(7));
  ASSERT_TRUE(c.lookup(7));
  // A fill whose version is stale (a store happened since) is refused.
  TptCache::FillTicket v = c.begin_fill(9);
  c.invalidate(9);
  c.fill(9, f, v);
  EXPECT_FALSE(c.lookup(9));
  c.invalidate(7);
  EXPECT_FALSE(c.lookup(7));
}

// The epoch a line carries is the one read before the MPT: a fill whose
// ticket predates a clear() (sync_tpt) is dead on arrival, even though no
// store hit its line.
TEST(TptCache, FillWhoseTicketPredatesSyncIsInvalid) {
  TptCache c;
  MptFields f;
  f.flags = MPT_FLAG_REGION;
  TptCache::FillTicket t = c.begin_fill(5);
  c.clear();
  c.fill(5, f, t);
  EXPECT_FALSE(c.lookup(5));
  c.fill(5, f, c.begin_fill(5));
  EXPECT_TRUE(c.lookup(5));
}

}  // namespace
}  // namespace srdma::hca
