// A program that uses softrdma as a library: it links softrdma::softrdma and
// sees include/ only (no internal include root), so this file compiling is
// the proof that the public headers stand alone. It also runs: an RDMA
// WRITE between two devices and the counters that saw it.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "srdma/access.h"
#include "srdma/device.h"

#if __has_include("hca/soft_hca.h") || __has_include("core/device_impl.h")
#error "a consumer of the library must not see its internal headers"
#endif

namespace srdma {
namespace {

TEST(PublicApi, WriteBetweenTwoDevicesAndItsCounters) {
  Profile p;
  p.num_mpt = 1 << 10;
  p.num_mtt_segs = 1 << 12;
  p.num_qp = 64;
  p.num_cq = 64;
  p.num_comp_vectors = 1;
  auto profile = validate_profile(p);
  ASSERT_TRUE(profile);
  struct Node {
    Device dev;
    ProtectionDomain pd;
    std::vector<std::uint8_t> buf = std::vector<std::uint8_t>(4096);
    MemoryRegion mr;
    std::unique_ptr<CompletionQueue> cq;
    std::unique_ptr<QueuePair> qp;
  };
  auto make = [&](Node& n) {
    n.dev = Device::open(*profile).value();
    n.pd = n.dev.alloc_pd().value();
    n.mr = n.pd.reg_mr(n.buf.data(), n.buf.size(), kAccessAll).value();
    n.cq = n.dev.create_cq(CqInit{.cqe = 16}).value();
    n.qp = n.pd.create_qp(QpInitAttr{n.cq.get(), n.cq.get(), QpCaps{8, 8, 1, 1, 0}, false, nullptr}).value();
  };
  Node a, b;
  make(a);
  make(b);
  ASSERT_TRUE(a.qp->connect(RcConnection{.peer_addr = b.dev.address(), .peer_qpn = b.qp->qp_num(), .access = kAccessAll}));
  ASSERT_TRUE(b.qp->connect(RcConnection{.peer_addr = a.dev.address(), .peer_qpn = a.qp->qp_num(), .access = kAccessAll}));
  std::memcpy(a.buf.data(), "public", 6);
  Sge sge{reinterpret_cast<std::uint64_t>(a.buf.data()), 6, a.mr.lkey()};
  SendWr w;
  w.opcode = WrOpcode::kRdmaWrite;
  w.sg_list = &sge;
  w.num_sge = 1;
  w.send_flags = SEND_SIGNALED;
  w.remote_addr = reinterpret_cast<std::uint64_t>(b.buf.data());
  w.rkey = b.mr.rkey();
  ASSERT_TRUE(a.qp->post_send(w));
  Wc wc;
  int got = 0;
  for (int i = 0; i < 10000000 && got == 0; ++i) got = a.cq->poll(std::span<Wc>(&wc, 1));
  ASSERT_EQ(got, 1);
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(b.buf.data(), "public", 6), 0);
  EXPECT_EQ(a.qp->counters().requests_sent, 1u);
  EXPECT_EQ(b.dev.counters().requests_received, 1u);
}

}  // namespace
}  // namespace srdma
