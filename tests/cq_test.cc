#include "hca/cq.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "hca/event_queue.h"
#include "wait.h"

namespace srdma::hca {
namespace {

using namespace std::chrono_literals;

Wc wc_with(std::uint64_t wr_id, WcStatus status = WcStatus::kSuccess) {
  Wc wc;
  wc.wr_id = wr_id;
  wc.status = status;
  return wc;
}

using test::eventually;

// Producers' flow control in the stress tests: one credit per CQE the
// consumer has room for. False once the consumer gave up (`failed`).
bool take_credit(std::atomic<std::uint32_t>& credits, const std::atomic<bool>& failed) {
  std::uint32_t c = credits.load();
  while (c == 0 || !credits.compare_exchange_weak(c, c - 1)) {
    if (c == 0) {
      if (failed.load()) return false;
      std::this_thread::yield();
      c = credits.load();
    }
  }
  return true;
}

// A CQ on its own completion vector, with a handler that counts events.
// A check that no event came follows f.eq.drain(): every event the pushes
// before it raised has been handled by then, so none can still be on its way.
struct Fixture {
  explicit Fixture(std::uint32_t cqe) : cq(7, cqe, &eq, 0, this) {
    cq.set_event_handler([this](Cq&) { handled.fetch_add(1); });
  }
  EventQueue eq{0};
  std::atomic<int> handled{0};
  Cq cq;  // last: destroyed first, while the handler's target still lives
};

TEST(Cq, ReportsWhatItWasCreatedWith) {
  int ctx = 0;
  Cq cq(42, 5, nullptr, 3, &ctx);
  EXPECT_EQ(cq.cqn(), 42u);
  EXPECT_EQ(cq.cqe(), 5u);
  EXPECT_EQ(cq.comp_vector(), 3u);
  EXPECT_EQ(cq.context(), &ctx);
  EXPECT_EQ(cq.waiting(), 0u);
  EXPECT_FALSE(cq.in_error());
  EXPECT_FALSE(cq.armed());
}

TEST(Cq, HoldsExactlyCqeEntries) {
  for (std::uint32_t n : {1u, 2u, 7u, 64u}) {
    Cq cq(1, n, nullptr, 0, nullptr);
    for (std::uint32_t i = 0; i < n; ++i) ASSERT_TRUE(cq.push(wc_with(i), false)) << n;
    EXPECT_EQ(cq.waiting(), n);
    EXPECT_FALSE(cq.push(wc_with(n), false)) << "entry " << n + 1 << " of a " << n << "-entry CQ";
  }
}

TEST(Cq, PollsOldestFirstInBatchesAcrossTheWrap) {
  Cq cq(1, 8, nullptr, 0, nullptr);
  std::uint64_t next_push = 0, next_poll = 0;
  std::array<Wc, 3> batch;
  for (int round = 0; round < 20; ++round) {  // head_ wraps several times
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(cq.push(wc_with(next_push++), false));
    int got;
    while ((got = cq.poll(batch)) > 0) {
      for (int i = 0; i < got; ++i) EXPECT_EQ(batch[i].wr_id, next_poll++);
    }
  }
  EXPECT_EQ(next_poll, next_push);
  EXPECT_EQ(cq.poll(batch), 0);
  EXPECT_EQ(cq.poll(std::span<Wc>()), 0);
  EXPECT_EQ(cq.cqes_written(), next_push);
}

TEST(Cq, PollCopiesEveryField) {
  Cq cq(1, 2, nullptr, 0, nullptr);
  Wc in = wc_with(99, WcStatus::kRemAccessErr);
  in.opcode = WcOpcode::kRecvRdmaWithImm;
  in.byte_len = 4096;
  in.imm_data = 0xdeadbeef;
  in.qp_num = 0x123456;
  in.wc_flags = WC_WITH_IMM;
  in.is_send_cqe = false;
  ASSERT_TRUE(cq.push(in, false));
  Wc out;
  ASSERT_EQ(cq.poll({&out, 1}), 1);
  EXPECT_EQ(out.wr_id, 99u);
  EXPECT_EQ(out.status, WcStatus::kRemAccessErr);
  EXPECT_EQ(out.opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(out.byte_len, 4096u);
  EXPECT_EQ(out.imm_data, 0xdeadbeefu);
  EXPECT_EQ(out.qp_num, 0x123456u);
  EXPECT_EQ(out.wc_flags, static_cast<std::uint32_t>(WC_WITH_IMM));
}

TEST(Cq, OverrunKeepsUnreadCqesAndEntersErrorOnce) {
  Cq cq(9, 4, nullptr, 0, nullptr);
  int overruns = 0;
  std::uint32_t overrun_cqn = 0;
  cq.set_overrun_handler([&](Cq& c) {
    ++overruns;
    overrun_cqn = c.cqn();
    EXPECT_EQ(c.waiting(), 4u);  // runs outside the CQ's lock
  });
  for (std::uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(cq.push(wc_with(i), false));
  EXPECT_FALSE(cq.in_error());
  EXPECT_FALSE(cq.push(wc_with(100), false));  // the overrun
  EXPECT_TRUE(cq.in_error());
  EXPECT_EQ(overruns, 1);
  EXPECT_EQ(overrun_cqn, 9u);
  EXPECT_FALSE(cq.push(wc_with(101), false));  // in error: refused, no second call
  EXPECT_EQ(overruns, 1);
  EXPECT_EQ(cq.cqes_written(), 4u);

  // The unread CQEs survive, in order, and nothing was overwritten.
  std::array<Wc, 8> out;
  ASSERT_EQ(cq.poll(out), 4);
  for (std::uint64_t i = 0; i < 4; ++i) EXPECT_EQ(out[i].wr_id, i);
  EXPECT_EQ(cq.poll(out), 0);
  // Room again, but the error state is sticky.
  EXPECT_FALSE(cq.push(wc_with(102), false));
  EXPECT_TRUE(cq.in_error());
  EXPECT_EQ(overruns, 1);
}

TEST(Cq, OverrunWithoutHandlerStillFails) {
  Cq cq(1, 1, nullptr, 0, nullptr);
  ASSERT_TRUE(cq.push(wc_with(1), false));
  EXPECT_FALSE(cq.push(wc_with(2), false));
  EXPECT_TRUE(cq.in_error());
  Wc out;
  ASSERT_EQ(cq.poll({&out, 1}), 1);
  EXPECT_EQ(out.wr_id, 1u);
}

TEST(Cq, OverrunHandlerCalledOnceUnderConcurrentProducers) {
  Cq cq(1, 16, nullptr, 0, nullptr);
  std::atomic<int> overruns{0};
  cq.set_overrun_handler([&](Cq&) { overruns.fetch_add(1); });
  std::atomic<int> accepted{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < 4; ++p) {
    producers.emplace_back([&] {
      for (int i = 0; i < 100; ++i)
        if (cq.push(wc_with(static_cast<std::uint64_t>(i)), false)) accepted.fetch_add(1);
    });
  }
  for (auto& t : producers) t.join();
  EXPECT_EQ(accepted.load(), 16);
  EXPECT_EQ(overruns.load(), 1);
  EXPECT_TRUE(cq.in_error());
  EXPECT_EQ(cq.waiting(), 16u);
}

TEST(Cq, ReqNotifyRejectsBadFlags) {
  Cq cq(1, 4, nullptr, 0, nullptr);
  for (std::uint32_t flags : {0u, static_cast<std::uint32_t>(NOTIFY_REPORT_MISSED_EVENTS), 1u << 3,
                              NOTIFY_NEXT_COMP | (1u << 7)}) {
    auto r = cq.req_notify(flags);
    ASSERT_FALSE(r.has_value()) << flags;
    EXPECT_EQ(r.error().code, EINVAL) << flags;
    EXPECT_FALSE(r.error().reason.empty());
  }
  EXPECT_FALSE(cq.armed());  // a refused arming arms nothing
  EXPECT_EQ(cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
  EXPECT_EQ(cq.req_notify(NOTIFY_SOLICITED).value(), 0);
  EXPECT_EQ(cq.req_notify(NOTIFY_NEXT_COMP | NOTIFY_SOLICITED).value(), 0);
  EXPECT_TRUE(cq.armed());
}

TEST(Cq, NoEventWithoutArming) {
  Fixture f(8);
  ASSERT_TRUE(f.cq.push(wc_with(1), false));
  ASSERT_TRUE(f.cq.push(wc_with(2), true));
  ASSERT_TRUE(f.cq.push(wc_with(3, WcStatus::kLocProtErr), false));
  f.eq.drain();
  EXPECT_EQ(f.handled.load(), 0);
  EXPECT_EQ(f.cq.events(), 0u);
}

TEST(Cq, EventFiresOncePerArming) {
  Fixture f(16);
  ASSERT_EQ(f.cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
  EXPECT_TRUE(f.cq.armed());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(f.cq.push(wc_with(i), false));
  ASSERT_TRUE(eventually([&] { return f.handled.load() == 1; }));
  EXPECT_FALSE(f.cq.armed());  // disarmed by the event
  f.eq.drain();
  EXPECT_EQ(f.handled.load(), 1);  // five CQEs, one arming, one event

  ASSERT_EQ(f.cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
  ASSERT_EQ(f.cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);  // arming twice is one arming
  ASSERT_TRUE(f.cq.push(wc_with(6), false));
  ASSERT_TRUE(f.cq.push(wc_with(7), false));
  ASSERT_TRUE(eventually([&] { return f.handled.load() == 2; }));
  f.eq.drain();
  EXPECT_EQ(f.handled.load(), 2);
  EXPECT_EQ(f.cq.events(), 2u);
  ASSERT_TRUE(eventually([&] { return f.eq.events() == 2; }));
  EXPECT_GE(f.eq.interrupts(), 1u);
  EXPECT_LE(f.eq.interrupts(), 2u);
}

TEST(Cq, ArmingWithCqesWaitingDoesNotFireByItself) {
  Fixture f(8);
  ASSERT_TRUE(f.cq.push(wc_with(1), false));
  ASSERT_EQ(f.cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);  // no REPORT_MISSED: 0
  f.eq.drain();
  EXPECT_EQ(f.handled.load(), 0);
  ASSERT_TRUE(f.cq.push(wc_with(2), false));
  ASSERT_TRUE(eventually([&] { return f.handled.load() == 1; }));
}

// A CQE pushed while the CQ is being armed: the arming sees it
// (REPORT_MISSED_EVENTS returns 1, and the caller polls again) or the push
// sees the arming and makes the event, or both; never neither (the lost
// wakeup). Many rounds, the push on another thread each time.
TEST(Cq, ACqeRacingTheArmingIsReportedOrMakesTheEvent) {
  Cq cq(9, 1024, nullptr, 0, nullptr);  // inline delivery: counted before push returns
  std::atomic<int> handled{0};
  cq.set_event_handler([&](Cq&) { handled.fetch_add(1); });
  for (int round = 1; round <= 500; ++round) {
    const int before = handled.load();
    std::atomic<bool> go{false};
    std::thread producer([&] {
      while (!go.load()) {
      }
      EXPECT_TRUE(cq.push(wc_with(static_cast<std::uint64_t>(round)), false));
    });
    go.store(true);
    const int missed = cq.req_notify(NOTIFY_NEXT_COMP | NOTIFY_REPORT_MISSED_EVENTS).value();
    producer.join();
    ASSERT_TRUE(missed == 1 || handled.load() == before + 1) << "round " << round << ": a lost wakeup";
    ASSERT_LE(handled.load(), before + 1) << "one arming, one event";
    Wc wc[1];
    ASSERT_EQ(cq.poll(wc), 1);
  }
}

TEST(Cq, SolicitedOnlyFiresOnSolicitedOrErrorCqes) {
  Fixture f(16);
  ASSERT_EQ(f.cq.req_notify(NOTIFY_SOLICITED).value(), 0);
  ASSERT_TRUE(f.cq.push(wc_with(1), false));
  ASSERT_TRUE(f.cq.push(wc_with(2), false));
  f.eq.drain();
  EXPECT_EQ(f.handled.load(), 0);
  EXPECT_TRUE(f.cq.armed());
  ASSERT_TRUE(f.cq.push(wc_with(3), true));  // solicited
  ASSERT_TRUE(eventually([&] { return f.handled.load() == 1; }));
  EXPECT_FALSE(f.cq.armed());

  // An error completion is always reported, solicited or not.
  ASSERT_EQ(f.cq.req_notify(NOTIFY_SOLICITED).value(), 0);
  ASSERT_TRUE(f.cq.push(wc_with(4), false));
  ASSERT_TRUE(f.cq.push(wc_with(5, WcStatus::kWrFlushErr), false));
  ASSERT_TRUE(eventually([&] { return f.handled.load() == 2; }));

  // Solicited arming fires once as well.
  ASSERT_EQ(f.cq.req_notify(NOTIFY_SOLICITED).value(), 0);
  ASSERT_TRUE(f.cq.push(wc_with(6), true));
  ASSERT_TRUE(f.cq.push(wc_with(7), true));
  ASSERT_TRUE(eventually([&] { return f.handled.load() == 3; }));
  f.eq.drain();
  EXPECT_EQ(f.handled.load(), 3);
}

TEST(Cq, NextCompArmingIsNotWeakenedBySolicited) {
  Fixture f(8);
  ASSERT_EQ(f.cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
  ASSERT_EQ(f.cq.req_notify(NOTIFY_SOLICITED).value(), 0);
  ASSERT_TRUE(f.cq.push(wc_with(1), false));  // unsolicited still fires
  ASSERT_TRUE(eventually([&] { return f.handled.load() == 1; }));
}

TEST(Cq, ReportMissedEvents) {
  Fixture f(8);
  const std::uint32_t kFlags = NOTIFY_NEXT_COMP | NOTIFY_REPORT_MISSED_EVENTS;
  EXPECT_EQ(f.cq.req_notify(kFlags).value(), 0);  // nothing waiting
  ASSERT_TRUE(f.cq.push(wc_with(1), false));       // fires the arming above
  ASSERT_TRUE(eventually([&] { return f.handled.load() == 1; }));

  // A CQE waits: report it, and arm anyway.
  EXPECT_EQ(f.cq.req_notify(kFlags).value(), 1);
  EXPECT_TRUE(f.cq.armed());
  ASSERT_TRUE(f.cq.push(wc_with(2), false));
  ASSERT_TRUE(eventually([&] { return f.handled.load() == 2; }));

  std::array<Wc, 8> out;
  EXPECT_EQ(f.cq.poll(out), 2);
  EXPECT_EQ(f.cq.req_notify(NOTIFY_SOLICITED | NOTIFY_REPORT_MISSED_EVENTS).value(), 0);
}

TEST(Cq, EventHandlerMayRearmAndPoll) {
  EventQueue eq(0);
  std::atomic<int> polled{0};
  std::atomic<int> events{0};
  Cq cq(1, 64, &eq, 0, nullptr);
  cq.set_event_handler([&](Cq& c) {
    std::array<Wc, 8> out;
    int n;
    do {
      while ((n = c.poll(out)) > 0) polled.fetch_add(n);
    } while (c.req_notify(NOTIFY_NEXT_COMP | NOTIFY_REPORT_MISSED_EVENTS).value() == 1);
    events.fetch_add(1);
  });
  ASSERT_EQ(cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(cq.push(wc_with(i), false));
    if (i % 10 == 0) std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(eventually([&] { return polled.load() == 50; }));
  EXPECT_GE(events.load(), 1);
  EXPECT_EQ(eq.completions_handled(), 50u);
  EXPECT_EQ(eq.cqes(), 50u);
}

TEST(Cq, ModerationByCount) {
  Fixture f(16);
  ASSERT_TRUE(f.cq.modify(4, 0).has_value());
  EXPECT_EQ(f.cq.moderation_count(), 4);
  EXPECT_EQ(f.cq.moderation_usec(), 0);
  ASSERT_EQ(f.cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(f.cq.push(wc_with(i), false));
  f.eq.drain();
  EXPECT_EQ(f.handled.load(), 0);  // 3 < 4: held back (no timer)
  EXPECT_TRUE(f.cq.armed());
  ASSERT_TRUE(f.cq.push(wc_with(3), false));
  ASSERT_TRUE(eventually([&] { return f.handled.load() == 1; }));
  EXPECT_FALSE(f.cq.armed());
  for (int i = 4; i < 10; ++i) ASSERT_TRUE(f.cq.push(wc_with(i), false));
  f.eq.drain();
  EXPECT_EQ(f.handled.load(), 1);  // still once per arming

  // Back to (0, 0): every completion.
  ASSERT_TRUE(f.cq.modify(0, 0).has_value());
  std::array<Wc, 16> out;
  ASSERT_EQ(f.cq.poll(out), 10);
  ASSERT_EQ(f.cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
  ASSERT_TRUE(f.cq.push(wc_with(10), false));
  ASSERT_TRUE(eventually([&] { return f.handled.load() == 2; }));
}

TEST(Cq, ModerationByTime) {
  EventQueue eq(0);
  constexpr auto kUsec = std::chrono::microseconds(30000);
  std::atomic<std::int64_t> fired_after_us{-1};
  std::chrono::steady_clock::time_point t0;
  std::atomic<int> handled{0};
  Cq cq(1, 16, &eq, 0, nullptr);
  cq.set_event_handler([&](Cq&) {
    fired_after_us.store(std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::steady_clock::now() - t0)
                             .count());
    handled.fetch_add(1);
  });
  ASSERT_TRUE(cq.modify(100, static_cast<std::uint16_t>(kUsec.count())).has_value());
  ASSERT_EQ(cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
  t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(cq.push(wc_with(1), false));  // starts the timer; 1 < 100 CQEs
  ASSERT_TRUE(cq.push(wc_with(2), false));  // does not restart it
  ASSERT_TRUE(eventually([&] { return handled.load() == 1; }));
  // Never before the deadline (bounded below by construction; no upper
  // bound on a noisy machine).
  EXPECT_GE(fired_after_us.load(), kUsec.count());
  EXPECT_FALSE(cq.armed());
  eq.drain(EventQueue::Timers::kAll);  // any timer still set has fired
  EXPECT_EQ(handled.load(), 1);
}

TEST(Cq, ModerationCountBeatsTimerAndTheStaleTimerIsIgnored) {
  EventQueue eq(0);
  std::atomic<int> handled{0};
  Cq cq(1, 16, &eq, 0, nullptr);
  cq.set_event_handler([&](Cq&) { handled.fetch_add(1); });
  ASSERT_TRUE(cq.modify(3, 40000).has_value());
  ASSERT_EQ(cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cq.push(wc_with(i), false));
  ASSERT_TRUE(eventually([&] { return handled.load() == 1; }));
  // The 40 ms timer of that arming must not make a second event, nor fire
  // a later arming early.
  std::array<Wc, 16> out;
  ASSERT_EQ(cq.poll(out), 3);
  ASSERT_EQ(cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
  const auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(cq.push(wc_with(3), false));  // a new timer, 40 ms from t1
  ASSERT_TRUE(eventually([&] { return handled.load() == 2; }));
  EXPECT_GE(std::chrono::steady_clock::now() - t1, std::chrono::microseconds(40000));
  eq.drain(EventQueue::Timers::kAll);  // the stale 40 ms timer has fired too
  EXPECT_EQ(handled.load(), 2);
}

TEST(Cq, ModerationAppliesToSolicitedArming) {
  Fixture f(16);
  ASSERT_TRUE(f.cq.modify(2, 0).has_value());
  ASSERT_EQ(f.cq.req_notify(NOTIFY_SOLICITED).value(), 0);
  ASSERT_TRUE(f.cq.push(wc_with(1), true));  // 1 waiting < 2
  f.eq.drain();
  EXPECT_EQ(f.handled.load(), 0);
  ASSERT_TRUE(f.cq.push(wc_with(2), false));  // unsolicited: does not qualify
  f.eq.drain();
  EXPECT_EQ(f.handled.load(), 0);
  ASSERT_TRUE(f.cq.push(wc_with(3), true));
  ASSERT_TRUE(eventually([&] { return f.handled.load() == 1; }));
}

TEST(Cq, WithoutEventQueueEventsAreDeliveredInline) {
  Cq cq(1, 4, nullptr, 0, nullptr);
  int handled = 0;
  cq.set_event_handler([&](Cq&) { ++handled; });
  ASSERT_EQ(cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
  ASSERT_TRUE(cq.push(wc_with(1), false));
  EXPECT_EQ(handled, 1);
  ASSERT_TRUE(cq.push(wc_with(2), false));
  EXPECT_EQ(handled, 1);
}

TEST(Cq, ResizeRejectsBadSizesAndKeepsTheCq) {
  Cq cq(1, 8, nullptr, 0, nullptr);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(cq.push(wc_with(i), false));
  struct Case {
    std::uint32_t cqe, max_cqe;
  };
  for (Case c : {Case{0, 100}, Case{101, 100}, Case{4, 100}, Case{1, 100}}) {
    auto r = cq.resize(c.cqe, c.max_cqe);
    ASSERT_FALSE(r.has_value()) << c.cqe;
    EXPECT_EQ(r.error().code, EINVAL) << c.cqe;
    EXPECT_FALSE(r.error().reason.empty());
  }
  EXPECT_EQ(cq.cqe(), 8u);
  EXPECT_EQ(cq.waiting(), 5u);
  EXPECT_TRUE(cq.resize(5, 100).has_value());  // exactly the waiting CQEs: allowed
  EXPECT_EQ(cq.cqe(), 5u);
  EXPECT_FALSE(cq.push(wc_with(5), false));  // and now full
}

TEST(Cq, ResizeKeepsWaitingCqesInOrder) {
  Cq cq(1, 4, nullptr, 0, nullptr);
  std::array<Wc, 8> out;
  // Wrap the ring: push 3, poll 2, push 3 -> waiting 2,3,4,5 with head at 2.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cq.push(wc_with(i), false));
  ASSERT_EQ(cq.poll({out.data(), 2}), 2);
  for (int i = 3; i < 6; ++i) ASSERT_TRUE(cq.push(wc_with(i), false));
  ASSERT_EQ(cq.waiting(), 4u);
  ASSERT_TRUE(cq.resize(10, 16).has_value());
  EXPECT_EQ(cq.cqe(), 10u);
  for (int i = 6; i < 12; ++i) ASSERT_TRUE(cq.push(wc_with(i), false));
  EXPECT_FALSE(cq.push(wc_with(12), false));  // exactly 10 entries
  std::uint64_t expect = 2;
  int n;
  while ((n = cq.poll(out)) > 0)
    for (int i = 0; i < n; ++i) EXPECT_EQ(out[i].wr_id, expect++);
  EXPECT_EQ(expect, 12u);
}

TEST(Cq, CleanTakesOneQpsCqesAndKeepsTheRestInOrder) {
  Cq cq(1, 8, nullptr, 0, nullptr);
  std::array<Wc, 8> out;
  // Wrap the ring first: head at 5 of an 8-entry ring.
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(cq.push(wc_with(100 + i), false));
  ASSERT_EQ(cq.poll({out.data(), 5}), 5);
  for (std::uint32_t i = 0; i < 7; ++i) {
    Wc wc = wc_with(i);
    wc.qp_num = i % 3 == 0 ? 0x42 : 0x43;  // 0, 3, 6 are QP 0x42's
    ASSERT_TRUE(cq.push(wc, false));
  }
  EXPECT_EQ(cq.clean(0x44), 0u);
  EXPECT_EQ(cq.waiting(), 7u);
  EXPECT_EQ(cq.clean(0x42), 3u);
  EXPECT_EQ(cq.waiting(), 4u);
  // The room the gap left is usable, and order holds across it.
  for (int i = 7; i < 11; ++i) ASSERT_TRUE(cq.push(wc_with(i), false));
  EXPECT_FALSE(cq.push(wc_with(11), false));  // 8 entries again
  std::vector<std::uint64_t> ids;
  int n;
  while ((n = cq.poll(out)) > 0)
    for (int i = 0; i < n; ++i) ids.push_back(out[i].wr_id);
  EXPECT_EQ(ids, (std::vector<std::uint64_t>{1, 2, 4, 5, 7, 8, 9, 10}));
}

TEST(Cq, CleanRacingProducersLosesOnlyTheCleanedQps) {
  // Producers of two QPs push while QP 1's CQEs are cleaned again and
  // again: every CQE of QP 2 is polled, once, in its producer's order.
  // Credits (one per free entry, shared) keep the CQ from overrunning.
  constexpr int kPerProducer = 20000;
  Cq cq(1, 1024, nullptr, 0, nullptr);
  std::atomic<std::uint32_t> credits{1024};
  std::atomic<bool> failed{false};
  std::atomic<int> producers{2};
  const auto produce = [&](std::uint32_t qpn) {
    for (int i = 0; i < kPerProducer; ++i) {
      if (!take_credit(credits, failed)) break;
      Wc wc = wc_with(i);
      wc.qp_num = qpn;
      if (!cq.push(wc, false)) failed = true;
    }
    producers.fetch_sub(1);
  };
  std::thread p1(produce, 1), p2(produce, 2);
  std::uint64_t next = 0;
  std::array<Wc, 64> out;
  while (!failed.load() && (producers.load() > 0 || cq.waiting() > 0)) {
    credits.fetch_add(cq.clean(1));
    const int n = cq.poll(out);
    for (int i = 0; i < n; ++i)
      if (out[i].qp_num == 2) EXPECT_EQ(out[i].wr_id, next++);  // QP 1's: pushed after the clean
    credits.fetch_add(static_cast<std::uint32_t>(n));
  }
  failed = true;  // releases a producer waiting for a credit after an error
  p1.join();
  p2.join();
  EXPECT_FALSE(cq.in_error());
  EXPECT_EQ(next, static_cast<std::uint64_t>(kPerProducer));
}

TEST(Cq, CountersFeedTheCompletionVector) {
  EventQueue eq(1);
  Cq a(1, 8, &eq, 1, nullptr), b(2, 8, &eq, 1, nullptr);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a.push(wc_with(i), false));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(b.push(wc_with(i), false));
  std::array<Wc, 8> out;
  EXPECT_EQ(a.poll(out), 3);
  EXPECT_EQ(b.poll({out.data(), 2}), 2);
  EXPECT_EQ(eq.cqes(), 7u);
  EXPECT_EQ(eq.completions_handled(), 5u);
  EXPECT_EQ(a.cqes_written(), 3u);
  EXPECT_EQ(b.cqes_written(), 4u);
}

// Several producers, one consumer that sleeps on events between bursts:
// every CQE is seen exactly once, in each producer's order. Producers hold
// a slot credit before pushing (as the engine reserves CQ space), so the CQ
// never overruns. Run under ThreadSanitizer in CI.
TEST(Cq, StressManyProducersOneConsumer) {
  constexpr int kProducers = 4;
  constexpr std::uint64_t kPerProducer = 20000;
  constexpr std::uint32_t kCqe = 64;
  EventQueue eq(0);
  std::atomic<int> events{0};
  std::mutex m;
  std::condition_variable cv;
  Cq cq(1, kCqe, &eq, 0, nullptr);  // after what its handler uses: destroyed first
  cq.set_event_handler([&](Cq&) {
    {
      std::lock_guard lk(m);
      events.fetch_add(1);
    }
    cv.notify_one();
  });
  std::atomic<std::uint32_t> credits{kCqe};
  std::atomic<bool> failed{false};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (std::uint64_t i = 0; i < kPerProducer; ++i) {
        if (!take_credit(credits, failed)) return;  // the consumer gave up
        if (!cq.push(wc_with((std::uint64_t(p) << 32) | i), (i % 7) == 0)) {
          failed.store(true);
          return;
        }
      }
    });
  }
  std::array<std::uint64_t, kProducers> next{};
  std::uint64_t total = 0;
  std::array<Wc, 16> out;
  while (total < kProducers * kPerProducer && !failed.load()) {
    int n = cq.poll(out);
    if (n == 0) {
      // Sleep on an event (sometimes solicited-only), re-checking missed ones.
      const int seen = events.load();
      const std::uint32_t how = (total % 3 == 0) ? NOTIFY_SOLICITED : NOTIFY_NEXT_COMP;
      if (cq.req_notify(how | NOTIFY_REPORT_MISSED_EVENTS).value() == 1) continue;
      std::unique_lock lk(m);
      cv.wait_for(lk, 2ms, [&] { return events.load() != seen; });
      continue;
    }
    for (int i = 0; i < n; ++i) {
      const auto p = out[i].wr_id >> 32;
      const auto seq = out[i].wr_id & 0xffffffffu;
      ASSERT_LT(p, static_cast<std::uint64_t>(kProducers));
      ASSERT_EQ(seq, next[p]) << "producer " << p;
      ++next[p];
    }
    total += static_cast<std::uint64_t>(n);
    credits.fetch_add(static_cast<std::uint32_t>(n));
  }
  for (auto& t : producers) t.join();
  ASSERT_FALSE(failed.load()) << "a push with a reserved slot failed";
  EXPECT_EQ(cq.poll(out), 0);
  for (auto n : next) EXPECT_EQ(n, kPerProducer);
  EXPECT_FALSE(cq.in_error());
  EXPECT_EQ(cq.cqes_written(), kProducers * kPerProducer);
  EXPECT_EQ(eq.completions_handled(), kProducers * kPerProducer);
  // The vector counts an event once the handler returned.
  EXPECT_TRUE(eventually([&] { return eq.events() == cq.events(); }));
}

// The handshake between a push and the consumer's re-arming: either the
// push sees the arming and fires the event, or req_notify reports the CQE
// as missed. A consumer that sleeps until an event (no polling timeout)
// never sleeps forever. Each round has exactly one CQE racing the re-arm.
// Two ways to close the race: REPORT_MISSED_EVENTS, or a poll after arming.
class CqRearm : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Both, CqRearm, ::testing::Values(true, false),
                         [](const auto& p) { return p.param ? "ReportMissed" : "PollAfterArming"; });

TEST_P(CqRearm, NoEventIsLostBetweenAPushAndTheRearm) {
  const bool report_missed = GetParam();
  constexpr int kRounds = 20000;
  EventQueue eq(0);
  std::mutex m;
  std::condition_variable cv;
  int events = 0;
  Cq cq(1, 4, &eq, 0, nullptr);
  cq.set_event_handler([&](Cq&) {
    {
      std::lock_guard lk(m);
      ++events;
    }
    cv.notify_one();
  });
  std::atomic<int> consumed{0};
  std::atomic<bool> stop{false};
  std::thread producer([&] {
    for (int i = 0; i < kRounds; ++i) {
      while (consumed.load() < i)  // one CQE in flight at a time
        if (stop.load()) return;
      ASSERT_TRUE(cq.push(wc_with(static_cast<std::uint64_t>(i)), false));
    }
  });
  std::array<Wc, 4> out;
  int got = 0, lost = 0;
  auto take = [&] {
    const int n = cq.poll(out);
    for (int i = 0; i < n; ++i) EXPECT_EQ(out[i].wr_id, static_cast<std::uint64_t>(got + i));
    got += n;
    consumed.store(got);
    return n;
  };
  while (got < kRounds) {
    if (take() > 0) continue;
    int seen;
    {
      std::lock_guard lk(m);
      seen = events;
    }
    if (report_missed) {
      if (cq.req_notify(NOTIFY_NEXT_COMP | NOTIFY_REPORT_MISSED_EVENTS).value() == 1) continue;
    } else {
      ASSERT_EQ(cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
      if (take() > 0) continue;
    }
    std::unique_lock lk(m);
    if (!cv.wait_for(lk, 10s, [&] { return events != seen; })) {
      ++lost;  // armed, nothing reported missed, and no event came
      stop.store(true);
      break;
    }
  }
  producer.join();
  EXPECT_EQ(lost, 0);
}

// Resizes (growing past the storage and shrinking within it) while four
// producers push and a consumer polls: every CQE arrives once, each
// producer's in order, and the CQ never overruns while the producers keep
// within the smallest size used.
TEST(Cq, ResizeWhileProducersPushAndTheConsumerPolls) {
  constexpr int kProducers = 4;
  constexpr std::uint64_t kPerProducer = 20000;
  constexpr std::uint32_t kCredits = 8;  // <= every size the resizer picks
  Cq cq(1, 16, nullptr, 0, nullptr);
  std::atomic<std::uint32_t> credits{kCredits};
  std::atomic<bool> failed{false}, done{false};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (std::uint64_t i = 0; i < kPerProducer; ++i) {
        if (!take_credit(credits, failed)) return;  // the consumer gave up
        if (!cq.push(wc_with((std::uint64_t(p) << 32) | i), false)) {
          failed.store(true);
          return;
        }
      }
    });
  }
  int resizes = 0;
  std::thread resizer([&] {
    const std::uint32_t sizes[] = {8, 300, 9, 1000, 20, 2048, 8};
    for (int i = 0; !done.load() && !failed.load(); ++i, ++resizes) {
      if (!cq.resize(sizes[i % std::size(sizes)], 4096)) failed.store(true);
      std::this_thread::yield();
    }
  });
  std::array<std::uint64_t, kProducers> next{};
  std::uint64_t total = 0;
  std::array<Wc, 16> out;
  while (total < kProducers * kPerProducer && !failed.load()) {
    const int n = cq.poll(out);
    for (int i = 0; i < n; ++i) {
      const auto p = out[i].wr_id >> 32;
      ASSERT_LT(p, static_cast<std::uint64_t>(kProducers));
      ASSERT_EQ(out[i].wr_id & 0xffffffffu, next[p]) << "producer " << p;
      ++next[p];
    }
    total += static_cast<std::uint64_t>(n);
    credits.fetch_add(static_cast<std::uint32_t>(n));
    if (n == 0) std::this_thread::yield();
  }
  done.store(true);
  for (auto& t : producers) t.join();
  resizer.join();
  ASSERT_FALSE(failed.load());
  EXPECT_GT(resizes, 0);
  EXPECT_FALSE(cq.in_error());
  for (auto n : next) EXPECT_EQ(n, kPerProducer);
  EXPECT_EQ(cq.cqes_written(), kProducers * kPerProducer);
  EXPECT_EQ(cq.cqes_polled(), kProducers * kPerProducer);
}

// Shrinking keeps the storage; a later grow within it needs no copy, and
// the CQ still refuses the CQE past its (new) size.
TEST(Cq, ShrinkThenOverrunAtTheNewSize) {
  Cq cq(1, 64, nullptr, 0, nullptr);
  ASSERT_TRUE(cq.resize(3, 4096));
  EXPECT_EQ(cq.cqe(), 3u);
  for (std::uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(cq.push(wc_with(i), false));
  EXPECT_FALSE(cq.push(wc_with(3), false));
  EXPECT_TRUE(cq.in_error());
  std::array<Wc, 8> out;
  ASSERT_EQ(cq.poll(out), 3);
  EXPECT_EQ(out[2].wr_id, 2u);
}

}  // namespace
}  // namespace srdma::hca
