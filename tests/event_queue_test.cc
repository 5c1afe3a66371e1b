#include "hca/event_queue.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "hca/async_events.h"
#include "hca/cq.h"
#include "wait.h"

namespace srdma::hca {
namespace {

using namespace std::chrono_literals;

using test::eventually;

Wc wc_with(std::uint64_t wr_id) {
  Wc wc;
  wc.wr_id = wr_id;
  return wc;
}

TEST(EventQueue, HandlersRunOnTheVectorThread) {
  EventQueue eq(3);
  EXPECT_EQ(eq.vector(), 3u);
  EXPECT_FALSE(eq.on_thread());
  std::atomic<bool> on_vector{false};
  std::atomic<bool> done{false};
  std::thread::id handler_thread;
  Cq cq(1, 4, &eq, 3, nullptr);
  cq.set_event_handler([&](Cq&) {
    handler_thread = std::this_thread::get_id();
    on_vector.store(eq.on_thread());
    done.store(true);
  });
  ASSERT_EQ(cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
  ASSERT_TRUE(cq.push(wc_with(1), false));
  ASSERT_TRUE(eventually([&] { return done.load(); }));
  EXPECT_TRUE(on_vector.load());
  EXPECT_NE(handler_thread, std::this_thread::get_id());
  // The vector counts once the handler returned.
  ASSERT_TRUE(eventually([&] { return eq.events() == 1; }));
  EXPECT_EQ(eq.interrupts(), 1u);
  EXPECT_EQ(eq.cqes(), 1u);
}

TEST(EventQueue, PinsToACpuOfTheProcessWherePossible) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  for (std::uint32_t v = 0; v < 4; ++v) {
    EventQueue eq(v);
    const int cpu = eq.cpu();
    if (cpu >= 0) {
      EXPECT_TRUE(CPU_ISSET(cpu, &allowed)) << "vector " << v << " cpu " << cpu;
    }
  }
  // With more than one CPU, vectors 0 and 1 land on different CPUs.
  if (CPU_COUNT(&allowed) > 1) {
    EventQueue a(0), b(1);
    if (a.cpu() >= 0 && b.cpu() >= 0) {
      EXPECT_NE(a.cpu(), b.cpu());
    }
  }
}

TEST(EventQueue, ManyCqsOnOneVectorEachGetTheirEvent) {
  EventQueue eq(0);
  constexpr int kCqs = 32;
  std::vector<std::unique_ptr<Cq>> cqs;
  std::vector<std::atomic<int>> hits(kCqs);
  for (int i = 0; i < kCqs; ++i) {
    cqs.push_back(std::make_unique<Cq>(i, 4, &eq, 0, nullptr));
    cqs.back()->set_event_handler([&hits, i](Cq&) { hits[i].fetch_add(1); });
    ASSERT_EQ(cqs.back()->req_notify(NOTIFY_NEXT_COMP).value(), 0);
  }
  for (auto& cq : cqs) ASSERT_TRUE(cq->push(wc_with(0), false));
  ASSERT_TRUE(eventually([&] { return eq.events() == kCqs; }));
  for (int i = 0; i < kCqs; ++i) EXPECT_EQ(hits[i].load(), 1) << i;
  // Fewer interrupts than events is the point of a shared vector; at least one.
  EXPECT_GE(eq.interrupts(), 1u);
  EXPECT_LE(eq.interrupts(), static_cast<std::uint64_t>(kCqs));
}

TEST(EventQueue, CancelWaitsForTheHandlerToReturn) {
  EventQueue eq(0);
  auto cq = std::make_unique<Cq>(1, 4, &eq, 0, nullptr);
  std::atomic<bool> entered{false}, release{false}, finished{false};
  cq->set_event_handler([&](Cq&) {
    entered.store(true);
    while (!release.load()) std::this_thread::sleep_for(100us);
    finished.store(true);
  });
  ASSERT_EQ(cq->req_notify(NOTIFY_NEXT_COMP).value(), 0);
  ASSERT_TRUE(cq->push(wc_with(1), false));
  ASSERT_TRUE(eventually([&] { return entered.load(); }));

  std::atomic<bool> cancelled{false};
  std::atomic<bool> finished_when_cancelled{false};
  std::thread destroyer([&] {
    eq.cancel(cq.get());
    finished_when_cancelled.store(finished.load());
    cancelled.store(true);
  });
  release.store(true);
  destroyer.join();
  EXPECT_TRUE(cancelled.load());
  EXPECT_TRUE(finished_when_cancelled.load());
  cq.reset();  // safe now (its destructor cancels again)
}

TEST(EventQueue, DestroyingACqDuringItsHandlerWaits) {
  EventQueue eq(0);
  auto cq = std::make_unique<Cq>(1, 4, &eq, 0, nullptr);
  std::atomic<bool> entered{false}, release{false};
  std::atomic<int> touched{0};
  cq->set_event_handler([&](Cq& c) {
    entered.store(true);
    while (!release.load()) std::this_thread::sleep_for(100us);
    touched.fetch_add(static_cast<int>(c.cqn()));  // the CQ is still alive here
  });
  ASSERT_EQ(cq->req_notify(NOTIFY_NEXT_COMP).value(), 0);
  ASSERT_TRUE(cq->push(wc_with(1), false));
  ASSERT_TRUE(eventually([&] { return entered.load(); }));
  std::thread releaser([&] {
    std::this_thread::sleep_for(10ms);
    release.store(true);
  });
  cq.reset();  // blocks until the handler returned (ASan checks the rest)
  EXPECT_EQ(touched.load(), 1);
  releaser.join();
}

TEST(EventQueue, DrainWaitsForTheHandlerOfAnEarlierEvent) {
  EventQueue eq(0);
  Cq cq(1, 4, &eq, 0, nullptr);
  std::atomic<bool> entered{false}, release{false}, finished{false};
  cq.set_event_handler([&](Cq&) {
    entered.store(true);
    while (!release.load()) std::this_thread::yield();
    finished.store(true);
  });
  ASSERT_EQ(cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
  ASSERT_TRUE(cq.push(wc_with(1), false));
  std::atomic<bool> finished_when_drained{false};
  std::thread drainer([&] {
    eq.drain();
    finished_when_drained.store(finished.load());
  });
  ASSERT_TRUE(eventually([&] { return entered.load(); }));
  release.store(true);
  drainer.join();
  EXPECT_TRUE(finished_when_drained.load());
  EXPECT_EQ(eq.events(), 1u);  // counted before drain() returns
}

TEST(EventQueue, DrainCoversEveryEarlierEventAcrossCqs) {
  EventQueue eq(0);
  constexpr int kCqs = 16;
  std::vector<std::unique_ptr<Cq>> cqs;
  std::atomic<int> handled{0};
  for (int i = 0; i < kCqs; ++i) {
    cqs.push_back(std::make_unique<Cq>(i, 4, &eq, 0, nullptr));
    cqs.back()->set_event_handler([&](Cq&) {
      for (int y = 0; y < 50; ++y) std::this_thread::yield();  // takes a while
      handled.fetch_add(1);
    });
    ASSERT_EQ(cqs.back()->req_notify(NOTIFY_NEXT_COMP).value(), 0);
  }
  for (auto& cq : cqs) ASSERT_TRUE(cq->push(wc_with(0), false));
  eq.drain();
  EXPECT_EQ(handled.load(), kCqs);
  EXPECT_EQ(eq.events(), static_cast<std::uint64_t>(kCqs));
}

TEST(EventQueue, DrainDoesNotWaitForEventsScheduledDuringIt) {
  // The handler re-arms and raises the next event itself, without end: a
  // drain() that waited for those would never return (the ctest timeout).
  EventQueue eq(0);
  std::atomic<bool> stop{false};
  std::atomic<int> handled{0};
  Cq cq(1, 1 << 10, &eq, 0, nullptr);
  cq.set_event_handler([&](Cq& c) {
    handled.fetch_add(1);
    std::array<Wc, 4> out;
    while (c.poll(out) > 0) {
    }
    if (stop.load()) return;
    (void)c.req_notify(NOTIFY_NEXT_COMP);
    (void)c.push(wc_with(2), false);
  });
  ASSERT_EQ(cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
  ASSERT_TRUE(cq.push(wc_with(1), false));
  eq.drain();
  EXPECT_GE(handled.load(), 1);
  stop.store(true);
  // The run in progress may have read `stop` before the store and queued
  // one more before it returned, i.e. before the first drain() returned;
  // that one sees `stop`. So two drains leave nothing.
  eq.drain();
  eq.drain();  // the last self-raised event sees `stop`
  const int final_count = handled.load();
  eq.drain();
  EXPECT_EQ(handled.load(), final_count);
}

TEST(EventQueue, DrainWithKAllWaitsOutATimerNotYetDue) {
  EventQueue eq(0);
  std::atomic<int> handled{0};
  Cq cq(1, 4, &eq, 0, nullptr);
  cq.set_event_handler([&](Cq&) { handled.fetch_add(1); });
  ASSERT_TRUE(cq.modify(0, 20000).has_value());  // 20 ms
  ASSERT_EQ(cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
  const auto t0 = EventQueue::Clock::now();
  ASSERT_TRUE(cq.push(wc_with(1), false));  // no count trigger: the timer decides
  eq.drain(EventQueue::Timers::kAll);
  EXPECT_EQ(handled.load(), 1);
  EXPECT_GE(EventQueue::Clock::now() - t0, 20ms);
  // Nothing is left: a second drain returns with nothing more delivered.
  eq.drain(EventQueue::Timers::kAll);
  EXPECT_EQ(handled.load(), 1);
}

TEST(EventQueue, DrainFromAHandlerDoesNotDeadlock) {
  EventQueue eq(0);
  std::atomic<bool> returned{false};
  Cq cq(1, 4, &eq, 0, nullptr);
  cq.set_event_handler([&](Cq&) {
    eq.drain();
    returned.store(true);
  });
  ASSERT_EQ(cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
  ASSERT_TRUE(cq.push(wc_with(1), false));
  eq.drain();
  EXPECT_TRUE(returned.load());
}

TEST(EventQueue, CancelDropsPendingTimers) {
  EventQueue eq(0);
  std::atomic<int> handled{0};
  {
    Cq cq(1, 4, &eq, 0, nullptr);
    cq.set_event_handler([&](Cq&) { handled.fetch_add(1); });
    ASSERT_TRUE(cq.modify(0, 20000).has_value());
    ASSERT_EQ(cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
    ASSERT_TRUE(cq.push(wc_with(1), false));  // a 20 ms timer is pending
    eq.cancel(&cq);
  }  // destroyed with the deadline still ahead
  // Waits out every timer still set: the cancelled one would fire on a dead
  // CQ here.
  eq.drain(EventQueue::Timers::kAll);
  EXPECT_EQ(handled.load(), 0);
  EXPECT_EQ(eq.events(), 0u);
}

TEST(EventQueue, CancelFromTheHandlerItselfDoesNotDeadlock) {
  EventQueue eq(0);
  std::atomic<bool> returned{false};
  Cq cq(1, 4, &eq, 0, nullptr);
  cq.set_event_handler([&](Cq& c) {
    eq.cancel(&c);  // on the vector's own thread: must not wait for itself
    returned.store(true);
  });
  ASSERT_EQ(cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
  ASSERT_TRUE(cq.push(wc_with(1), false));
  ASSERT_TRUE(eventually([&] { return returned.load(); }));
}

TEST(EventQueue, CreateArmPushDestroyChurn) {
  // CQs die while their events may be queued or running: nothing may touch
  // a destroyed CQ (ASan) or race (TSan).
  EventQueue eq(0);
  std::atomic<int> handled{0};
  for (int round = 0; round < 300; ++round) {
    Cq cq(static_cast<std::uint32_t>(round), 8, &eq, 0, nullptr);
    cq.set_event_handler([&](Cq& c) {
      handled.fetch_add(1);
      (void)c.req_notify(NOTIFY_NEXT_COMP);
    });
    ASSERT_TRUE(cq.modify(0, static_cast<std::uint16_t>(round % 3 == 0 ? 50 : 0)).has_value());
    ASSERT_EQ(cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(cq.push(wc_with(i), false));
  }
  EXPECT_LE(handled.load(), 900);
}

TEST(EventQueue, StopsWithEventsPending) {
  std::atomic<int> handled{0};
  auto eq = std::make_unique<EventQueue>(0);
  {
    Cq cq(1, 4, eq.get(), 0, nullptr);
    cq.set_event_handler([&](Cq&) { handled.fetch_add(1); });
    ASSERT_TRUE(cq.modify(0, 60000).has_value());
    ASSERT_EQ(cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
    ASSERT_TRUE(cq.push(wc_with(1), false));
  }
  eq.reset();  // joins promptly despite the (cancelled) 60 ms deadline
  EXPECT_EQ(handled.load(), 0);
}

// ---- Asynchronous events ----------------------------------------------------

TEST(AsyncEvents, Names) {
  EXPECT_EQ(async_event_str(AsyncEventType::kCqErr), "CQ error");
  EXPECT_EQ(async_event_str(AsyncEventType::kQpFatal), "QP fatal error");
  EXPECT_EQ(async_event_str(AsyncEventType::kQpLastWqeReached), "last WQE reached");
  EXPECT_EQ(async_event_str(AsyncEventType::kPortActive), "port active");
  EXPECT_EQ(async_event_str(AsyncEventType::kDeviceFatal), "device fatal error");
}

TEST(AsyncEvents, HandlerRunsOnItsOwnThreadInOrder) {
  AsyncEventDispatcher d;
  std::vector<AsyncEvent> seen;  // written by the handler, read after flush
  std::thread::id handler_thread;
  d.set_handler([&](const AsyncEvent& e) {
    handler_thread = std::this_thread::get_id();
    seen.push_back(e);
  });
  int ctx = 0;
  d.raise({AsyncEventType::kPortActive});
  d.raise({AsyncEventType::kCqErr, 17, 0, &ctx});
  d.raise({AsyncEventType::kQpFatal, 0, 0x42, nullptr});
  d.raise({AsyncEventType::kQpLastWqeReached, 0, 0x43, nullptr});
  d.raise({AsyncEventType::kDeviceFatal});
  d.flush();
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_NE(handler_thread, std::this_thread::get_id());
  EXPECT_EQ(seen[0].type, AsyncEventType::kPortActive);
  EXPECT_EQ(seen[1].type, AsyncEventType::kCqErr);
  EXPECT_EQ(seen[1].cqn, 17u);
  EXPECT_EQ(seen[1].context, &ctx);
  EXPECT_EQ(seen[2].qpn, 0x42u);
  EXPECT_EQ(seen[3].type, AsyncEventType::kQpLastWqeReached);
  EXPECT_EQ(seen[4].type, AsyncEventType::kDeviceFatal);
  EXPECT_EQ(d.count(AsyncEventType::kCqErr), 1u);
  EXPECT_EQ(d.count(AsyncEventType::kQpFatal), 1u);
  EXPECT_EQ(d.count(AsyncEventType::kPortActive), 1u);
}

TEST(AsyncEvents, WithoutHandlerEventsAreCountedAndDropped) {
  AsyncEventDispatcher d;
  d.raise({AsyncEventType::kQpFatal, 0, 1, nullptr});
  d.raise({AsyncEventType::kQpFatal, 0, 2, nullptr});
  d.flush();
  EXPECT_EQ(d.count(AsyncEventType::kQpFatal), 2u);
  EXPECT_EQ(d.count(AsyncEventType::kCqErr), 0u);
  d.flush();  // nothing pending: returns at once
}

TEST(AsyncEvents, HandlerMayRaiseAndFlushWithoutDeadlock) {
  AsyncEventDispatcher d;
  std::atomic<int> handled{0};
  d.set_handler([&](const AsyncEvent& e) {
    if (e.type == AsyncEventType::kCqErr) {
      // What a device does on CQ error: the QPs on the CQ go fatal.
      d.raise({AsyncEventType::kQpFatal, 0, 5, nullptr});
      d.flush();  // from the handler: returns at once
    }
    handled.fetch_add(1);
  });
  d.raise({AsyncEventType::kCqErr, 3, 0, nullptr});
  ASSERT_TRUE(eventually([&] { return handled.load() == 2; }));
  d.flush();
  EXPECT_EQ(d.count(AsyncEventType::kQpFatal), 1u);
}

TEST(AsyncEvents, ManyRaisersFlushSeesAll) {
  AsyncEventDispatcher d;
  std::atomic<int> handled{0};
  d.set_handler([&](const AsyncEvent&) { handled.fetch_add(1); });
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 500; ++i) d.raise({AsyncEventType::kQpLastWqeReached});
    });
  for (auto& t : ts) t.join();
  d.flush();
  EXPECT_EQ(handled.load(), 2000);
  EXPECT_EQ(d.count(AsyncEventType::kQpLastWqeReached), 2000u);
}

TEST(AsyncEvents, DestructorHandlesWhatIsQueued) {
  std::atomic<int> handled{0};
  {
    AsyncEventDispatcher d;
    d.set_handler([&](const AsyncEvent&) {
      std::this_thread::sleep_for(1ms);
      handled.fetch_add(1);
    });
    for (int i = 0; i < 10; ++i) d.raise({AsyncEventType::kPortActive});
  }
  EXPECT_EQ(handled.load(), 10);
}

// The wiring the device uses: a CQ overrun raises a CQ-error async event.
TEST(AsyncEvents, CqOverrunRaisesCqErrorOnce) {
  AsyncEventDispatcher d;
  std::vector<AsyncEvent> seen;
  d.set_handler([&](const AsyncEvent& e) { seen.push_back(e); });
  int ctx = 0;
  Cq cq(11, 2, nullptr, 0, &ctx);
  cq.set_overrun_handler([&](Cq& c) {
    d.raise({AsyncEventType::kCqErr, c.cqn(), 0, c.context()});
  });
  ASSERT_TRUE(cq.push(wc_with(1), false));
  ASSERT_TRUE(cq.push(wc_with(2), false));
  EXPECT_FALSE(cq.push(wc_with(3), false));
  EXPECT_FALSE(cq.push(wc_with(4), false));
  d.flush();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].type, AsyncEventType::kCqErr);
  EXPECT_EQ(seen[0].cqn, 11u);
  EXPECT_EQ(seen[0].context, &ctx);
  EXPECT_EQ(d.count(AsyncEventType::kCqErr), 1u);
}

}  // namespace
}  // namespace srdma::hca
