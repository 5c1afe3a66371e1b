// The device's shared CQ pool: real processed CQs, leases, refusals, QPs
// sharing a CQ within their reservations, and concurrent get/put.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "connected_pair.h"
#include "srdma/access.h"
#include "srdma/device.h"
#include "test_profile.h"
#include "wait.h"

namespace srdma {
namespace {

Profile profile() { return test::small_profile(256); }

TEST(DeviceCqPool, PoolCqsAreSharedAndProcessed) {
  auto dev = Device::open(profile()).value();
  CompletionQueue* cq = dev.cq_pool_get(100, 1, PollContext::kSoftirq).value();
  EXPECT_TRUE(cq->shared());
  EXPECT_EQ(cq->poll_context(), PollContext::kSoftirq);
  EXPECT_EQ(cq->comp_vector(), 1u % std::min(2u, std::max(1u, std::thread::hardware_concurrency())));
  EXPECT_EQ(cq->cqe(), 4096u);
  EXPECT_EQ(cq->context(), nullptr) << "a pool CQ has no cq_context";
  EXPECT_EQ(cq->destroy().error().code, EOPNOTSUPP);
  EXPECT_EQ(cq->resize(8192).error().code, EOPNOTSUPP);
  EXPECT_EQ(cq->modify(4, 10).error().code, EOPNOTSUPP);
  EXPECT_EQ(dev.cq_pool_put(cq, 101).error().code, EINVAL);
  auto own = dev.create_cq(CqInit{.cqe = 8}).value();
  EXPECT_EQ(dev.cq_pool_put(own.get(), 1).error().code, EINVAL);
  ASSERT_TRUE(dev.cq_pool_put(cq, 100));
  EXPECT_EQ(dev.cq_pool_get(1, 0, PollContext::kDirect).error().code, EINVAL);
  EXPECT_EQ(dev.cq_pool_get(0, 0, PollContext::kSoftirq).error().code, EINVAL);
  EXPECT_EQ(dev.cq_pool_trim(), dev.cq_pool_stats().size());
  EXPECT_TRUE(dev.cq_pool_stats().empty());
}

TEST(DeviceCqPool, LeasesReturnTheirEntries) {
  auto dev = Device::open(profile()).value();
  {
    auto lease = dev.cq_pool_lease(300, 0, PollContext::kWorkqueue).value();
    EXPECT_EQ(dev.cq_pool_stats()[0].cqe_used, 300u);
    CqLease moved = std::move(lease);
    EXPECT_EQ(lease.cq(), nullptr);
    EXPECT_EQ(dev.cq_pool_stats()[0].cqe_used, 300u);
  }
  EXPECT_EQ(dev.cq_pool_stats()[0].cqe_used, 0u);
}

// Many QP pairs share pool CQs; each reserves what its caps can produce and
// keeps within them, so no pool CQ overruns.
TEST(DeviceCqPool, SharedCqNeverOverrunsWithinReservations) {
  auto da = Device::open(profile()).value(), db = Device::open(profile()).value();
  auto pa = da.alloc_pd().value(), pb = db.alloc_pd().value();
  std::vector<std::uint8_t> ba(1 << 16), bb(1 << 16);
  auto ma = pa.reg_mr(ba.data(), ba.size(), kAccessAll).value();
  auto mb = pb.reg_mr(bb.data(), bb.size(), kAccessAll).value();
  struct Done {
    WrCqe cqe{&Done::done};
    std::atomic<int> n{0};
    static void done(CompletionQueue&, const Wc& wc) {
      ASSERT_EQ(wc.status, WcStatus::kSuccess);
      ASSERT_NE(wc.qp_context, nullptr) << "the queue is found through the QP's context";
      ++reinterpret_cast<Done*>(wc.wr_cqe)->n;
    }
  } done;
  constexpr int kPairs = 16, kDepth = 32;
  std::vector<CqLease> leases;
  std::vector<std::unique_ptr<QueuePair>> qa, qb;
  auto peer_cq = db.create_cq(CqInit{.cqe = 4096}).value();
  for (int i = 0; i < kPairs; ++i) {
    auto lease = da.cq_pool_lease(kDepth, -1, PollContext::kSoftirq).value();
    qa.push_back(pa.create_qp(QpInitAttr{lease.cq(), lease.cq(), QpCaps{kDepth, 1, 1, 1, 0}, false, &leases}).value());
    qb.push_back(pb.create_qp(QpInitAttr{peer_cq.get(), peer_cq.get(), QpCaps{1, 1, 1, 1, 0}}).value());
    leases.push_back(std::move(lease));
  }
  EXPECT_EQ(da.cq_pool_stats().size(), 2u) << "16 x 32 entries fit in one 4096-entry CQ per vector";
  for (int i = 0; i < kPairs; ++i) test::connect_qps(*qa[i], da, *qb[i], db, {.access = ACCESS_REMOTE_WRITE});
  Sge s{reinterpret_cast<std::uint64_t>(ba.data()), 64, ma.lkey()};
  SendWr w;
  w.wr_cqe = &done.cqe;
  w.opcode = WrOpcode::kRdmaWrite;
  w.sg_list = &s;
  w.num_sge = 1;
  w.remote_addr = reinterpret_cast<std::uint64_t>(bb.data());
  w.rkey = mb.rkey();
  w.send_flags = SEND_SIGNALED;
  int posted = 0;
  for (int round = 0; round < 20; ++round) {
    for (auto& q : qa)
      for (int k = 0; k < kDepth; ++k) {
        auto r = q->post_send(w);
        if (r) ++posted;
        else ASSERT_EQ(r.error().code, ENOMEM);  // the send queue is full until completions are processed
      }
    ASSERT_TRUE(test::eventually([&] { return done.n.load() >= posted; }));
  }
  EXPECT_EQ(done.n.load(), posted);
  for (const auto& st : da.cq_pool_stats()) {
    EXPECT_EQ(st.qps, 2 * (st.cqe_used / kDepth)) << "each QP uses it as send and receive CQ";
    EXPECT_LE(st.cqe_used, st.cqe);
  }
  for (auto& q : qa) EXPECT_EQ(q->state(), QpState::kRts) << "no overrun moved a QP to ERR";
}

TEST(DeviceCqPool, ConcurrentGetPut) {
  auto dev = Device::open(profile()).value();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        auto lease = dev.cq_pool_lease(1 + (i % 50), t - 2, t % 2 ? PollContext::kSoftirq : PollContext::kUnboundWorkqueue);
        ASSERT_TRUE(lease);
      }
    });
  for (auto& th : threads) th.join();
  for (const auto& st : dev.cq_pool_stats()) EXPECT_EQ(st.cqe_used, 0u);
  EXPECT_EQ(dev.cq_pool_stats().size(), 4u) << "one growth per poll context: 2 vectors each";
}

}  // namespace
}  // namespace srdma

