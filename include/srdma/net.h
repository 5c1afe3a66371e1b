// Where a device sits on an IP network: RoCEv2 (InfiniBand transport
// packets in UDP, IBTA vol. 1 Annex A17).
//
// A device opened with a NetConfig binds one IP address (IPv4 or IPv6) and
// the RoCEv2 UDP port; its address on the link (Device::address(), what a
// peer QP's QP_AV names) is then roce_address() of that IPv4 address, and
// its GID the IPv4-mapped ::ffff:a.b.c.d; or, for an IPv6 address, the
// roce6 address of its entry in the process's IPv6 table, and its GID the
// address itself. A device opened without one stays on the in-process link.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "srdma/status.h"

namespace srdma {

inline constexpr std::uint16_t kRoceV2UdpPort = 4791;

struct NetConfig {
  std::string ip = "127.0.0.1";  // IP address to bind: IPv4 dotted quad, or IPv6 text (::1)
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
  // Receive such runs as one datagram, cut into frames here (UDP_GRO)
  // rather than by the kernel (SRDMA_GRO=0).
  bool gro = true;
  // Share ip:port with this user's other processes (and devices), each
  // packet steered to the one that owns its QP (hca/host_steering.h).
  // false (SRDMA_EXCLUSIVE=1): the device holds the address alone.
  bool shared = true;
  // On a shared address, frames for another device of this user on this
  // host go through shared memory (hca/same_host.h). false
  // (SRDMA_SAME_HOST=0): every frame takes the wire.
  bool same_host = true;

  // From the environment: SRDMA_ADDR (default 127.0.0.1; ::1 or any IPv6
  // address opens the device on IPv6), SRDMA_PORT,
  // SRDMA_ICRC=0 (no check), SRDMA_BUSY_POLL_US, SRDMA_GSO=0, SRDMA_GRO=0, SRDMA_EXCLUSIVE=1,
  // SRDMA_SAME_HOST=0.
  // EINVAL naming the variable for a value that does not parse.
  static Result<NetConfig> from_env();
};

// Addresses on the link: in-process devices get small numbers; a RoCEv2
// device's address carries a tag and its IPv4 address (host order).
inline constexpr std::uint64_t kRoceAddressTag = std::uint64_t{1} << 48;
constexpr std::uint64_t roce_address(std::uint32_t ipv4) { return kRoceAddressTag | ipv4; }
// An IPv4 RoCEv2 address (roce_address()).
constexpr bool is_roce_address(std::uint64_t a) { return (a >> 32) == (kRoceAddressTag >> 32); }
constexpr std::uint32_t roce_ipv4(std::uint64_t a) { return static_cast<std::uint32_t>(a); }

// An IPv6 RoCEv2 address: a second tag and the index of the address in the
// process's IPv6 table (roce6_address_of). The table is append-only and
// bounded, and an address enters it only when this process names it
// (opening a device on it, an AH or QP_AV or CM path naming its GID), never
// because a packet arrived from it: a flood of spoofed sources commits
// nothing (the receive path only looks addresses up).
inline constexpr std::uint64_t kRoce6AddressTag = std::uint64_t{2} << 48;
inline constexpr std::uint32_t kMaxIpv6Addresses = 4096;
constexpr std::uint64_t roce6_address(std::uint32_t index) { return kRoce6AddressTag | index; }
constexpr bool is_roce6_address(std::uint64_t a) { return (a >> 32) == (kRoce6AddressTag >> 32); }
constexpr std::uint32_t roce6_index(std::uint64_t a) { return static_cast<std::uint32_t>(a); }
// Either family: the address of a device on the RoCEv2 link.
constexpr bool is_roce_link_address(std::uint64_t a) { return is_roce_address(a) || is_roce6_address(a); }

// "a.b.c.d" to an IPv4 address in host order; EINVAL with the reason.
Result<std::uint32_t> parse_ipv4(std::string_view s);
std::string ipv4_str(std::uint32_t ipv4);

// RoCE v2 GIDs: IPv6 addresses, IPv4 ones IPv4-mapped.
using Gid = std::array<std::uint8_t, 16>;
Gid gid_of_ipv4(std::uint32_t ipv4);
// EINVAL unless `gid` is IPv4-mapped (::ffff:a.b.c.d).
Result<std::uint32_t> ipv4_of_gid(const Gid& gid);
bool is_ipv4_mapped(const Gid& gid);

// An IP address of either family, as its GID: an IPv4 address IPv4-mapped.
struct IpAddress {
  Gid bytes{};
  bool is_v4() const { return is_ipv4_mapped(bytes); }
  std::uint32_t v4() const;  // REQUIRES: is_v4()
  static IpAddress of_v4(std::uint32_t ipv4) { return IpAddress{gid_of_ipv4(ipv4)}; }
  friend bool operator==(const IpAddress&, const IpAddress&) = default;
};
// An IPv4 dotted quad or IPv6 text (a v4-mapped one is IPv4); EINVAL with
// the reason.
Result<IpAddress> parse_ip(std::string_view s);
// Dotted quad for IPv4, RFC 5952 text for IPv6.
std::string ip_str(const IpAddress& a);

// The link address of `a`: roce_address() for IPv4; for IPv6 its entry in
// the table, added if new. ENOSPC when the table is full. Only for
// addresses this process names itself (see kRoce6AddressTag).
Result<std::uint64_t> roce_address_of(const IpAddress& a);
// The link address of `a` if it has one, without adding to the table
// (what the receive path uses): 0 for an IPv6 address never named here.
std::uint64_t known_roce_address(const IpAddress& a);
// The CM's allowance: the link address of the IPv6 source of a MAD for
// QP1 that arrived (a REQ from a host this process never addressed),
// added if new while fewer than kMaxIpv6Arrivals of the table's entries
// came that way; 0 once they have. A flood of spoofed sources takes that
// many entries for the process's life and no more: the rest of the table
// stays for the addresses this process names.
inline constexpr std::uint32_t kMaxIpv6Arrivals = 256;
std::uint64_t roce_address_of_arrival(const IpAddress& a);
// How many entries arrivals took (tests).
std::size_t ipv6_arrivals_taken();
// The IP address of a RoCEv2 link address (either tag); REQUIRES:
// is_roce_link_address(a) and, for IPv6, an index the table handed out.
IpAddress ip_of_roce_address(std::uint64_t a);
// Whether `a` is an IPv6 link address the table handed out.
bool roce6_known(std::uint64_t a);
// The GID of a RoCEv2 link address; the GID's link address (interned as
// roce_address_of does). EINVAL for the unspecified GID (::) and multicast
// ones other than IPv4-mapped; ENOSPC for a full table.
Gid gid_of_roce_address(std::uint64_t a);
Result<std::uint64_t> roce_address_of_gid(const Gid& gid);
// How many IPv6 addresses the table holds (tests: a flood adds none).
std::size_t ipv6_table_size();

// The IB MTU (256..4096) that fits in an IP MTU with the RoCEv2 headers
// (IPv4 or IPv6, UDP, BTH, the largest extended header, ICRC); 0 if none does.
std::uint32_t ib_mtu_for_ip_mtu(std::uint32_t ip_mtu, bool ipv6 = false);

}  // namespace srdma
