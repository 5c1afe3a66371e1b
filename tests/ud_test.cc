// UD queue pairs and address handles: datagrams between devices over the
// in-process and the RoCEv2 link, the GRH area in front of the payload,
// many senders to one QP, and what is dropped (and counted) instead of
// answered: a wrong Q_Key, no receive posted, a receive too short.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "link_nodes.h"

namespace srdma::test {
namespace {

constexpr std::uint32_t kQkey = 0x11111111;

class Ud : public ::testing::TestWithParam<LinkKind> {};

std::uint16_t be16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] << 8 | p[1]); }
std::uint32_t be32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3];
}
std::uint32_t ipv4_of(std::uint64_t addr) {
  return is_roce_address(addr) ? roce_ipv4(addr) : static_cast<std::uint32_t>(addr);
}

SendWr ud_send(std::uint64_t wr_id, const Sge& s, AddressHandle& ah, std::uint32_t qpn, std::uint32_t qkey = kQkey) {
  SendWr w = send_wr(wr_id, s);
  w.ud.ah = &ah;
  w.ud.remote_qpn = qpn;
  w.ud.remote_qkey = qkey;
  return w;
}

// Waits until `n`'s QPs dropped `count` packets for `why` (the drop
// happened: a check that nothing was received may follow).
bool dropped(LinkNode& n, DropReason why, std::uint64_t count) {
  return eventually([&] {
    n.dev.progress();
    return n.dev.counters().dropped_for(why) >= count;
  });
}

TEST_P(Ud, ADatagramArrivesBehindItsGrhAreaFromAnySender) {
  LinkNode a(GetParam(), 1), b(GetParam(), 2), c(GetParam(), 3);
  auto qa = a.ud_qp(kQkey), qb = b.ud_qp(kQkey), qc = c.ud_qp(0x2222);
  auto ah_ab = a.pd.create_ah(AhAttr{.dest_addr = b.dev.address(), .hop_limit = 7, .traffic_class = 0x20}).value();
  auto ah_cb = c.pd.create_ah(AhAttr{.dest_addr = b.dev.address()}).value();
  for (int i = 0; i < 2; ++i) {
    const Sge r = b.sge(i * 8192, 8192);
    ASSERT_TRUE(qb->post_recv(recv_wr(10 + i, r)));
  }
  const std::uint32_t len = 1000;
  for (std::uint32_t i = 0; i < len; ++i) a.buf[i] = static_cast<std::uint8_t>(i * 7);
  std::memset(c.buf.data(), 0xcc, 64);
  const Sge sa = a.sge(0, len), sc = c.sge(0, 64);
  SendWr wa = ud_send(1, sa, *ah_ab, qb->qp_num());
  wa.opcode = WrOpcode::kSendWithImm;
  wa.imm_data = 0xfeedbeef;
  ASSERT_TRUE(qa->post_send(wa));
  const Wc sent = poll_one(*a.scq);
  EXPECT_EQ(sent.status, WcStatus::kSuccess);
  EXPECT_EQ(sent.wr_id, 1u);
  EXPECT_EQ(sent.byte_len, len);
  const Wc r1 = poll_one(*b.rcq);
  // Another device sends too, with its QP's own Q_Key ... which is not b's:
  // the high bit asks for the QP's (IBA 10.2.4), so c's first datagram is
  // dropped; one with b's Q_Key arrives.
  ASSERT_TRUE(qc->post_send(ud_send(2, sc, *ah_cb, qb->qp_num(), 0x80000000)));
  ASSERT_TRUE(dropped(b, DropReason::kBadKey, 1));
  ASSERT_TRUE(qc->post_send(ud_send(3, sc, *ah_cb, qb->qp_num())));
  auto sent_c = poll_n(*c.scq, 2);
  ASSERT_EQ(sent_c.size(), 2u);
  const Wc r2 = poll_one(*b.rcq);

  EXPECT_EQ(r1.status, WcStatus::kSuccess);
  EXPECT_EQ(r1.wr_id, 10u);
  EXPECT_EQ(r1.opcode, WcOpcode::kRecv);
  EXPECT_EQ(r1.byte_len, kGrh + len);
  EXPECT_EQ(r1.wc_flags, std::uint32_t{WC_GRH | WC_WITH_IMM});
  EXPECT_EQ(r1.imm_data, 0xfeedbeefu);
  EXPECT_EQ(r1.qp_num, qb->qp_num());
  EXPECT_EQ(r1.src_qp, qa->qp_num());
  EXPECT_EQ(r1.slid, static_cast<std::uint16_t>(a.dev.address()));
  EXPECT_EQ(r1.pkey_index, 0);
  EXPECT_EQ(r2.wr_id, 11u);
  EXPECT_EQ(r2.src_qp, qc->qp_num());
  EXPECT_EQ(r2.byte_len, kGrh + 64);
  EXPECT_EQ(r2.wc_flags, std::uint32_t{WC_GRH});

  // The GRH area: 20 zero bytes, then the IPv4 header of the datagram.
  const std::uint8_t* g = b.buf.data();
  for (int i = 0; i < 20; ++i) EXPECT_EQ(g[i], 0) << "byte " << i;
  const std::uint8_t* ip = g + 20;
  EXPECT_EQ(ip[0], 0x45);
  // IPv4 + UDP + BTH + DETH + ImmDt + payload (1000: no pad) + ICRC.
  EXPECT_EQ(be16(ip + 2), 20 + 8 + 12 + 8 + 4 + len + 4);
  EXPECT_EQ(ip[9], 17);
  EXPECT_EQ(be32(ip + 12), ipv4_of(a.dev.address()));
  EXPECT_EQ(be32(ip + 16), ipv4_of(b.dev.address()));
  std::uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += be16(ip + i);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  EXPECT_EQ(sum, 0xffffu) << "the header checksum holds";
  // On UDP: the TTL and TOS the datagram arrived with, which it left with.
  EXPECT_EQ(ip[8], 7) << "the AH's hop limit";
  EXPECT_EQ(ip[1], 0x20) << "the AH's traffic class";
  EXPECT_EQ(std::memcmp(b.buf.data() + kGrh, a.buf.data(), len), 0);
  EXPECT_EQ(b.buf[8192 + kGrh], 0xcc);
  // No answers: UD is never acknowledged.
  EXPECT_EQ(qa->counters().responses_received, 0u);
  EXPECT_EQ(qb->counters().responses_sent, 0u);
}

