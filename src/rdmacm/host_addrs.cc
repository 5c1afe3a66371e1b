// Which IPv4 addresses are this host's. A device opened with no SRDMA_ADDR
// stands for the host (the host model): any of the host's addresses is its
// own to bind, and a destination that is one of them is the device itself.
// (It is reachable on 127.0.0.1 only; SRDMA_ADDR puts it on one address of
// the network, and then that address alone is its own.)
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstdlib>
#include <cstring>

#include "objects.h"

namespace srdma::rdmacm {

bool device_stands_for_host() {
  const char* a = std::getenv("SRDMA_ADDR");
  return a == nullptr || *a == '\0';
}

bool host_ipv4(std::uint32_t ip) {
  if ((ip >> 24) == 127) return true;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next)
    if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET)
      found = ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr) == ip;
  freeifaddrs(list);
  return found;
}

bool ipv4_view(const sockaddr* a, std::uint32_t& ip, std::uint16_t& port) {
  if (a->sa_family == AF_INET) {
    const auto* s = reinterpret_cast<const sockaddr_in*>(a);
    ip = ntohl(s->sin_addr.s_addr);
    port = ntohs(s->sin_port);
    return true;
  }
  if (a->sa_family != AF_INET6) return false;
  const auto* s = reinterpret_cast<const sockaddr_in6*>(a);
  const in6_addr& v6 = s->sin6_addr;
  port = ntohs(s->sin6_port);
  if (IN6_IS_ADDR_UNSPECIFIED(&v6)) {
    ip = INADDR_ANY;
    return true;
  }
  if (IN6_IS_ADDR_LOOPBACK(&v6)) {
    ip = INADDR_LOOPBACK;
    return true;
  }
  if (IN6_IS_ADDR_V4MAPPED(&v6)) {
    std::uint32_t be;
    std::memcpy(&be, &v6.s6_addr[12], 4);
    ip = ntohl(be);
    return true;
  }
  return false;
}

}  // namespace srdma::rdmacm
