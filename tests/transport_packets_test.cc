// The RC transport packet by packet: segmentation at the path MTU, PSNs
// that wrap, the responder's checks on packets injected as a hostile or
// broken peer would send them, responder resources, max_rd_atomic.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "hca/packet.h"
#include "hca_pair.h"

namespace srdma::hca {
namespace {

using pair::connect;
using pair::PathParams;
using pair::poll_n;
using pair::post;
using pair::Side;
using pair::write_wr;

PathParams at_mtu(std::uint32_t mtu, std::uint32_t psn = 0) {
  PathParams p;
  p.path_mtu = mtu;
  p.sq_psn = p.rq_psn = psn;
  return p;
}

TEST(PacketPsn, ArithmeticWrapsAt24Bits) {
  EXPECT_EQ(psn_add(0xffffff, 1), 0u);
  EXPECT_EQ(psn_add(0xfffffe, 5), 3u);
  EXPECT_EQ(psn_diff(2, 0xfffffe), 4);
  EXPECT_EQ(psn_diff(0xfffffe, 2), -4);
  EXPECT_TRUE(psn_before(0xffffff, 0));
  EXPECT_FALSE(psn_before(0, 0xffffff));
  EXPECT_FALSE(psn_before(5, 5));
}

TEST(PacketTrain, UnrollGivesTheWiresPackets) {
  std::vector<std::byte> bytes(2 * 256 + 10);
  Packet t;
  t.op = Opcode::kWriteFirst;
  t.last_op = Opcode::kWriteLastImm;
  t.count = 3;
  t.psn = 0xfffffe;
  t.va = 0x1000;
  t.rkey = 7;
  t.dma_length = static_cast<std::uint32_t>(bytes.size());
  t.imm = 42;
  t.ack_req = true;
  t.payload_length = t.dma_length;
  t.payload.push_back(MemPiece{bytes.data(), bytes.size()});
  std::vector<Packet> got;
  unroll(t, 256, [&](Packet& p) { got.push_back(p); });
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].op, Opcode::kWriteFirst);
  EXPECT_EQ(got[1].op, Opcode::kWriteMiddle);
  EXPECT_EQ(got[2].op, Opcode::kWriteLastImm);
  EXPECT_EQ(got[0].psn, 0xfffffeu);
  EXPECT_EQ(got[1].psn, 0xffffffu);
  EXPECT_EQ(got[2].psn, 0u);
  EXPECT_EQ(got[0].payload_length, 256u);
  EXPECT_EQ(got[1].payload_length, 256u);
  EXPECT_EQ(got[2].payload_length, 10u);
  EXPECT_EQ(got[1].payload.front().addr, bytes.data() + 256);
  EXPECT_EQ(got[0].rkey, 7u);  // RETH on the first only
  EXPECT_EQ(got[1].rkey, 0u);
  EXPECT_EQ(got[2].imm, 42u);  // ImmDt on the last only
  EXPECT_EQ(got[0].imm, 0u);
  EXPECT_TRUE(got[2].ack_req);
  EXPECT_TRUE(got[1].ack_req) << "PSN 0xFFFFFF ends a group of 16";
  EXPECT_FALSE(got[0].ack_req);
}