TEST_P(Ud, WhatCannotBeReceivedIsDroppedAndCounted) {
  LinkNode a(GetParam(), 1), b(GetParam(), 2);
  auto qa = a.ud_qp(kQkey), qb = b.ud_qp(kQkey);
  auto ah = a.pd.create_ah(AhAttr{.dest_addr = b.dev.address()}).value();
  const Sge s8 = a.sge(0, 8), s20 = a.sge(0, 20);
  a.buf[0] = 1;
  // No receive posted: dropped (no RNR on UD), the send completes anyway.
  ASSERT_TRUE(qa->post_send(ud_send(1, s8, *ah, qb->qp_num())));
  EXPECT_EQ(poll_one(*a.scq).status, WcStatus::kSuccess);
  ASSERT_TRUE(dropped(b, DropReason::kNoReceive, 1));
  // A wrong Q_Key.
  const Sge r = b.sge(0, kGrh + 10);
  ASSERT_TRUE(qb->post_recv(recv_wr(7, r)));
  ASSERT_TRUE(qa->post_send(ud_send(2, s8, *ah, qb->qp_num(), kQkey + 1)));
  ASSERT_TRUE(dropped(b, DropReason::kBadKey, 1));
  // Too long for the receive (40 + 10 bytes): dropped, the WQE stays.
  ASSERT_TRUE(qa->post_send(ud_send(3, s20, *ah, qb->qp_num())));
  ASSERT_TRUE(dropped(b, DropReason::kBadLength, 1));
  // An unknown QPN on the device.
  ASSERT_TRUE(qa->post_send(ud_send(4, s8, *ah, 0xabcde)));
  ASSERT_TRUE(dropped(b, DropReason::kUnknownQp, 1));
  // Every drop above happened before this: the one completion is its.
  a.buf[0] = 5;
  ASSERT_TRUE(qa->post_send(ud_send(5, s8, *ah, qb->qp_num())));
  auto sent = poll_n(*a.scq, 4);
  ASSERT_EQ(sent.size(), 4u);
  for (const Wc& wc : sent) EXPECT_EQ(wc.status, WcStatus::kSuccess);
  const Wc got = poll_one(*b.rcq);
  EXPECT_EQ(got.wr_id, 7u);
  EXPECT_EQ(got.byte_len, kGrh + 8);
  EXPECT_EQ(b.buf[kGrh], 5);
  Wc more;
  EXPECT_EQ(b.rcq->poll(std::span<Wc>(&more, 1)), 0);
  const TransportCounters c = qb->counters();
  EXPECT_EQ(c.dropped_for(DropReason::kNoReceive), 1u);
  EXPECT_EQ(c.dropped_for(DropReason::kBadKey), 1u);
  EXPECT_EQ(c.dropped_for(DropReason::kBadLength), 1u);
}

