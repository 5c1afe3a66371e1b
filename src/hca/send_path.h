// What modify_qp copies from the QP's attributes for the send side: where
// the requester sends and the rules the requester and the completer follow.
// Written only by modify_qp (which holds every lock of the QP), read by
// both roles, so the data path reads no shared attributes.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "hca/engine_clock.h"

namespace srdma::hca {

struct SendPath {
  std::uint64_t dest_addr = 0;
  std::uint32_t dest_qpn = 0;
  std::uint8_t timeout = 14;          // local ACK timeout: 4.096 us * 2^timeout, 0 = infinite
  std::uint8_t retry_cnt = 7;
  std::uint8_t rnr_retry = 7;         // 7 = for ever
  std::uint32_t mtu = 4096;           // path_mtu (a UD QP: the port's MTU)
  std::uint8_t mtu_shift = 12;        // log2(mtu)
  std::uint8_t max_rd_atomic = 16;    // READs and atomics outstanding at most
  std::uint32_t qkey = 0;             // UD: the QP's, sent for a WR that asks for it

  // A message's packets at the path MTU (a power of two: a shift, not a
  // division, per packet).
  std::uint32_t packets_at_mtu(std::uint64_t bytes) const {
    return bytes == 0 ? 1 : static_cast<std::uint32_t>((bytes + mtu - 1) >> mtu_shift);
  }
  // The transport timeout (IBA 9.7.6.1.3); zero for an infinite one.
  Clock::duration timeout_span() const {
    if (timeout == 0) return Clock::duration::zero();
    return std::chrono::nanoseconds(4096LL << std::min<int>(timeout, 31));
  }
};

}  // namespace srdma::hca
