// The FMR pool: the cache (a hit does nothing on the device), reference
// counts, remap_count -> dirty -> one batch release by the worker, flush,
// EAGAIN, the lazy unmap hole and the synchronous mode that closes it,
// destroy, and many threads at once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "srdma/access.h"
#include "srdma/device.h"
#include "srdma/fmr_pool.h"
#include "test_profile.h"
#include "wait.h"

namespace srdma {
namespace {

constexpr std::uint32_t kRw = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;

class FmrPoolTest : public ::testing::Test {
 protected:
  FmrPoolTest() : mem_(static_cast<std::uint8_t*>(std::aligned_alloc(4096, kPages * 4096))) {}
  ~FmrPoolTest() override { std::free(mem_); }

  static constexpr std::size_t kPages = 64;
  std::uint64_t page(std::size_t i) const { return reinterpret_cast<std::uint64_t>(mem_) + (i % kPages) * 4096; }
  std::vector<std::uint64_t> pages(std::size_t first, std::size_t n) const {
    std::vector<std::uint64_t> v;
    for (std::size_t i = 0; i < n; ++i) v.push_back(page(first + i));
    return v;
  }
  std::unique_ptr<FmrPool> make(FmrPoolParams p) {
    p.access = kRw;
    return FmrPool::create(pd_, std::move(p)).value();
  }
  bool translates(const PoolFmr* f) {
    return dev_.translate(f->rkey(), f->iova(), 8, ACCESS_REMOTE_WRITE, pd_.pd_num()).has_value();
  }
  bool translates(std::uint32_t key, std::uint64_t iova) {
    return dev_.translate(key, iova, 8, 0, pd_.pd_num()).has_value();
  }
  std::uint64_t syncs() const { return dev_.tpt_stats().syncs; }

