// The RDMA CM's conventions on top of the IB CM (IBA Annex A11, the IP CM
// service; Linux drivers/infiniband/core/cma.c): how an IP address and port
// become a service ID and the first 36 bytes of a REQ's private data.
//
// The service ID of an IP port space is (port space << 16) | port, e.g.
// 0x0000000001060000 | port for RDMA_PS_TCP (cma.c rdma_get_service_id):
// the listener's port travels there. The REQ's private data starts with
// struct cma_hdr: CMA_VERSION 0, the IP version in the high nibble of byte 1,
// the *active side's* port (cma_format_hdr copies the source sin_port), then
// the source and destination addresses, 16 bytes each. An IPv4 address is
// the last 4 bytes after 12 zeros: cma_format_hdr sets only ip4.addr, in a
// buffer from kzalloc (librdmacm's ib_connect_hdr: src_addr[3]). It is not
// ::ffff:a.b.c.d.
//
// No <expected> here either (see cm_mad.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "cm/cm_mad.h"

namespace srdma::cm {

// RDMA CM port spaces (Linux enum rdma_ucm_port_space: "IBTA Annex A11,
// service ID bytes 4 & 5").
constexpr std::uint16_t kRdmaPsIpoib = 0x0002;
constexpr std::uint16_t kRdmaPsTcp = 0x0106;
constexpr std::uint16_t kRdmaPsUdp = 0x0111;
constexpr std::uint16_t kRdmaPsIb = 0x013F;
// The service IDs of one port space, whatever the port (RDMA_IB_IP_PS_MASK).
constexpr std::uint64_t kRdmaIpPsMask = 0xFFFFFFFFFFFF0000ULL;

constexpr std::uint64_t rdma_service_id(std::uint16_t port_space, std::uint16_t port) {
  return std::uint64_t{port_space} << 16 | port;
}
constexpr std::uint16_t rdma_service_port(std::uint64_t service_id) {
  return static_cast<std::uint16_t>(service_id & 0xffff);
}
constexpr bool is_rdma_ip_service(std::uint64_t service_id, std::uint16_t port_space) {
  return (service_id & kRdmaIpPsMask) == rdma_service_id(port_space, 0);
}
static_assert(rdma_service_id(kRdmaPsTcp, 0) == 0x0000000001060000ULL);

constexpr std::size_t kCmaHeaderBytes = 36;  // sizeof(struct cma_hdr)
constexpr std::uint8_t kCmaVersion = 0x00;

// What the RDMA CM leaves the user of each message on an IB or RoCE device:
// rdma_connect's private data follows the header in the REQ (cma.c
// cma_user_data_offset); rdma_accept's and rdma_reject's are the whole REP's
// and REJ's. The RTU, DREQ and DREP it sends itself carry none
// (ib_send_cm_rtu / _dreq / _drep with NULL, 0); a CM user of its own has
// their full sizes (kRtuPrivateDataBytes 224, kDreqPrivateDataBytes 220,
// kDrepPrivateDataBytes 224, kMraPrivateDataBytes 222).
constexpr std::size_t kRdmaCmReqUserData = kReqPrivateDataBytes - kCmaHeaderBytes;  // 56
constexpr std::size_t kRdmaCmRepUserData = kRepPrivateDataBytes;                    // 196
constexpr std::size_t kRdmaCmRejUserData = kRejPrivateDataBytes;                    // 148
constexpr std::size_t kRdmaCmSidrReqUserData = kSidrReqPrivateDataBytes - kCmaHeaderBytes;  // 180
constexpr std::size_t kRdmaCmSidrRepUserData = kSidrRepPrivateDataBytes;                    // 136
static_assert(kRdmaCmReqUserData == 56);

using IpAddress16 = std::array<std::byte, 16>;

// struct cma_hdr, decoded. Ports in host order.
struct CmaHeader {
  std::uint8_t ip_version = 4;  // 4 or 6
  std::uint16_t src_port = 0;   // the active side's port
  IpAddress16 src_addr{};       // IPv6, or IPv4 in bytes 12..15 (the rest zero)
  IpAddress16 dst_addr{};

  bool operator==(const CmaHeader&) const = default;
};

// An IPv4 address (host order) in cma_hdr's form: 12 zero bytes, then the
// address big-endian. And back (bytes 12..15).
IpAddress16 cma_ipv4(std::uint32_t addr);
std::uint32_t cma_ipv4_of(const IpAddress16& a);

// The header of an IPv4 connection from src:src_port to dst.
CmaHeader cma_header_v4(std::uint32_t src_ip, std::uint32_t dst_ip, std::uint16_t src_port);

// Writes the header into the first kCmaHeaderBytes of `private_data` (a
// REQ's or SIDR_REQ's). IPv4 writes the 12 bytes before the address as zero,
// whatever `h` holds there. kInvalidField for an IP version other than 4 or
// 6 or a span shorter than the header.
MadStatus encode_cma_header(const CmaHeader& h, std::span<std::byte> private_data);

// Reads the header from the start of `private_data`. kShortPrivateData if
// it is shorter; kReservedValue for a CMA version other than 0 or an IP
// version other than 4 or 6. The low nibble of byte 1 is reserved and
// ignored; so are the 12 bytes before an IPv4 address (returned as zero).
MadStatus decode_cma_header(std::span<const std::byte> private_data, CmaHeader& out);

}  // namespace srdma::cm