// Every size around the MTU, at every MTU, from a PSN just below the wrap:
// one PSN per packet on both sides, the bytes exactly where they belong.
TEST(PacketSegmentation, WritesSendsAndReadsAtEveryMtu) {
  for (std::uint32_t mtu : {256u, 512u, 1024u, 2048u, 4096u}) {
    Side a, b;
    connect(a, b, at_mtu(mtu, 0xfffffd));
    std::uint64_t packets = 0;  // request packets sent so far
    std::uint64_t wr_id = 0;
    for (std::uint32_t len : {0u, 1u, mtu - 1, mtu, mtu + 1, 3 * mtu, 8 * mtu + 1}) {
      if (len > b.buf.size() / 2) continue;
      for (std::uint32_t i = 0; i < len; ++i) a.buf[i] = static_cast<std::uint8_t>(i * 13 + len);
      std::memset(b.buf.data(), 0, len + 1);
      Sge sge{a.addr(), len, a.key};
      ASSERT_TRUE(post(a, write_wr(wr_id++, sge, b.addr(), b.key)));
      auto wcs = poll_n(*a.scq, 1);
      ASSERT_EQ(wcs.size(), 1u);
      ASSERT_EQ(wcs[0].status, WcStatus::kSuccess) << "mtu " << mtu << " len " << len;
      ASSERT_EQ(std::memcmp(a.buf.data(), b.buf.data(), len), 0) << "mtu " << mtu << " len " << len;
      EXPECT_EQ(b.buf[len], 0);
      packets += len == 0 ? 1 : (len + mtu - 1) / mtu;
      EXPECT_EQ(a.qp->counters().requests_sent, packets) << "one packet per MTU, mtu " << mtu << " len " << len;
      EXPECT_EQ(b.qp->counters().requests_received, packets);

      // The same bytes back by RDMA READ: one request, a response per MTU.
      std::memset(a.buf.data() + (1 << 15), 0, len + 1);
      SendWr rd;
      rd.wr_id = wr_id++;
      rd.opcode = WrOpcode::kRdmaRead;
      Sge dst{a.addr(1 << 15), len, a.key};
      rd.sg_list = &dst;
      rd.num_sge = 1;
      rd.send_flags = SEND_SIGNALED;
      rd.remote_addr = b.addr();
      rd.rkey = b.key;
      const std::uint64_t responses = a.qp->counters().responses_received;
      ASSERT_TRUE(post(a, rd));
      wcs = poll_n(*a.scq, 1);
      ASSERT_EQ(wcs.size(), 1u);
      ASSERT_EQ(wcs[0].status, WcStatus::kSuccess);
      ASSERT_EQ(std::memcmp(a.buf.data(), a.buf.data() + (1 << 15), len), 0);
      EXPECT_EQ(a.buf[(1 << 15) + len], 0);
      const std::uint64_t n = len == 0 ? 1 : (len + mtu - 1) / mtu;
      packets += 1;
      EXPECT_EQ(a.qp->counters().requests_sent, packets);
      EXPECT_EQ(a.qp->counters().responses_received - responses, n) << "a READ response per MTU";
      // (The READ took n PSNs, but sent one request packet.)
    }
  }
}

// A packet as a broken or hostile peer would send it, delivered straight
// to b's device, from a's address and QPN.
class Injected : public ::testing::Test {
 protected:
  void SetUp() override { connect(a, b, at_mtu(256, 100)); }
  Packet from_a(Opcode op, std::uint32_t psn, std::uint32_t len) {
    Packet p;
    p.op = op;
    p.src_addr = a.dev->engine().address();
    p.dst_addr = b.dev->engine().address();
    p.src_qpn = a.qp->qpn();
    p.dst_qpn = b.qp->qpn();
    p.psn = psn;
    p.payload_length = len;
    if (len) p.payload.push_back(MemPiece{reinterpret_cast<std::byte*>(a.buf.data()), len});
    p.va = b.addr();
    p.rkey = b.key;
    p.dma_length = len;
    return p;
  }
  Side a, b;
};

TEST_F(Injected, MiddleWithoutFirstIsAnInvalidRequest) {
  std::memset(b.buf.data(), 0, 512);
  std::memset(a.buf.data(), 0x5a, 512);
  b.dev->engine().receive(from_a(Opcode::kWriteMiddle, 100, 256));
  EXPECT_EQ(b.qp->state(), QpState::kErr) << "class C: the responder's QP ends";
  EXPECT_EQ(b.qp->counters().naks_sent_for(NakCause::kInvalidOpcodeSequence), 1u);
  EXPECT_EQ(b.buf[0], 0) << "nothing of it lands";
}

TEST_F(Injected, FirstShorterThanTheMtuIsAnInvalidRequest) {
  Packet p = from_a(Opcode::kWriteFirst, 100, 200);
  p.dma_length = 1000;
  b.dev->engine().receive(std::move(p));
  EXPECT_EQ(b.qp->state(), QpState::kErr);
}

TEST_F(Injected, OnlyLongerThanTheMtuIsAnInvalidRequest) {
  std::memset(b.buf.data(), 0, 512);
  std::memset(a.buf.data(), 0x5a, 512);
  b.dev->engine().receive(from_a(Opcode::kWriteOnly, 100, 257));
  EXPECT_EQ(b.qp->state(), QpState::kErr);
  EXPECT_EQ(b.qp->counters().naks_sent_for(NakCause::kInvalidLength), 1u);
  EXPECT_EQ(b.buf[0], 0);
}

