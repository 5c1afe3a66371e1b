// XRC at the public API (srdma/xrcd.h): a domain, an XRC SRQ in it, a TGT
// QP of it and an INI QP of a PD, over the in-process and the RoCEv2 link
// (there the XRCETH crosses the wire); the domain's lifetime rules.
#include <gtest/gtest.h>

#include <cstring>

#include "connected_pair.h"
#include "link_nodes.h"

namespace srdma::test {
namespace {

class Xrcd : public ::testing::TestWithParam<LinkKind> {};

std::unique_ptr<QueuePair> ini_qp(LinkNode& n) {
  QpInitAttr a{n.scq.get(), nullptr, QpCaps{64, 0, 2, 0, 64}, false, nullptr};
  a.qp_type = QpType::kXrcIni;
  return n.pd.create_qp(a).value();
}

std::unique_ptr<QueuePair> tgt_qp(XrcDomain& d) {
  QpInitAttr a;
  a.qp_type = QpType::kXrcTgt;
  auto q = d.create_tgt_qp(a);
  EXPECT_TRUE(q) << q.error().reason;
  return std::move(*q);
}

TEST_P(Xrcd, TwoTgtQpsOfOneDomainReceiveIntoTheSrqEachMessageNames) {
  LinkNode a(GetParam(), 1), b(GetParam(), 2);
  auto xrcd = b.dev.open_xrcd().value();
  SrqInitAttr si{16, 1, 0, nullptr};
  si.xrcd = xrcd.get();
  si.cq = b.rcq.get();
  auto srq = b.pd.create_srq(si).value();
  EXPECT_TRUE(srq->is_xrc());
  auto ini1 = ini_qp(a), ini2 = ini_qp(a);
  auto tgt1 = tgt_qp(*xrcd), tgt2 = tgt_qp(*xrcd);
  EXPECT_EQ(xrcd->usecnt(), 3);  // the SRQ and two TGT QPs
  EXPECT_EQ(xrcd->close().error().code, EBUSY);
  const RcConnection path{.access = kAccessAll, .path_mtu = 1024};
  connect_qps(*ini1, a.dev, *tgt1, b.dev, path);
  connect_qps(*ini2, a.dev, *tgt2, b.dev, path);
  for (int i = 0; i < 2; ++i) {
    const Sge s = b.sge(i * 4096, 4096);
    ASSERT_TRUE(srq->post_recv(recv_wr(100 + i, s)));
  }
  std::memset(a.buf.data(), 0x11, 1500);
  std::memset(a.buf.data() + 4096, 0x22, 1500);
  const Sge s1 = a.sge(0, 1500), s2 = a.sge(4096, 1500);
  SendWr w1 = send_wr(1, s1), w2 = send_wr(2, s2);
  w1.xrc.remote_srqn = w2.xrc.remote_srqn = srq->srq_num();
  ASSERT_TRUE(ini1->post_send(w1));
  ASSERT_TRUE(ini2->post_send(w2));
  auto sent = poll_n(*a.scq, 2);
  ASSERT_EQ(sent.size(), 2u);
  for (const Wc& c : sent) EXPECT_EQ(c.status, WcStatus::kSuccess) << wc_status_str(c.status);
  auto got = poll_n(*b.rcq, 2);
  ASSERT_EQ(got.size(), 2u);
  for (const Wc& c : got) {
    EXPECT_EQ(c.status, WcStatus::kSuccess);
    EXPECT_EQ(c.byte_len, 1500u);
    EXPECT_TRUE(c.qp_num == tgt1->qp_num() || c.qp_num == tgt2->qp_num());
    const std::uint8_t want = c.qp_num == tgt1->qp_num() ? 0x11 : 0x22;
    EXPECT_EQ(b.buf[(c.wr_id - 100) * 4096], want);
    EXPECT_EQ(b.buf[(c.wr_id - 100) * 4096 + 1499], want);
  }
  EXPECT_NE(got[0].qp_num, got[1].qp_num);
  // Gone in order: the domain closes once nothing uses it.
  tgt1.reset();
  tgt2.reset();
  EXPECT_EQ(xrcd->close().error().code, EBUSY);
  ASSERT_TRUE(srq->destroy());
  EXPECT_TRUE(xrcd->close());
  QpInitAttr again;
  again.qp_type = QpType::kXrcTgt;
  EXPECT_FALSE(xrcd->create_tgt_qp(again));
}

INSTANTIATE_TEST_SUITE_P(Links, Xrcd, ::testing::Values(LinkKind::kInproc, LinkKind::kUdp, LinkKind::kSameHost), link_name);

TEST(XrcdApi, AnOpenedTgtQpIsTheSameQpAndOutlivesItsCreator) {
  LinkNode a(LinkKind::kInproc, 1), b(LinkKind::kInproc, 2);
  auto xrcd = b.dev.open_xrcd().value(), other = b.dev.open_xrcd().value();
  SrqInitAttr si{4, 1, 0, nullptr};
  si.xrcd = xrcd.get();
  si.cq = b.rcq.get();
  auto srq = b.pd.create_srq(si).value();
  auto ini = ini_qp(a);
  auto tgt = tgt_qp(*xrcd);
  connect_qps(*ini, a.dev, *tgt, b.dev, RcConnection{.access = kAccessAll});
  auto opened = xrcd->open_tgt_qp(tgt->qp_num());
  ASSERT_TRUE(opened) << opened.error().reason;
  EXPECT_EQ((*opened)->qp_num(), tgt->qp_num());
  EXPECT_EQ((*opened)->state(), QpState::kRts);
  EXPECT_EQ(other->open_tgt_qp(tgt->qp_num()).error().code, ENOENT) << "only in its own domain";
  EXPECT_EQ(xrcd->open_tgt_qp(tgt->qp_num() + 1).error().code, ENOENT);
  const std::uint32_t qpn = tgt->qp_num();
  tgt.reset();  // the creator's handle goes; the QP stays for the opened one
  EXPECT_EQ(xrcd->usecnt(), 2);
  const Sge r = b.sge(0, 64), s = a.sge(0, 8);
  ASSERT_TRUE(srq->post_recv(recv_wr(1, r)));
  SendWr w = send_wr(2, s);
  w.xrc.remote_srqn = srq->srq_num();
  ASSERT_TRUE(ini->post_send(w));
  auto got = poll_n(*b.rcq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].qp_num, qpn);
  ASSERT_EQ(poll_n(*a.scq, 1).size(), 1u);
  opened->reset();  // the last handle: the QP is destroyed
  EXPECT_EQ(xrcd->usecnt(), 1);
  EXPECT_EQ(xrcd->open_tgt_qp(qpn).error().code, ENOENT);
}

TEST(XrcdApi, EachQpTypeIsMadeWhereItBelongs) {
  LinkNode n(LinkKind::kInproc, 1);
  auto xrcd = n.dev.open_xrcd().value();
  // A TGT QP is of a domain, never of a PD; it has no CQs or queues.
  QpInitAttr tgt;
  tgt.qp_type = QpType::kXrcTgt;
  EXPECT_EQ(n.pd.create_qp(tgt).error().code, EINVAL);
  QpInitAttr with_cq = tgt;
  with_cq.send_cq = n.scq.get();
  EXPECT_EQ(xrcd->create_tgt_qp(with_cq).error().code, EINVAL);
  QpInitAttr rc;
  EXPECT_EQ(xrcd->create_tgt_qp(rc).error().code, EINVAL);
  // An INI QP has no receive side.
  QpInitAttr ini{n.scq.get(), n.rcq.get(), QpCaps{8, 0, 1, 0, 0}, false, nullptr};
  ini.qp_type = QpType::kXrcIni;
  EXPECT_EQ(n.pd.create_qp(ini).error().code, EINVAL);
  ini.recv_cq = nullptr;
  auto q = n.pd.create_qp(ini);
  ASSERT_TRUE(q) << q.error().reason;
  const Sge s = n.sge(0, 8);
  EXPECT_EQ((*q)->post_recv(recv_wr(1, s)).error().code, EINVAL);
  // An XRC SRQ: its domain and its CQ, both.
  SrqInitAttr si{4, 1, 0, nullptr};
  si.xrcd = xrcd.get();
  EXPECT_EQ(n.pd.create_srq(si).error().code, EINVAL);
  si.xrcd = nullptr;
  si.cq = n.rcq.get();
  EXPECT_EQ(n.pd.create_srq(si).error().code, EINVAL);
  si.xrcd = xrcd.get();
  auto srq = n.pd.create_srq(si);
  ASSERT_TRUE(srq);
  // Its CQ stays while it lives.
  EXPECT_EQ(n.rcq->destroy().error().code, EBUSY);
  ASSERT_TRUE((*srq)->destroy());
  EXPECT_TRUE(xrcd->close());
  EXPECT_EQ(xrcd->close().error().code, EINVAL);
}

}  // namespace
}  // namespace srdma::test
