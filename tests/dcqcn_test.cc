// DCQCN's reaction point and the NP's CNP gate, on a clock the test moves.
#include "hca/dcqcn.h"

#include <gtest/gtest.h>

#include <cmath>

namespace srdma::hca {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);

TEST(Dcqcn, AnUnlimitedQpSendsAtOnceAndCountsNothing) {
  ReactionPoint rp;
  EXPECT_FALSE(rp.limited());
  rp.on_sent(1 << 30, t0);
  EXPECT_EQ(rp.send_time(t0), t0);
  EXPECT_EQ(rp.rate_mbps(), DcqcnParams{}.rpg_max_rate);
  EXPECT_EQ(rp.counters().rate_increases, 0u);
}

TEST(Dcqcn, TheFirstCnpHalvesTheRateAndKeepsTheTarget) {
  ReactionPoint rp;
  rp.on_cnp(t0);
  EXPECT_TRUE(rp.limited());
  // alpha starts at 1: Rc * (1 - 1/2).
  EXPECT_DOUBLE_EQ(rp.rate_mbps(), 50000);
  EXPECT_DOUBLE_EQ(rp.target_mbps(), 100000);
  EXPECT_EQ(rp.counters().cnps_received, 1u);
  EXPECT_EQ(rp.counters().rate_decreases, 1u);
}

TEST(Dcqcn, OneCutPerMonitorPeriodButAlphaHearsEveryCnp) {
  DcqcnParams p;
  p.rate_reduce_monitor_period = 10;
  ReactionPoint rp(p);
  rp.on_cnp(t0);
  const double after_first = rp.rate_mbps();
  rp.on_cnp(t0 + microseconds(5));
  EXPECT_DOUBLE_EQ(rp.rate_mbps(), after_first) << "inside the monitor period";
  EXPECT_EQ(rp.counters().rate_decreases, 1u);
  rp.on_cnp(t0 + microseconds(10));
  EXPECT_LT(rp.rate_mbps(), after_first);
  EXPECT_EQ(rp.counters().rate_decreases, 2u);
  EXPECT_EQ(rp.counters().cnps_received, 3u);
}

TEST(Dcqcn, ACutNeverGoesBelowTheMinimumDecreaseFactorOrTheMinimumRate) {
  DcqcnParams p;
  p.rpg_min_dec_fac = 0.8;
  p.rate_reduce_monitor_period = 0;
  p.rpg_min_rate = 1000;
  ReactionPoint rp(p);
  rp.on_cnp(t0);
  EXPECT_DOUBLE_EQ(rp.rate_mbps(), 80000) << "alpha 1 would halve it; the factor holds it at 80%";
  for (int i = 1; i < 200; ++i) rp.on_cnp(t0 + nanoseconds(i));
  EXPECT_DOUBLE_EQ(rp.rate_mbps(), 1000);
}

TEST(Dcqcn, TheFirstCnpMaySetAGivenRate) {
  DcqcnParams p;
  p.rate_to_set_on_first_cnp = 2000;
  ReactionPoint rp(p);
  rp.on_cnp(t0);
  EXPECT_DOUBLE_EQ(rp.rate_mbps(), 2000);
}

TEST(Dcqcn, AlphaDecaysWithoutCnps) {
  ReactionPoint rp;
  rp.on_cnp(t0);
  const double a = rp.alpha();
  (void)rp.send_time(t0 + microseconds(55 * 10));
  EXPECT_NEAR(rp.alpha(), a * std::pow(1 - 1.0 / 256, 10), 1e-9);
}

TEST(Dcqcn, FastRecoveryThenAdditiveThenHyperIncrease) {
  DcqcnParams p;
  p.rpg_threshold = 2;
  p.rpg_byte_reset = 1000;
  p.burst_bytes = 1 << 30;  // the bucket stays out of it
  ReactionPoint rp(p);
  rp.on_cnp(t0);
  const double rt = rp.target_mbps(), rc0 = rp.rate_mbps();
  // Two timer rounds: fast recovery, halfway to Rt each, Rt unchanged.
  (void)rp.send_time(t0 + microseconds(300));
  EXPECT_DOUBLE_EQ(rp.rate_mbps(), (rt + rc0) / 2);
  (void)rp.send_time(t0 + microseconds(600));
  EXPECT_DOUBLE_EQ(rp.target_mbps(), rt);
  EXPECT_EQ(rp.counters().rate_increases, 2u);
  // The target was the line rate: cut again from lower so that increase
  // has room to show.
  DcqcnParams q = p;
  q.rpg_max_rate = 100000;
  q.clamp_tgt_rate = true;
  ReactionPoint r2(q);
  r2.on_cnp(t0);
  r2.on_cnp(t0 + microseconds(4));  // Rt = 50000, Rc lower
  const double rt2 = r2.target_mbps();
  ASSERT_LT(rt2, 100000);
  auto t = t0 + microseconds(4);
  for (int i = 1; i <= 3; ++i) (void)r2.send_time(t + microseconds(300 * i));  // timer rounds 1..3
  EXPECT_DOUBLE_EQ(r2.target_mbps(), rt2 + q.rpg_ai_rate) << "round 3 > F: additive";
  // Bytes: rounds 1..3 by the byte counter; the third is past F on both: hyper.
  const double before = r2.target_mbps();
  t += microseconds(900);
  r2.on_sent(1000, t);
  r2.on_sent(1000, t);
  EXPECT_DOUBLE_EQ(r2.target_mbps(), before + 2 * q.rpg_ai_rate) << "byte rounds 1, 2: timer past F only, additive";
  r2.on_sent(1000, t);
  EXPECT_DOUBLE_EQ(r2.target_mbps(), before + 2 * q.rpg_ai_rate + q.rpg_hai_rate) << "both past F: hyper, i = 1";
}

