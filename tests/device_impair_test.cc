// Device::impair through the public verbs: when it may be called, what it
// refuses, and RC transfers across an impaired link that arrive intact
// while the counters show the recovery it took.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "connected_pair.h"
#include "srdma/access.h"
#include "srdma/device.h"
#include "test_profile.h"
#include "wait.h"

namespace srdma {
namespace {

using test::PairNode;

Profile small_profile() {
  Profile p = test::small_profile();
  p.num_comp_vectors = 1;
  return p;
}

// A node of these tests: a 64 KiB buffer, a CQ of 64 and a QP of 32 WRs
// and one SGE each way, on a device that sends through `impair`.
PairNode node(const ImpairSpec& impair = {}) {
  return PairNode(
      {.profile = small_profile(), .impair = impair, .buf_bytes = 64 * 1024, .cq = {.cqe = 64}, .caps = {32, 32, 1, 1, 0}});
}

void connect(PairNode& a, PairNode& b, std::uint32_t mtu) {
  // A short transport timeout: a lost last packet costs one timeout.
  test::connect(a, b, {.access = kAccessAll, .path_mtu = mtu, .timeout = 8});  // 4.096 us * 2^8 ~ 1 ms
}

ImpairSpec lossy(double loss, std::uint64_t seed) {
  ImpairSpec s;
  s.loss = loss;
  s.seed = seed;
  return s;
}

TEST(DeviceImpair, RefusedOnceTheDeviceHasAQpAndForABadSpec) {
  PairNode n = node();
  auto r = n.dev.impair(lossy(0.1, 1));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EBUSY) << r.error().to_string();
  EXPECT_EQ(n.dev.impair_stats(), ImpairStats{});

  auto fresh = Device::open(small_profile()).value();
  ImpairSpec bad;
  bad.loss = 1.0;
  r = fresh.impair(bad);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EINVAL);
  EXPECT_NE(r.error().reason.find("loss"), std::string::npos) << r.error().reason;
  bad = ImpairSpec{};
  bad.reorder_depth = 0;
  EXPECT_EQ(fresh.impair(bad).error().code, EINVAL);
  EXPECT_TRUE(fresh.impair(lossy(0.1, 1)));
  EXPECT_TRUE(fresh.impair(ImpairSpec{}));  // back to the plain link
  ASSERT_TRUE(fresh.remove());
  EXPECT_EQ(fresh.impair(lossy(0.1, 1)).error().code, ENODEV);
}

// WRITEs and READs of several packets each across a link that loses,
// duplicates, reorders and corrupts packets in both directions: every byte
// arrives, and the transport counters show how.
TEST(DeviceImpair, RcTransfersSurviveAnImpairedLink) {
  ImpairSpec spec;
  spec.loss = 0.05;
  spec.dup = 0.02;
  spec.reorder = 0.05;
  spec.corrupt = 0.02;
  spec.seed = 11;
  PairNode a = node(spec), b = node(spec);
  connect(a, b, 256);
  constexpr std::size_t kLen = 4096;  // 16 packets at MTU 256
  std::uint32_t wrs = 0;
  for (std::uint32_t round = 0; round < 40; ++round) {
    const std::size_t off = (round % 8) * kLen;
    for (std::size_t i = 0; i < kLen; ++i) a.buf[off + i] = static_cast<std::uint8_t>(i * 7 + round);
    Sge sge{reinterpret_cast<std::uint64_t>(a.buf.data() + off), kLen, a.mr.lkey()};
    SendWr w;
    w.opcode = round % 2 ? WrOpcode::kRdmaRead : WrOpcode::kRdmaWrite;
    w.sg_list = &sge;
    w.num_sge = 1;
    w.send_flags = SEND_SIGNALED;
    w.wr_id = round;
    w.remote_addr = reinterpret_cast<std::uint64_t>(b.buf.data() + off);
    w.rkey = b.mr.rkey();
    if (w.opcode == WrOpcode::kRdmaRead)  // read back what b holds there
      for (std::size_t i = 0; i < kLen; ++i) b.buf[off + i] = static_cast<std::uint8_t>(i * 7 + round);
    ASSERT_TRUE(a.qp->post_send(w));
    Wc wc = test::poll_one(*a.cq);
    ASSERT_EQ(wc.status, WcStatus::kSuccess) << "round " << round << ": " << wc_status_str(wc.status);
    ++wrs;
    ASSERT_EQ(std::memcmp(a.buf.data() + off, b.buf.data() + off, kLen), 0) << "round " << round;
  }
  const ImpairStats sa = a.dev.impair_stats(), sb = b.dev.impair_stats();
  EXPECT_GT(sa.passed + sa.dropped, wrs * 8u);
  EXPECT_GT(sa.dropped + sb.dropped, 0u);
  EXPECT_GT(a.dev.counters().retransmissions, 0u);
}