namespace srdma {
namespace {

TEST(AssignCqs, CreateQpTakesExactlyItsCapsFromThePoolAndGivesThemBack) {
  auto dev = Device::open(profile()).value();
  auto pd = dev.alloc_pd().value();
  QpInitAttr init;
  init.cap = QpCaps{40, 24, 1, 1, 0};
  init.create_flags = QP_CREATE_ASSIGN_CQS;
  init.affinity_hint = 1;  // the CPU vector 1's thread serves (or 1 mod n)
  {
    auto qp = pd.create_qp(init).value();
    ASSERT_NE(qp->send_cq(), nullptr);
    EXPECT_TRUE(qp->send_cq()->shared());
    EXPECT_EQ(qp->send_cq()->comp_vector(), qp->recv_cq()->comp_vector());
    std::uint32_t used = 0;
    for (const auto& st : dev.cq_pool_stats()) used += st.cqe_used;
    EXPECT_EQ(used, 40u + 24u);
    if (qp->send_cq() == qp->recv_cq()) {
      EXPECT_EQ(dev.cq_pool_stats()[qp->send_cq()->comp_vector()].cqe_used, 64u);
    }
  }
  for (const auto& st : dev.cq_pool_stats()) EXPECT_EQ(st.cqe_used, 0u) << "returned on destroy";
  // Round robin without a hint.
  init.affinity_hint = -1;
  auto a = pd.create_qp(init).value();
  auto b = pd.create_qp(init).value();
  if (dev.cq_pool_stats().size() >= 2 && std::thread::hardware_concurrency() >= 2) {
    EXPECT_NE(a->send_cq()->comp_vector(), b->send_cq()->comp_vector());
  }
  // The flag takes no CQs from the caller; unknown flags are refused.
  auto own = dev.create_cq(CqInit{.cqe = 8}).value();
  init.send_cq = own.get();
  EXPECT_EQ(pd.create_qp(init).error().code, EINVAL);
  init.send_cq = nullptr;
  init.create_flags = 1u << 7;
  EXPECT_EQ(pd.create_qp(init).error().code, EINVAL);
}

}  // namespace
}  // namespace srdma
