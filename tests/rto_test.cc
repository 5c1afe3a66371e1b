// Adaptive retransmission (rtt_estimator.h, completer.cc): the estimate is
// RFC 6298's; a request lost after the round trip was measured is probed
// at PTO (the last request again, with AckReq: TCP's tail-loss probe) and
// resent at RTO, long before the QP's IBA timeout, without spending
// retry_cnt; and a peer that never answers still ends in RETRY_EXC_ERR
// after exactly retry_cnt + 1 IBA timeouts. Time is a manual clock.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "hca/rtt_estimator.h"
#include "hca_pair.h"

namespace srdma::hca {
namespace {

using namespace std::chrono_literals;
using pair::PathParams;
using pair::Side;
using pair::write_wr;

TEST(RttEstimator, FollowsRfc6298) {
  RttEstimator e;
  EXPECT_FALSE(e.has_sample());
  e.add(2ms);  // first: SRTT = R, RTTVAR = R/2, RTO = R + 4 R/2
  EXPECT_TRUE(e.has_sample());
  EXPECT_EQ(e.srtt(), 2ms);
  EXPECT_EQ(e.rto(), 6ms);
  e.add(4ms);  // RTTVAR = 3/4 1ms + 1/4 2ms = 1.25ms; SRTT = 7/8 2ms + 1/8 4ms = 2.25ms
  EXPECT_EQ(e.srtt(), 2250us);
  EXPECT_EQ(e.rto(), 2250us + 4 * 1250us);
  EXPECT_EQ(e.pto(), 2 * 2250us) << "two round trips";
  RttEstimator fast;
  fast.add(10us);
  EXPECT_EQ(fast.rto(), kRtoFloor) << "never below the floor";
  EXPECT_EQ(fast.rto(kRtoFloorInProcess), kRtoFloorInProcess);
  EXPECT_EQ(fast.pto(), kPtoFloor);
  EXPECT_EQ(fast.pto(kPtoFloorInProcess), kPtoFloorInProcess);
  fast.reset();
  EXPECT_FALSE(fast.has_sample());
}

// Runs the engine timer of both sides after the clock moved.
void step(ManualClock& clock, Side& a, Side& b, Clock::duration d) {
  clock.advance(d);
  a.dev->engine().drain_timer();
  b.dev->engine().drain_timer();
}

void reconnect_b(Side& a, Side& b, std::uint32_t rq_psn, std::uint32_t mtu = 4096) {
  QpAttr at;
  at.qp_state = QpState::kReset;
  ASSERT_TRUE(b.qp->modify(at, QP_STATE));
  PathParams p;
  p.timeout = 14;
  p.rq_psn = rq_psn;
  p.sq_psn = 0;
  p.path_mtu = mtu;
  pair::bring_up(b, a.dev->engine().address(), a.qp->qpn(), p);
}

// The clock never moves between a request and its answer here, so the
// round trip measures 0: PTO and RTO are the in-process link's floors.
constexpr Clock::duration kPto = kPtoFloorInProcess;  // 50 us
constexpr Clock::duration kRto = kRtoFloorInProcess;  // 200 us

// a's round trip is measured on one WRITE; then b drops requests silently
// (RESET) while what the test posts goes out: lost.
void measure_then_silence_b(Side& a, Side& b, const PathParams& p) {
  pair::connect(a, b, p);
  Sge sge{a.addr(), 8, a.key};
  ASSERT_TRUE(pair::post(a, write_wr(1, sge, b.addr(), b.key)));
  ASSERT_EQ(pair::poll_n(*a.scq, 1).size(), 1u);
  QpAttr reset;
  reset.qp_state = QpState::kReset;
  ASSERT_TRUE(b.qp->modify(reset, QP_STATE));
}

TEST(AdaptiveRetransmission, ALostRequestIsProbedAtPtoThenResentAtRto) {
  ManualClock clock;
  Side a(&clock), b(&clock);
  PathParams p;
  p.timeout = 14;  // 67 ms: what perftest and rping use
  p.retry_cnt = 7;
  measure_then_silence_b(a, b, p);
  Sge sge{a.addr(), 8, a.key};
  ASSERT_TRUE(pair::post(a, write_wr(2, sge, b.addr() + 64, b.key)));
  step(clock, a, b, kPto + 10us);  // past PTO: the last request again, lost again
  TransportCounters c = a.qp->counters();
  EXPECT_EQ(c.tail_probes, 1u);
  EXPECT_EQ(c.rto_expiries, 0u);
  EXPECT_EQ(c.retransmissions, 1u);
  step(clock, a, b, kRto - kPto);  // past RTO: go back N, lost again
  c = a.qp->counters();
  EXPECT_EQ(c.tail_probes, 1u) << "one probe until the window moves";
  EXPECT_EQ(c.rto_expiries, 1u);
  EXPECT_EQ(c.retransmissions, 2u);
  EXPECT_EQ(c.timeouts, 0u);
  step(clock, a, b, kRto);  // the next early one waits twice as long
  EXPECT_EQ(a.qp->counters().rto_expiries, 1u);

  reconnect_b(a, b, 1);  // b expects the lost WRITE's PSN
  step(clock, a, b, kRto + 10us);  // 2 RTO after the first: resent again, and answered
  auto wcs = pair::poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 2u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  c = a.qp->counters();
  EXPECT_EQ(c.rto_expiries, 2u);
  EXPECT_EQ(c.timeouts, 0u) << "recovered in 0.6 ms of a 67 ms timeout, no retry spent";
}

// The last packets of a WRITE are lost, the first arrived: the probe (its
// last packet, AckReq) draws the sequence NAK that says where to go back.
TEST(TailLossProbe, ALostTailIsRecoveredByOneProbeAndItsNak) {
  ManualClock clock;
  Side a(&clock), b(&clock);
  PathParams p;
  p.timeout = 14;
  p.path_mtu = 256;
  measure_then_silence_b(a, b, p);
  Sge sge{a.addr(), 1000, a.key};  // four packets, PSNs 1..4, all lost
  ASSERT_TRUE(pair::post(a, write_wr(2, sge, b.addr() + 4096, b.key)));
  reconnect_b(a, b, 1, 256);  // b now expects PSN 1: what it sees next is beyond it
  step(clock, a, b, kPto + 10us);
  auto wcs = pair::poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 2u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data() + 4096, 1000), 0);
  const TransportCounters c = a.qp->counters();
  EXPECT_EQ(c.tail_probes, 1u);
  EXPECT_EQ(c.seq_naks_received, 1u) << "the probe (PSN 4) found b at PSN 1";
  EXPECT_EQ(c.retransmissions, 1u + 4u) << "the probe, then PSNs 1..4";
  EXPECT_EQ(c.rto_expiries, 0u);
  EXPECT_EQ(c.timeouts, 0u);
}

