#include "hca/comp_channel.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "hca/cq.h"
#include "hca/event_queue.h"

namespace srdma::hca {
namespace {

using namespace std::chrono_literals;

Wc wc_with(std::uint64_t wr_id) {
  Wc wc;
  wc.wr_id = wr_id;
  return wc;
}

// poll(2) on the channel's fd: true if readable within `timeout_ms`.
bool readable(const CompChannel& ch, int timeout_ms) {
  pollfd p{ch.fd(), POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

// A channel and a CQ bound to it, as create_cq(..., channel, ...) does.
struct Bound {
  Bound() : ch(CompChannel::create().value()), cq(5, 16, &eq, 0, this) {
    ch->usecnt.fetch_add(1);
    cq.set_event_handler([c = ch.get()](Cq& q) { c->notify(&q); });
  }
  ~Bound() { ch->usecnt.fetch_sub(1); }
  EventQueue eq{0};
  std::unique_ptr<CompChannel> ch;
  Cq cq;
};

// Blocking: a program's own fcntl(O_NONBLOCK) on the fd is what makes
// ibv_get_cq_event return EAGAIN instead of waiting.
TEST(CompChannel, CreatesABlockingCloexecFd) {
  auto ch = CompChannel::create().value();
  ASSERT_GE(ch->fd(), 0);
  EXPECT_EQ(fcntl(ch->fd(), F_GETFL) & O_NONBLOCK, 0);
  EXPECT_NE(fcntl(ch->fd(), F_GETFD) & FD_CLOEXEC, 0);
  EXPECT_FALSE(readable(*ch, 0));
}

TEST(CompChannel, NoEventIsEagainWhenNotBlocking) {
  auto ch = CompChannel::create().value();
  auto r = ch->get_event(false);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, EAGAIN);
}

TEST(CompChannel, FdBecomesReadableOnACqEvent) {
  Bound b;
  ASSERT_EQ(b.cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
  EXPECT_FALSE(readable(*b.ch, 0));
  ASSERT_TRUE(b.cq.push(wc_with(1), false));
  ASSERT_TRUE(readable(*b.ch, 10000));
  auto cq = b.ch->get_event(false);
  ASSERT_TRUE(cq.has_value());
  EXPECT_EQ(*cq, &b.cq);
  EXPECT_EQ((*cq)->context(), &b);
  EXPECT_FALSE(readable(*b.ch, 0));  // drained with the last event
  EXPECT_EQ(b.ch->unacked(&b.cq), 1u);
  b.ch->ack_events(&b.cq, 1);
  EXPECT_EQ(b.ch->unacked(&b.cq), 0u);
  EXPECT_EQ(b.ch->events_notified(), 1u);
}

TEST(CompChannel, EventsFromSeveralCqsInOrder) {
  auto ch = CompChannel::create().value();
  Cq a(1, 4, nullptr, 0, nullptr), c(2, 4, nullptr, 0, nullptr);
  ch->notify(&a);
  ch->notify(&c);
  ch->notify(&a);
  EXPECT_TRUE(readable(*ch, 0));
  EXPECT_EQ(ch->get_event(false).value(), &a);
  EXPECT_TRUE(readable(*ch, 0));  // two still waiting
  EXPECT_EQ(ch->get_event(false).value(), &c);
  EXPECT_EQ(ch->get_event(false).value(), &a);
  EXPECT_FALSE(readable(*ch, 0));
  EXPECT_EQ(ch->unacked(&a), 2u);
  EXPECT_EQ(ch->unacked(&c), 1u);
  ch->ack_events(&a, 5);  // more than returned: clamped
  EXPECT_EQ(ch->unacked(&a), 0u);
  ch->ack_events(&c, 1);
  EXPECT_TRUE(ch->close().has_value());
}

TEST(CompChannel, BlockingGetEventWaitsForTheEvent) {
  Bound b;
  ASSERT_EQ(b.cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);
  std::thread producer([&] {
    std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(b.cq.push(wc_with(1), false));
  });
  auto cq = b.ch->get_event(true);
  producer.join();
  ASSERT_TRUE(cq.has_value());
  EXPECT_EQ(*cq, &b.cq);
  b.ch->ack_events(*cq, 1);
}

TEST(CompChannel, CloseRefusesWhileEventsAreUnacknowledged) {
  auto ch = CompChannel::create().value();
  Cq cq(1, 4, nullptr, 0, nullptr);
  ch->notify(&cq);
  ch->notify(&cq);
  ASSERT_TRUE(ch->get_event(false).has_value());
  ASSERT_TRUE(ch->get_event(false).has_value());
  ch->ack_events(&cq, 1);
  auto r = ch->close();
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, EBUSY);
  EXPECT_GE(ch->fd(), 0);  // unchanged
  ch->ack_events(&cq, 1);
  ASSERT_TRUE(ch->close().has_value());
  EXPECT_EQ(ch->fd(), -1);
  EXPECT_TRUE(ch->close().has_value());  // twice is fine
  auto e = ch->get_event(false);
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.error().code, EBADF);
  ch->notify(&cq);  // dropped on a closed channel
  EXPECT_EQ(ch->events_notified(), 2u);
}

TEST(CompChannel, CloseRefusesWhileCqsAreBound) {
  auto ch = CompChannel::create().value();
  ch->usecnt.fetch_add(1);
  auto r = ch->close();
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, EBUSY);
  ch->usecnt.fetch_sub(1);
  EXPECT_TRUE(ch->close().has_value());
}

TEST(CompChannel, ForgetDropsQueuedEventsOfADestroyedCq) {
  auto ch = CompChannel::create().value();
  Cq a(1, 4, nullptr, 0, nullptr), c(2, 4, nullptr, 0, nullptr);
  ch->notify(&a);
  ch->notify(&c);
  ch->notify(&a);
  ch->forget(&a);
  EXPECT_EQ(ch->get_event(false).value(), &c);
  EXPECT_FALSE(readable(*ch, 0));
  ch->notify(&a);
  ch->forget(&a);
  EXPECT_FALSE(readable(*ch, 0));  // emptied: not readable any more
  EXPECT_EQ(ch->get_event(false).error().code, EAGAIN);
  ch->ack_events(&c, 1);
}

// A blocked consumer that receives for its own channel (a Taking scope)
// takes the events it makes itself: they do not make the fd readable. What
// it leaves queued does, once it takes one; and events made by any other
// thread meanwhile make the fd readable as always.
TEST(CompChannel, ATakersOwnEventsLeaveTheFdAloneUntilItLeavesSomeQueued) {
  auto ch = CompChannel::create().value();
  Cq a(1, 4, nullptr, 0, nullptr), c(2, 4, nullptr, 0, nullptr);
  {
    const CompChannel::Taking taking(*ch);
    ch->notify(&a);
    EXPECT_FALSE(readable(*ch, 0));
    EXPECT_EQ(ch->get_event(false).value(), &a);
    EXPECT_FALSE(readable(*ch, 0));

    ch->notify(&a);
    ch->notify(&c);
    EXPECT_FALSE(readable(*ch, 0));
    EXPECT_EQ(ch->get_event(false).value(), &a);
    EXPECT_TRUE(readable(*ch, 0));  // c waits: whoever polls the fd sees it
    EXPECT_EQ(ch->get_event(false).value(), &c);
    EXPECT_FALSE(readable(*ch, 0));

    std::thread other([&] { ch->notify(&c); });  // not in a Taking scope
    other.join();
    EXPECT_TRUE(readable(*ch, 0));
    EXPECT_EQ(ch->get_event(false).value(), &c);
    EXPECT_FALSE(readable(*ch, 0));
  }
  ch->notify(&a);  // the scope is over
  EXPECT_TRUE(readable(*ch, 0));
  EXPECT_EQ(ch->get_event(false).value(), &a);
  EXPECT_FALSE(readable(*ch, 0));

  {  // a scope for another channel changes nothing for this one
    auto other = CompChannel::create().value();
    const CompChannel::Taking taking(*other);
    ch->notify(&c);
    EXPECT_TRUE(readable(*ch, 0));
    EXPECT_EQ(ch->get_event(false).value(), &c);
  }
  {  // an unsignalled event that is forgotten leaves nothing to drain
    const CompChannel::Taking taking(*ch);
    ch->notify(&a);
    ch->forget(&a);
    EXPECT_FALSE(readable(*ch, 0));
    EXPECT_EQ(ch->get_event(false).error().code, EAGAIN);
  }
  ch->ack_events(&a, 3);
  ch->ack_events(&c, 3);
  EXPECT_TRUE(ch->close().has_value());
}

// The ibv_get_cq_event loop of an event-driven consumer (perftest -e),
// against a producer thread: every CQE is seen exactly once and no wake-up
// is lost. Run under ThreadSanitizer in CI.
TEST(CompChannel, EventDrivenConsumerSeesEveryCqe) {
  Bound b;
  constexpr std::uint64_t kTotal = 20000;
  std::atomic<std::uint32_t> credits{16};
  ASSERT_EQ(b.cq.req_notify(NOTIFY_NEXT_COMP).value(), 0);  // armed before anything is posted
  std::thread producer([&] {
    for (std::uint64_t i = 0; i < kTotal; ++i) {
      while (credits.load() == 0) std::this_thread::yield();
      credits.fetch_sub(1);
      if (!b.cq.push(wc_with(i), false)) return;
    }
  });
  std::uint64_t next = 0;
  unsigned unacked = 0;
  std::array<Wc, 8> out;
  while (next < kTotal) {
    // poll(2) with a bound instead of get_event(true), so a lost wake-up
    // fails the test instead of hanging it.
    if (!readable(*b.ch, 10000)) {
      ADD_FAILURE() << "lost wake-up after " << next << " CQEs";
      break;
    }
    auto cq = b.ch->get_event(false);
    ASSERT_TRUE(cq.has_value()) << cq.error().to_string();
    ASSERT_EQ(*cq, &b.cq);
    ++unacked;
    // Re-arm, then poll until empty (the order that loses no completion).
    ASSERT_TRUE((*cq)->req_notify(NOTIFY_NEXT_COMP).has_value());
    int n;
    while ((n = (*cq)->poll(out)) > 0) {
      for (int i = 0; i < n; ++i) ASSERT_EQ(out[i].wr_id, next++);
      credits.fetch_add(static_cast<std::uint32_t>(n));
    }
    if (unacked == 16) {
      b.ch->ack_events(*cq, unacked);
      unacked = 0;
    }
  }
  credits.store(1u << 30);  // let the producer finish even after a failure
  producer.join();
  b.ch->ack_events(&b.cq, unacked);
  EXPECT_FALSE(b.cq.in_error());
  EXPECT_EQ(b.ch->unacked(&b.cq), 0u);
  EXPECT_GE(b.eq.interrupts(), 1u);
  EXPECT_EQ(b.eq.completions_handled(), kTotal);
}

// A notifier and a taker racing on one channel: whatever the interleaving
// of the eventfd's writes and reads with the queue, once both are done the
// fd is readable exactly while events wait, and no read of the counter
// blocks on zero (a hang here is a failure: the ctest timeout).
TEST(CompChannel, TakingAnEventRacingItsNotifyLeavesTheFdConsistent) {
  auto ch = CompChannel::create().value();
  Cq cq(7, 16, nullptr, 0, nullptr);
  constexpr int kEvents = 20000;
  std::atomic<bool> go{false};
  std::thread notifier([&] {
    while (!go.load()) std::this_thread::yield();
    for (int i = 0; i < kEvents; ++i) ch->notify(&cq);
  });
  int taken = 0;
  go.store(true);
  while (taken < kEvents) {
    auto r = ch->get_event(false);
    if (r) {
      ++taken;
      continue;
    }
    ASSERT_EQ(r.error().code, EAGAIN);
    std::this_thread::yield();
  }
  notifier.join();
  EXPECT_FALSE(readable(*ch, 0)) << "no event waits: the counter must be zero";
  EXPECT_EQ(ch->get_event(false).error().code, EAGAIN);
  ch->notify(&cq);
  EXPECT_TRUE(readable(*ch, 0));
  EXPECT_EQ(ch->get_event(true).value(), &cq);
  EXPECT_FALSE(readable(*ch, 0));
  ch->ack_events(&cq, kEvents + 1);
  EXPECT_EQ(ch->unacked(&cq), 0u);
  EXPECT_TRUE(ch->close().has_value());
}

}  // namespace
}  // namespace srdma::hca
