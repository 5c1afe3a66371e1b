// Congestion control as RoCEv2 NICs do it: DCQCN (Zhu et al., SIGCOMM
// 2015), its two ends named and tuned as NVIDIA's adapters name them.
//
// - The notification point (NP) is the receiver of a request whose IP
//   header says CE (ECN 11, marked by a switch's queue, or by the link
//   that misbehaves on purpose). It answers with a CNP (BTH opcode 0x81)
//   to the QP that sent it, at most one per min_time_between_cnps.
// - The reaction point (RP) is that QP's requester. A CNP cuts its rate:
//   Rt = Rc, Rc *= (1 - alpha/2), alpha moves toward 1. Without CNPs alpha
//   decays every dce_tcp_rtt, and the rate climbs back on a timer
//   (rpg_time_reset) and a byte counter (rpg_byte_reset): rpg_threshold
//   rounds of fast recovery (Rc halfway to Rt), then additive increase
//   (Rt += rpg_ai_rate), then hyper increase (Rt += i * rpg_hai_rate) once
//   both the timer and the byte counter passed the threshold. At the line
//   rate (rpg_max_rate) the QP is unlimited again and pays nothing.
// - A path that does not mark still queues: a rising round trip (its
//   gradient, as TIMELY reads it) is taken as a CNP would be, at most once
//   per rate_reduce_monitor_period, when the round trip is above
//   delay_low_us.
//
// The RP paces with a token bucket at Rc: a send that finds the bucket
// empty waits (the requester's kWaitRate) until it refills. Every time is
// the caller's (the engine clock): tests drive it by hand.
//
// Not thread-safe: the RP's state belongs to the requester (under the QP's
// send lock); a CNP reaches it through the send side's inbox.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "hca/engine_clock.h"

namespace srdma::hca {

// The parameters, named as NVIDIA's RoCE congestion control names them
// (rates in Mb/s, times in microseconds).
struct DcqcnParams {
  // RP
  double rpg_max_rate = 100000;         // the line rate: at it the QP is unlimited
  double rpg_min_rate = 10;             // never below
  double rate_to_set_on_first_cnp = 0;  // 0: the first CNP cuts from the current rate
  double rpg_min_dec_fac = 0.5;         // one CNP cuts at most to this share of Rc
  double rpg_ai_rate = 50;              // additive increase step
  double rpg_hai_rate = 500;            // hyper increase step
  std::uint32_t rpg_threshold = 5;      // increase rounds of fast recovery (F)
  std::uint32_t rpg_time_reset = 300;   // us: the rate increase timer
  std::uint64_t rpg_byte_reset = 32767; // bytes: the rate increase byte counter
  double dce_tcp_g = 1.0 / 256;         // alpha's gain
  std::uint32_t dce_tcp_rtt = 55;       // us: alpha's update period
  double initial_alpha_value = 1.0;
  std::uint32_t rate_reduce_monitor_period = 4;  // us: at most one cut per period
  bool clamp_tgt_rate = true;           // a cut also sets Rt = Rc (else Rt keeps its value)
  // NP
  std::uint32_t min_time_between_cnps = 4;  // us, per QP
  // The delay signal (for paths that do not mark): off when 0.
  std::uint32_t delay_low_us = 0;       // a round trip below this is never congestion
  double delay_gradient = 0.2;          // a normalized RTT gradient above this is (TIMELY's)
  // The pacer's bucket: a burst this many bytes long goes at once (four
  // packets at MTU 4096: a switch queue sees little more from one QP).
  std::uint32_t burst_bytes = 16 * 1024;
};

// What the RP has done, for the counters.
struct DcqcnCounters {
  std::uint64_t cnps_received = 0;
  std::uint64_t rate_decreases = 0;  // a CNP's or the delay signal's cut
  std::uint64_t rate_increases = 0;  // a timer's or byte counter's round
  std::uint64_t delay_signals = 0;   // cuts the delay signal made
  std::uint64_t paced_waits = 0;     // sends that waited for the bucket
};

class ReactionPoint {
 public:
  explicit ReactionPoint(const DcqcnParams& p = {}) : p_(p), rc_(p.rpg_max_rate), rt_(p.rpg_max_rate) {}

  // Whether the rate limits the QP (a CNP came and the rate has not
  // climbed back): the requester asks only then.
  bool limited() const { return limited_; }
  double rate_mbps() const { return rc_; }
  double target_mbps() const { return rt_; }
  double alpha() const { return alpha_; }
  const DcqcnCounters& counters() const { return c_; }

  // A CNP for this QP arrived.
  void on_cnp(Clock::time_point now);
  // A round-trip sample: the delay signal's input.
  void on_rtt(Clock::duration rtt, Clock::time_point now);
  // `bytes` went out (payload and headers): the byte counter and the bucket.
  void on_sent(std::uint64_t bytes, Clock::time_point now);
  // When the next send may go: `now` when the bucket has tokens (or the QP
  // is unlimited), else when it will. Runs the timers that fell due.
  Clock::time_point send_time(Clock::time_point now);

 private:
  void advance(Clock::time_point now);  // the alpha and increase timers
  void cut(Clock::time_point now);
  void increase_round();
  void refill(Clock::time_point now);
  static double bytes_per_ns(double mbps) { return mbps / 8000.0; }

  DcqcnParams p_;
  bool limited_ = false;
  double rc_, rt_;
  double alpha_ = 1.0;
  bool cnp_since_alpha_ = false;
  bool first_cnp_ = true;
  std::uint32_t timer_rounds_ = 0, byte_rounds_ = 0;
  std::uint64_t bytes_since_round_ = 0;
  Clock::time_point last_alpha_{}, last_timer_{}, last_cut_{};
  // The bucket: tokens in bytes, as of last_refill_.
  double tokens_ = 0;
  Clock::time_point last_refill_{};
  // The delay signal: the previous sample, the smoothed difference and the
  // least round trip seen (the gradient's normalizer).
  std::int64_t prev_rtt_ns_ = -1, min_rtt_ns_ = -1;
  double rtt_diff_ns_ = 0;
  DcqcnCounters c_;
};

// The NP's gate: a CNP at most once per min_time_between_cnps per QP.
class CnpGate {
 public:
  bool admit(Clock::time_point now, std::uint32_t min_gap_us) {
    if (sent_ && now - last_ < std::chrono::microseconds(min_gap_us)) return false;
    sent_ = true;
    last_ = now;
    return true;
  }

 private:
  bool sent_ = false;
  Clock::time_point last_{};
};

// ECN codepoints of the IP header's TOS / traffic class (RFC 3168).
constexpr std::uint8_t kEcnMask = 0x03;
constexpr std::uint8_t kEcnEct0 = 0x02;
constexpr std::uint8_t kEcnCe = 0x03;
constexpr bool ecn_capable(std::uint8_t tos) { return (tos & kEcnMask) != 0; }
constexpr bool ecn_marked(std::uint8_t tos) { return (tos & kEcnMask) == kEcnCe; }

}  // namespace srdma::hca
