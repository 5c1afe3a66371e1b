// A QP's round-trip estimate and the retransmission timeout it gives, as
// TCP's (RFC 6298): SRTT and RTTVAR from samples of requests sent once
// (Karn: a retransmitted request's answer could be the first send's), RTO
// = SRTT + 4 RTTVAR, never below a floor.
//
// The completer retransmits early from it (completer.cc): a tail-loss
// probe at PTO (the last request again, with AckReq), then go-back-N at
// RTO after the oldest unacknowledged request, neither spending
// retry_cnt, backing off by doubling. The QP's IBA timeout stays what it is, the longest a
// requester waits: when it expires the retry is spent as before. IBA lets
// a requester resend any time (the responder answers duplicates).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "hca/engine_clock.h"

namespace srdma::hca {

// Below this an early retransmission is more likely a scheduler's delay
// than a loss on a host whose processes share two cores: one millisecond,
// where the IBA timeout perftest and rping use is 67 ms (timeout 14).
// That is a wire's (a polled link: the peer answers from another thread,
// often another process); on the in-process link the responder answers
// inside the requester's own send, so no delay hides from the estimate,
// and the floor is the engine timer's granularity.
constexpr Clock::duration kRtoFloor = std::chrono::milliseconds(1);
constexpr Clock::duration kRtoFloorInProcess = std::chrono::microseconds(200);
// The tail-loss probe's (TCP's TLP, RFC 8985 7.2): after PTO = 2 SRTT (at
// least this) without an answer, the last request is sent again asking
// for an ACK. A probe not needed costs one packet and its ACK.
constexpr Clock::duration kPtoFloor = std::chrono::microseconds(200);
constexpr Clock::duration kPtoFloorInProcess = std::chrono::microseconds(50);
// A sample of the round trip is taken on the first request and then on
// every kRttSampleEvery-th request sent once (two clock reads per sample).
constexpr std::uint32_t kRttSampleEvery = 64;

class RttEstimator {
 public:
  bool has_sample() const { return srtt_ns_ >= 0; }
  void add(Clock::duration sample) {
    const std::int64_t r = std::max<std::int64_t>(0, std::chrono::nanoseconds(sample).count());
    if (srtt_ns_ < 0) {
      srtt_ns_ = r;
      rttvar_ns_ = r / 2;
      return;
    }
    const std::int64_t err = r > srtt_ns_ ? r - srtt_ns_ : srtt_ns_ - r;
    rttvar_ns_ += (err - rttvar_ns_) / 4;  // beta 1/4
    srtt_ns_ += (r - srtt_ns_) / 8;        // alpha 1/8
  }
  Clock::duration srtt() const { return std::chrono::nanoseconds(std::max<std::int64_t>(0, srtt_ns_)); }
  Clock::duration rto(Clock::duration floor = kRtoFloor) const {
    return std::max<Clock::duration>(floor, std::chrono::nanoseconds(srtt_ns_ + 4 * rttvar_ns_));
  }
  // The probe timeout: two round trips, never below `floor`.
  Clock::duration pto(Clock::duration floor = kPtoFloor) const {
    return std::max<Clock::duration>(floor, std::chrono::nanoseconds(2 * srtt_ns_));
  }
  void reset() { srtt_ns_ = -1, rttvar_ns_ = 0; }

 private:
  std::int64_t srtt_ns_ = -1;  // -1: no sample yet
  std::int64_t rttvar_ns_ = 0;
};

}  // namespace srdma::hca
