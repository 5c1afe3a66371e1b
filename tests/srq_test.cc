// Shared receive queues (srdma/srq.h): RC QPs that take their receives from
// one SRQ, over the in-process and the RoCEv2 link; the SRQ's limits,
// resize and limit event; QPs sharing it from several threads.
#include <gtest/gtest.h>

#include <atomic>
#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "connected_pair.h"
#include "link_nodes.h"

namespace srdma::test {
namespace {

class Srq : public ::testing::TestWithParam<LinkKind> {};

// The RC QPs' path: every access, MTU 1024.
const RcConnection kPath{.access = kAccessAll, .path_mtu = 1024};

std::unique_ptr<SharedReceiveQueue> make_srq(LinkNode& n, std::uint32_t max_wr, std::uint32_t limit = 0,
                                             void* context = nullptr) {
  auto s = n.pd.create_srq(SrqInitAttr{max_wr, 2, limit, context});
  EXPECT_TRUE(s) << s.error().reason;
  return std::move(*s);
}

TEST_P(Srq, TwoQpsTakeTheirReceivesFromOneSrqEachCompletingOnItsOwnCq) {
  LinkNode a(GetParam(), 1), b(GetParam(), 2);
  auto srq = make_srq(b, 16, 0, &b);
  EXPECT_EQ(srq->context(), &b);
  auto rcq2 = b.dev.create_cq(CqInit{.cqe = 64}).value();
  auto a1 = a.rc_qp(), a2 = a.rc_qp();
  auto b1 = b.rc_qp(srq.get()), b2 = b.rc_qp(srq.get(), rcq2.get());
  EXPECT_EQ(srq->usecnt(), 2);
  connect_qps(*a1, a.dev, *b1, b.dev, kPath);
  connect_qps(*a2, a.dev, *b2, b.dev, kPath);
  constexpr int kEach = 4;
  for (int i = 0; i < 2 * kEach; ++i) {
    const Sge s = b.sge(i * 2048, 2048);
    ASSERT_TRUE(srq->post_recv(recv_wr(100 + i, s)));
  }
  // Each message is 1500 bytes (two packets at MTU 1024) of its QP's byte.
  std::memset(a.buf.data(), 0x11, 1500);
  std::memset(a.buf.data() + 4096, 0x22, 1500);
  const Sge s1 = a.sge(0, 1500), s2 = a.sge(4096, 1500);
  for (int i = 0; i < kEach; ++i) {
    ASSERT_TRUE(a1->post_send(send_wr(i, s1)));
    ASSERT_TRUE(a2->post_send(send_wr(i, s2)));
  }
  auto sent = poll_n(*a.scq, 2 * kEach);
  ASSERT_EQ(sent.size(), 2u * kEach);
  for (const Wc& wc : sent) EXPECT_EQ(wc.status, WcStatus::kSuccess) << wc_status_str(wc.status);
  auto r1 = poll_n(*b.rcq, kEach), r2 = poll_n(*rcq2, kEach);
  ASSERT_EQ(r1.size(), std::size_t{kEach});
  ASSERT_EQ(r2.size(), std::size_t{kEach});
  std::set<std::uint64_t> ids;
  auto check = [&](const std::vector<Wc>& wcs, const QueuePair& qp, std::uint8_t byte) {
    for (const Wc& wc : wcs) {
      EXPECT_EQ(wc.status, WcStatus::kSuccess);
      EXPECT_EQ(wc.opcode, WcOpcode::kRecv);
      EXPECT_EQ(wc.qp_num, qp.qp_num());
      EXPECT_EQ(wc.byte_len, 1500u);
      EXPECT_TRUE(ids.insert(wc.wr_id).second) << "WR " << wc.wr_id << " completed twice";
      const std::size_t slot = (wc.wr_id - 100) * 2048;
      EXPECT_TRUE(std::all_of(b.buf.begin() + slot, b.buf.begin() + slot + 1500, [&](auto v) { return v == byte; }));
    }
  };
  check(r1, *b1, 0x11);
  check(r2, *b2, 0x22);
  EXPECT_EQ(srq->query().max_wr, 16u);
}

TEST_P(Srq, AQpWithAnSrqRefusesPostRecvAndAnEmptySrqIsRnr) {
  LinkNode a(GetParam(), 1), b(GetParam(), 2);
  auto srq = make_srq(b, 4);
  auto qa = a.rc_qp(), qb = b.rc_qp(srq.get());
  connect_qps(*qa, a.dev, *qb, b.dev, kPath);
  const Sge s = b.sge(0, 64);
  const RecvWr w = recv_wr(1, s);
  const RecvWr* bad = nullptr;
  auto r = qb->post_recv(w, &bad);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EINVAL);
  EXPECT_EQ(bad, &w);
  // No receive in the SRQ: the sender is told RNR until one is posted.
  const Sge ss = a.sge(0, 8);
  ASSERT_TRUE(qa->post_send(send_wr(7, ss)));
  ASSERT_TRUE(eventually([&] {
    b.dev.progress();
    a.dev.progress();
    return qb->counters().rnr_naks_sent > 0;
  }));
  ASSERT_TRUE(srq->post_recv(w));
  EXPECT_EQ(poll_one(*a.scq).status, WcStatus::kSuccess);
  const Wc got = poll_one(*b.rcq);
  EXPECT_EQ(got.wr_id, 1u);
  EXPECT_EQ(got.qp_num, qb->qp_num());
}

INSTANTIATE_TEST_SUITE_P(Links, Srq, ::testing::Values(LinkKind::kInproc, LinkKind::kUdp, LinkKind::kSameHost), link_name);

TEST(SrqApi, LimitsComeFromTheDeviceAndAreEnforcedNamingTheField) {
  LinkNode n(LinkKind::kInproc, 1);
  const DeviceAttr d = n.dev.query();
  EXPECT_EQ(d.max_srq_wr, d.max_qp_wr);
  EXPECT_EQ(d.max_srq_sge, d.max_sge);
  EXPECT_EQ(d.max_srq, 63u);  // the QP table's size, SRQN 0 reserved
  auto big = n.pd.create_srq(SrqInitAttr{d.max_srq_wr + 1, 1, 0, nullptr});
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code, EINVAL);
  EXPECT_NE(big.error().reason.find("max_wr"), std::string::npos) << big.error().reason;
  auto wide = n.pd.create_srq(SrqInitAttr{8, d.max_srq_sge + 1, 0, nullptr});
  ASSERT_FALSE(wide);
  EXPECT_NE(wide.error().reason.find("max_sge"), std::string::npos) << wide.error().reason;
  auto limit = n.pd.create_srq(SrqInitAttr{8, 1, 9, nullptr});
  ASSERT_FALSE(limit);
  EXPECT_NE(limit.error().reason.find("srq_limit"), std::string::npos) << limit.error().reason;
  EXPECT_EQ(n.pd.create_srq(SrqInitAttr{0, 1, 0, nullptr}).error().code, EINVAL);
}

