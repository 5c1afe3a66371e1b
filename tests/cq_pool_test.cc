// The shared CQ pool's policy: least used, growth exactly once, round robin
// per pool, trim, and the refusals.
#include "core/cq_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace srdma::core {
namespace {

struct CountingBackend final : CqPool::Backend {
  std::atomic<int> created{0}, destroyed{0};
  std::atomic<bool> fail{false};
  Result<void*> create_cq(std::uint32_t, std::uint32_t, PollContext) override {
    if (fail) return make_error(ENOMEM, "CQ table exhausted");
    std::this_thread::yield();  // widen the window for racing misses
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(++created));
  }
  void destroy_cq(void*) override { ++destroyed; }
};

TEST(CqPool, GrowsOneCqPerVectorSizedAtLeast4096) {
  CountingBackend b;
  CqPool pool(b, 4, 2, 65535);  // n = min(4 vectors, 2 CPUs) = 2
  auto cq = pool.get(100, 5, PollContext::kSoftirq).value();
  EXPECT_EQ(cq.vector, 1u);  // 5 mod 2
  EXPECT_EQ(cq.cqe, 4096u);
  EXPECT_EQ(cq.cqe_used, 100u);
  EXPECT_EQ(b.created.load(), 2);
  auto big = pool.get(10000, 0, PollContext::kSoftirq).value();
  EXPECT_EQ(big.cqe, 10000u) << "max(nr_cqe, 4096)";
  CqPool small(b, 1, 1, 1000);
  EXPECT_EQ(small.get(10, 0, PollContext::kWorkqueue).value().cqe, 1000u) << "min(max_cqe, ...)";
}

TEST(CqPool, PicksTheLeastUsedAndTiesGoToTheFirstCreated) {
  CountingBackend b;
  CqPool pool(b, 1, 1, 65535);
  auto a = pool.get(4000, 0, PollContext::kSoftirq).value();  // CQ 0
  auto c = pool.get(1000, 0, PollContext::kSoftirq).value();  // no room in 0: CQ 1
  EXPECT_EQ(a.id, 0u);
  EXPECT_EQ(c.id, 1u);
  ASSERT_TRUE(pool.put(0, 3950));  // CQ 0 now has 50 used, CQ 1 has 1000
  EXPECT_EQ(pool.get(10, 0, PollContext::kSoftirq).value().id, 0u) << "least used, not first fit";
  ASSERT_TRUE(pool.put(0, 60));
  ASSERT_TRUE(pool.put(1, 1000));
  EXPECT_EQ(pool.get(10, 0, PollContext::kSoftirq).value().id, 0u) << "a tie goes to the first created";
  // Other poll contexts have their own CQs.
  EXPECT_EQ(pool.get(10, 0, PollContext::kWorkqueue).value().id, 2u);
}

TEST(CqPool, RoundRobinIsPerPoolAndStartsAtZero) {
  CountingBackend b;
  CqPool p1(b, 3, 3, 65535), p2(b, 3, 3, 65535);
  EXPECT_EQ(p1.get(1, -1, PollContext::kSoftirq)->vector, 0u);
  EXPECT_EQ(p1.get(1, -1, PollContext::kSoftirq)->vector, 1u);
  EXPECT_EQ(p2.get(1, -7, PollContext::kSoftirq)->vector, 0u) << "another device starts at 0 too";
  EXPECT_EQ(p1.get(1, -1, PollContext::kSoftirq)->vector, 2u);
  EXPECT_EQ(p1.get(1, -1, PollContext::kSoftirq)->vector, 0u);
}

TEST(CqPool, RefusalsChangeNothing) {
  CountingBackend b;
  CqPool pool(b, 2, 2, 8192);
  EXPECT_EQ(pool.get(0, 0, PollContext::kSoftirq).error().code, EINVAL);
  EXPECT_EQ(pool.get(8193, 0, PollContext::kSoftirq).error().code, EINVAL);
  EXPECT_EQ(pool.get(1, 0, PollContext::kDirect).error().code, EINVAL);
  EXPECT_EQ(b.created.load(), 0);
  auto cq = pool.get(10, 0, PollContext::kSoftirq).value();
  EXPECT_EQ(pool.put(cq.id, 11).error().code, EINVAL);
  EXPECT_EQ(pool.put(99, 1).error().code, EINVAL);
  EXPECT_EQ(pool.snapshot()[0].cqe_used, 10u);
  EXPECT_EQ(pool.destroy(cq.id).error().code, EOPNOTSUPP);
  EXPECT_EQ(pool.resize(cq.id, 100).error().code, EOPNOTSUPP);
  EXPECT_EQ(pool.destroy(99).error().code, EINVAL);
  CqPool none(b, 0, 4, 8192);
  EXPECT_EQ(none.get(1, 0, PollContext::kSoftirq).error().code, EINVAL) << "no vectors: an error, not a crash";
  CqPool no_cpus(b, 4, 0, 8192);
  EXPECT_EQ(no_cpus.get(1, -1, PollContext::kSoftirq).error().code, EINVAL);
}

TEST(CqPool, FailedGrowthLeavesNothingBehind) {
  CountingBackend b;
  CqPool pool(b, 2, 2, 8192);
  b.fail = true;
  auto r = pool.get(1, 0, PollContext::kSoftirq);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ENOMEM);
  EXPECT_TRUE(pool.snapshot().empty());
}

TEST(CqPool, TrimFreesOnlyIdleCqs) {
  CountingBackend b;
  CqPool pool(b, 2, 2, 65535);
  auto cq = pool.get(10, 0, PollContext::kSoftirq).value();
  EXPECT_EQ(pool.trim(), 1u);  // vector 1's CQ was never used
  EXPECT_EQ(b.destroyed.load(), 1);
  ASSERT_TRUE(pool.put(cq.id, 10));
  EXPECT_EQ(pool.trim(), 1u);
  EXPECT_TRUE(pool.snapshot().empty());
  // Numbers are never reused.
  EXPECT_EQ(pool.get(1, 0, PollContext::kSoftirq).value().id, 2u);
}

TEST(CqPool, ConcurrentMissesGrowExactlyOnce) {
  for (int round = 0; round < 20; ++round) {
    CountingBackend b;
    CqPool pool(b, 2, 2, 65535);
    std::vector<std::thread> threads;
    std::atomic<int> ok{0};
    for (int t = 0; t < 8; ++t)
      threads.emplace_back([&] { ok += pool.get(100, 0, PollContext::kSoftirq).has_value(); });
    for (auto& th : threads) th.join();
    EXPECT_EQ(ok.load(), 8);
    EXPECT_EQ(b.created.load(), 2) << "one CQ per vector, once";
    EXPECT_EQ(pool.snapshot()[0].cqe_used, 800u);
  }
}

TEST(CqPool, ConcurrentGetPutKeepsTheBooks) {
  CountingBackend b;
  CqPool pool(b, 2, 2, 65535);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        auto cq = pool.get(1 + (i % 7), t - 2, PollContext::kWorkqueue);
        ASSERT_TRUE(cq);
        ASSERT_TRUE(pool.put(cq->id, 1 + (i % 7)));
        if (i % 500 == 0) (void)pool.trim();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& cq : pool.snapshot()) EXPECT_EQ(cq.cqe_used, 0u);
}

}  // namespace
}  // namespace srdma::core
