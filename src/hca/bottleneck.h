// A switch port as the link that misbehaves models it (impair.h's rate=,
// queue=, ecn=, kmax=, pmax=): a FIFO that drains at a fixed rate, with room
// for so many packets, marking CE on ECN-capable packets as RED does on the
// instantaneous queue (none below Kmin, with a probability rising to Pmax
// up to Kmax, all from Kmax) and dropping at its tail when full.
//
// Why RED and not a single threshold: with one threshold, the flow whose
// packets happen to arrive when the queue sits at it takes every mark, and
// two DCQCN flows settle at unequal rates. Marking in proportion to the
// excess spreads the marks over the flows by their share of the arrivals
// (docs/BENCHMARKS.md, congestion control).
//
// The queue is virtual (a phantom queue): each packet offered is given the
// time its last bit would leave (after everything queued before it), and
// the occupancy a packet finds is the number of those still in the future.
// The packet itself goes on at once. Throughput beyond the rate then shows
// up as it does at a real port, as marks and tail drops, without holding
// packets back in a link whose delivery is synchronous.
//
// Not thread-safe: the impairing link calls it under its lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <random>

#include "hca/engine_clock.h"

namespace srdma::hca {

class BottleneckPort {
 public:
  enum class Verdict { kPass, kMark, kDrop };

  // kmin 0: never marks; kmax 0 or kmax == kmin: marks every packet from
  // kmin on. The marking draws come from a generator of their own, seeded,
  // so a run replays exactly and the link's other fates keep their draws.
  BottleneckPort(double rate_gbps, std::uint32_t queue_packets, std::uint32_t kmin, std::uint32_t kmax = 0,
                 double pmax = 1, std::uint64_t seed = 1)
      : ns_per_byte_(8.0 / rate_gbps),
        queue_packets_(queue_packets),
        kmin_(kmin),
        kmax_(kmax > kmin ? kmax : kmin),
        pmax_(pmax),
        rng_(seed) {}

  // A packet of `wire_bytes` arrives at `now`; `ect`: it is ECN-capable.
  Verdict offer(std::uint32_t wire_bytes, bool ect, Clock::time_point now) {
    while (!departures_.empty() && departures_.front() <= now) departures_.pop_front();
    const std::size_t queued = departures_.size();
    if (queued >= queue_packets_) return Verdict::kDrop;
    const Clock::time_point start = departures_.empty() ? now : departures_.back();
    departures_.push_back(start + std::chrono::nanoseconds(static_cast<std::int64_t>(wire_bytes * ns_per_byte_)));
    return ect && marks(queued) ? Verdict::kMark : Verdict::kPass;
  }
  // Packets in the queue at `now` (for tests and reports).
  std::size_t queued(Clock::time_point now) const {
    std::size_t n = 0;
    for (auto it = departures_.rbegin(); it != departures_.rend() && *it > now; ++it) ++n;
    return n;
  }

 private:
  bool marks(std::size_t queued) {
    if (kmin_ == 0 || queued < kmin_) return false;
    if (queued >= kmax_) return true;
    const double p = pmax_ * static_cast<double>(queued - kmin_) / static_cast<double>(kmax_ - kmin_);
    return std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < p;
  }

  const double ns_per_byte_;
  const std::uint32_t queue_packets_, kmin_, kmax_;
  const double pmax_;
  std::mt19937_64 rng_;
  std::deque<Clock::time_point> departures_;  // when each queued packet's last bit leaves
};

}  // namespace srdma::hca