TEST(SrqApi, PostRecvRefusesBadWrsAndAFullQueueNamingTheFirstNotPosted) {
  LinkNode n(LinkKind::kInproc, 1);
  auto srq = make_srq(n, 2);
  Sge sges[3] = {n.sge(0, 8), n.sge(8, 8), n.sge(16, 8)};
  RecvWr w = recv_wr(1, sges[0]);
  w.num_sge = 3;  // max_sge is 2
  const RecvWr* bad = nullptr;
  EXPECT_EQ(srq->post_recv(w, &bad).error().code, EINVAL);
  EXPECT_EQ(bad, &w);
  RecvWr null_list;
  null_list.num_sge = 1;
  bad = nullptr;
  EXPECT_EQ(srq->post_recv(null_list, &bad).error().code, EINVAL);
  EXPECT_EQ(bad, &null_list);
  RecvWr chain[3] = {recv_wr(1, sges[0]), recv_wr(2, sges[1]), recv_wr(3, sges[2])};
  chain[0].next = &chain[1];
  chain[1].next = &chain[2];
  bad = nullptr;
  auto r = srq->post_recv(chain[0], &bad);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ENOMEM);
  EXPECT_EQ(bad, &chain[2]);
}

TEST(SrqApi, ModifyResizesAndArmsWithinLimits) {
  LinkNode n(LinkKind::kInproc, 1);
  auto srq = make_srq(n, 4);
  const Sge s = n.sge(0, 8);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(srq->post_recv(recv_wr(i, s)));
  EXPECT_EQ(srq->post_recv(recv_wr(9, s)).error().code, ENOMEM);
  ASSERT_TRUE(srq->modify(SrqAttr{.max_wr = 8}, SRQ_MAX_WR));
  EXPECT_EQ(srq->query().max_wr, 8u);
  for (int i = 4; i < 8; ++i) ASSERT_TRUE(srq->post_recv(recv_wr(i, s)));
  EXPECT_EQ(srq->post_recv(recv_wr(9, s)).error().code, ENOMEM);
  EXPECT_EQ(srq->modify(SrqAttr{.max_wr = 4}, SRQ_MAX_WR).error().code, EINVAL) << "below the WRs posted";
  EXPECT_EQ(srq->modify(SrqAttr{.srq_limit = 9}, SRQ_LIMIT).error().code, EINVAL) << "above max_wr";
  EXPECT_EQ(srq->modify(SrqAttr{}, 1u << 5).error().code, EINVAL) << "unknown mask bit";
  EXPECT_EQ(srq->modify(SrqAttr{.max_wr = 16, .srq_limit = 17}, SRQ_MAX_WR | SRQ_LIMIT).error().code, EINVAL);
  EXPECT_EQ(srq->query().max_wr, 8u) << "a refused modify changes nothing";
  ASSERT_TRUE(srq->modify(SrqAttr{.srq_limit = 3}, SRQ_LIMIT));
  EXPECT_EQ(srq->query().srq_limit, 3u);
  EXPECT_EQ(srq->query().max_sge, 2u);
}

