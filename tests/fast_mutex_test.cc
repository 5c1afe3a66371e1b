// FastMutex: mutual exclusion, and no lost wake-up when the unlock is a
// plain store (waiters that went to sleep are always woken).
#include "hca/fast_mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace srdma::hca {
namespace {

TEST(FastMutex, TryLockFailsWhileHeldAndSucceedsAfter) {
  FastMutex mu;
  ASSERT_TRUE(mu.try_lock());
  std::thread other([&] { EXPECT_FALSE(mu.try_lock()); });
  other.join();
  mu.unlock();
  std::thread again([&] {
    EXPECT_TRUE(mu.try_lock());
    mu.unlock();
  });
  again.join();
}

// `threads` threads each increment a plain counter `iters` times under the
// lock (yielding while holding it every `yield_every`, if non-zero) and
// return the total: any two holders at once lose an increment (and
// ThreadSanitizer reports the race).
std::uint64_t count_under_lock(int threads, int iters, int yield_every) {
  FastMutex mu;
  std::uint64_t counter = 0;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < iters; ++i) {
        std::lock_guard lock(mu);
        ++counter;
        if (yield_every != 0 && i % yield_every == 0) std::this_thread::yield();  // preempted while holding
      }
    });
  for (auto& t : ts) t.join();
  return counter;
}

TEST(FastMutex, CountsExactlyUnderContention) { EXPECT_EQ(count_under_lock(4, 50000, 0), 4u * 50000); }

TEST(FastMutex, SleepersAreWokenByEveryHandoff) {
  // Holders keep the lock long enough that waiters stop spinning and sleep;
  // a lost wake-up leaves a thread asleep on a free lock and the join below
  // never returns (ctest's timeout catches it).
  FastMutex mu;
  std::atomic<int> inside{0};
  int rounds_done = 0;
  constexpr int kThreads = 4, kRounds = 300;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::lock_guard lock(mu);
        EXPECT_EQ(inside.fetch_add(1), 0);
        std::this_thread::sleep_for(std::chrono::microseconds(20));
        ++rounds_done;
        inside.fetch_sub(1);
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(rounds_done, kThreads * kRounds);
}

TEST(FastMutex, ShortHoldsWithManyThreadsNeverStrandAWaiter) {
  // Short critical sections and more threads than cores: unlocks race the
  // waiters' announcement (the Dekker pair this lock relies on) many times.
  EXPECT_EQ(count_under_lock(8, 20000, 64), 8u * 20000);
}

}  // namespace
}  // namespace srdma::hca