TEST_P(Ud, PostSendRefusesWhatADatagramCannotBe) {
  LinkNode a(GetParam(), 1), b(GetParam(), 2);
  auto qa = a.ud_qp(kQkey), qb = b.ud_qp(kQkey);
  auto ah = a.pd.create_ah(AhAttr{.dest_addr = b.dev.address()}).value();
  const std::uint32_t mtu = a.dev.query_port().active_mtu;
  const Sge big = a.sge(0, mtu + 1), fits = a.sge(0, mtu);
  SendWr w = ud_send(1, big, *ah, qb->qp_num());
  const SendWr* bad = nullptr;
  auto r = qa->post_send(w, &bad);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EINVAL);
  EXPECT_NE(r.error().reason.find("MTU"), std::string::npos) << r.error().reason;
  EXPECT_EQ(bad, &w);
  SendWr write = ud_send(2, fits, *ah, qb->qp_num());
  write.opcode = WrOpcode::kRdmaWrite;
  EXPECT_EQ(qa->post_send(write).error().code, EINVAL);
  SendWr no_ah = ud_send(3, fits, *ah, qb->qp_num());
  no_ah.ud.ah = nullptr;
  EXPECT_EQ(qa->post_send(no_ah).error().code, EINVAL);
  // An AH of another PD.
  ProtectionDomain other = a.dev.alloc_pd().value();
  auto foreign = other.create_ah(AhAttr{.dest_addr = b.dev.address()}).value();
  EXPECT_EQ(qa->post_send(ud_send(4, fits, *foreign, qb->qp_num())).error().code, EINVAL);
  // A whole MTU is one datagram.
  const Sge whole = b.sge(0, kGrh + mtu);
  ASSERT_TRUE(qb->post_recv(recv_wr(9, whole)));
  ASSERT_TRUE(qa->post_send(ud_send(5, fits, *ah, qb->qp_num())));
  EXPECT_EQ(poll_one(*b.rcq).byte_len, kGrh + mtu);
}

// QP1 on each device: the CM's MADs go from one GSI QP to the other, with
// the GSI's Q_Key, as 256-byte datagrams.
TEST_P(Ud, TheGsiQpIsQp1) {
  LinkNode a(GetParam(), 1), b(GetParam(), 2);
  auto ga = make_ud_qp(a, kGsiQkey, nullptr, QP_CREATE_GSI);
  auto gb = make_ud_qp(b, kGsiQkey, nullptr, QP_CREATE_GSI);
  ASSERT_TRUE(ga && gb);
  EXPECT_EQ(ga->qp_num(), kGsiQpn);
  EXPECT_EQ(gb->qp_num(), kGsiQpn);
  auto ordinary = a.ud_qp(kQkey);
  EXPECT_GT(ordinary->qp_num(), kGsiQpn) << "the allocator never hands out QP0 or QP1";

  QpInitAttr again{a.scq.get(), a.rcq.get(), QpCaps{8, 8, 1, 1, 0}, false, nullptr};
  again.qp_type = QpType::kUd;
  again.create_flags = QP_CREATE_GSI;
  EXPECT_EQ(a.pd.create_qp(again).error().code, EBUSY) << "one GSI QP per device";
  again.qp_type = QpType::kRc;
  EXPECT_EQ(a.pd.create_qp(again).error().code, EINVAL) << "the GSI QP is UD";

  auto ah = a.pd.create_ah(AhAttr{.dest_addr = b.dev.address()}).value();
  const Sge r = b.sge(0, kGrh + 256);
  ASSERT_TRUE(gb->post_recv(recv_wr(5, r)));
  for (int i = 0; i < 256; ++i) a.buf[i] = static_cast<std::uint8_t>(i);
  const Sge s = a.sge(0, 256);
  ASSERT_TRUE(ga->post_send(ud_send(6, s, *ah, kGsiQpn, kGsiQkey)));
  EXPECT_EQ(poll_one(*a.scq).status, WcStatus::kSuccess);
  const Wc got = poll_one(*b.rcq);
  EXPECT_EQ(got.status, WcStatus::kSuccess);
  EXPECT_EQ(got.qp_num, kGsiQpn);
  EXPECT_EQ(got.src_qp, kGsiQpn);
  EXPECT_EQ(got.byte_len, kGrh + 256);
  EXPECT_EQ(std::memcmp(b.buf.data() + kGrh, a.buf.data(), 256), 0);

  // Destroyed, QP1 can be created again (and the allocator kept it out).
  ga.reset();
  EXPECT_EQ(make_ud_qp(a, kGsiQkey, nullptr, QP_CREATE_GSI)->qp_num(), kGsiQpn);
}

INSTANTIATE_TEST_SUITE_P(Links, Ud, ::testing::Values(LinkKind::kInproc, LinkKind::kUdp, LinkKind::kSameHost), link_name);

