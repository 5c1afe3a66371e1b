// rdma_getaddrinfo: IPv4 names and numbers through getaddrinfo(3), the
// result in rdma_addrinfo's form (ai_src_addr for RAI_PASSIVE, ai_dst_addr
// otherwise with the hints' source copied, RDMA_PS_TCP and RC by default);
// with neither node nor service, the hints' own addresses, as librdmacm.
#include <arpa/inet.h>
#include <netdb.h>

#include <cstdlib>
#include <cstring>

#include "errors.h"
#include "objects.h"

namespace {

sockaddr* copy_addr(const sockaddr* a, socklen_t len) {
  if (!a || len == 0) return nullptr;
  auto* out = static_cast<sockaddr*>(std::calloc(1, sizeof(sockaddr_storage)));
  if (out) std::memcpy(out, a, std::min<std::size_t>(len, sizeof(sockaddr_storage)));
  return out;
}

}  // namespace

using namespace srdma::rdmacm;

extern "C" {

void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res) {
    rdma_addrinfo* next = res->ai_next;
    std::free(res->ai_src_addr);
    std::free(res->ai_dst_addr);
    std::free(res->ai_src_canonname);
    std::free(res->ai_dst_canonname);
    std::free(res->ai_route);
    std::free(res->ai_connect);
    std::free(res);
    res = next;
  }
}

int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints, rdma_addrinfo** res) {
  if (!res) return fail("rdma_getaddrinfo", EINVAL, "NULL res");
  // librdmacm: with neither node nor service, the hints' addresses are the
  // answer (libfabric's verbs provider asks this way).
  if (!node && !service && !hints) return fail("rdma_getaddrinfo", EINVAL, "neither node, service nor hints");
  const int flags = hints ? hints->ai_flags : 0;
  if (flags & ~(RAI_PASSIVE | RAI_NUMERICHOST | RAI_NOROUTE | RAI_FAMILY))
    return fail("rdma_getaddrinfo", EINVAL, "unknown ai_flags");
  if (hints && hints->ai_family != AF_UNSPEC && hints->ai_family != AF_INET)
    return fail("rdma_getaddrinfo", EAFNOSUPPORT, "IPv4 only");
  // RDMA_PS_TCP with RC, RDMA_PS_UDP with UD; either hint gives the other
  // (librdmacm's ucma_convert_to_rai), neither is TCP and RC.
  int ps = hints ? hints->ai_port_space : 0;
  int qp_type = hints ? hints->ai_qp_type : 0;
  if (ps && ps != RDMA_PS_TCP && ps != RDMA_PS_UDP)
    return fail("rdma_getaddrinfo", EOPNOTSUPP, "RDMA_PS_TCP and RDMA_PS_UDP only");
  if (qp_type && qp_type != IBV_QPT_RC && qp_type != IBV_QPT_UD)
    return fail("rdma_getaddrinfo", EOPNOTSUPP, "RC and UD only");
  if (!ps) ps = qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP;
  if (!qp_type) qp_type = ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;
  if ((ps == RDMA_PS_UDP) != (qp_type == IBV_QPT_UD))
    return fail("rdma_getaddrinfo", EINVAL, "RDMA_PS_UDP goes with UD, RDMA_PS_TCP with RC");
  // An address in the hints must be one we can use: IPv4, whole.
  const auto hinted = [](const sockaddr* a, socklen_t len) {
    return a != nullptr && len >= sizeof(sockaddr_in) && a->sa_family == AF_INET;
  };
  if (hints && hints->ai_src_len && !hinted(hints->ai_src_addr, hints->ai_src_len))
    return fail("rdma_getaddrinfo", EAFNOSUPPORT, "the hints' source is not an IPv4 address");
  if (hints && hints->ai_dst_len && !hinted(hints->ai_dst_addr, hints->ai_dst_len))
    return fail("rdma_getaddrinfo", EAFNOSUPPORT, "the hints' destination is not an IPv4 address");

  auto* out = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
  if (!out) return fail("rdma_getaddrinfo", ENOMEM, "out of memory");
  out->ai_flags = flags;
  out->ai_family = AF_INET;
  out->ai_qp_type = qp_type;
  out->ai_port_space = ps;
  bool ok = true;
  if (node || service) {
    // Any family, then the first answer that is an IPv4 address, or an
    // IPv6 one that stands for one (::1, ::ffff:a.b.c.d: ipv4_view), as
    // IPv4: "::1" and names with IPv6 answers first resolve.
    addrinfo ah{};
    ah.ai_family = AF_UNSPEC;
    ah.ai_socktype = ps == RDMA_PS_UDP ? SOCK_DGRAM : SOCK_STREAM;
    ah.ai_flags = ((flags & RAI_PASSIVE) ? AI_PASSIVE : 0) | ((flags & RAI_NUMERICHOST) ? AI_NUMERICHOST : 0);
    addrinfo* found = nullptr;
    if (int r = getaddrinfo(node, service, &ah, &found); r != 0) {
      rdma_freeaddrinfo(out);
      const int e = r == EAI_SYSTEM ? errno : (r == EAI_NONAME || r == EAI_NODATA ? ENODATA : EINVAL);
      return fail("rdma_getaddrinfo", e, gai_strerror(r));
    }
    sockaddr_in v4{};
    bool have = false;
    for (const addrinfo* f = found; f != nullptr && !have; f = f->ai_next) {
      std::uint32_t ip = 0;
      std::uint16_t port = 0;
      if (f->ai_family != AF_INET && f->ai_family != AF_INET6) continue;
      if (ipv4_view(f->ai_addr, ip, port)) {
        v4.sin_family = AF_INET;
        v4.sin_addr.s_addr = htonl(ip);
        v4.sin_port = htons(port);
        have = true;
      }
    }
    freeaddrinfo(found);
    if (!have) {
      rdma_freeaddrinfo(out);
      return fail("rdma_getaddrinfo", EAFNOSUPPORT, "no IPv4 address for the node (softrdma's CM is IPv4)");
    }
    sockaddr*& a = (flags & RAI_PASSIVE) ? out->ai_src_addr : out->ai_dst_addr;
    socklen_t& len = (flags & RAI_PASSIVE) ? out->ai_src_len : out->ai_dst_len;
    a = copy_addr(reinterpret_cast<const sockaddr*>(&v4), sizeof v4);
    len = sizeof v4;
    ok = a != nullptr;
  } else if (hints->ai_dst_len) {
    out->ai_dst_addr = copy_addr(hints->ai_dst_addr, sizeof(sockaddr_in));
    out->ai_dst_len = sizeof(sockaddr_in);
    ok = out->ai_dst_addr != nullptr;
  }
  if (ok && !out->ai_src_addr && hints && hints->ai_src_len) {
    out->ai_src_addr = copy_addr(hints->ai_src_addr, sizeof(sockaddr_in));
    out->ai_src_len = sizeof(sockaddr_in);
    ok = out->ai_src_addr != nullptr;
  }
  if (!ok) {
    rdma_freeaddrinfo(out);
    return fail("rdma_getaddrinfo", ENOMEM, "out of memory");
  }
  *res = out;
  return 0;
}

}  // extern "C"