TEST(SrqApi, DestroyIsRefusedWhileQpsUseItAndThePdWhileTheSrqLives) {
  LinkNode n(LinkKind::kInproc, 1);
  auto srq = make_srq(n, 4);
  auto qp = n.rc_qp(srq.get());
  EXPECT_EQ(srq->destroy().error().code, EBUSY);
  qp.reset();
  EXPECT_EQ(srq->usecnt(), 0);
  EXPECT_EQ(n.pd.usecnt(), 2);  // the MR and the SRQ
  ASSERT_TRUE(srq->destroy());
  EXPECT_EQ(srq->destroy().error().code, EINVAL);
  EXPECT_EQ(n.pd.usecnt(), 1);
}

// The device's async events, collected.
struct Events {
  std::mutex mu;
  std::vector<AsyncEvent> seen;
  explicit Events(Device& dev) {
    dev.set_async_event_handler([this](const AsyncEvent& e) {
      std::lock_guard lock(mu);
      seen.push_back(e);
    });
  }
  std::size_t count(AsyncEventType t) {
    std::lock_guard lock(mu);
    return std::count_if(seen.begin(), seen.end(), [&](const AsyncEvent& e) { return e.type == t; });
  }
};

TEST_P(Srq, TheLimitEventFiresOnceWhenThePostedWrsDropBelowTheLimit) {
  LinkNode a(GetParam(), 1), b(GetParam(), 2);
  Events events(b.dev);
  auto srq = make_srq(b, 8);
  auto qa = a.rc_qp(), qb = b.rc_qp(srq.get());
  connect_qps(*qa, a.dev, *qb, b.dev, kPath);
  const Sge rs = b.sge(0, 64), ss = a.sge(0, 8);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(srq->post_recv(recv_wr(i, rs)));
  ASSERT_TRUE(srq->modify(SrqAttr{.srq_limit = 3}, SRQ_LIMIT));
  auto one_message = [&] {
    ASSERT_TRUE(qa->post_send(send_wr(0, ss)));
    ASSERT_EQ(poll_one(*a.scq).status, WcStatus::kSuccess);
    ASSERT_EQ(poll_one(*b.rcq).status, WcStatus::kSuccess);
    b.dev.flush_async_events();
  };
  one_message();  // 3 left: not below 3
  EXPECT_EQ(events.count(AsyncEventType::kSrqLimitReached), 0u);
  EXPECT_EQ(srq->query().srq_limit, 3u);
  one_message();  // 2 left
  ASSERT_EQ(events.count(AsyncEventType::kSrqLimitReached), 1u);
  EXPECT_EQ(srq->query().srq_limit, 0u) << "disarmed";
  {
    std::lock_guard lock(events.mu);
    const AsyncEvent& e = events.seen.back();
    EXPECT_EQ(e.context, srq.get());
    EXPECT_EQ(e.srqn, srq->srq_num());
    EXPECT_EQ(async_event_str(e.type), "SRQ limit reached");
  }
  one_message();  // 1 left: disarmed, nothing more
  EXPECT_EQ(events.count(AsyncEventType::kSrqLimitReached), 1u);
  // A QP attached to an SRQ that enters ERR reports its last WQE.
  ASSERT_TRUE(qb->modify(QpAttr{.qp_state = QpState::kErr}, QP_STATE));
  b.dev.flush_async_events();
  EXPECT_EQ(events.count(AsyncEventType::kQpLastWqeReached), 1u);
  EXPECT_EQ(srq->query().max_wr, 8u);
}

