// UC queue pairs: SENDs and RDMA WRITEs (with immediate) between two
// connected QPs over the in-process and the RoCEv2 link, with nothing
// acknowledged; a message that loses a packet on an impaired link is
// dropped and the responder resyncs at the next one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "link_nodes.h"

namespace srdma::test {
namespace {

std::unique_ptr<QueuePair> uc_qp(LinkNode& n) {
  QpInitAttr init{n.scq.get(), n.rcq.get(), QpCaps{64, 64, 2, 2, 64}, false, nullptr};
  init.qp_type = QpType::kUc;
  return n.pd.create_qp(init).value();
}

// RESET -> INIT -> RTR -> RTS with UC's attributes (IBA table 91).
void bring_up_uc(QueuePair& qp, const LinkNode& peer, std::uint32_t peer_qpn, std::uint32_t mtu) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qp_access_flags = ACCESS_REMOTE_WRITE;
  ASSERT_TRUE(qp.modify(a, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS));
  a.qp_state = QpState::kRtr;
  a.dest_addr = peer.dev.address();
  a.dest_qp_num = peer_qpn;
  a.path_mtu = mtu;
  a.rq_psn = 0xfffffe;  // both directions wrap
  ASSERT_TRUE(qp.modify(a, QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN));
  a.qp_state = QpState::kRts;
  a.sq_psn = 0xfffffe;
  ASSERT_TRUE(qp.modify(a, QP_STATE | QP_SQ_PSN));
}

void connect_uc(QueuePair& qa, const LinkNode& a, QueuePair& qb, const LinkNode& b, std::uint32_t mtu = 1024) {
  bring_up_uc(qa, b, qb.qp_num(), mtu);
  bring_up_uc(qb, a, qa.qp_num(), mtu);
}

class Uc : public ::testing::TestWithParam<LinkKind> {};

TEST_P(Uc, SendsAndWritesArriveUnacknowledged) {
  LinkNode a(GetParam(), 1), b(GetParam(), 2);
  auto qa = uc_qp(a), qb = uc_qp(b);
  connect_uc(*qa, a, *qb, b);
  const std::uint32_t len = 3000;  // three packets at MTU 1024
  for (std::uint32_t i = 0; i < len; ++i) a.buf[i] = static_cast<std::uint8_t>(i * 13 + 1);
  const Sge s = a.sge(0, len);
  const Sge r1 = b.sge(0, 4096), r2 = b.sge(4096, 4096);
  ASSERT_TRUE(qb->post_recv(recv_wr(1, r1)));
  ASSERT_TRUE(qb->post_recv(recv_wr(2, r2)));
  SendWr send = send_wr(10, s);
  SendWr send_imm = send_wr(11, s, WrOpcode::kSendWithImm);
  send_imm.imm_data = 0x1234;
  SendWr write = send_wr(12, s, WrOpcode::kRdmaWrite);
  write.remote_addr = b.addr(16384);
  write.rkey = b.mr.rkey();
  SendWr write_imm = write;
  write_imm.wr_id = 13;
  write_imm.opcode = WrOpcode::kRdmaWriteWithImm;
  write_imm.remote_addr = b.addr(32768);
  write_imm.imm_data = 0x5678;
  send.next = &send_imm;
  send_imm.next = &write;
  write.next = &write_imm;
  // Only the WRITE with immediate consumes a receive besides the SENDs.
  const Sge r3 = b.sge(8192, 16);
  ASSERT_TRUE(qb->post_recv(recv_wr(3, r3)));
  ASSERT_TRUE(qa->post_send(send));
  auto sent = poll_n(*a.scq, 4);
  ASSERT_EQ(sent.size(), 4u);
  for (std::size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(sent[i].status, WcStatus::kSuccess);
    EXPECT_EQ(sent[i].wr_id, 10 + i);
  }
  auto got = poll_n(*b.rcq, 3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].wr_id, 1u);
  EXPECT_EQ(got[0].byte_len, len);
  EXPECT_EQ(got[1].wr_id, 2u);
  EXPECT_EQ(got[1].wc_flags, std::uint32_t{WC_WITH_IMM});
  EXPECT_EQ(got[1].imm_data, 0x1234u);
  EXPECT_EQ(got[2].wr_id, 3u);
  EXPECT_EQ(got[2].opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(got[2].imm_data, 0x5678u);
  EXPECT_EQ(got[2].byte_len, len);
  for (std::size_t off : {std::size_t{0}, std::size_t{4096}, std::size_t{16384}, std::size_t{32768}})
    EXPECT_EQ(std::memcmp(b.buf.data() + off, a.buf.data(), len), 0) << "at " << off;
  // Nothing answered any of it.
  EXPECT_EQ(qb->counters().responses_sent, 0u);
  EXPECT_EQ(qa->counters().responses_received, 0u);
  EXPECT_EQ(qa->counters().requests_sent, 12u);
}

TEST_P(Uc, AMessageWithoutAReceiveIsDroppedNotRnrNaked) {
  LinkNode a(GetParam(), 1), b(GetParam(), 2);
  auto qa = uc_qp(a), qb = uc_qp(b);
  connect_uc(*qa, a, *qb, b);
  a.buf[0] = 1;
  const Sge s = a.sge(0, 2000);
  ASSERT_TRUE(qa->post_send(send_wr(1, s)));
  EXPECT_EQ(poll_one(*a.scq).status, WcStatus::kSuccess);
  ASSERT_TRUE(eventually([&] {
    b.dev.progress();
    return qb->counters().dropped_for(DropReason::kNoReceive) == 1;
  }));
  // Its second packet, outside any message now, is dropped too.
  ASSERT_TRUE(eventually([&] {
    b.dev.progress();
    return qb->counters().dropped_for(DropReason::kBadOpcode) == 1;
  }));
  const Sge r = b.sge(0, 4096);
  ASSERT_TRUE(qb->post_recv(recv_wr(7, r)));
  a.buf[0] = 2;
  ASSERT_TRUE(qa->post_send(send_wr(2, s)));
  const Wc got = poll_one(*b.rcq);
  EXPECT_EQ(got.wr_id, 7u);
  EXPECT_EQ(b.buf[0], 2);
  EXPECT_EQ(qb->counters().rnr_naks_sent, 0u);
}

INSTANTIATE_TEST_SUITE_P(Links, Uc, ::testing::Values(LinkKind::kInproc, LinkKind::kUdp, LinkKind::kSameHost), link_name);

TEST(UcApi, ReadsAndAtomicsAreRefusedAndTheTransitionsAreUcs) {
  LinkNode a(LinkKind::kInproc, 1), b(LinkKind::kInproc, 2);
  auto qa = uc_qp(a), qb = uc_qp(b);
  QpAttr at;
  at.qp_state = QpState::kInit;
  at.qp_access_flags = ACCESS_REMOTE_WRITE;
  ASSERT_TRUE(qa->modify(at, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS));
  at.qp_state = QpState::kRtr;
  at.dest_addr = b.dev.address();
  at.dest_qp_num = qb->qp_num();
  EXPECT_EQ(qa->modify(at, QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC)
                .error()
                .code,
            EINVAL)
      << "UC has no responder resources";
  ASSERT_TRUE(qa->modify(at, QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN));
  at.qp_state = QpState::kRts;
  auto r = qa->modify(at, QP_STATE | QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().reason.find("TIMEOUT"), std::string::npos) << r.error().reason;
  ASSERT_TRUE(qa->modify(at, QP_STATE | QP_SQ_PSN));
  const Sge s = a.sge(0, 8);
  for (WrOpcode op : {WrOpcode::kRdmaRead, WrOpcode::kAtomicCmpAndSwp, WrOpcode::kAtomicFetchAndAdd,
                      WrOpcode::kSendWithInv}) {
    SendWr w = send_wr(1, s, op);
    const SendWr* bad = nullptr;
    auto e = qa->post_send(w, &bad);
    ASSERT_FALSE(e) << static_cast<int>(op);
    EXPECT_EQ(e.error().code, EINVAL);
    EXPECT_EQ(bad, &w);
  }
}

// Every packet of one QP crosses a link that loses a quarter of them; UC
// never resends, so a message with a lost packet is gone. The in-process
// link delivers before post_send returns, so whether a message arrived is
// known right after it is sent: exactly the messages that lost nothing
// complete, intact and in order, and the responder resyncs at the next
// message after each loss.
TEST(UcLoss, AMessageThatLosesAPacketIsDroppedAndTheNextOneArrives) {
  ImpairSpec lossy;
  lossy.loss = 0.25;
  lossy.seed = 7;
  LinkNode a(LinkKind::kInproc, 1), b(LinkKind::kInproc, 2);
  // (Impair before the first QP: the roles keep the link they start with.)
  ASSERT_TRUE(a.dev.impair(lossy));
  auto qa = uc_qp(a), qb = uc_qp(b);
  connect_uc(*qa, a, *qb, b, 256);
  constexpr int kMessages = 40;
  constexpr std::uint32_t kLen = 900;  // four packets at MTU 256
  const Sge r = b.sge(0, 1024);
  ASSERT_TRUE(qb->post_recv(recv_wr(0, r)));
  int delivered = 0, lost = 0, resynced = 0;
  bool after_loss = false;
  for (int m = 0; m < kMessages; ++m) {
    std::memset(a.buf.data() + m * 1024, m + 1, kLen);
    const Sge s = a.sge(m * 1024, kLen);
    const std::uint64_t dropped_before = a.dev.impair_stats().dropped;
    ASSERT_TRUE(qa->post_send(send_wr(m, s)));
    ASSERT_EQ(poll_one(*a.scq).status, WcStatus::kSuccess);
    const bool intact = a.dev.impair_stats().dropped == dropped_before;
    Wc wc;
    const int n = b.rcq->poll(std::span<Wc>(&wc, 1));
    ASSERT_EQ(n, intact ? 1 : 0) << "message " << m;
    if (!intact) {
      ++lost;
      after_loss = true;
      continue;
    }
    ++delivered;
    if (after_loss) ++resynced;
    after_loss = false;
    EXPECT_EQ(wc.status, WcStatus::kSuccess);
    EXPECT_EQ(wc.byte_len, kLen);
    EXPECT_TRUE(std::all_of(b.buf.begin(), b.buf.begin() + kLen, [&](auto v) { return v == m + 1; })) << m;
    ASSERT_TRUE(qb->post_recv(recv_wr(m + 1, r)));
  }
  EXPECT_GT(lost, 0);
  EXPECT_GT(resynced, 0) << "a message right after a lost one arrived";
  const TransportCounters c = qb->counters();
  EXPECT_GT(c.dropped_for(DropReason::kBadPsn) + c.dropped_for(DropReason::kBadOpcode), 0u);
  EXPECT_EQ(c.rnr_naks_sent + c.seq_naks_sent + c.responses_sent, 0u);
  EXPECT_EQ(delivered + lost, kMessages);
}

}  // namespace
}  // namespace srdma::test
