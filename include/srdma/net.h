// Where a device sits on an IP network: RoCEv2 (InfiniBand transport
// packets in UDP, IBTA vol. 1 Annex A17).
//
// A device opened with a NetConfig binds one IPv4 address and the RoCEv2
// UDP port; its address on the link (Device::address(), what a peer QP's
// QP_AV names) is then roce_address() of that IPv4 address, and its GID
// the IPv4-mapped ::ffff:a.b.c.d. A device opened without one stays on the
// in-process link.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "srdma/status.h"

namespace srdma {

inline constexpr std::uint16_t kRoceV2UdpPort = 4791;

struct NetConfig {
  std::string ip = "127.0.0.1";  // IPv4 address to bind (dotted quad)
  std::uint16_t port = kRoceV2UdpPort;  // every peer listens on the same port
  // Check every received frame's ICRC (drop and count a bad one). Off for
  // peers whose IPv4 Identification a socket cannot predict.
  bool check_icrc = true;
  // After traffic, the receive thread polls this long before it sleeps:
  // a ping-pong stays awake, an idle device costs nothing.
  std::uint32_t busy_poll_us = 200;
  // Send runs of equal-sized frames to one peer as one UDP GSO send where
  // the kernel can (SRDMA_GSO=0: one datagram per frame).
  bool gso = true;
  // Share ip:port with this user's other processes (and devices), each
  // packet steered to the one that owns its QP (hca/host_steering.h).
  // false (SRDMA_EXCLUSIVE=1): the device holds the address alone.
  bool shared = true;

  // From the environment: SRDMA_ADDR (default 127.0.0.1), SRDMA_PORT,
  // SRDMA_ICRC=0 (no check), SRDMA_BUSY_POLL_US, SRDMA_GSO=0, SRDMA_EXCLUSIVE=1.
  // EINVAL naming the variable for a value that does not parse.
  static Result<NetConfig> from_env();
};

// Addresses on the link: in-process devices get small numbers; a RoCEv2
// device's address carries a tag and its IPv4 address (host order).
inline constexpr std::uint64_t kRoceAddressTag = std::uint64_t{1} << 48;
constexpr std::uint64_t roce_address(std::uint32_t ipv4) { return kRoceAddressTag | ipv4; }
constexpr bool is_roce_address(std::uint64_t a) { return (a >> 32) == (kRoceAddressTag >> 32); }
constexpr std::uint32_t roce_ipv4(std::uint64_t a) { return static_cast<std::uint32_t>(a); }

// "a.b.c.d" to an IPv4 address in host order; EINVAL with the reason.
Result<std::uint32_t> parse_ipv4(std::string_view s);
std::string ipv4_str(std::uint32_t ipv4);

// RoCE v2 GIDs: IPv4-mapped IPv6 addresses.
using Gid = std::array<std::uint8_t, 16>;
Gid gid_of_ipv4(std::uint32_t ipv4);
// EINVAL unless `gid` is IPv4-mapped (::ffff:a.b.c.d).
Result<std::uint32_t> ipv4_of_gid(const Gid& gid);

// The IB MTU (256..4096) that fits in an IP MTU with the RoCEv2 headers
// (IPv4, UDP, BTH, the largest extended header, ICRC); 0 if none does.
std::uint32_t ib_mtu_for_ip_mtu(std::uint32_t ip_mtu);

}  // namespace srdma
