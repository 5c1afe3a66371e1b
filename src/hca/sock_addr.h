// A socket address of either family, made from an IpAddress (net.h) and a
// port, and the IpAddress a received datagram's name holds.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstring>

#include "srdma/net.h"

namespace srdma::hca {

struct SockAddr {
  union {
    sockaddr sa;
    sockaddr_in v4;
    sockaddr_in6 v6;
  } u{};

  static SockAddr of(const IpAddress& ip, std::uint16_t port) {
    SockAddr a;
    if (ip.is_v4()) {
      a.u.v4.sin_family = AF_INET;
      a.u.v4.sin_addr.s_addr = htonl(ip.v4());
      a.u.v4.sin_port = htons(port);
    } else {
      a.u.v6.sin6_family = AF_INET6;
      std::memcpy(&a.u.v6.sin6_addr, ip.bytes.data(), 16);
      a.u.v6.sin6_port = htons(port);
    }
    return a;
  }
  int family() const { return u.sa.sa_family; }
  socklen_t len() const { return family() == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in); }
  const sockaddr* ptr() const { return &u.sa; }
  sockaddr* ptr() { return &u.sa; }

  // What a receive wrote here (`len` bytes of name): its address and port,
  // if it is of `family` and whole. An IPv4-mapped IPv6 source is refused:
  // a device's IPv6 socket is IPV6_V6ONLY, and no such datagram is real.
  bool ip_port(int want_family, socklen_t len, IpAddress& ip, std::uint16_t& port) const {
    if (family() != want_family || len != (want_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in)))
      return false;
    if (want_family == AF_INET) {
      ip = IpAddress::of_v4(ntohl(u.v4.sin_addr.s_addr));
      port = ntohs(u.v4.sin_port);
      return true;
    }
    std::memcpy(ip.bytes.data(), &u.v6.sin6_addr, 16);
    port = ntohs(u.v6.sin6_port);
    return !ip.is_v4();
  }
};

}  // namespace srdma::hca
