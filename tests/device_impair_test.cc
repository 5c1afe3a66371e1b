// Device::impair through the public verbs: when it may be called, what it
// refuses, and RC transfers across an impaired link that arrive intact
// while the counters show the recovery it took.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "srdma/access.h"
#include "srdma/device.h"
#include "wait.h"

namespace srdma {
namespace {

Profile small_profile() {
  Profile p;
  p.num_mpt = 1 << 10;
  p.num_mtt_segs = 1 << 12;
  p.num_qp = 64;
  p.num_cq = 64;
  p.num_comp_vectors = 1;
  return p;
}

struct Node {
  Device dev;
  ProtectionDomain pd;
  std::vector<std::uint8_t> buf = std::vector<std::uint8_t>(64 * 1024);
  MemoryRegion mr;
  std::unique_ptr<CompletionQueue> cq;
  std::unique_ptr<QueuePair> qp;

  explicit Node(const ImpairSpec& impair = {}) {
    dev = Device::open(small_profile()).value();
    EXPECT_TRUE(dev.impair(impair));
    pd = dev.alloc_pd().value();
    mr = pd.reg_mr(buf.data(), buf.size(), kAccessAll).value();
    cq = dev.create_cq(CqInit{.cqe = 64}).value();
    qp = pd.create_qp(QpInitAttr{cq.get(), cq.get(), QpCaps{32, 32, 1, 1, 0}, false, nullptr}).value();
  }
};

void connect(Node& a, Node& b, std::uint32_t mtu) {
  // A short transport timeout: a lost last packet costs one timeout.
  RcConnection c{.peer_addr = b.dev.address(), .peer_qpn = b.qp->qp_num(), .access = kAccessAll, .path_mtu = mtu};
  c.timeout = 8;  // 4.096 us * 2^8 ~ 1 ms
  ASSERT_TRUE(a.qp->connect(c));
  c.peer_addr = a.dev.address();
  c.peer_qpn = a.qp->qp_num();
  ASSERT_TRUE(b.qp->connect(c));
}

ImpairSpec lossy(double loss, std::uint64_t seed) {
  ImpairSpec s;
  s.loss = loss;
  s.seed = seed;
  return s;
}

TEST(DeviceImpair, RefusedOnceTheDeviceHasAQpAndForABadSpec) {
  Node n;
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
  Node a(spec), b(spec);
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

}  // namespace
}  // namespace srdma
