#include "tools/address_option.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

namespace srdma::tools {
namespace {

bool is_ipv6_text(std::string_view s) {
  in6_addr a{};
  const std::string z(s);
  return z.find(':') != std::string::npos && inet_pton(AF_INET6, z.c_str(), &a) == 1;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

const char* family(const IpAddress& a) { return a.is_v4() ? "IPv4" : "IPv6"; }

}  // namespace

Result<IpAddress> parse_ip_option(std::string_view option, std::string_view value) {
  auto a = parse_ip(value);
  if (!a)
    return make_error(EINVAL, fmt::format("{}: '{}' is not an IPv4 or IPv6 address (a.b.c.d, or IPv6 text such as ::1)",
                                          option, value));
  return *a;
}

Result<HostPort> parse_host_port(std::string_view option, std::string_view value, std::uint16_t default_port) {
  auto bad = [&](const std::string& why) -> Result<HostPort> {
    return make_error(EINVAL, fmt::format("{} '{}': {}", option, value, why));
  };
  auto port_of = [&](std::string_view p) -> Result<std::uint16_t> {
    unsigned n = 0;
    const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), n);
    if (!all_digits(p) || ec != std::errc{} || end != p.data() + p.size() || n == 0 || n > 65535)
      return make_error(EINVAL, fmt::format("{} '{}': the port is not 1..65535", option, value));
    return static_cast<std::uint16_t>(n);
  };
  HostPort out;
  out.port = default_port;
  std::string_view addr = value, port;
  bool has_port = false;
  if (value.starts_with('[')) {
    const auto close = value.find(']');
    if (close == std::string_view::npos) return bad("no ']' closes the IPv6 address ([ADDR] or [ADDR]:PORT)");
    addr = value.substr(1, close - 1);
    if (!is_ipv6_text(addr)) return bad(fmt::format("'{}' in brackets is not an IPv6 address", addr));
    const std::string_view rest = value.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return bad("only :PORT may follow ']'");
      port = rest.substr(1);
      has_port = true;
    }
  } else if (std::count(value.begin(), value.end(), ':') == 1) {  // IPv6 text has two at least
    const auto colon = value.find(':');
    addr = value.substr(0, colon);
    port = value.substr(colon + 1);
    has_port = true;
  } else if (value.find(':') != std::string_view::npos) {
    // Unbracketed IPv6 text: an address alone, unless it also reads as an
    // address and a port (::1:4420 is the address ::1:4420, or ::1 port
    // 4420): that one is refused rather than guessed at.
    const auto last = value.rfind(':');
    const std::string_view head = value.substr(0, last), tail = value.substr(last + 1);
    if (all_digits(tail) && is_ipv6_text(head))
      return bad(fmt::format("an IPv6 address with a port is bracketed: [{}]:{} (or [{}] for that address alone)",
                             head, tail, value));
  }
  auto ip = parse_ip(addr);
  if (!ip) return bad(fmt::format("'{}' is not an IPv4 or IPv6 address (names are not resolved)", addr));
  out.ip = *ip;
  if (has_port) {
    auto p = port_of(port);
    if (!p) return std::unexpected(p.error());
    out.port = *p;
  }
  return out;
}

std::string host_port_str(const IpAddress& ip, std::uint16_t port) {
  return ip.is_v4() ? fmt::format("{}:{}", ip_str(ip), port) : fmt::format("[{}]:{}", ip_str(ip), port);
}

std::string gid_str(std::uint64_t a) {
  if (is_roce_address(a)) return "::ffff:" + ipv4_str(roce_ipv4(a));
  return ip_str(ip_of_roce_address(a));
}

Result<void> check_same_family(std::string_view option_a, const IpAddress& a, std::string_view option_b,
                               const IpAddress& b) {
  if (a.is_v4() == b.is_v4()) return {};
  return make_error(EINVAL, fmt::format("{} {} is {} and {} {} is {}: a device reaches peers of its own family only",
                                        option_a, ip_str(a), family(a), option_b, ip_str(b), family(b)));
}

}  // namespace srdma::tools
