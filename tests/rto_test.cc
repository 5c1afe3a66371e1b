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
#include "srdma/impair.h"

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

// Every early go-back-N doubles PTO and RTO for what follows, until a
// request sent once is answered (RFC 6298 5.5-5.7, Karn): a peer that is
// slow for a while (a process not scheduled for milliseconds) is not
// answered with go-back-N after go-back-N at the estimate's short RTO.
TEST(AdaptiveRetransmission, EarlyResendsBackOffUntilARoundTripIsMeasuredAgain) {
  ManualClock clock;
  Side a(&clock), b(&clock);
  PathParams p;
  p.timeout = 14;
  measure_then_silence_b(a, b, p);
  Sge sge{a.addr(), 8, a.key};
  ASSERT_TRUE(pair::post(a, write_wr(2, sge, b.addr() + 64, b.key)));  // PSN 1, lost
  step(clock, a, b, kPto + 10us);  // the probe
  step(clock, a, b, kRto - kPto);  // go back N at RTO: backed off once
  ASSERT_EQ(a.qp->counters().rto_expiries, 1u);
  reconnect_b(a, b, 1);
  step(clock, a, b, 2 * kRto + 10us);  // the next RTO (twice as long) resends: answered
  ASSERT_EQ(pair::poll_n(*a.scq, 1).size(), 1u);
  TransportCounters c = a.qp->counters();
  ASSERT_EQ(c.rto_expiries, 2u);  // backed off twice; the answer was a resend's: no sample
  const std::uint64_t probes = c.tail_probes;

  step(clock, a, b, 2ms);  // the timer still pending finds nothing out
  QpAttr reset;
  reset.qp_state = QpState::kReset;
  ASSERT_TRUE(b.qp->modify(reset, QP_STATE));
  ASSERT_TRUE(pair::post(a, write_wr(3, sge, b.addr() + 128, b.key)));  // PSN 2, lost
  step(clock, a, b, kPto + 10us);
  EXPECT_EQ(a.qp->counters().tail_probes, probes) << "PTO is 4 times the estimate's now";
  step(clock, a, b, 3 * kPto);
  EXPECT_EQ(a.qp->counters().tail_probes, probes + 1);
  reconnect_b(a, b, 2);
  step(clock, a, b, 4 * kRto);  // the backed-off RTO: resent and answered
  ASSERT_EQ(pair::poll_n(*a.scq, 1).size(), 1u);

  // A request sent once and answered: measured, and the backoff is gone.
  ASSERT_TRUE(pair::post(a, write_wr(4, sge, b.addr() + 192, b.key)));  // PSN 3
  ASSERT_EQ(pair::poll_n(*a.scq, 1).size(), 1u);
  step(clock, a, b, 4ms);
  ASSERT_TRUE(b.qp->modify(reset, QP_STATE));
  ASSERT_TRUE(pair::post(a, write_wr(5, sge, b.addr() + 256, b.key)));  // PSN 4, lost
  step(clock, a, b, kPto + 10us);
  EXPECT_EQ(a.qp->counters().tail_probes, probes + 2) << "PTO is the estimate's again";
  EXPECT_EQ(a.qp->counters().timeouts, 0u);
}

// A message longer than the window goes a window at a time where the link
// takes single packets (a wire), even when nothing before it is
// outstanding, and a go-back-N into it resends a window, not the rest of
// the message. (The window once applied only behind an earlier WQE: an
// 8 MiB WRITE went out whole, 2048 packets, and every go-back-N at PTO
// sent all of them again into the peer's socket.)
TEST(Window, AMessageLongerThanTheWindowGoesAWindowAtATime) {
  constexpr std::size_t kPackets = 4 * kMaxUnackedPsns;
  constexpr std::size_t kLen = kPackets * 256;
  std::vector<std::uint8_t> src(kLen), dst(kLen);  // (outlive the devices)
  for (std::size_t i = 0; i < kLen; ++i) src[i] = static_cast<std::uint8_t>(i * 13 + (i >> 10));
  ManualClock clock;
  ImpairSpec single;  // the impairing link at a rate that never fires, single packets
  single.corrupt = 1e-15;
  single.seed = 1;
  single.single_packets = true;
  Side a(256, pair::kSideCaps, &clock, &single), b(256, pair::kSideCaps, &clock, &single);
  PathParams p;
  p.timeout = 14;
  p.path_mtu = 256;
  measure_then_silence_b(a, b, p);
  const std::uint32_t src_key = a.reg(src.data(), kLen, kAccessAll);
  const std::uint32_t dst_key = b.reg(dst.data(), kLen, kAccessAll);
  const TransportCounters before = a.qp->counters();
  Sge sge{reinterpret_cast<std::uint64_t>(src.data()), static_cast<std::uint32_t>(kLen), src_key};
  ASSERT_TRUE(pair::post(a, write_wr(2, sge, reinterpret_cast<std::uint64_t>(dst.data()), dst_key)));
  TransportCounters c = a.qp->counters();
  EXPECT_EQ(c.requests_sent - before.requests_sent, kMaxUnackedPsns) << "one window, then it waits";
  step(clock, a, b, kPto + 10us);  // more than 16 out and no answer: go back N at PTO
  c = a.qp->counters();
  EXPECT_EQ(c.rto_expiries, 1u);
  EXPECT_EQ(c.retransmissions, kMaxUnackedPsns) << "a window again, not the rest of the message";

  reconnect_b(a, b, 1, 256);  // b expects the WRITE's first PSN
  step(clock, a, b, kRto);  // go back N at RTO: answered, and the ACKs open the window
  auto wcs = pair::poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 2u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), kLen), 0);
  c = a.qp->counters();
  EXPECT_EQ(c.rto_expiries, 2u);
  EXPECT_EQ(c.retransmissions, 2 * kMaxUnackedPsns);
  EXPECT_EQ(c.requests_sent - before.requests_sent, kPackets + 2 * kMaxUnackedPsns);
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
