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

inline NetConfig loopback_net(unsigned k) {
  NetConfig c;
  c.ip = loopback_ip(k);
  return c;
}

// A test's parameter: which link its devices speak over.
enum class LinkKind { kInproc, kUdp };
inline std::string link_name(const ::testing::TestParamInfo<LinkKind>& i) {
  return i.param == LinkKind::kInproc ? "Inproc" : "Udp";
}
// The network of a test's k-th device on `link`: none in-process, else its
// loopback address.
inline std::optional<NetConfig> link_net(LinkKind link, unsigned k) {
  if (link == LinkKind::kInproc) return std::nullopt;
  return loopback_net(k);
}

}  // namespace srdma::test
