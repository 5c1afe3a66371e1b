// A switch port as the link that misbehaves models it (impair.h's rate=,
// queue=, ecn=): a FIFO that drains at a fixed rate, with room for so many
// packets, marking CE on an ECN-capable packet that finds the ECN threshold
// reached and dropping at its tail when full.
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

#include "hca/engine_clock.h"

namespace srdma::hca {

class BottleneckPort {
 public:
  enum class Verdict { kPass, kMark, kDrop };

  BottleneckPort(double rate_gbps, std::uint32_t queue_packets, std::uint32_t ecn_packets)
      : ns_per_byte_(8.0 / rate_gbps), queue_packets_(queue_packets), ecn_packets_(ecn_packets) {}

  // A packet of `wire_bytes` arrives at `now`; `ect`: it is ECN-capable.
  Verdict offer(std::uint32_t wire_bytes, bool ect, Clock::time_point now) {
    while (!departures_.empty() && departures_.front() <= now) departures_.pop_front();
    const std::size_t queued = departures_.size();
    if (queued >= queue_packets_) return Verdict::kDrop;
    const Clock::time_point start = departures_.empty() ? now : departures_.back();
    departures_.push_back(start + std::chrono::nanoseconds(static_cast<std::int64_t>(wire_bytes * ns_per_byte_)));
    return ect && ecn_packets_ != 0 && queued >= ecn_packets_ ? Verdict::kMark : Verdict::kPass;
  }
  // Packets in the queue at `now` (for tests and reports).
  std::size_t queued(Clock::time_point now) const {
    std::size_t n = 0;
    for (auto it = departures_.rbegin(); it != departures_.rend() && *it > now; ++it) ++n;
    return n;
  }

 private:
  const double ns_per_byte_;
  const std::uint32_t queue_packets_, ecn_packets_;
  std::deque<Clock::time_point> departures_;  // when each queued packet's last bit leaves
};

}  // namespace srdma::hca