// Two senders on two threads, each to its own QP of b; both of b's QPs take
// from one SRQ (on the in-process link their responders run in the
// senders' threads, so the SRQ is taken from concurrently), while the
// main thread posts half the receives as they go (a sender that finds the
// SRQ empty is RNR-NAKed and retries).
TEST_P(Srq, TwoQpsShareAnSrqFromTwoThreads) {
  LinkNode a(GetParam(), 1), b(GetParam(), 2);
  constexpr int kEach = 200;
  auto srq = make_srq(b, 2 * kEach);
  auto rcq2 = b.dev.create_cq(CqInit{.cqe = 1024}).value();
  auto scq2 = a.dev.create_cq(CqInit{.cqe = 1024}).value();
  auto a1 = a.rc_qp();
  QpInitAttr second{scq2.get(), a.rcq.get(), QpCaps{64, 64, 2, 2, 64}, false, nullptr};
  auto a2 = a.pd.create_qp(second).value();
  auto b1 = b.rc_qp(srq.get()), b2 = b.rc_qp(srq.get(), rcq2.get());
  connect_qps(*a1, a.dev, *b1, b.dev, kPath);
  connect_qps(*a2, a.dev, *b2, b.dev, kPath);
  std::vector<Sge> rsges;
  for (int i = 0; i < 2 * kEach; ++i) rsges.push_back(b.sge(i * 16, 16));
  for (int i = 0; i < kEach; ++i) ASSERT_TRUE(srq->post_recv(recv_wr(i, rsges[i])));
  // Message i of sender t: the bytes (t, i / 256, i % 256).
  for (int t = 0; t < 2; ++t)
    for (int i = 0; i < kEach; ++i) {
      std::uint8_t* m = a.buf.data() + (t * kEach + i) * 16;
      m[0] = static_cast<std::uint8_t>(t);
      m[1] = static_cast<std::uint8_t>(i / 256);
      m[2] = static_cast<std::uint8_t>(i % 256);
    }
  std::atomic<bool> failed{false};
  auto sender = [&](int t, QueuePair& qp, CompletionQueue& scq) {
    int done = 0;
    for (int i = 0; i < kEach; ++i) {
      const Sge s = a.sge((t * kEach + i) * 16, 3);
      while (!qp.post_send(send_wr(i, s))) {  // ENOMEM: the send queue is full, reap
        Wc wc[16];
        const int k = scq.poll(std::span<Wc>(wc, 16));
        for (int j = 0; j < k; ++j) failed = failed || wc[j].status != WcStatus::kSuccess;
        done += k;
      }
    }
    while (done < kEach) {
      auto got = poll_n(scq, static_cast<std::size_t>(kEach - done));
      if (got.empty()) break;
      for (const Wc& wc : got) failed = failed || wc.status != WcStatus::kSuccess;
      done += static_cast<int>(got.size());
    }
    failed = failed || done != kEach;
  };
  std::thread t1(sender, 0, std::ref(*a1), std::ref(*a.scq)), t2(sender, 1, std::ref(*a2), std::ref(*scq2));
  for (int i = kEach; i < 2 * kEach; ++i) ASSERT_TRUE(srq->post_recv(recv_wr(i, rsges[i])));
  t1.join();
  t2.join();
  EXPECT_FALSE(failed);
  auto r1 = poll_n(*b.rcq, kEach), r2 = poll_n(*rcq2, kEach);
  ASSERT_EQ(r1.size(), std::size_t{kEach});
  ASSERT_EQ(r2.size(), std::size_t{kEach});
  std::set<std::uint64_t> ids;
  auto check = [&](const std::vector<Wc>& wcs, const QueuePair& qp, int t) {
    int next = 0;  // RC order: sender t's messages arrive in order
    for (const Wc& wc : wcs) {
      EXPECT_EQ(wc.status, WcStatus::kSuccess);
      EXPECT_EQ(wc.qp_num, qp.qp_num());
      EXPECT_TRUE(ids.insert(wc.wr_id).second);
      const std::uint8_t* m = b.buf.data() + wc.wr_id * 16;
      EXPECT_EQ(m[0], t);
      EXPECT_EQ(m[1] * 256 + m[2], next);
      ++next;
    }
  };
  check(r1, *b1, 0);
  check(r2, *b2, 1);
  EXPECT_EQ(ids.size(), 2u * kEach);
}

}  // namespace
}  // namespace srdma::test