TEST(UdApi, AnAddressHandleNeedsADestinationTheLinkReaches) {
  LinkNode n(LinkKind::kInproc, 1);
  auto unknown = n.pd.create_ah(AhAttr{.dest_addr = 0xdead0000beefull});
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, EINVAL);
  EXPECT_EQ(n.pd.create_ah(AhAttr{.dest_addr = n.dev.address(), .flow_label = 1u << 20}).error().code, EINVAL);
  auto ah = n.pd.create_ah(AhAttr{.dest_addr = n.dev.address(), .sl = 3});
  ASSERT_TRUE(ah);
  EXPECT_EQ((*ah)->attr().sl, 3);
  EXPECT_EQ(n.pd.usecnt(), 2);  // the MR and the AH
  EXPECT_EQ(n.pd.dealloc().error().code, EBUSY);
  ah->reset();
  EXPECT_EQ(n.pd.usecnt(), 1);

  LinkNode u(LinkKind::kUdp, 1);
  auto not_roce = u.pd.create_ah(AhAttr{.dest_addr = 5});
  ASSERT_FALSE(not_roce);
  EXPECT_EQ(not_roce.error().code, EINVAL);
  const std::uint64_t peer = roce_address(parse_ipv4(loopback_ip(2)).value());
  EXPECT_TRUE(u.pd.create_ah(AhAttr{.dest_addr = peer, .is_global = true,
                                    .dgid = gid_of_ipv4(roce_ipv4(peer))}));
  EXPECT_EQ(u.pd.create_ah(AhAttr{.dest_addr = peer, .is_global = true, .dgid = u.dev.query_port().gid})
                .error()
                .code,
            EINVAL)
      << "a DGID of another host";
}

TEST(UdApi, TransitionsTakeTheUdAttributes) {
  LinkNode n(LinkKind::kInproc, 1);
  auto qp = n.pd.create_qp(QpInitAttr{.send_cq = n.scq.get(), .recv_cq = n.rcq.get(), .cap = QpCaps{8, 8, 1, 1, 0},
                                      .qp_type = QpType::kUd})
                .value();
  QpAttr a;
  a.qp_state = QpState::kInit;
  auto r = qp->modify(a, QP_STATE | QP_PKEY_INDEX | QP_PORT);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().reason.find("QKEY"), std::string::npos) << r.error().reason;
  EXPECT_EQ(qp->modify(a, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_QKEY | QP_ACCESS_FLAGS).error().code, EINVAL);
  a.qkey = 0x1234;
  ASSERT_TRUE(qp->modify(a, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_QKEY));
  a.qp_state = QpState::kRtr;
  a.dest_addr = n.dev.address();
  EXPECT_EQ(qp->modify(a, QP_STATE | QP_AV).error().code, EINVAL) << "UD has no path";
  ASSERT_TRUE(qp->modify(a, QP_STATE));
  a.qp_state = QpState::kRts;
  EXPECT_EQ(qp->modify(a, QP_STATE).error().code, EINVAL) << "RTS needs SQ_PSN";
  EXPECT_EQ(qp->modify(a, QP_STATE | QP_SQ_PSN | QP_TIMEOUT).error().code, EINVAL);
  ASSERT_TRUE(qp->modify(a, QP_STATE | QP_SQ_PSN));
  EXPECT_EQ(qp->query().qkey, 0x1234u);
  EXPECT_EQ(qp->state(), QpState::kRts);
  EXPECT_EQ(n.pd.create_qp(QpInitAttr{.send_cq = n.scq.get(), .recv_cq = n.rcq.get(), .cap = QpCaps{8, 8, 1, 1, 0},
                                      .qp_type = static_cast<QpType>(7)})
                .error()
                .code,
            EINVAL);
}

// A UD QP may take its receives from an SRQ too.
TEST(UdApi, ADatagramCanLandInAnSrq) {
  LinkNode a(LinkKind::kInproc, 1), b(LinkKind::kInproc, 2);
  auto srq = b.pd.create_srq(SrqInitAttr{4, 1, 0, nullptr}).value();
  auto qa = a.ud_qp(kQkey), qb = b.ud_qp(kQkey, srq.get());
  auto ah = a.pd.create_ah(AhAttr{.dest_addr = b.dev.address()}).value();
  const Sge r = b.sge(0, 256), s = a.sge(0, 16);
  ASSERT_TRUE(srq->post_recv(recv_wr(3, r)));
  ASSERT_TRUE(qa->post_send(ud_send(1, s, *ah, qb->qp_num())));
  const Wc got = poll_one(*b.rcq);
  EXPECT_EQ(got.wr_id, 3u);
  EXPECT_EQ(got.qp_num, qb->qp_num());
  EXPECT_EQ(got.byte_len, kGrh + 16);
}

}  // namespace
}  // namespace srdma::test
