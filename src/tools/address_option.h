// Addresses as the tools' command lines write them: a device's address
// (--ip) is an IPv4 dotted quad or IPv6 text; a peer's service is
// ADDR[:PORT], an IPv6 address bracketed when a port follows, as URLs and
// NVMe-oF write it ([::1]:4420). An IPv4-mapped address (::ffff:a.b.c.d) is
// its IPv4 address, as everywhere in the library (srdma/net.h). Names are
// not resolved. Every refusal is EINVAL naming the option and the value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "srdma/net.h"
#include "srdma/status.h"

namespace srdma::tools {

// "--ip: 'x' is not an IPv4 or IPv6 address (...)" for anything else.
Result<IpAddress> parse_ip_option(std::string_view option, std::string_view value);

struct HostPort {
  IpAddress ip;
  std::uint16_t port = 0;
};

// a.b.c.d, a.b.c.d:PORT, [IPV6], [IPV6]:PORT, or a bare IPv6 address with
// no port (`default_port`). A bare IPv6 text that could also be read as an
// address and a port (::1:4420) is refused: it must be bracketed.
Result<HostPort> parse_host_port(std::string_view option, std::string_view value, std::uint16_t default_port);

// a.b.c.d:PORT, or [IPV6]:PORT.
std::string host_port_str(const IpAddress& ip, std::uint16_t port);

// The GID of a RoCEv2 device's link address as the tools print it:
// ::ffff:a.b.c.d for IPv4, the address itself for IPv6.
std::string gid_str(std::uint64_t roce_link_address);

// EINVAL unless `a` (option_a's) and `b` (option_b's) are of one family:
// a device reaches peers of its own family only.
Result<void> check_same_family(std::string_view option_a, const IpAddress& a, std::string_view option_b,
                               const IpAddress& b);

}  // namespace srdma::tools
