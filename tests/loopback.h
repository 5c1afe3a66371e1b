// The two links a test runs over: the in-process link, or RoCEv2 (UDP) on
// loopback addresses of the test process's own: 127.b.c.d from its PID, so
// that tests running side by side (ctest -j) never bind the same address
// and port.
#pragma once

#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>

#include "srdma/net.h"

namespace srdma::test {

// The k-th (1..3) loopback address of this process.
inline std::string loopback_ip(unsigned k) {
  const auto pid = static_cast<std::uint32_t>(::getpid());
  const std::uint32_t ip = (127u << 24) | (((pid >> 14) & 0xff) << 16) | (((pid >> 6) & 0xff) << 8) |
                           ((pid & 63) << 2) | (k & 3);
  return ipv4_str(ip);
}

// A test's devices on loopback addresses stand for hosts of their own: their
// frames take the wire (UDP), not the same-host path, unless asked.
inline NetConfig loopback_net(unsigned k, bool same_host = false) {
  NetConfig c;
  c.ip = loopback_ip(k);
  c.same_host = same_host;
  return c;
}

// IPv6 loopback has one address, ::1: a test process's IPv6 devices keep
// apart from other processes' by a RoCEv2 port of their own (from the PID,
// below the kernel's ephemeral ports), and share it with each other as the
// devices of one host do (hca/host_steering.h).
inline std::uint16_t loopback6_port() { return static_cast<std::uint16_t>(10000 + ::getpid() % 20000); }
inline NetConfig loopback6_net() {
  NetConfig c;
  c.ip = "::1";
  c.port = loopback6_port();
  c.same_host = false;
  return c;
}

// A test's parameter: which link its devices speak over. kSameHost: RoCEv2
// devices whose frames go through the same-host path's rings. kUdp6: RoCEv2
// over IPv6, every device on ::1 at this process's port (loopback6_net).
enum class LinkKind { kInproc, kUdp, kSameHost, kUdp6 };
inline std::string link_name(const ::testing::TestParamInfo<LinkKind>& i) {
  switch (i.param) {
    case LinkKind::kInproc: return "Inproc";
    case LinkKind::kUdp: return "Udp";
    case LinkKind::kSameHost: return "SameHost";
    case LinkKind::kUdp6: return "Udp6";
  }
  return "?";
}
// The network of a test's k-th device on `link`: none in-process, else its
// loopback address.
inline std::optional<NetConfig> link_net(LinkKind link, unsigned k) {
  if (link == LinkKind::kInproc) return std::nullopt;
  if (link == LinkKind::kUdp6) return loopback6_net();
  return loopback_net(k, link == LinkKind::kSameHost);
}

}  // namespace srdma::test