TEST_F(Injected, WriteLongerThanItsDmaLengthIsAnInvalidRequest) {
  b.dev->engine().receive(from_a(Opcode::kWriteFirst, 100, 256));  // dma_length 256: not a FIRST
  EXPECT_EQ(b.qp->state(), QpState::kErr);
}

TEST_F(Injected, OneSequenceNakPerGapThenSilence) {
  b.dev->engine().receive(from_a(Opcode::kWriteOnly, 102, 8));
  b.dev->engine().receive(from_a(Opcode::kWriteOnly, 103, 8));
  b.dev->engine().receive(from_a(Opcode::kWriteOnly, 104, 8));
  TransportCounters c = b.qp->counters();
  EXPECT_EQ(c.seq_naks_sent, 1u);
  EXPECT_EQ(c.dropped_for(DropReason::kBadPsn), 2u);
  EXPECT_EQ(b.qp->state(), QpState::kRts);
  // The expected PSN arrives: the gap is closed, and the next gap NAKs again.
  b.dev->engine().receive(from_a(Opcode::kWriteOnly, 100, 8));
  b.dev->engine().receive(from_a(Opcode::kWriteOnly, 105, 8));
  EXPECT_EQ(b.qp->counters().seq_naks_sent, 2u);
}

// One NAK per gap means one per go-back-N: a packet past the expected PSN
// but before the newest dropped since the NAK is a resend, whose expected
// PSN was lost again, and it draws one more NAK; a duplicate of the newest
// does not, and neither does the resend's next packet. Never more NAKs
// than packets received.
TEST_F(Injected, AResendThatFindsTheGapStillOpenIsNakedOnceMore) {
  b.dev->engine().receive(from_a(Opcode::kWriteOnly, 102, 8));  // the gap: NAK
  b.dev->engine().receive(from_a(Opcode::kWriteOnly, 103, 8));
  b.dev->engine().receive(from_a(Opcode::kWriteOnly, 104, 8));
  b.dev->engine().receive(from_a(Opcode::kWriteOnly, 104, 8));  // a duplicate of the newest
  EXPECT_EQ(b.qp->counters().seq_naks_sent, 1u);
  b.dev->engine().receive(from_a(Opcode::kWriteOnly, 101, 8));  // the requester went back; 100 lost again
  EXPECT_EQ(b.qp->counters().seq_naks_sent, 2u);
  b.dev->engine().receive(from_a(Opcode::kWriteOnly, 102, 8));  // the same resend goes on
  b.dev->engine().receive(from_a(Opcode::kWriteOnly, 103, 8));
  TransportCounters c = b.qp->counters();
  EXPECT_EQ(c.seq_naks_sent, 2u);
  EXPECT_EQ(c.dropped_for(DropReason::kBadPsn), 5u);
  EXPECT_EQ(b.qp->state(), QpState::kRts);
  // The gap closes: what follows in sequence executes, and nothing is NAKed.
  for (std::uint32_t psn = 100; psn <= 104; ++psn) b.dev->engine().receive(from_a(Opcode::kWriteOnly, psn, 8));
  c = b.qp->counters();
  EXPECT_EQ(c.seq_naks_sent, 2u);
  EXPECT_EQ(b.qp->state(), QpState::kRts);
  b.dev->engine().receive(from_a(Opcode::kWriteOnly, 106, 8));  // a new gap after 105: NAKed
  EXPECT_EQ(b.qp->counters().seq_naks_sent, 3u);
}