  Device dev_ = Device::open(test::small_profile()).value();
  ProtectionDomain pd_ = dev_.alloc_pd().value();
  std::uint8_t* mem_;
};

TEST_F(FmrPoolTest, CreateRejectsBadParams) {
  auto code = [&](FmrPoolParams p) {
    auto r = FmrPool::create(pd_, std::move(p));
    EXPECT_FALSE(r);
    return r ? 0 : r.error().code;
  };
  EXPECT_EQ(code({.pool_size = 0}), EINVAL);
  EXPECT_EQ(code({.dirty_watermark = 0}), EINVAL);
  EXPECT_EQ(code({.max_remaps = dev_.query().max_map_per_fmr + 1}), EINVAL);
  EXPECT_EQ(code({.max_pages_per_fmr = 513}), EINVAL);
  EXPECT_EQ(code({.page_shift = 11}), EINVAL);
  EXPECT_EQ(code({.pool_size = 5000}), ENOMEM) << "1024 MPTs";
  EXPECT_EQ(pd_.usecnt(), 0) << "a failed create frees what it allocated";
  auto pool = make({.pool_size = 4});
  EXPECT_EQ(pool->max_remaps(), dev_.query().max_map_per_fmr) << "0: the device's max_map_per_fmr";
  EXPECT_EQ(pd_.usecnt(), 4);
  pool.reset();
  EXPECT_EQ(pd_.usecnt(), 0);
}

TEST_F(FmrPoolTest, MapRejectsBadInputWithoutTakingAnFmr) {
  auto pool = make({.max_pages_per_fmr = 4, .pool_size = 2});
  EXPECT_EQ(pool->map_phys({}, 0).error().code, EINVAL);
  EXPECT_EQ(pool->map_phys(pages(0, 5), 0).error().code, EINVAL);
  EXPECT_EQ(pool->map_phys(pages(0, 1), 100).error().code, EINVAL);
  EXPECT_EQ(pool->map_phys(std::vector<std::uint64_t>{page(0) + 64}, 0).error().code, EINVAL);
  EXPECT_EQ(pool->unmap(nullptr).error().code, EINVAL);
  EXPECT_EQ(pool->stats().free, 2u);
}

TEST_F(FmrPoolTest, CacheHitDoesNoDeviceOperation) {
  auto pool = make({.pool_size = 4});
  const auto list = pages(3, 4);
  PoolFmr* f = pool->map_phys(list, 0x100000).value();
  const std::uint32_t key = f->rkey();
  EXPECT_TRUE(translates(f));
  ASSERT_TRUE(pool->unmap(f));
  const auto before = pool->stats();
  const auto s0 = syncs();
  PoolFmr* g = pool->map_phys(list, 0x100000).value();
  const auto after = pool->stats();
  EXPECT_EQ(g, f);
  EXPECT_EQ(g->rkey(), key) << "no remap: same key";
  EXPECT_EQ(after.cache_hits, before.cache_hits + 1);
  EXPECT_EQ(after.remaps, before.remaps) << "no map_phys on the device";
  EXPECT_EQ(syncs(), s0);
  EXPECT_TRUE(translates(g));
  ASSERT_TRUE(pool->unmap(g));
  // A hit needs the same iova, length and whole page list.
  auto other = pages(3, 4);
  other[3] = page(40);
  for (auto [l, iova] : {std::pair{pages(3, 4), std::uint64_t{0x200000}}, std::pair{pages(3, 3), std::uint64_t{0x100000}},
                         std::pair{other, std::uint64_t{0x100000}}}) {
    const auto misses = pool->stats().cache_misses;
    PoolFmr* m = pool->map_phys(l, iova).value();
    EXPECT_EQ(pool->stats().cache_misses, misses + 1);
    ASSERT_TRUE(pool->unmap(m));
  }
  EXPECT_EQ(pool->stats().maps, 5u);
}

TEST_F(FmrPoolTest, NoCacheMeansEveryMapRemaps) {
  auto pool = make({.pool_size = 2, .cache = false});
  for (int i = 0; i < 4; ++i) {
    PoolFmr* f = pool->map_phys(pages(0, 1), 0).value();
    ASSERT_TRUE(pool->unmap(f));
  }
  EXPECT_EQ(pool->stats().cache_hits, 0u);
  EXPECT_EQ(pool->stats().remaps, 4u);
}

TEST_F(FmrPoolTest, ReferenceCountsShareOneMapping) {
  auto pool = make({.pool_size = 2});
  PoolFmr* a = pool->map_phys(pages(0, 2), 0).value();
  PoolFmr* b = pool->map_phys(pages(0, 2), 0).value();
  EXPECT_EQ(a, b) << "a hit on an FMR in use shares it";
  EXPECT_EQ(pool->stats().in_use, 1u);
  ASSERT_TRUE(pool->unmap(a));
  EXPECT_EQ(pool->stats().in_use, 1u) << "one reference left";
  ASSERT_TRUE(pool->unmap(a));
  EXPECT_EQ(pool->stats().free, 2u);
  EXPECT_EQ(pool->unmap(a).error().code, EINVAL) << "unmapped once too often";
  auto other = make({.pool_size = 1});
  PoolFmr* o = other->map_phys(pages(0, 1), 0).value();
  EXPECT_EQ(pool->unmap(o).error().code, EINVAL) << "another pool's FMR";
  ASSERT_TRUE(other->unmap(o));
}

// The documented hole: a lazy unmap leaves the rkey working until a flush.
TEST_F(FmrPoolTest, LazyUnmapLeavesTheKeyValidUntilFlush) {
  auto pool = make({.pool_size = 4});
  PoolFmr* f = pool->map_phys(pages(0, 2), 0x400000).value();
  const std::uint32_t key = f->rkey();
  ASSERT_TRUE(pool->unmap(f));
  EXPECT_TRUE(translates(key, 0x400000)) << "lazy: still valid after unmap";
  const auto s0 = syncs();
  pool->flush();
  EXPECT_FALSE(translates(key, 0x400000)) << "flush invalidated it";
  EXPECT_EQ(syncs(), s0 + 1);
  const auto st = pool->stats();
  EXPECT_EQ(st.flushes, 1u);
  EXPECT_EQ(st.fmrs_flushed, 1u);
  EXPECT_EQ(st.free, 4u);
  EXPECT_EQ(st.dirty, 0u);
  // A flushed mapping is gone from the cache: the same map misses.
  PoolFmr* g = pool->map_phys(pages(0, 2), 0x400000).value();
  EXPECT_EQ(pool->stats().cache_hits, 0u);
  EXPECT_NE(g->rkey(), key);
  ASSERT_TRUE(pool->unmap(g));
}

TEST_F(FmrPoolTest, SynchronousUnmapInvalidatesBeforeReturning) {
  auto pool = make({.pool_size = 2, .synchronous_unmap = true});
  PoolFmr* f = pool->map_phys(pages(0, 2), 0x400000).value();
  const std::uint32_t key = f->rkey();
  EXPECT_TRUE(translates(key, 0x400000));
  const auto s0 = syncs();
  ASSERT_TRUE(pool->unmap(f));
  EXPECT_FALSE(translates(key, 0x400000)) << "dead before unmap returned";
  EXPECT_EQ(syncs(), s0 + 1);
  EXPECT_EQ(pool->stats().sync_unmaps, 1u);
  PoolFmr* g = pool->map_phys(pages(0, 2), 0x400000).value();
  EXPECT_EQ(pool->stats().cache_hits, 0u) << "no hits across a synchronous unmap";
  ASSERT_TRUE(pool->unmap(g));
}

TEST_F(FmrPoolTest, RemapsGoDirtyAndTheWorkerReleasesOneBatch) {
  std::atomic<int> flush_calls{0};
  auto pool = make({.pool_size = 4, .dirty_watermark = 4, .flush_function = [&] { ++flush_calls; },
                    .cache = false, .max_remaps = 2});
  const auto s0 = syncs();
  std::vector<std::uint32_t> keys;
  for (int i = 0; i < 7; ++i) {  // FMRs 0..3 once, then 0..2 a second time
    PoolFmr* f = pool->map_phys(pages(i, 1), std::uint64_t(i) << 20).value();
    keys.push_back(f->rkey());
    ASSERT_TRUE(pool->unmap(f));
  }
  EXPECT_EQ(pool->stats().dirty, 3u) << "three FMRs reached max_remaps";
  EXPECT_EQ(pool->stats().flushes, 0u) << "below the watermark";
  EXPECT_TRUE(translates(keys[6], 6u << 20)) << "dirty but not yet released: still valid";
  PoolFmr* f = pool->map_phys(pages(7, 1), 7u << 20).value();
  keys.push_back(f->rkey());
  ASSERT_TRUE(pool->unmap(f));  // the fourth dirty FMR: the watermark
  ASSERT_TRUE(test::eventually([&] {
    const FmrPoolStats s = pool->stats();
    return s.flushes == 1 && s.free == 4;
  }));
  EXPECT_EQ(syncs(), s0 + 1) << "ONE sync for the whole batch";
  EXPECT_EQ(pool->stats().fmrs_flushed, 4u);
  EXPECT_EQ(pool->stats().fmrs_per_flush(), 4.0);
  for (int i = 4; i < 8; ++i) EXPECT_FALSE(translates(keys[i], std::uint64_t(i) << 20)) << i;
  EXPECT_TRUE(test::eventually([&] { return flush_calls.load() == 1; }));
  // Released FMRs start over with remap_count 0.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool->unmap(pool->map_phys(pages(i, 1), 0).value()));
  EXPECT_EQ(pool->stats().dirty, 0u);
}

TEST_F(FmrPoolTest, EagainWhenNoFmrIsFree) {
  auto pool = make({.pool_size = 2, .dirty_watermark = 8, .cache = false, .max_remaps = 1});
  PoolFmr* a = pool->map_phys(pages(0, 1), 0).value();
  PoolFmr* b = pool->map_phys(pages(1, 1), 0).value();
  auto r = pool->map_phys(pages(2, 1), 0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EAGAIN) << "all in use";
  ASSERT_TRUE(pool->unmap(a));
  ASSERT_TRUE(pool->unmap(b));
  EXPECT_EQ(pool->map_phys(pages(2, 1), 0).error().code, EAGAIN) << "all dirty, below the watermark";
  pool->flush();
  PoolFmr* c = pool->map_phys(pages(2, 1), 0).value();
  ASSERT_TRUE(pool->unmap(c));
}

TEST_F(FmrPoolTest, FlushWaitsForTheBatchAndLeavesFmrsInUseAlone) {
  auto pool = make({.pool_size = 4});
  PoolFmr* held = pool->map_phys(pages(0, 1), 0).value();
  PoolFmr* released = pool->map_phys(pages(1, 1), 0x10000).value();
  const std::uint32_t released_key = released->rkey();
  ASSERT_TRUE(pool->unmap(released));
  pool->flush();
  // flush returns only after the worker's batch: no waiting needed here.
  EXPECT_EQ(pool->stats().flushes, 1u);
  EXPECT_FALSE(translates(released_key, 0x10000));
  EXPECT_TRUE(translates(held)) << "FMRs in use are not flushed";
  pool->flush();
  EXPECT_EQ(pool->stats().flushes, 1u) << "an empty batch syncs nothing";
  ASSERT_TRUE(pool->unmap(held));
}

TEST_F(FmrPoolTest, DestroyUnmapsEverything) {
  auto pool = make({.pool_size = 3});
  PoolFmr* held = pool->map_phys(pages(0, 1), 0).value();
  PoolFmr* lazy = pool->map_phys(pages(1, 1), 0x10000).value();
  const std::uint32_t k1 = held->rkey(), k2 = lazy->rkey();
  ASSERT_TRUE(pool->unmap(lazy));
  pool.reset();
  EXPECT_FALSE(translates(k1, 0));
  EXPECT_FALSE(translates(k2, 0x10000));
  EXPECT_EQ(pd_.usecnt(), 0);
}

TEST_F(FmrPoolTest, ManyThreadsMapAndUnmap) {
  auto pool = make({.pool_size = 8, .dirty_watermark = 2, .max_remaps = 4});
  constexpr int kThreads = 4, kIters = 3000;
  std::atomic<int> bad{0};
  std::atomic<std::uint64_t> eagain{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        // A few page lists shared by all threads (hits), some private (misses).
        const std::size_t first = (i % 3 == 0) ? std::size_t(16 + t * 8 + i % 8) : std::size_t(i % 4);
        const std::uint64_t iova = std::uint64_t(first) << 20;
        auto r = pool->map_phys(pages(first, 2), iova);
        if (!r) {
          if (r.error().code != EAGAIN) bad.fetch_add(1);
          eagain.fetch_add(1);
          std::this_thread::yield();
          continue;
        }
        PoolFmr* f = *r;
        if (f->iova() != iova || f->length() != 2 * 4096 || !translates(f)) bad.fetch_add(1);
        if (!pool->unmap(f)) bad.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  pool->flush();
  const auto s = pool->stats();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(s.maps, s.unmaps);
  EXPECT_EQ(s.maps, s.cache_hits + s.cache_misses);
  EXPECT_EQ(s.maps + eagain.load(), std::uint64_t(kThreads) * kIters);
  EXPECT_GT(s.cache_hits, 0u);
  EXPECT_GT(s.flushes, 0u);
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(s.free, 8u);
}

}  // namespace
}  // namespace srdma
