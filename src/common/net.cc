#include "srdma/net.h"

#include <arpa/inet.h>

#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

namespace srdma {
namespace {

template <class T>
Result<T> env_number(const char* name, T fallback, T max) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  T out{};
  std::string_view s(v);
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc{} || end != s.data() + s.size() || out > max)
    return make_error(EINVAL, fmt::format("{}={} is not a number in 0..{}", name, s, max));
  return out;
}

}  // namespace

Result<std::uint32_t> parse_ipv4(std::string_view s) {
  in_addr a{};
  const std::string z(s);
  if (inet_pton(AF_INET, z.c_str(), &a) != 1)
    return make_error(EINVAL, fmt::format("'{}' is not an IPv4 address (a.b.c.d)", s));
  return ntohl(a.s_addr);
}

std::string ipv4_str(std::uint32_t ip) {
  return fmt::format("{}.{}.{}.{}", ip >> 24, (ip >> 16) & 0xff, (ip >> 8) & 0xff, ip & 0xff);
}

std::uint32_t IpAddress::v4() const {
  return (std::uint32_t{bytes[12]} << 24) | (std::uint32_t{bytes[13]} << 16) | (std::uint32_t{bytes[14]} << 8) |
         bytes[15];
}

Result<IpAddress> parse_ip(std::string_view s) {
  const std::string z(s);
  if (auto v4 = parse_ipv4(s)) return IpAddress::of_v4(*v4);
  IpAddress a;
  if (z.find(':') == std::string::npos || inet_pton(AF_INET6, z.c_str(), a.bytes.data()) != 1)
    return make_error(EINVAL, fmt::format("'{}' is not an IP address (a.b.c.d or IPv6 text such as ::1)", s));
  return a;
}

std::string ip_str(const IpAddress& a) {
  if (a.is_v4()) return ipv4_str(a.v4());
  char buf[INET6_ADDRSTRLEN] = {};
  (void)inet_ntop(AF_INET6, a.bytes.data(), buf, sizeof buf);
  return buf;
}

Result<NetConfig> NetConfig::from_env() {
  NetConfig c;
  if (const char* a = std::getenv("SRDMA_ADDR"); a != nullptr && *a != '\0') {
    auto ip = parse_ip(a);
    if (!ip) return make_error(EINVAL, fmt::format("SRDMA_ADDR: {}", ip.error().reason));
    c.ip = a;
  }
  auto port = env_number<std::uint32_t>("SRDMA_PORT", kRoceV2UdpPort, 65535);
  if (!port) return std::unexpected(port.error());
  if (*port == 0) return make_error(EINVAL, "SRDMA_PORT=0: the device needs a fixed port its peers know");
  c.port = static_cast<std::uint16_t>(*port);
  auto icrc = env_number<std::uint32_t>("SRDMA_ICRC", 1, 1);
  if (!icrc) return std::unexpected(icrc.error());
  c.check_icrc = *icrc != 0;
  auto busy = env_number<std::uint32_t>("SRDMA_BUSY_POLL_US", c.busy_poll_us, 1'000'000);
  if (!busy) return std::unexpected(busy.error());
  c.busy_poll_us = *busy;
  auto gso = env_number<std::uint32_t>("SRDMA_GSO", 1, 1);
  if (!gso) return std::unexpected(gso.error());
  c.gso = *gso != 0;
  auto gro = env_number<std::uint32_t>("SRDMA_GRO", 1, 1);
  if (!gro) return std::unexpected(gro.error());
  c.gro = *gro != 0;
  auto exclusive = env_number<std::uint32_t>("SRDMA_EXCLUSIVE", 0, 1);
  if (!exclusive) return std::unexpected(exclusive.error());
  c.shared = *exclusive == 0;
  auto same_host = env_number<std::uint32_t>("SRDMA_SAME_HOST", 1, 1);
  if (!same_host) return std::unexpected(same_host.error());
  c.same_host = *same_host != 0;
  return c;
}

Gid gid_of_ipv4(std::uint32_t ip) {
  Gid g{};
  g[10] = 0xff;
  g[11] = 0xff;
  g[12] = static_cast<std::uint8_t>(ip >> 24);
  g[13] = static_cast<std::uint8_t>(ip >> 16);
  g[14] = static_cast<std::uint8_t>(ip >> 8);
  g[15] = static_cast<std::uint8_t>(ip);
  return g;
}

bool is_ipv4_mapped(const Gid& g) {
  for (int i = 0; i < 10; ++i)
    if (g[i] != 0) return false;
  return g[10] == 0xff && g[11] == 0xff;
}

Result<std::uint32_t> ipv4_of_gid(const Gid& g) {
  if (!is_ipv4_mapped(g)) return make_error(EINVAL, "the GID is not an IPv4-mapped address (::ffff:a.b.c.d)");
  return (std::uint32_t{g[12]} << 24) | (std::uint32_t{g[13]} << 16) | (std::uint32_t{g[14]} << 8) | g[15];
}

std::uint32_t ib_mtu_for_ip_mtu(std::uint32_t ip_mtu, bool ipv6) {
  // IPv4 20 (IPv6 40) + UDP 8 + BTH 12 + RETH 16 + ImmDt 4 (the most a
  // data packet carries) + ICRC 4, as rxe sizes its MTU from the netdev's.
  const std::uint32_t kOverhead = (ipv6 ? 40 : 20) + 8 + 12 + 16 + 4 + 4;
  for (std::uint32_t m = 4096; m >= 256; m /= 2)
    if (ip_mtu >= m + kOverhead) return m;
  return 0;
}

}  // namespace srdma
