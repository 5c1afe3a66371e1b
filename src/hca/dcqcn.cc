// DCQCN's reaction point (dcqcn.h).
#include "hca/dcqcn.h"

#include <cmath>

namespace srdma::hca {

namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

// A QP idle for long runs its timers as many rounds as fit; past this many
// the rate is back at the line rate anyway.
constexpr std::uint32_t kMaxRoundsAtOnce = 1024;

}  // namespace

void ReactionPoint::on_cnp(Clock::time_point now) {
  ++c_.cnps_received;
  cut(now);
}

void ReactionPoint::cut(Clock::time_point now) {
  advance(now);
  if (limited_ && now - last_cut_ < microseconds(p_.rate_reduce_monitor_period)) {
    cnp_since_alpha_ = true;  // alpha still hears of it
    return;
  }
  if (!limited_) {
    // From the line rate: the timers start now, alpha where it is set.
    limited_ = true;
    alpha_ = p_.initial_alpha_value;
    last_alpha_ = last_timer_ = now;
    tokens_ = p_.burst_bytes;
    last_refill_ = now;
  }
  ++c_.rate_decreases;
  if (p_.clamp_tgt_rate || first_cnp_) rt_ = rc_;
  if (first_cnp_ && p_.rate_to_set_on_first_cnp > 0) {
    rc_ = std::min(rc_, p_.rate_to_set_on_first_cnp);
  } else {
    rc_ = std::max(rc_ * (1 - alpha_ / 2), rc_ * p_.rpg_min_dec_fac);
  }
  rc_ = std::max(rc_, p_.rpg_min_rate);
  first_cnp_ = false;
  alpha_ = (1 - p_.dce_tcp_g) * alpha_ + p_.dce_tcp_g;
  cnp_since_alpha_ = false;
  last_alpha_ = now;
  timer_rounds_ = byte_rounds_ = 0;
  bytes_since_round_ = 0;
  last_timer_ = last_cut_ = now;
}

void ReactionPoint::advance(Clock::time_point now) {
  if (!limited_) return;
  // Alpha: a period with no CNP decays it; one with a CNP (that made no
  // cut of its own) raises it.
  const auto alpha_period = microseconds(std::max<std::uint32_t>(1, p_.dce_tcp_rtt));
  if (now - last_alpha_ >= alpha_period) {
    const auto periods = static_cast<std::uint64_t>((now - last_alpha_) / alpha_period);
    std::uint64_t quiet = std::min<std::uint64_t>(periods, 1u << 20);
    if (cnp_since_alpha_) {  // the first period heard one
      alpha_ = (1 - p_.dce_tcp_g) * alpha_ + p_.dce_tcp_g;
      cnp_since_alpha_ = false;
      --quiet;
    }
    alpha_ *= std::pow(1 - p_.dce_tcp_g, static_cast<double>(quiet));
    last_alpha_ += alpha_period * periods;
  }
  // The rate increase timer.
  const auto period = microseconds(std::max<std::uint32_t>(1, p_.rpg_time_reset));
  std::uint32_t rounds = 0;
  while (limited_ && now - last_timer_ >= period && rounds < kMaxRoundsAtOnce) {
    last_timer_ += period;
    ++timer_rounds_;
    ++rounds;
    increase_round();
  }
  if (now - last_timer_ >= period) last_timer_ = now;  // caught up (the rate is back)
}

void ReactionPoint::increase_round() {
  ++c_.rate_increases;
  const std::uint32_t f = p_.rpg_threshold;
  if (timer_rounds_ > f && byte_rounds_ > f) {
    rt_ += (std::min(timer_rounds_, byte_rounds_) - f) * p_.rpg_hai_rate;  // hyper
  } else if (std::max(timer_rounds_, byte_rounds_) > f) {
    rt_ += p_.rpg_ai_rate;  // additive
  }  // else fast recovery: toward Rt alone
  rt_ = std::min(rt_, p_.rpg_max_rate);
  rc_ = (rt_ + rc_) / 2;
  // Within a megabit of the line rate it is the line rate: unlimited.
  if (rc_ >= p_.rpg_max_rate - 1) {
    rc_ = rt_ = p_.rpg_max_rate;
    limited_ = false;
    first_cnp_ = true;
  }
}

void ReactionPoint::on_rtt(Clock::duration rtt, Clock::time_point now) {
  if (p_.delay_low_us == 0) return;
  const std::int64_t r = std::chrono::duration_cast<nanoseconds>(rtt).count();
  if (r <= 0) return;
  if (min_rtt_ns_ < 0 || r < min_rtt_ns_) min_rtt_ns_ = r;
  if (prev_rtt_ns_ < 0) {
    prev_rtt_ns_ = r;
    return;
  }
  // TIMELY's smoothed difference, normalized by the least round trip.
  rtt_diff_ns_ = 0.875 * rtt_diff_ns_ + 0.125 * static_cast<double>(r - prev_rtt_ns_);
  prev_rtt_ns_ = r;
  const double gradient = rtt_diff_ns_ / static_cast<double>(std::max<std::int64_t>(1, min_rtt_ns_));
  if (r < std::int64_t{p_.delay_low_us} * 1000 || gradient <= p_.delay_gradient) return;
  if (limited_ && now - last_cut_ < microseconds(p_.rate_reduce_monitor_period)) return;
  ++c_.delay_signals;
  cut(now);
}

void ReactionPoint::on_sent(std::uint64_t bytes, Clock::time_point now) {
  if (!limited_) return;
  refill(now);
  tokens_ -= static_cast<double>(bytes);
  bytes_since_round_ += bytes;
  if (bytes_since_round_ >= p_.rpg_byte_reset) {
    bytes_since_round_ = 0;
    ++byte_rounds_;
    increase_round();
  }
}

void ReactionPoint::refill(Clock::time_point now) {
  if (now > last_refill_) {
    const double ns = static_cast<double>(std::chrono::duration_cast<nanoseconds>(now - last_refill_).count());
    tokens_ = std::min<double>(p_.burst_bytes, tokens_ + ns * bytes_per_ns(rc_));
    last_refill_ = now;
  }
}

Clock::time_point ReactionPoint::send_time(Clock::time_point now) {
  if (!limited_) return now;
  advance(now);
  if (!limited_) return now;
  refill(now);
  if (tokens_ >= 0) return now;
  ++c_.paced_waits;
  const double wait_ns = -tokens_ / bytes_per_ns(rc_);
  return now + nanoseconds(static_cast<std::int64_t>(std::ceil(wait_ns)));
}

}  // namespace srdma::hca
