// The transport counters, per QP and per device, in scenarios that fix the
// exact counts. Timer paths run on a manual clock.
#include <gtest/gtest.h>

#include <cstring>

#include "hca_pair.h"

namespace srdma::hca {
namespace {

using pair::connect;
using pair::poll_n;
using pair::post;
using pair::Side;
using pair::write_wr;

TEST(TransportCounters, WriteAndReadCountEachPacketOnce) {
  Side a, b;
  connect(a, b);
  Sge sge{a.addr(), 256, a.key};
  ASSERT_TRUE(post(a, write_wr(1, sge, b.addr(), b.key)));
  SendWr r = write_wr(2, sge, b.addr(), b.key);
  r.opcode = WrOpcode::kRdmaRead;
  ASSERT_TRUE(post(a, r));
  ASSERT_EQ(poll_n(*a.scq, 2).size(), 2u);
  TransportCounters ca = a.qp->counters(), cb = b.qp->counters();
  EXPECT_EQ(ca.requests_sent, 2u);
  EXPECT_EQ(ca.responses_received, 2u);
  EXPECT_EQ(ca.retransmissions, 0u);
  EXPECT_EQ(cb.requests_received, 2u);
  EXPECT_EQ(cb.responses_sent, 2u);
  EXPECT_EQ(cb.dropped_total(), 0u);
  // The device sums its QPs, and keeps a destroyed QP's counts.
  EXPECT_EQ(a.dev->engine().counters().requests_sent, 2u);
  ASSERT_TRUE(a.dev->engine().destroy_qp(a.qp));
  EXPECT_EQ(a.dev->engine().counters().requests_sent, 2u);
}

// The in-process link remembers, per sending thread, the QP a stream of
// packets goes to. Once that QP is destroyed and freed, what the sender
// sends to its QPN is dropped and counted as for no QP (ASan: a stale
// route would be a use after free), and the sender retries into
// RETRY_EXC_ERR.
TEST(TransportCounters, APeerDestroyedAfterTrafficIsSentNothingMore) {
  ManualClock clock;
  Side a(&clock), b(&clock);
  pair::PathParams p;
  p.retry_cnt = 1;
  connect(a, b, p);
  Sge sge{a.addr(), 8, a.key};
  ASSERT_TRUE(post(a, write_wr(1, sge, b.addr(), b.key)));
  auto first = poll_n(*a.scq, 1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].status, WcStatus::kSuccess);
  auto unknown_qp = [&] { return b.dev->engine().counters().dropped_for(DropReason::kUnknownQp); };
  ASSERT_EQ(unknown_qp(), 0u);
  ASSERT_TRUE(b.dev->engine().destroy_qp(b.qp));
  b.qp.reset();
  ASSERT_TRUE(post(a, write_wr(2, sge, b.addr(), b.key)));
  EXPECT_EQ(unknown_qp(), 1u);  // delivered (and dropped) inside post_send
  std::vector<Wc> wcs = pair::poll_n_advancing(clock, *a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRetryExcErr);
  // Its one retry after the IBA timeout (retry_cnt 1: two timeouts end it),
  // and the early ones the round trip measured on the first WR allows in
  // between (a tail-loss probe, then go-back-N at RTO with backoff, inside
  // each 4.2 ms timeout).
  const TransportCounters c = a.qp->counters();
  EXPECT_EQ(c.timeouts, 2u);
  EXPECT_GT(c.rto_expiries, 0u);
  EXPECT_EQ(c.retransmissions, 1u + c.rto_expiries + c.tail_probes);
  EXPECT_EQ(unknown_qp(), 1u + c.retransmissions);  // every one dropped for no QP
}

// rnr_retry = 3 and no receive posted: the SEND draws exactly four RNR
// NAKs and is resent exactly three times, then fails.
TEST(TransportCounters, RnrRetryExceededCountsEveryRetry) {
  ManualClock clock;
  Side a(&clock), b(&clock);
  pair::PathParams p;
  p.rnr_retry = 3;
  connect(a, b, p);
  Sge sge{a.addr(), 32, a.key};
  SendWr s = write_wr(1, sge, 0, 0);
  s.opcode = WrOpcode::kSend;
  ASSERT_TRUE(post(a, s));
  std::vector<Wc> wcs = pair::poll_n_advancing(clock, *a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRnrRetryExcErr);
  TransportCounters ca = a.qp->counters(), cb = b.qp->counters();
  EXPECT_EQ(ca.rnr_naks_received, 4u);
  EXPECT_EQ(ca.rnr_retries, 3u);
  EXPECT_EQ(ca.retransmissions, 3u);
  EXPECT_EQ(ca.requests_sent, 4u);
  EXPECT_EQ(cb.rnr_naks_sent, 4u);
  EXPECT_EQ(ca.timeouts, 0u);
}

// Brings `s` from RESET to RTS again with the given PSNs; `timeout` 0: no
// transport timer, only responses move the requester.
void restart(Side& s, Side& peer, std::uint32_t sq_psn, std::uint32_t rq_psn, std::uint8_t retry_cnt,
             std::uint8_t timeout = 0) {
  ASSERT_TRUE(s.qp->modify(QpAttr{.qp_state = QpState::kReset}, QP_STATE));
  pair::bring_up(s, peer.dev->engine().address(), peer.qp->qpn(),
                 {.retry_cnt = retry_cnt, .timeout = timeout, .sq_psn = sq_psn, .rq_psn = rq_psn});
}

// A request behind the expected PSN is a duplicate: acknowledged again,
// not executed again.
TEST(TransportCounters, DuplicateIsAcknowledgedNotExecuted) {
  Side a, b;
  connect(a, b);
  restart(b, a, 0, 100, 2);  // b expects PSN 100; a sends PSN 0
  std::memset(b.buf.data(), 0, 16);
  std::memset(a.buf.data(), 0x3c, 16);
  Sge sge{a.addr(), 16, a.key};
  ASSERT_TRUE(post(a, write_wr(1, sge, b.addr(), b.key)));
  auto wcs = poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(b.qp->counters().duplicate_requests, 1u);
  EXPECT_EQ(b.qp->counters().requests_received, 1u);
  EXPECT_EQ(b.buf[0], 0) << "a duplicate is not executed again";
}

// A request ahead of the expected PSN draws a sequence-error NAK naming
// the PSN the responder expects (IBA 9.7.5.2.2). Here that PSN precedes
// everything the requester sent (the two sides disagree about PSNs), so the
// requester drops the NAK, counted, and its transport timer (on a manual
// clock) retries: exactly retry_cnt retransmissions, each NAKed once, then
// RETRY_EXC_ERR.
TEST(TransportCounters, SequenceNakOutsideTheWindowIsDroppedAndTheTimerRetries) {
  ManualClock clock;
  Side a(&clock), b(&clock);
  pair::PathParams p;
  connect(a, b, p);
  restart(a, b, 200, 0, 2, /*timeout=*/1);  // b expects PSN 0; a sends PSN 200
  std::memset(b.buf.data(), 0, 16);
  Sge sge{a.addr(), 16, a.key};
  ASSERT_TRUE(post(a, write_wr(1, sge, b.addr(), b.key)));
  std::vector<Wc> wcs = pair::poll_n_advancing(clock, *a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRetryExcErr);
  TransportCounters ca = a.qp->counters(), cb = b.qp->counters();
  EXPECT_EQ(ca.requests_sent, 3u);
  EXPECT_EQ(ca.retransmissions, 2u);
  EXPECT_EQ(cb.seq_naks_sent, 1u) << "one NAK per gap: the resends of the same gap are dropped";
  EXPECT_EQ(cb.dropped_for(DropReason::kBadPsn), 2u);
  EXPECT_EQ(ca.dropped_for(DropReason::kBadPsn), 1u) << "the NAK names a PSN before the window";
  EXPECT_EQ(b.buf[0], 0);
}

// A response whose PSN names an outstanding WQE but whose opcode does not
// answer it (READ data or an atomic ACK for a WRITE) is dropped as a bad
// opcode, not as a bad PSN, and completes nothing.
TEST(TransportCounters, ResponseOfTheWrongKindIsDroppedAsABadOpcode) {
  ManualClock clock;
  Side a(&clock), b(&clock);
  connect(a, b);
  QpAttr err;
  err.qp_state = QpState::kErr;
  ASSERT_TRUE(b.qp->modify(err, QP_STATE));  // b answers nothing: a's WRITE stays outstanding
  Sge sge{a.addr(), 16, a.key};
  ASSERT_TRUE(post(a, write_wr(1, sge, b.addr(), b.key)));
  for (Opcode op : {Opcode::kReadResponseOnly, Opcode::kAtomicAck}) {
    Packet p;
    p.op = op;
    p.src_addr = b.dev->engine().address();
    p.dst_addr = a.dev->engine().address();
    p.src_qpn = b.qp->qpn();
    p.dst_qpn = a.qp->qpn();
    p.psn = 0;  // the WRITE's
    a.dev->engine().receive(std::move(p));
  }
  const TransportCounters c = a.qp->counters();
  EXPECT_EQ(c.dropped_for(DropReason::kBadOpcode), 2u);
  EXPECT_EQ(c.dropped_for(DropReason::kBadPsn), 0u);
  EXPECT_TRUE(poll_n(*a.scq, 1, std::chrono::milliseconds(0)).empty());
}

// A packet for a QPN the device does not have is dropped and counted on
// the device.
TEST(TransportCounters, UnknownDestinationQpIsCountedOnTheDevice) {
  ManualClock clock;
  Side a(&clock), b;
  pair::bring_up(a, b.dev->engine().address(), 0xabcde);
  Sge sge{a.addr(), 8, a.key};
  ASSERT_TRUE(post(a, write_wr(1, sge, b.addr(), b.key)));
  EXPECT_EQ(b.dev->engine().counters().dropped_for(DropReason::kUnknownQp), 1u);
  EXPECT_EQ(a.qp->counters().requests_sent, 1u);
}

}  // namespace
}  // namespace srdma::hca
