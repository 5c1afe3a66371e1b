// Adaptive retransmission (rtt_estimator.h, completer.cc): the estimate is
// RFC 6298's; a request lost after the round trip was measured is resent
// at RTO, long before the QP's IBA timeout, without spending retry_cnt;
// and a peer that never answers still ends in RETRY_EXC_ERR after exactly
// retry_cnt + 1 IBA timeouts. Time is a manual clock.
#include <gtest/gtest.h>

#include <chrono>

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
  RttEstimator fast;
  fast.add(10us);
  EXPECT_EQ(fast.rto(), kRtoFloor) << "never below the floor";
  fast.reset();
  EXPECT_FALSE(fast.has_sample());
}

// Runs the engine timer of both sides after the clock moved.
void step(ManualClock& clock, Side& a, Side& b, Clock::duration d) {
  clock.advance(d);
  a.dev->engine().drain_timer();
  b.dev->engine().drain_timer();
}

void reconnect_b(Side& a, Side& b, std::uint32_t rq_psn) {
  QpAttr at;
  at.qp_state = QpState::kReset;
  ASSERT_TRUE(b.qp->modify(at, QP_STATE));
  PathParams p;
  p.timeout = 14;
  p.rq_psn = rq_psn;
  p.sq_psn = 0;
  pair::bring_up(b, a.dev->engine().address(), a.qp->qpn(), p);
}

TEST(AdaptiveRetransmission, ALossAfterTheRoundTripWasMeasuredIsResentAtRto) {
  ManualClock clock;
  Side a(&clock), b(&clock);
  PathParams p;
  p.timeout = 14;  // 67 ms: what perftest and rping use
  p.retry_cnt = 7;
  pair::connect(a, b, p);
  Sge sge{a.addr(), 8, a.key};
  ASSERT_TRUE(pair::post(a, write_wr(1, sge, b.addr(), b.key)));  // its round trip is measured: RTO 1 ms
  ASSERT_EQ(pair::poll_n(*a.scq, 1).size(), 1u);

  // b drops requests silently (RESET) while the next WRITE goes out: lost.
  QpAttr reset;
  reset.qp_state = QpState::kReset;
  ASSERT_TRUE(b.qp->modify(reset, QP_STATE));
  ASSERT_TRUE(pair::post(a, write_wr(2, sge, b.addr() + 64, b.key)));
  step(clock, a, b, 1100us);  // past RTO: resent early, lost again
  TransportCounters c = a.qp->counters();
  EXPECT_EQ(c.rto_expiries, 1u);
  EXPECT_EQ(c.retransmissions, 1u);
  EXPECT_EQ(c.timeouts, 0u);
  step(clock, a, b, 500us);  // the next early one waits twice as long
  EXPECT_EQ(a.qp->counters().rto_expiries, 1u);

  reconnect_b(a, b, 1);  // b expects the lost WRITE's PSN
  step(clock, a, b, 1600us);  // 2 ms after the first early resend: resent again, and answered
  auto wcs = pair::poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 2u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  c = a.qp->counters();
  EXPECT_EQ(c.rto_expiries, 2u);
  EXPECT_EQ(c.timeouts, 0u) << "recovered in 3.2 ms of a 67 ms timeout, no retry spent";
}

TEST(AdaptiveRetransmission, ASilentPeerStillEndsAfterRetryCntTimeouts) {
  ManualClock clock;
  Side a(&clock), b(&clock);
  PathParams p;
  p.timeout = 12;  // 16.8 ms
  p.retry_cnt = 3;
  pair::connect(a, b, p);
  Sge sge{a.addr(), 8, a.key};
  ASSERT_TRUE(pair::post(a, write_wr(1, sge, b.addr(), b.key)));
  ASSERT_EQ(pair::poll_n(*a.scq, 1).size(), 1u);
  QpAttr reset;
  reset.qp_state = QpState::kReset;
  ASSERT_TRUE(b.qp->modify(reset, QP_STATE));
  ASSERT_TRUE(pair::post(a, write_wr(2, sge, b.addr(), b.key)));
  std::vector<Wc> wcs;
  for (int i = 0; i < 400 && wcs.empty(); ++i) {
    step(clock, a, b, 500us);
    wcs = pair::poll_n(*a.scq, 1, std::chrono::milliseconds(0));
  }
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRetryExcErr);
  const TransportCounters c = a.qp->counters();
  EXPECT_EQ(c.timeouts, 4u) << "retry_cnt + 1 IBA timeouts, as without early resends";
  EXPECT_GT(c.rto_expiries, 0u);
  EXPECT_EQ(c.retransmissions, 3u + c.rto_expiries);
}

}  // namespace
}  // namespace srdma::hca
