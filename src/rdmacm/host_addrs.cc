// Which IPv4 addresses are this host's. A device opened with no SRDMA_ADDR
// stands for the host (the host model): any of the host's addresses is its
// own to bind, and a destination that is one of them is the device itself.
// (It is reachable on 127.0.0.1 only; SRDMA_ADDR puts it on one address of
// the network, and then that address alone is its own.)
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstdlib>

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

}  // namespace srdma::rdmacm