// The NVMe-oF pattern: RDMA READs, unsignaled RDMA WRITEs each followed by
// a SEND, several in flight, and the peer's receives. Across a lossy link
// every SEND arrives exactly once and in order, and every signaled WR
// completes.
TEST(DeviceImpair, EverySendArrivesOnceAcrossALossyLink) {
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    PairNode a = node(lossy(0.03, seed)), b = node(lossy(0.03, seed + 100));
    connect(a, b, 4096);
    constexpr std::uint32_t kMsgs = 400, kWindow = 8, kRecvs = 16;
    constexpr std::size_t kSlot = 64;
    auto post_recv = [&](std::uint32_t i) {
      Sge sge{reinterpret_cast<std::uint64_t>(b.buf.data() + 32768 + (i % kRecvs) * kSlot), kSlot, b.mr.lkey()};
      RecvWr r;
      r.wr_id = i;
      r.sg_list = &sge;
      r.num_sge = 1;
      ASSERT_TRUE(b.qp->post_recv(r));
    };
    for (std::uint32_t i = 0; i < kRecvs; ++i) post_recv(i);
    // The window bounds what a's send queue holds (32 WRs, up to 3 a
    // message) by the SENDs a saw acknowledged, not only those b received:
    // a lost ACK keeps a received message's WRs queued on a (TSan's
    // slowness once overflowed the queue that way).
    std::uint32_t sent = 0, received = 0, completed = 0, signaled = 0, acked = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while ((received < kMsgs || completed < signaled) && std::chrono::steady_clock::now() < deadline) {
      if (sent < kMsgs && sent - received < kWindow && sent - acked < kWindow) {
        const std::uint32_t i = sent++;
        std::memcpy(a.buf.data() + 1024 + (i % kWindow) * 8, &i, sizeof i);
        Sge rd{reinterpret_cast<std::uint64_t>(a.buf.data() + 2048), 512, a.mr.lkey()};
        Sge data{reinterpret_cast<std::uint64_t>(a.buf.data()), 512, a.mr.lkey()};
        Sge msg{reinterpret_cast<std::uint64_t>(a.buf.data() + 1024 + (i % kWindow) * 8), sizeof i, a.mr.lkey()};
        SendWr r, w, m;
        r.opcode = WrOpcode::kRdmaRead;
        r.sg_list = &rd;
        r.num_sge = 1;
        r.send_flags = SEND_SIGNALED;
        r.wr_id = 1'000'000 + i;
        r.remote_addr = reinterpret_cast<std::uint64_t>(b.buf.data() + 4096);
        r.rkey = b.mr.rkey();
        r.next = &w;
        w.opcode = WrOpcode::kRdmaWrite;
        w.sg_list = &data;
        w.num_sge = 1;
        w.remote_addr = reinterpret_cast<std::uint64_t>(b.buf.data());
        w.rkey = b.mr.rkey();
        w.next = &m;
        m.opcode = WrOpcode::kSend;
        m.sg_list = &msg;
        m.num_sge = 1;
        m.send_flags = SEND_SIGNALED;
        m.wr_id = i;
        ASSERT_TRUE(a.qp->post_send(i % 3 == 0 ? r : w));
        signaled += i % 3 == 0 ? 2 : 1;
      }
      Wc wc[8];
      const int n = b.cq->poll(std::span<Wc>(wc));
      for (int k = 0; k < n; ++k) {
        if (wc[k].opcode != WcOpcode::kRecv) {  // a's completions (one CQ per node)
          continue;
        }
        ASSERT_EQ(wc[k].status, WcStatus::kSuccess) << "seed " << seed;
        std::uint32_t got;
        std::memcpy(&got, b.buf.data() + 32768 + (wc[k].wr_id % kRecvs) * kSlot, sizeof got);
        ASSERT_EQ(got, received) << "seed " << seed << ": receive " << received << " holds message " << got;
        ++received;
        post_recv(static_cast<std::uint32_t>(wc[k].wr_id) + kRecvs);
      }
      const int c = a.cq->poll(std::span<Wc>(wc));
      for (int k = 0; k < c; ++k) {
        ASSERT_EQ(wc[k].status, WcStatus::kSuccess) << "seed " << seed << " wr " << wc[k].wr_id;
        ++completed;
        if (wc[k].wr_id < 1'000'000) ++acked;  // a SEND: its message's WRs are off the queue
      }
    }
    EXPECT_EQ(received, kMsgs) << "seed " << seed;
    EXPECT_EQ(completed, signaled) << "seed " << seed;
  }
}

}  // namespace
}  // namespace srdma