// Everything arrived but no ACK came (an unsignaled last WRITE asks for
// none; a lost ACK looks the same): the probe is a duplicate, and b's ACK
// of it retires the WRITE, nothing else is resent.
TEST(TailLossProbe, AMissingAckIsRecoveredByADuplicate) {
  ManualClock clock;
  Side a(&clock), b(&clock);
  PathParams p;
  p.timeout = 14;
  pair::connect(a, b, p);
  Sge sge{a.addr(), 8, a.key};
  ASSERT_TRUE(pair::post(a, write_wr(1, sge, b.addr(), b.key)));
  ASSERT_EQ(pair::poll_n(*a.scq, 1).size(), 1u);
  ASSERT_TRUE(pair::post(a, write_wr(2, sge, b.addr() + 8, b.key, 0)));  // unsignaled, last: no AckReq
  EXPECT_EQ(a.qp->counters().responses_received, 1u) << "b executed it and did not answer";
  step(clock, a, b, kPto + 10us);
  const TransportCounters c = a.qp->counters();
  EXPECT_EQ(c.tail_probes, 1u);
  EXPECT_EQ(c.retransmissions, 1u);
  EXPECT_EQ(b.qp->counters().duplicate_requests, 1u);
  EXPECT_EQ(c.rto_expiries, 0u);
  // Retired: a signaled WRITE after it completes alone, and nothing is out.
  ASSERT_TRUE(pair::post(a, write_wr(3, sge, b.addr() + 16, b.key)));
  auto wcs = pair::poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 3u);
  EXPECT_EQ(a.qp->counters().retransmissions, 1u);
}

// More than a group of 16 PSNs out and no answer at PTO: a request that
// asked for an ACK went unanswered, so the responder is dropping on
// purpose (its one sequence NAK was lost, C9-66): a probe would be dropped
// too. Go back N at PTO instead.
TEST(TailLossProbe, ASilentResponderWithManyOutIsAnsweredByGoBackNAtPto) {
  ManualClock clock;
  Side a(&clock), b(&clock);
  PathParams p;
  p.timeout = 14;
  p.path_mtu = 256;
  measure_then_silence_b(a, b, p);
  Sge sge{a.addr(), 20 * 256, a.key};  // 20 packets, PSNs 1..20, all lost
  ASSERT_TRUE(pair::post(a, write_wr(2, sge, b.addr() + 8192, b.key)));
  reconnect_b(a, b, 1, 256);
  step(clock, a, b, kPto + 10us);
  auto wcs = pair::poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data() + 8192, 20 * 256), 0);
  const TransportCounters c = a.qp->counters();
  EXPECT_EQ(c.tail_probes, 0u);
  EXPECT_EQ(c.rto_expiries, 1u);
  EXPECT_EQ(c.retransmissions, 20u);
  EXPECT_EQ(c.timeouts, 0u);
}

// retry_cnt counts IBA timeouts only: a peer that never answers ends in
// RETRY_EXC_ERR after retry_cnt + 1 of them, however many probes and
// early go-back-Ns came between (none of which spends a retry).
TEST(AdaptiveRetransmission, ASilentPeerStillEndsAfterRetryCntTimeouts) {
  for (const std::uint32_t len : {8u, 20u * 256}) {  // a probe each period; go-back-N at PTO
    SCOPED_TRACE(len);
    ManualClock clock;
    Side a(&clock), b(&clock);
    PathParams p;
    p.timeout = 12;  // 16.8 ms
    p.retry_cnt = 3;
    p.path_mtu = 256;
    measure_then_silence_b(a, b, p);
    Sge sge{a.addr(), len, a.key};
    ASSERT_TRUE(pair::post(a, write_wr(2, sge, b.addr(), b.key)));
    std::vector<Wc> wcs;
    for (int i = 0; i < 4000 && wcs.empty(); ++i) {
      step(clock, a, b, 50us);
      wcs = pair::poll_n(*a.scq, 1, std::chrono::milliseconds(0));
    }
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, WcStatus::kRetryExcErr);
    const TransportCounters c = a.qp->counters();
    EXPECT_EQ(c.timeouts, 4u) << "retry_cnt + 1 IBA timeouts, as without early resends";
    EXPECT_GT(c.rto_expiries, 0u);
    const std::uint64_t packets = (len + 255) / 256;
    if (packets == 1) {
      EXPECT_EQ(c.tail_probes, 4u) << "one in each timeout's period, none counted as a timeout";
    } else {
      EXPECT_EQ(c.tail_probes, 0u);
    }
    EXPECT_EQ(c.retransmissions, packets * (3u + c.rto_expiries) + c.tail_probes);
  }
}

}  // namespace
}  // namespace srdma::hca
