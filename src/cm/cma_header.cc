#include "cm/cma_header.h"

#include <algorithm>

namespace srdma::cm {
namespace {

constexpr std::size_t kVersionByte = 0;
constexpr std::size_t kIpVersionByte = 1;  // IP version in bits 7:4
constexpr std::size_t kPortByte = 2;
constexpr std::size_t kSrcAddrByte = 4;
constexpr std::size_t kDstAddrByte = 20;
constexpr std::size_t kIpv4Offset = 12;  // union cma_ip_addr: pad[3], then addr
static_assert(kDstAddrByte + 16 == kCmaHeaderBytes);

constexpr std::string_view kIpVersionField = "RDMA CM header IP version";

IpAddress16 canonical(std::uint8_t ip_version, const IpAddress16& a) {
  if (ip_version != 4) return a;
  IpAddress16 v4{};
  std::copy_n(a.begin() + kIpv4Offset, 4, v4.begin() + kIpv4Offset);
  return v4;
}

}  // namespace

IpAddress16 cma_ipv4(std::uint32_t addr) {
  IpAddress16 a{};
  for (unsigned i = 0; i < 4; ++i) a[kIpv4Offset + i] = static_cast<std::byte>(addr >> (24 - 8 * i));
  return a;
}

std::uint32_t cma_ipv4_of(const IpAddress16& a) {
  std::uint32_t v = 0;
  for (unsigned i = 0; i < 4; ++i) v = v << 8 | std::to_integer<std::uint32_t>(a[kIpv4Offset + i]);
  return v;
}

CmaHeader cma_header_v4(std::uint32_t src_ip, std::uint32_t dst_ip, std::uint16_t src_port) {
  CmaHeader h;
  h.ip_version = 4;
  h.src_port = src_port;
  h.src_addr = cma_ipv4(src_ip);
  h.dst_addr = cma_ipv4(dst_ip);
  return h;
}

MadStatus encode_cma_header(const CmaHeader& h, std::span<std::byte> private_data) {
  if (private_data.size() < kCmaHeaderBytes)
    return MadStatus{MadError::kInvalidField, "RDMA CM private data length", private_data.size()};
  if (h.ip_version != 4 && h.ip_version != 6) return MadStatus{MadError::kInvalidField, kIpVersionField, h.ip_version};
  private_data[kVersionByte] = std::byte{kCmaVersion};
  private_data[kIpVersionByte] = static_cast<std::byte>(h.ip_version << 4);
  private_data[kPortByte] = static_cast<std::byte>(h.src_port >> 8);
  private_data[kPortByte + 1] = static_cast<std::byte>(h.src_port & 0xff);
  const IpAddress16 src = canonical(h.ip_version, h.src_addr), dst = canonical(h.ip_version, h.dst_addr);
  std::copy(src.begin(), src.end(), private_data.begin() + kSrcAddrByte);
  std::copy(dst.begin(), dst.end(), private_data.begin() + kDstAddrByte);
  return {};
}

MadStatus decode_cma_header(std::span<const std::byte> private_data, CmaHeader& out) {
  if (private_data.size() < kCmaHeaderBytes)
    return MadStatus{MadError::kShortPrivateData, "RDMA CM private data length", private_data.size()};
  const auto version = std::to_integer<std::uint8_t>(private_data[kVersionByte]);
  if (version != kCmaVersion) return MadStatus{MadError::kReservedValue, "RDMA CM header version", version};
  const auto ip_version = static_cast<std::uint8_t>(std::to_integer<std::uint8_t>(private_data[kIpVersionByte]) >> 4);
  if (ip_version != 4 && ip_version != 6) return MadStatus{MadError::kReservedValue, kIpVersionField, ip_version};
  out.ip_version = ip_version;
  out.src_port = static_cast<std::uint16_t>(std::to_integer<unsigned>(private_data[kPortByte]) << 8 |
                                            std::to_integer<unsigned>(private_data[kPortByte + 1]));
  IpAddress16 src, dst;
  std::copy_n(private_data.begin() + kSrcAddrByte, 16, src.begin());
  std::copy_n(private_data.begin() + kDstAddrByte, 16, dst.begin());
  out.src_addr = canonical(ip_version, src);
  out.dst_addr = canonical(ip_version, dst);
  return {};
}

}  // namespace srdma::cm
