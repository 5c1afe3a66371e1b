// Translations between <infiniband/verbs.h> values and softrdma's: MTUs,
// access flags, QP states, completion statuses and opcodes. Every value
// from the application is range-checked here.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "srdma/qp_attr.h"
#include "srdma/status.h"
#include "srdma/wc.h"

namespace srdma::verbs {

// 256..4096 for IBV_MTU_256..IBV_MTU_4096, 0 for anything else.
std::uint32_t mtu_bytes(int mtu);
// The enum for 256..4096 bytes (IBV_MTU_256 below that).
ibv_mtu mtu_enum(std::uint32_t bytes);

// An MR's or a QP's access flags. The optional range (relaxed ordering ...)
// is ignored, as rdma-core does; HUGETLB is a hint; ZERO_BASED and
// ON_DEMAND are EOPNOTSUPP; unknown bits EINVAL.
Result<std::uint32_t> access_flags(unsigned int ibv_access);
// A memory window bind's mw_access_flags: remote rights and ZERO_BASED;
// anything else EINVAL.
Result<std::uint32_t> mw_access_flags(unsigned int ibv_access);

// IBV_QPS_* and softrdma's QpState have IBA's order; EINVAL past ERR.
Result<QpState> qp_state(int ibv_state);
inline ibv_qp_state ibv_state(QpState s) { return static_cast<ibv_qp_state>(s); }

// The peer's RoCEv2 address from an address vector: the IPv4-mapped GID
// with a GRH; without one the LID, which carries the low 16 bits of the
// peer's address, in our own /16 (how LID-only programs such as qperf
// address a peer). `own_ipv4` is the device's address. Over IPv6 (own_ipv4
// 0) the GRH's DGID is the peer's IPv6 address, and a GRH is needed.
Result<std::uint64_t> peer_address(std::uint32_t own_ipv4, const ibv_ah_attr& ah);

// A softrdma completion as an ibv_wc (imm_data back to network order).
// ibv_wc.sl of a UD receive with a GRH area: the RoCE L3 header type
// (IPv4), as mlx5 reports it.
inline constexpr std::uint8_t kWcSlRoceIpv4 = 2;
void to_ibv_wc(const Wc& in, ibv_wc& out);

}  // namespace srdma::verbs
