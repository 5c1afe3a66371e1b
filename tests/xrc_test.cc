// XRC at the device level: an INI QP on one device sends to a TGT QP on
// another, and each message lands in the XRC SRQ its XRCETH names: SEND,
// WRITE, READ and atomics, the SRQ's PD checking the rkeys and its CQ
// taking the receives. A TGT refuses an SRQ of another XRC domain, a basic
// SRQ and a number no SRQ has (NAK Invalid RD Request, nothing placed,
// counted), and what the wire may bring that no XRC QP takes.
#include <gtest/gtest.h>

#include <cstring>

#include "hca_pair.h"
#include "link_nodes.h"
#include "hca/qp_rules.h"

namespace srdma::hca {
namespace {

using pair::bring_up;
using pair::poll_n;
using pair::Side;

constexpr QpCaps kIniCaps{64, 0, 4, 0, 64};

// a: the initiator's device, with an INI QP. b: the target's, with an XRC
// domain, an XRC SRQ in it (b's PD, completing on b.rcq) and a TGT QP.
struct XrcPair {
  Side a, b;
  std::shared_ptr<Qp> ini, tgt;
  std::uint32_t xrcdn = 0;
  std::shared_ptr<Srq> srq;

  explicit XrcPair(const pair::PathParams& p = {}) {
    ini = a.dev->engine().create_qp(ini_init()).value();
    xrcdn = b.dev->engine().alloc_xrcd();
    srq = b.dev->engine().create_srq(b.pdn, 64, 4, 0, nullptr, SrqXrcBinding{xrcdn, b.rcq}).value();
    tgt = b.dev->engine().create_qp(tgt_init(xrcdn)).value();
    bring_up(*ini, b.dev->engine().address(), tgt->qpn(), p);
    bring_up(*tgt, a.dev->engine().address(), ini->qpn(), p);
  }
  QpInit ini_init() const {
    QpInit i{a.pdn, a.scq, nullptr, kIniCaps, false, nullptr};
    i.type = QpType::kXrcIni;
    return i;
  }
  static QpInit tgt_init(std::uint32_t xrcdn) {
    QpInit t;
    t.type = QpType::kXrcTgt;
    t.xrcdn = xrcdn;
    return t;
  }
  void post_srq_recv(Srq& q, std::uint64_t wr_id, std::size_t off, std::uint32_t len) {
    Sge sge{b.addr(off), len, b.key};
    const RecvWr r = test::recv_wr(wr_id, sge);
    ASSERT_TRUE(q.post_recv(&r, nullptr));
  }
  Result<void> post(SendWr w, std::uint32_t srqn) {
    w.xrc.remote_srqn = srqn;
    const SendWr* bad = nullptr;
    return ini->post_send(&w, &bad);
  }
  // A request as parse_frame would hand it to b: from the INI's address and
  // QPN to the TGT's (the hostile tests' forged packets).
  Packet forged(QpType transport, Opcode op) const {
    Packet p;
    p.transport = transport;
    p.op = op;
    p.src_addr = a.dev->engine().address();
    p.dst_addr = b.dev->engine().address();
    p.src_qpn = ini->qpn();
    p.dst_qpn = tgt->qpn();
    return p;
  }
};

SendWr wr(WrOpcode op, const Sge& sge, std::uint64_t wr_id = 1) { return test::send_wr(wr_id, sge, op); }

TEST(Xrc, SendLandsInTheSrqItNamesAndCompletesOnItsCq) {
  pair::PathParams p;
  p.path_mtu = 1024;  // 3000 bytes: FIRST, MIDDLE, LAST, each with its XRCETH
  XrcPair x(p);
  for (std::size_t i = 0; i < 3000; ++i) x.a.buf[i] = static_cast<std::uint8_t>(i * 7);
  x.post_srq_recv(*x.srq, 77, 8192, 4096);
  Sge sge{x.a.addr(), 3000, x.a.key};
  SendWr w = wr(WrOpcode::kSendWithImm, sge, 5);
  w.imm_data = 0xfeed;
  ASSERT_TRUE(x.post(w, x.srq->srqn()));
  auto s = poll_n(*x.a.scq, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, WcStatus::kSuccess) << wc_status_str(s[0].status);
  EXPECT_EQ(s[0].wr_id, 5u);
  auto r = poll_n(*x.b.rcq, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, WcStatus::kSuccess);
  EXPECT_EQ(r[0].wr_id, 77u);
  EXPECT_EQ(r[0].qp_num, x.tgt->qpn());  // the TGT QP's, on the SRQ's CQ
  EXPECT_EQ(r[0].byte_len, 3000u);
  EXPECT_EQ(r[0].imm_data, 0xfeedu);
  EXPECT_EQ(std::memcmp(x.b.buf.data() + 8192, x.a.buf.data(), 3000), 0);
  EXPECT_EQ(x.srq->posted(), 0u);
}

TEST(Xrc, WriteReadAndAtomicsCheckTheirRkeysInTheSrqsPd) {
  XrcPair x;
  // A second XRC SRQ of the same domain in another PD: b's key is not of it.
  const std::uint32_t pdn2 = x.b.dev->tables().alloc_pd().value();
  auto srq2 = x.b.dev->engine().create_srq(pdn2, 8, 1, 0, nullptr, SrqXrcBinding{x.xrcdn, x.b.rcq}).value();
  std::memcpy(x.a.buf.data(), "xrc-write", 9);
  Sge sge{x.a.addr(), 9, x.a.key};
  SendWr w = wr(WrOpcode::kRdmaWrite, sge, 1);
  w.remote_addr = x.b.addr(100);
  w.rkey = x.b.key;
  ASSERT_TRUE(x.post(w, x.srq->srqn()));
  // READ back into a's buffer at 200.
  std::memcpy(x.b.buf.data() + 300, "read-me", 7);
  Sge rsge{x.a.addr(200), 7, x.a.key};
  SendWr rd = wr(WrOpcode::kRdmaRead, rsge, 2);
  rd.remote_addr = x.b.addr(300);
  rd.rkey = x.b.key;
  ASSERT_TRUE(x.post(rd, x.srq->srqn()));
  // FETCH ADD on b's word at 512.
  std::uint64_t word = 40;
  std::memcpy(x.b.buf.data() + 512, &word, 8);
  Sge asge{x.a.addr(600), 8, x.a.key};
  SendWr fa = wr(WrOpcode::kAtomicFetchAndAdd, asge, 3);
  fa.remote_addr = x.b.addr(512);
  fa.rkey = x.b.key;
  fa.compare_add = 2;
  ASSERT_TRUE(x.post(fa, x.srq->srqn()));
  auto s = poll_n(*x.a.scq, 3);
  ASSERT_EQ(s.size(), 3u);
  for (const Wc& c : s) EXPECT_EQ(c.status, WcStatus::kSuccess) << c.wr_id << " " << wc_status_str(c.status);
  EXPECT_EQ(std::memcmp(x.b.buf.data() + 100, "xrc-write", 9), 0);
  EXPECT_EQ(std::memcmp(x.a.buf.data() + 200, "read-me", 7), 0);
  std::memcpy(&word, x.b.buf.data() + 512, 8);
  EXPECT_EQ(word, 42u);
  std::memcpy(&word, x.a.buf.data() + 600, 8);
  EXPECT_EQ(word, 40u);
  // The same WRITE through the SRQ of the other PD: the rkey is refused.
  std::memcpy(x.a.buf.data(), "XXXXXXXXX", 9);
  w.remote_addr = x.b.addr(1000);
  ASSERT_TRUE(x.post(w, srq2->srqn()));
  s = poll_n(*x.a.scq, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, WcStatus::kRemAccessErr) << wc_status_str(s[0].status);
  EXPECT_EQ(x.b.buf[1000], 0u);
  EXPECT_EQ(x.tgt->counters().naks_sent_for(NakCause::kAccessKeyRefused), 1u);
  EXPECT_EQ(x.tgt->state(), QpState::kErr);
}

TEST(Xrc, TheTgtHoldsNoSrqBetweenMessages) {
  XrcPair x;
  auto& engine = x.b.dev->engine();
  auto cq = engine.create_cq(16, 0, nullptr).value();
  auto srq = engine.create_srq(x.b.pdn, 8, 1, 0, nullptr, SrqXrcBinding{x.xrcdn, cq}).value();
  x.post_srq_recv(*srq, 1, 0, 64);
  Sge sge{x.a.addr(), 16, x.a.key};
  ASSERT_TRUE(x.post(wr(WrOpcode::kSend, sge), srq->srqn()));
  ASSERT_EQ(poll_n(*x.a.scq, 1).size(), 1u);
  ASSERT_EQ(poll_n(*cq, 1).size(), 1u);
  // Its CQ is busy while the SRQ lives, and free once it is destroyed: the
  // TGT that received into it keeps nothing of it.
  EXPECT_EQ(engine.destroy_cq(cq).error().code, EBUSY);
  std::weak_ptr<Srq> weak = srq;
  const std::uint32_t gone = srq->srqn();
  ASSERT_TRUE(engine.destroy_srq(srq));
  srq.reset();
  EXPECT_TRUE(weak.expired());
  EXPECT_TRUE(engine.destroy_cq(cq));
  // Its number now names nothing: refused.
  ASSERT_TRUE(x.post(wr(WrOpcode::kSend, sge), gone));
  auto s = poll_n(*x.a.scq, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, WcStatus::kRemInvReqErr);
}

// The three SRQs a TGT must refuse, each on a pair of its own.
enum class BadSrq { kOtherDomain, kBasic, kUnknown };

TEST(Xrc, TgtRefusesAnSrqOutsideItsDomain) {
  for (BadSrq bad : {BadSrq::kOtherDomain, BadSrq::kBasic, BadSrq::kUnknown}) {
    SCOPED_TRACE(static_cast<int>(bad));
    XrcPair x;
    std::shared_ptr<Srq> other;
    std::uint32_t srqn = 0xabcde;  // no SRQ has it
    if (bad == BadSrq::kOtherDomain) {
      other = x.b.dev->engine()
                  .create_srq(x.b.pdn, 8, 1, 0, nullptr, SrqXrcBinding{x.b.dev->engine().alloc_xrcd(), x.b.rcq})
                  .value();
    } else if (bad == BadSrq::kBasic) {
      other = x.b.dev->engine().create_srq(x.b.pdn, 8, 1, 0, nullptr).value();
      EXPECT_EQ(x.b.dev->engine().find_xrc_srq(other->srqn()), nullptr);
    }
    if (other) {
      srqn = other->srqn();
      x.post_srq_recv(*other, 9, 0, 64);
    }
    x.post_srq_recv(*x.srq, 10, 0, 64);
    std::memcpy(x.a.buf.data(), "must-not-land", 13);
    Sge sge{x.a.addr(), 13, x.a.key};
    ASSERT_TRUE(x.post(wr(WrOpcode::kSend, sge), srqn));
    auto s = poll_n(*x.a.scq, 1);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, WcStatus::kRemInvReqErr) << wc_status_str(s[0].status);
    EXPECT_EQ(x.tgt->counters().naks_sent_for(NakCause::kXrcSrqRefused), 1u);
    EXPECT_EQ(x.ini->counters().naks_received_for(NakCode::kInvalidRdRequest), 1u);
    EXPECT_EQ(x.tgt->state(), QpState::kErr);
    EXPECT_EQ(x.b.buf[0], 0u) << "nothing placed";
    EXPECT_EQ(x.srq->posted(), 1u);
    if (other) EXPECT_EQ(other->posted(), 1u);
    Wc none[1];
    EXPECT_EQ(x.b.rcq->poll(none), 0) << "no receive completed";
  }
}

TEST(Xrc, WrongWayPacketsAreDroppedAndCounted) {
  XrcPair x;
  auto& engine = x.b.dev->engine();
  const TransportCounters before = engine.counters();
  // A request for the TGT that is RC's, not XRC's.
  const Packet rc = x.forged(QpType::kRc, Opcode::kSendOnly);
  engine.receive(Packet(rc));
  // A response for a TGT, a request for an INI (XRC's bits both).
  Packet resp = rc;
  resp.transport = QpType::kXrcIni;
  resp.op = Opcode::kAck;
  engine.receive(Packet(resp));
  Packet to_ini = rc;
  to_ini.transport = QpType::kXrcTgt;
  to_ini.dst_addr = x.a.dev->engine().address();
  to_ini.dst_qpn = x.ini->qpn();
  x.a.dev->engine().receive(Packet(to_ini));
  EXPECT_EQ(engine.counters().dropped_for(DropReason::kBadOpcode) - before.dropped_for(DropReason::kBadOpcode), 2u);
  EXPECT_EQ(x.a.dev->engine().counters().dropped_for(DropReason::kBadOpcode), 1u);
  EXPECT_EQ(x.tgt->state(), QpState::kRts);
  EXPECT_EQ(x.ini->state(), QpState::kRts);
}

TEST(Xrc, AHostileXrcEthEndsTheTgtAndPlacesNothing) {
  XrcPair x;
  x.post_srq_recv(*x.srq, 1, 0, 64);
  auto& engine = x.b.dev->engine();
  // What parse_frame makes of a frame whose XRCETH names every SRQN there
  // is, from the INI's address and QPN at the expected PSN.
  for (std::uint32_t srqn : {0u, 0xffffffu, x.srq->srqn() + 1}) {
    Packet p = x.forged(QpType::kXrcTgt, Opcode::kWriteOnly);
    p.xrc_srqn = srqn;
    p.va = x.b.addr(0);
    p.rkey = x.b.key;
    p.dma_length = 0;
    engine.receive(std::move(p));
  }
  // The first ends the QP; the others find it in ERR.
  EXPECT_EQ(x.tgt->counters().naks_sent_for(NakCause::kXrcSrqRefused), 1u);
  EXPECT_EQ(x.tgt->counters().dropped_for(DropReason::kBadState), 2u);
  EXPECT_EQ(x.tgt->state(), QpState::kErr);
  EXPECT_EQ(x.srq->posted(), 1u);
}

TEST(Xrc, QueuesEachSideHasAndHasNot) {
  XrcPair x;
  // An INI has no receive queue, a TGT no send queue.
  RecvWr r;
  const RecvWr* bad_r = nullptr;
  EXPECT_EQ(x.ini->post_recv(&r, &bad_r).error().code, EINVAL);
  EXPECT_EQ(x.tgt->post_recv(&r, &bad_r).error().code, EINVAL);
  Sge sge{x.a.addr(), 8, x.a.key};
  SendWr w = wr(WrOpcode::kSend, sge);
  const SendWr* bad = nullptr;
  EXPECT_EQ(x.tgt->post_send(&w, &bad).error().code, EINVAL);
  // The SRQN rides in 24 bits.
  EXPECT_EQ(x.post(w, 0x1000000).error().code, EINVAL);
  // A TGT has an XRC domain and nothing else; an INI no receive side.
  auto& engine = x.b.dev->engine();
  QpInit t = XrcPair::tgt_init(x.xrcdn);
  t.send_cq = x.b.scq;
  EXPECT_EQ(engine.create_qp(t).error().code, EINVAL);
  EXPECT_EQ(engine.create_qp(XrcPair::tgt_init(x.xrcdn + 1000)).error().code, EINVAL);
  QpInit i = x.ini_init();
  i.caps.max_recv_wr = 4;
  EXPECT_EQ(x.a.dev->engine().create_qp(i).error().code, EINVAL);
  // An XRC SRQ needs a live domain and a CQ.
  EXPECT_FALSE(engine.create_srq(x.b.pdn, 8, 1, 0, nullptr, SrqXrcBinding{x.xrcdn, nullptr}));
  EXPECT_FALSE(engine.create_srq(x.b.pdn, 8, 1, 0, nullptr, SrqXrcBinding{x.xrcdn + 1000, x.b.rcq}));
  // The SRQ's CQ is busy while it lives.
  EXPECT_EQ(engine.destroy_cq(x.b.rcq).error().code, EBUSY);
}

TEST(Xrc, TransitionsAreLinuxs) {
  // A TGT needs no requester attributes for RTS, an INI no responder ones for RTR.
  EXPECT_TRUE(check_qp_transition(QpType::kXrcTgt, QpState::kRtr, QpState::kRts, QP_STATE | QP_TIMEOUT | QP_SQ_PSN));
  EXPECT_FALSE(check_qp_transition(QpType::kRc, QpState::kRtr, QpState::kRts, QP_STATE | QP_TIMEOUT | QP_SQ_PSN));
  EXPECT_TRUE(check_qp_transition(QpType::kXrcIni, QpState::kInit, QpState::kRtr,
                                  QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN));
  EXPECT_FALSE(check_qp_transition(QpType::kXrcTgt, QpState::kInit, QpState::kRtr,
                                   QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN));
  EXPECT_FALSE(check_qp_transition(QpType::kXrcIni, QpState::kReset, QpState::kRtr, QP_STATE));
  EXPECT_EQ(qp_type_str(QpType::kXrcIni), "XRC INI");
  EXPECT_EQ(qp_type_str(QpType::kXrcTgt), "XRC TGT");
}

}  // namespace
}  // namespace srdma::hca