// An RNR NAK stands for the message behind it: its later packets are
// dropped without a sequence NAK (which would cut the requester's RNR wait
// short and spend its retry_cnt), and the resend after the wait executes.
TEST_F(Injected, PacketsBehindAnRnrNakDrawNoSequenceNak) {
  b.dev->engine().receive(from_a(Opcode::kSendFirst, 100, 256));  // no receive posted: RNR NAK
  b.dev->engine().receive(from_a(Opcode::kSendMiddle, 101, 256));
  b.dev->engine().receive(from_a(Opcode::kSendLast, 102, 8));
  TransportCounters c = b.qp->counters();
  EXPECT_EQ(c.rnr_naks_sent, 1u);
  EXPECT_EQ(c.seq_naks_sent, 0u) << "the packets behind the RNR NAK are dropped silently";
  EXPECT_EQ(c.dropped_for(DropReason::kBadPsn), 2u);
  const Sge rs{b.addr(), 1024, b.key};
  RecvWr rw;
  rw.wr_id = 7;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ASSERT_TRUE(b.qp->post_recv(&rw, nullptr));
  b.dev->engine().receive(from_a(Opcode::kSendFirst, 100, 256));  // the resend after the RNR wait
  b.dev->engine().receive(from_a(Opcode::kSendMiddle, 101, 256));
  b.dev->engine().receive(from_a(Opcode::kSendLast, 102, 8));
  auto wcs = poll_n(*b.rcq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[0].byte_len, 520u);
  c = b.qp->counters();
  EXPECT_EQ(c.seq_naks_sent, 0u);
  EXPECT_EQ(b.qp->state(), QpState::kRts);
}

TEST_F(Injected, CorruptedPacketIsDroppedBeforeAnythingIsRead) {
  std::memset(b.buf.data(), 0, 64);
  std::memset(a.buf.data(), 0x77, 64);
  Packet p = from_a(Opcode::kWriteOnly, 100, 64);
  p.corrupted = true;
  b.dev->engine().receive(std::move(p));
  EXPECT_EQ(b.buf[0], 0);
  EXPECT_EQ(b.dev->engine().counters().dropped_for(DropReason::kBadIcrc), 1u);
  EXPECT_EQ(b.qp->counters().requests_received, 0u);
}

// A duplicate atomic is answered from the saved result, not executed again.
TEST_F(Injected, DuplicateAtomicIsNotExecutedTwice) {
  std::uint64_t word = 5;
  std::memcpy(b.buf.data(), &word, 8);
  Packet fa = from_a(Opcode::kFetchAdd, 100, 0);
  fa.compare_add = 10;
  Packet again = fa;
  b.dev->engine().receive(std::move(fa));
  b.dev->engine().receive(std::move(again));
  std::memcpy(&word, b.buf.data(), 8);
  EXPECT_EQ(word, 15u);
  EXPECT_EQ(b.qp->counters().duplicate_requests, 1u);
}

// The device's limit is 16 responder resources and 16 outstanding READs
// and atomics: above is EINVAL, naming the attribute.
TEST(MaxRdAtomic, ValuesAboveTheDeviceAreRefused) {
  Side a;
  QpAttr at;
  at.qp_state = QpState::kInit;
  ASSERT_TRUE(a.qp->modify(at, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS));
  at.qp_state = QpState::kRtr;
  at.dest_addr = a.dev->engine().address();
  at.dest_qp_num = a.qp->qpn();
  at.max_dest_rd_atomic = kMaxRdAtomic + 1;
  auto r = a.qp->modify(at, QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC |
                                  QP_MIN_RNR_TIMER);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EINVAL);
  EXPECT_NE(r.error().reason.find("max_dest_rd_atomic"), std::string::npos);
  EXPECT_EQ(a.qp->state(), QpState::kInit) << "a refused modify changes nothing";
  at.max_dest_rd_atomic = kMaxRdAtomic;
  ASSERT_TRUE(a.qp->modify(at, QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC |
                                  QP_MIN_RNR_TIMER));
  at.qp_state = QpState::kRts;
  at.max_rd_atomic = kMaxRdAtomic + 1;
  r = a.qp->modify(at, QP_STATE | QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().reason.find("max_rd_atomic"), std::string::npos);
}

