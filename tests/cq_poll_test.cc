// Completion processing in each poll context: every completion reaches its
// wr_cqe->done exactly once, and misuse is counted, not a crash.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "connected_pair.h"
#include "srdma/access.h"
#include "srdma/device.h"
#include "test_profile.h"
#include "wait.h"

namespace srdma {
namespace {

Profile profile() { return test::small_profile(); }

struct Counter {
  WrCqe cqe{&Counter::done};
  std::atomic<int> n{0};
  std::atomic<std::thread::id> last_thread{};
  static void done(CompletionQueue&, const Wc& wc) {
    auto* c = reinterpret_cast<Counter*>(wc.wr_cqe);
    c->last_thread = std::this_thread::get_id();
    ++c->n;
  }
};

struct Link {
  Device da = Device::open(profile()).value(), db = Device::open(profile()).value();
  ProtectionDomain pa = da.alloc_pd().value(), pb = db.alloc_pd().value();
  std::vector<std::uint8_t> ba = std::vector<std::uint8_t>(4096), bb = std::vector<std::uint8_t>(4096);
  MemoryRegion ma = pa.reg_mr(ba.data(), 4096, kAccessAll).value();
  MemoryRegion mb = pb.reg_mr(bb.data(), 4096, kAccessAll).value();
  std::unique_ptr<CompletionQueue> cq, peer_cq = db.create_cq(CqInit{.cqe = 64}).value();
  std::unique_ptr<QueuePair> qa, qb;

  explicit Link(PollContext ctx, std::uint32_t vector = 1) {
    cq = da.alloc_cq(nullptr, 512, vector, ctx).value();
    qa = pa.create_qp(QpInitAttr{cq.get(), cq.get(), QpCaps{256, 4, 1, 1, 0}}).value();
    qb = pb.create_qp(QpInitAttr{peer_cq.get(), peer_cq.get(), QpCaps{4, 4, 1, 1, 0}}).value();
    test::connect_qps(*qa, da, *qb, db, {.access = ACCESS_REMOTE_WRITE});
  }
  void write(WrCqe* cqe) {
    Sge s{reinterpret_cast<std::uint64_t>(ba.data()), 8, ma.lkey()};
    SendWr w;
    w.wr_cqe = cqe;
    w.opcode = WrOpcode::kRdmaWrite;
    w.sg_list = &s;
    w.num_sge = 1;
    w.remote_addr = reinterpret_cast<std::uint64_t>(bb.data());
    w.rkey = mb.rkey();
    w.send_flags = SEND_SIGNALED;
    ASSERT_TRUE(qa->post_send(w));
  }
};

class PollContexts : public ::testing::TestWithParam<PollContext> {};

TEST_P(PollContexts, EveryCompletionReachesItsDoneOnce) {
  Link l(GetParam());
  Counter c;
  for (int i = 0; i < 200; ++i) {
    l.write(&c.cqe);
    if (i % 50 == 49) {  // bursts: it re-arms between them
      ASSERT_TRUE(test::eventually([&] { return c.n.load() >= i + 1; }));
    }
  }
  ASSERT_TRUE(test::eventually([&] { return c.n.load() >= 200; })) << c.n.load();
  test::drain_cq(*l.cq);
  EXPECT_EQ(c.n.load(), 200) << "no completion twice";
  EXPECT_NE(c.last_thread.load(), std::this_thread::get_id()) << "processed by the device, not the poster";
  EXPECT_EQ(l.cq->completions_processed(), 200u);
  EXPECT_EQ(l.cq->poll_context(), GetParam());
  EXPECT_EQ(l.cq->process_direct(10).error().code, EINVAL);
}

INSTANTIATE_TEST_SUITE_P(Processed, PollContexts,
                         ::testing::Values(PollContext::kSoftirq, PollContext::kWorkqueue,
                                           PollContext::kUnboundWorkqueue),
                         [](const auto& param_info) { return std::string(poll_context_name(param_info.param)); });

TEST(PollContexts, DirectIsPolledByItsOwnerInBatches) {
  Link l(PollContext::kDirect);
  Counter c;
  for (int i = 0; i < 20; ++i) l.write(&c.cqe);
  EXPECT_EQ(c.n.load(), 0) << "nothing runs until the owner polls";
  EXPECT_EQ(l.cq->process_direct(5).value(), 5);
  EXPECT_EQ(l.cq->process_direct(100).value(), 15);
  EXPECT_EQ(l.cq->process_direct(100).value(), 0);
  EXPECT_EQ(c.n.load(), 20);
  EXPECT_EQ(c.last_thread.load(), std::this_thread::get_id());
  // Arming a DIRECT CQ is a bug: its event is counted, nothing else.
  ASSERT_TRUE(l.cq->req_notify(CQ_NEXT_COMP));
  l.write(&c.cqe);
  ASSERT_TRUE(test::eventually([&] { return l.cq->unexpected_events() > 0; }));
  test::drain_cq(*l.cq);
  EXPECT_EQ(l.cq->unexpected_events(), 1u);
  EXPECT_EQ(c.n.load(), 20);
}

TEST(PollContexts, ACompletionWithoutWrCqeIsCountedNotFollowed) {
  Link l(PollContext::kSoftirq);
  Counter c;
  l.write(nullptr);
  l.write(&c.cqe);
  ASSERT_TRUE(test::eventually([&] { return c.n.load() >= 1; }));
  ASSERT_TRUE(test::eventually([&] { return l.cq->completions_without_wr_cqe() > 0; }));
  test::drain_cq(*l.cq);
  EXPECT_EQ(l.cq->completions_without_wr_cqe(), 1u);
  EXPECT_EQ(c.n.load(), 1);
}

TEST(PollContexts, DestroyWhileBusyIsRefusedThenSafe) {
  Link l(PollContext::kWorkqueue);
  Counter c;
  for (int i = 0; i < 50; ++i) l.write(&c.cqe);
  EXPECT_EQ(l.cq->destroy().error().code, EBUSY) << "the QP still uses it";
  ASSERT_TRUE(test::eventually([&] { return c.n.load() >= 50; }));
  EXPECT_EQ(c.n.load(), 50);
  l.qa.reset();
  EXPECT_TRUE(l.cq->destroy());
}

}  // namespace
}  // namespace srdma
