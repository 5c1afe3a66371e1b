// The transport's fixed limits. A requester keeps at most kMaxUnackedPsns
// PSNs unacknowledged (its window; one READ larger than that goes alone)
// and asks for an ACK at least every kAckEveryPsns packets (packet.h).
// kMaxRdAtomic is the device's max_qp_rd_atom and max_qp_init_rd_atom:
// modify_qp refuses max_rd_atomic and max_dest_rd_atomic above it.
#pragma once

#include <cstdint>

namespace srdma::hca {

constexpr std::uint32_t kMaxUnackedPsns = 256;
// A wire's window after losses never goes below this (requester.h).
constexpr std::uint32_t kMinLossWindow = 32;
constexpr std::uint8_t kMaxRdAtomic = 16;

}  // namespace srdma::hca