// max_rd_atomic 0: the QP may issue no READ or atomic, so posting one is
// EINVAL with bad_wr, nothing posted (it would otherwise wait for ever).
TEST(MaxRdAtomic, ZeroRefusesReadsAndAtomicsAtPost) {
  Side c, d;
  PathParams p;
  p.max_rd_atomic = 0;
  connect(c, d, p);
  for (WrOpcode op : {WrOpcode::kRdmaRead, WrOpcode::kAtomicFetchAndAdd}) {
    SendWr wr;
    wr.opcode = op;
    Sge dst{c.addr(), 8, c.key};
    wr.sg_list = &dst;
    wr.num_sge = 1;
    wr.remote_addr = d.addr();
    wr.rkey = d.key;
    const SendWr* bad = nullptr;
    auto r = c.qp->post_send(&wr, &bad);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, EINVAL);
    EXPECT_EQ(bad, &wr);
  }
  EXPECT_EQ(c.qp->counters().requests_sent, 0u);
  // A WRITE still goes.
  Sge src{c.addr(), 8, c.key};
  ASSERT_TRUE(post(c, write_wr(7, src, d.addr(64), d.key)));
  auto wcs = poll_n(*c.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
}

// max_rd_atomic 1: a second READ waits for the first one's completion.
TEST(MaxRdAtomic, CapsOutstandingReads) {
  Side c, d;
  PathParams p;
  p.max_rd_atomic = 1;
  connect(c, d, p);
  ASSERT_TRUE(d.dev->engine().destroy_qp(d.qp));  // nobody answers
  for (std::uint64_t i = 0; i < 3; ++i) {
    SendWr rd;
    rd.wr_id = i;
    rd.opcode = WrOpcode::kRdmaRead;
    Sge dst{c.addr(i * 64), 64, c.key};
    rd.sg_list = &dst;
    rd.num_sge = 1;
    rd.remote_addr = d.addr();
    rd.rkey = d.key;
    ASSERT_TRUE(post(c, rd));
  }
  EXPECT_EQ(c.qp->counters().requests_sent, 1u) << "the other two READs wait";
}

// With a live peer they all complete, in order, one at a time.
TEST(MaxRdAtomic, OneAtATimeStillCompletesEveryRead) {
  Side c, d;
  PathParams p;
  p.max_rd_atomic = 1;
  connect(c, d, p);
  for (std::uint64_t i = 0; i < 8; ++i) {
    SendWr rd;
    rd.wr_id = i;
    rd.opcode = i % 2 ? WrOpcode::kAtomicFetchAndAdd : WrOpcode::kRdmaRead;
    Sge dst{c.addr(i * 64), i % 2 ? 8u : 64u, c.key};
    rd.sg_list = &dst;
    rd.num_sge = 1;
    rd.send_flags = SEND_SIGNALED;
    rd.remote_addr = d.addr(i % 2 ? 4096 : 0);
    rd.rkey = d.key;
    rd.compare_add = 1;
    ASSERT_TRUE(post(c, rd));
  }
  auto wcs = poll_n(*c.scq, 8);
  ASSERT_EQ(wcs.size(), 8u);
  for (std::uint64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(wcs[i].wr_id, i);
    EXPECT_EQ(wcs[i].status, WcStatus::kSuccess);
  }
  std::uint64_t word = 0;
  std::memcpy(&word, d.buf.data() + 4096, 8);
  EXPECT_EQ(word, 4u);
}