TEST(Dcqcn, TheRateClimbsBackToTheLineRateAndTheQpIsUnlimitedAgain) {
  ReactionPoint rp;
  rp.on_cnp(t0);
  (void)rp.send_time(t0 + std::chrono::milliseconds(100));
  EXPECT_FALSE(rp.limited());
  EXPECT_DOUBLE_EQ(rp.rate_mbps(), 100000);
  // And a new CNP starts over from the line rate.
  rp.on_cnp(t0 + std::chrono::milliseconds(101));
  EXPECT_DOUBLE_EQ(rp.rate_mbps(), 50000);
}

TEST(Dcqcn, ThePacerHoldsABurstThenTheRate) {
  DcqcnParams p;
  p.burst_bytes = 10000;
  p.rate_to_set_on_first_cnp = 8000;  // 8 Gb/s: one byte per ns
  ReactionPoint rp(p);
  rp.on_cnp(t0);
  EXPECT_EQ(rp.send_time(t0), t0);
  rp.on_sent(10000, t0);  // the burst
  EXPECT_EQ(rp.send_time(t0), t0) << "the bucket is empty, not in debt";
  rp.on_sent(4000, t0);
  EXPECT_EQ(rp.send_time(t0), t0 + nanoseconds(4000));
  EXPECT_EQ(rp.counters().paced_waits, 1u);
  EXPECT_EQ(rp.send_time(t0 + nanoseconds(4000)), t0 + nanoseconds(4000));
}

TEST(Dcqcn, TheDelaySignalIsOffByDefault) {
  ReactionPoint rp;
  for (int i = 0; i < 100; ++i) rp.on_rtt(microseconds(100 + 100 * i), t0 + microseconds(10 * i));
  EXPECT_FALSE(rp.limited());
}

TEST(Dcqcn, ARisingRoundTripCutsAFlatOneDoesNot) {
  DcqcnParams p;
  p.delay_low_us = 50;
  ReactionPoint flat(p);
  for (int i = 0; i < 100; ++i) flat.on_rtt(microseconds(200), t0 + microseconds(10 * i));
  EXPECT_FALSE(flat.limited());
  ReactionPoint rising(p);
  for (int i = 0; i < 100 && !rising.limited(); ++i)
    rising.on_rtt(microseconds(100 + 50 * i), t0 + microseconds(10 * i));
  EXPECT_TRUE(rising.limited());
  EXPECT_EQ(rising.counters().delay_signals, 1u);
  // Below delay_low_us a rise is no signal.
  ReactionPoint low(p);
  for (int i = 0; i < 40; ++i) low.on_rtt(nanoseconds(1000 + 1000 * i), t0 + microseconds(10 * i));
  EXPECT_FALSE(low.limited());
}

TEST(CnpGate, OnePerIntervalPerQp) {
  CnpGate g;
  EXPECT_TRUE(g.admit(t0, 4));
  EXPECT_FALSE(g.admit(t0 + microseconds(3), 4));
  EXPECT_TRUE(g.admit(t0 + microseconds(4), 4));
  CnpGate every;
  EXPECT_TRUE(every.admit(t0, 0));
  EXPECT_TRUE(every.admit(t0, 0));
}

TEST(Ecn, Codepoints) {
  EXPECT_FALSE(ecn_capable(0x00));
  EXPECT_TRUE(ecn_capable(kEcnEct0));
  EXPECT_TRUE(ecn_marked(0xb8 | kEcnCe));
  EXPECT_FALSE(ecn_marked(0xb8 | kEcnEct0));
}

}  // namespace
}  // namespace srdma::hca
