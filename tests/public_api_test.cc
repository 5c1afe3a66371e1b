// A program that uses softrdma as a library: it links softrdma::softrdma and
// sees include/ only (no internal include root), so this file compiling is
// the proof that the public headers stand alone (the tests' connected pair,
// connected_pair.h, uses them alone too). It also runs: an RDMA
// WRITE between two devices and the counters that saw it.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "connected_pair.h"
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
  // One CQ of 16 and a QP of 8 WRs and one SGE each way, a 4 KiB buffer.
  const test::PairNode::Options o{.profile = *profile, .buf_bytes = 4096, .cq = {.cqe = 16}, .caps = {8, 8, 1, 1, 0}};
  test::PairNode a(o), b(o);
  test::connect(a, b, {.access = kAccessAll});
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