// A READ whose responses arrive slower than one transport timeout, but
// each in time after the last: every response that moves the window
// restarts the timer, so the READ is never asked again (asking would
// restart the train, for ever on a link this slow). A READ that gets no
// answer still times out. The clock is manual; drain_timer() lets what
// fell due run before the next response arrives.
TEST(TransportTimer, RestartsOnEveryResponseThatMakesProgress) {
  ManualClock clock;
  Side a(&clock), b;
  constexpr std::uint32_t kPeerQpn = 0xabcde;  // b has no such QP: the requests go nowhere
  PathParams p = at_mtu(256, 0xfffffe);         // the READ's PSNs wrap
  p.timeout = 10;                               // 4.096 us * 2^10 = 4.19 ms
  pair::bring_up(a, b.dev->engine().address(), kPeerQpn, p);
  for (std::size_t i = 0; i < 1024; ++i) b.buf[i] = static_cast<std::uint8_t>(i * 7 + 1);
  Sge dst{a.addr(), 1024, a.key};
  SendWr rd = write_wr(1, dst, 0x1000, 0x77);
  rd.opcode = WrOpcode::kRdmaRead;
  ASSERT_TRUE(post(a, rd));
  const Opcode ops[] = {Opcode::kReadResponseFirst, Opcode::kReadResponseMiddle, Opcode::kReadResponseMiddle,
                        Opcode::kReadResponseLast};
  for (std::uint32_t i = 0; i < 4; ++i) {
    clock.advance(std::chrono::milliseconds(3));  // 0.72 timeouts per response: 2.9 in all
    a.dev->engine().drain_timer();
    Packet r;
    r.op = ops[i];
    r.src_addr = b.dev->engine().address();
    r.dst_addr = a.dev->engine().address();
    r.src_qpn = kPeerQpn;
    r.dst_qpn = a.qp->qpn();
    r.psn = psn_add(0xfffffe, i);
    r.msn = i == 3 ? 1 : 0;
    r.payload_length = 256;
    r.payload.push_back(MemPiece{reinterpret_cast<std::byte*>(b.buf.data() + 256 * i), 256});
    a.dev->engine().receive(std::move(r));
  }
  auto wcs = poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data(), 1024), 0);
  TransportCounters c = a.qp->counters();
  EXPECT_EQ(c.timeouts, 0u);
  EXPECT_EQ(c.requests_sent, 1u) << "the READ was never asked again";
  EXPECT_EQ(c.responses_received, 4u);

  // No answer at all: the timer still runs, and fires within two timeouts
  // (a pending timer stamps the deadline when it runs, see qp.cc).
  rd.wr_id = 2;
  ASSERT_TRUE(post(a, rd));
  for (int i = 0; i < 2; ++i) {
    clock.advance(std::chrono::microseconds(4200));
    a.dev->engine().drain_timer();
  }
  EXPECT_EQ(a.qp->counters().timeouts, 1u);
  EXPECT_EQ(a.qp->counters().requests_sent, 3u) << "asked again once";
}

// Sequence NAKs that repeat the one acted on (the same PSN, no progress
// since: stale reordered packets draw them, responder.cc renak) go back
// again without spending retry_cnt, up to kFreeRepeatNaks of them; past
// those each spends one, so a responder that NAKs for ever still ends the
// QP in RETRY_EXC_ERR. A NAK that shows progress starts the count again.
TEST(SequenceNak, RepeatsOfTheNakActedOnAreBoundedButDoNotEndTheQp) {
  ManualClock clock;  // no timer fires: only the NAKs count
  Side a(&clock), b;
  constexpr std::uint32_t kPeerQpn = 0xabcde;  // the requests go nowhere
  PathParams p = at_mtu(256, 100);
  p.retry_cnt = 2;
  pair::bring_up(a, b.dev->engine().address(), kPeerQpn, p);
  Sge src{a.addr(), 2048, a.key};  // 8 packets: PSNs 100..107
  ASSERT_TRUE(post(a, write_wr(1, src, 0x1000, 0x77)));
  auto nak = [&](std::uint32_t psn) {
    Packet r;
    r.op = Opcode::kAck;
    r.syndrome = Syndrome::kPsnSequenceError;
    r.src_addr = b.dev->engine().address();
    r.dst_addr = a.dev->engine().address();
    r.src_qpn = kPeerQpn;
    r.dst_qpn = a.qp->qpn();
    r.psn = psn;
    a.dev->engine().receive(std::move(r));
  };
  nak(102);  // progress (100, 101 taken), then the first NAK for 102: one retry spent
  // Repeats of it: free, each a go-back-N all the same.
  const std::uint64_t sent = a.qp->counters().requests_sent;
  for (int i = 0; i < 8; ++i) nak(102);
  EXPECT_EQ(a.qp->state(), QpState::kRts) << "repeats of the NAK acted on spent no retry";
  EXPECT_EQ(a.qp->counters().requests_sent, sent + 8 * 6) << "each went back to 102";
  nak(103);  // progress: the count starts again (this NAK spends 1 of 2)
  for (int i = 0; i < 8; ++i) nak(103);
  EXPECT_EQ(a.qp->state(), QpState::kRts);
  // Past the free ones each repeat spends: the last retry, then the QP ends.
  nak(103);
  EXPECT_EQ(a.qp->state(), QpState::kRts);
  nak(103);
  auto wcs = poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRetryExcErr);
}

}  // namespace
}  // namespace srdma::hca
