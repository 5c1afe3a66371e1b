// Loopback addresses of the test process's own: 127.b.c.d from its PID,
// so that tests running side by side (ctest -j) never bind the same
// address and port.
#pragma once

#include <unistd.h>

#include <cstdint>
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

}  // namespace srdma::test
