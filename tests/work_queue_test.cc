#include "core/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "wait.h"

namespace srdma::core {
namespace {

using namespace std::chrono_literals;

using test::eventually;

TEST(WorkQueue, AKeyIsPendingAtMostOnce) {
  WorkQueue wq(1, -1);
  std::promise<void> release;
  auto gate = release.get_future().share();
  std::atomic<int> runs{0};
  int blocker = 0, key = 0;
  // Occupy the only worker so that what follows stays pending.
  ASSERT_TRUE(wq.queue(&blocker, [gate] { gate.wait(); }));
  EXPECT_TRUE(wq.queue(&key, [&] { runs.fetch_add(1); }));
  EXPECT_FALSE(wq.queue(&key, [&] { runs.fetch_add(100); }));
  release.set_value();
  wq.drain();
  EXPECT_EQ(runs.load(), 1);
  // Once it ran, the key can be queued again.
  EXPECT_TRUE(wq.queue(&key, [&] { runs.fetch_add(1); }));
  ASSERT_TRUE(eventually([&] { return runs.load() == 2; }));
}

// Four workers, one key queued from outside and by itself: never two runs at
// once (what lets a CQ's processing keep unlocked state such as DIM), and
// nothing queued is lost.
TEST(WorkQueue, AKeyNeverRunsOnTwoThreadsAtOnce) {
  WorkQueue wq(4, -1);
  int key = 0;
  std::atomic<int> inside{0}, overlaps{0}, runs{0}, requeues_left{2000};
  std::function<void()> item = [&] {
    if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
    std::this_thread::yield();
    runs.fetch_add(1);
    inside.fetch_sub(1);
    if (requeues_left.fetch_sub(1) > 0) wq.queue(&key, item);  // pending while it runs: allowed
  };
  std::vector<std::thread> producers;
  for (int t = 0; t < 3; ++t)
    producers.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) wq.queue(&key, item);
    });
  for (auto& p : producers) p.join();
  ASSERT_TRUE(eventually([&] { return requeues_left.load() <= 0 && inside.load() == 0; }));
  wq.cancel(&key);
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_GE(runs.load(), 2000);  // each run spends one requeue until none is left
}

TEST(WorkQueue, DifferentKeysRunInParallel) {
  WorkQueue wq(2, -1);
  int a = 0, b = 0;
  std::atomic<int> arrived{0};
  std::atomic<bool> both{false};
  auto meet = [&] {
    arrived.fetch_add(1);
    // Only true if the other key's item runs at the same time.
    if (eventually([&] { return arrived.load() == 2; }, 5s)) both.store(true);
  };
  wq.queue(&a, meet);
  wq.queue(&b, meet);
  ASSERT_TRUE(eventually([&] { return arrived.load() == 2; }));
  EXPECT_TRUE(eventually([&] { return both.load(); }));
}

// An item of a running key waits, and runs right after, even with every
// other worker asleep.
TEST(WorkQueue, AnItemQueuedWhileItsKeyRunsRunsAfterIt) {
  WorkQueue wq(3, -1);
  int key = 0;
  std::promise<void> release;
  auto gate = release.get_future().share();
  std::atomic<int> order{0}, first{-1}, second{-1};
  std::atomic<bool> started{false}, probed{false};
  int other = 0;
  ASSERT_TRUE(wq.queue(&key, [&, gate] {
    started.store(true);
    gate.wait();
    first.store(order.fetch_add(1));
  }));
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  ASSERT_TRUE(wq.queue(&key, [&] { second.store(order.fetch_add(1)); }));
  // Items start in queue order among the runnable ones: once an idle worker
  // ran the probe queued behind `second`, it had passed `second` over.
  ASSERT_TRUE(wq.queue(&other, [&] { probed.store(true); }));
  ASSERT_TRUE(eventually([&] { return probed.load(); }));
  EXPECT_EQ(second.load(), -1);  // not started on an idle worker
  release.set_value();
  ASSERT_TRUE(eventually([&] { return second.load() >= 0; }));
  EXPECT_EQ(first.load(), 0);
  EXPECT_EQ(second.load(), 1);
}

TEST(WorkQueue, CancelDropsThePendingItemAndWaitsForTheRunningOne) {
  WorkQueue wq(2, -1);
  int key = 0;
  std::atomic<bool> started{false}, finished{false};
  std::atomic<int> later{0};
  ASSERT_TRUE(wq.queue(&key, [&] {
    started.store(true);
    std::this_thread::sleep_for(30ms);
    finished.store(true);
  }));
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  ASSERT_TRUE(wq.queue(&key, [&] { later.fetch_add(1); }));
  wq.cancel(&key);
  EXPECT_TRUE(finished.load());
  wq.drain();  // would run `later` had cancel() left it queued
  EXPECT_EQ(later.load(), 0);
}

TEST(WorkQueue, DrainWaitsForEveryItemQueuedBeforeIt) {
  WorkQueue wq(3, -1);
  constexpr int kKeys = 64;
  std::vector<int> keys(kKeys);
  std::atomic<int> runs{0};
  for (int& k : keys)
    ASSERT_TRUE(wq.queue(&k, [&] {
      for (int y = 0; y < 50; ++y) std::this_thread::yield();  // takes a while
      runs.fetch_add(1);
    }));
  wq.drain();
  EXPECT_EQ(runs.load(), kKeys);
  wq.drain();  // nothing queued: returns at once
  EXPECT_EQ(runs.load(), kKeys);
}

TEST(WorkQueue, DrainDoesNotWaitForItemsQueuedDuringIt) {
  // The item queues itself again without end: a drain() that waited for
  // those would never return (the ctest timeout).
  WorkQueue wq(2, -1);
  int key = 0;
  std::atomic<bool> stop{false};
  std::atomic<int> runs{0};
  std::function<void()> item = [&] {
    runs.fetch_add(1);
    if (!stop.load()) (void)wq.queue(&key, item);
  };
  ASSERT_TRUE(wq.queue(&key, item));
  wq.drain();
  EXPECT_GE(runs.load(), 1);
  stop.store(true);
  // The run in progress may have read `stop` before the store and queued
  // one more before it returned, i.e. before the first drain() returned;
  // that one sees `stop`. So two drains leave nothing.
  wq.drain();
  wq.drain();  // the run that sees `stop` queues nothing more
  const int final_runs = runs.load();
  wq.drain();
  EXPECT_EQ(runs.load(), final_runs);
}

TEST(WorkQueue, DrainFromAnItemWaitsForTheOthersNotItself) {
  WorkQueue wq(2, -1);
  int slow_key = 0, drain_key = 0;
  std::atomic<bool> slow_started{false}, release{false}, slow_done{false};
  std::atomic<int> slow_done_at_drain{-1};
  ASSERT_TRUE(wq.queue(&slow_key, [&] {
    slow_started.store(true);
    while (!release.load()) std::this_thread::yield();
    slow_done.store(true);
  }));
  ASSERT_TRUE(eventually([&] { return slow_started.load(); }));
  ASSERT_TRUE(wq.queue(&drain_key, [&] {
    wq.drain();  // would deadlock waiting for itself
    slow_done_at_drain.store(slow_done.load() ? 1 : 0);
  }));
  release.store(true);
  wq.drain();
  EXPECT_EQ(slow_done_at_drain.load(), 1);
}

}  // namespace
}  // namespace srdma::core
