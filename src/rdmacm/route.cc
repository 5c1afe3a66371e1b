// Address and route resolution. Every peer is on softrdma's RoCEv2 link:
// the address resolves to the GID ::ffff:a.b.c.d and the route to one path
// record between the two GIDs, at once (the events are queued before the
// call returns, as they may be with librdmacm).
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

#include "errors.h"
#include "objects.h"

namespace srdma::rdmacm {
namespace {

void mapped_gid(std::uint32_t ip, ibv_gid& g) {
  std::memset(g.raw, 0, sizeof g.raw);
  g.raw[10] = g.raw[11] = 0xff;
  g.raw[12] = static_cast<std::uint8_t>(ip >> 24);
  g.raw[13] = static_cast<std::uint8_t>(ip >> 16);
  g.raw[14] = static_cast<std::uint8_t>(ip >> 8);
  g.raw[15] = static_cast<std::uint8_t>(ip);
}

void set_sin(sockaddr_in& s, std::uint32_t ip, std::uint16_t port) {
  std::memset(&s, 0, sizeof s);
  s.sin_family = AF_INET;
  s.sin_addr.s_addr = htonl(ip);
  s.sin_port = htons(port);
}

}  // namespace

void fill_route_addrs(Id& id, std::uint32_t src_ip, std::uint16_t src_port, std::uint32_t dst_ip,
                      std::uint16_t dst_port) {
  rdma_addr& a = id.id.route.addr;
  set_sin(a.src_sin, src_ip, src_port);
  mapped_gid(src_ip, a.addr.ibaddr.sgid);
  if (dst_ip) {
    set_sin(a.dst_sin, dst_ip, dst_port);
    mapped_gid(dst_ip, a.addr.ibaddr.dgid);
  }
  a.addr.ibaddr.pkey = htons(0xffff);
}

void fill_route_addrs6(Id& id, const in6_addr& src, std::uint16_t src_port, const in6_addr* dst,
                       std::uint16_t dst_port) {
  rdma_addr& a = id.id.route.addr;
  std::memset(&a.src_sin6, 0, sizeof a.src_sin6);
  a.src_sin6.sin6_family = AF_INET6;
  a.src_sin6.sin6_addr = src;
  a.src_sin6.sin6_port = htons(src_port);
  std::memcpy(a.addr.ibaddr.sgid.raw, &src, 16);
  if (dst) {
    std::memset(&a.dst_sin6, 0, sizeof a.dst_sin6);
    a.dst_sin6.sin6_family = AF_INET6;
    a.dst_sin6.sin6_addr = *dst;
    a.dst_sin6.sin6_port = htons(dst_port);
    std::memcpy(a.addr.ibaddr.dgid.raw, dst, 16);
  }
  a.addr.ibaddr.pkey = htons(0xffff);
}

in6_addr peer6_of(const srdma_cm_event& e, const in6_addr& from_header) {
  in6_addr g;
  std::memcpy(&g, e.peer_gid, sizeof g);
  return IN6_IS_ADDR_UNSPECIFIED(&g) ? from_header : g;
}

void fill_path(Id& id) {
  const rdma_addr& a = id.id.route.addr;
  ibv_sa_path_rec& p = id.path;
  std::memset(&p, 0, sizeof p);
  p.sgid = a.addr.ibaddr.sgid;
  p.dgid = a.addr.ibaddr.dgid;
  // RoCE paths carry no LIDs; the hop limit and traffic class of the GRH.
  p.hop_limit = 64;
  p.traffic_class = id.tos;
  p.reversible = 1;
  p.numb_path = 1;
  p.pkey = htons(0xffff);
  p.sl = 0;
  p.mtu_selector = 2;  // exactly
  p.mtu = id.mtu;
  p.rate_selector = 2;
  p.rate = IBV_RATE_100_GBPS;
  p.packet_life_time_selector = 2;
  p.packet_life_time = id.ack_timeout > 0 ? id.ack_timeout - 1 : 0;  // the QP's timeout is life time + 1
  id.id.route.path_rec = &id.path;
  id.id.route.num_paths = 1;
}

}  // namespace srdma::rdmacm

using namespace srdma::rdmacm;

extern "C" {

int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr, int timeout_ms) {
  (void)timeout_ms;  // resolution never waits
  if (!dst_addr) return fail("rdma_resolve_addr", EINVAL, "NULL destination");
  bool sync;
  {
    std::lock_guard lock(g_mu);
    if (!live(id)) return fail("rdma_resolve_addr", EINVAL, "not a live rdma_cm_id");
    DeviceRef* dev = device();
    if (!dev) return -1;
    if (dev->v6) {
      // A device on IPv6 reaches IPv6 peers: the destination is one (::1
      // included), never an IPv4 one.
      if (dst_addr->sa_family != AF_INET6)
        return fail("rdma_resolve_addr", EAFNOSUPPORT, "the device is on IPv6 (SRDMA_ADDR): IPv6 destinations only");
      const auto* d6 = reinterpret_cast<const sockaddr_in6*>(dst_addr);
      const in6_addr dst = d6->sin6_addr;
      if (IN6_IS_ADDR_UNSPECIFIED(&dst) || IN6_IS_ADDR_V4MAPPED(&dst) || IN6_IS_ADDR_MULTICAST(&dst))
        return fail("rdma_resolve_addr", EINVAL, "not an IPv6 unicast destination (::, ::ffff:a.b.c.d, ff00::/8)");
      Id& i = *to_id(id);
      if (i.state == State::kIdle) {
        sockaddr_in6 any{};
        any.sin6_family = AF_INET6;
        if (bind_locked(i, src_addr ? src_addr : reinterpret_cast<sockaddr*>(&any), "rdma_resolve_addr")) return -1;
      } else if (i.state != State::kBound) {
        return fail("rdma_resolve_addr", EINVAL, "the ID is resolved, listening or connected already");
      }
      i.mtu = dev->mtu;
      fill_route_addrs6(i, dev->ip6, i.port, &dst, ntohs(d6->sin6_port));
      i.state = State::kAddrResolved;
      queue_event(i, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
      sync = i.sync;
    } else {
    std::uint32_t dst_ip = 0;
    std::uint16_t dst_port = 0;
    if (!ipv4_view(dst_addr, dst_ip, dst_port))
      return fail("rdma_resolve_addr", EAFNOSUPPORT, "IPv4 destinations only (and ::1, ::ffff:a.b.c.d)");
    Id& i = *to_id(id);
    if (dst_ip == INADDR_ANY || dst_ip == INADDR_BROADCAST)
      return fail("rdma_resolve_addr", EINVAL, "not a unicast or multicast destination");
    // A multicast group is a UD ID's destination (rdma_join_multicast next).
    if (IN_MULTICAST(dst_ip) && !is_ud(i))
      return fail("rdma_resolve_addr", EINVAL, "a multicast destination needs an RDMA_PS_UDP ID");
    if (i.state == State::kIdle) {
      sockaddr_in any{};
      any.sin_family = AF_INET;
      if (bind_locked(i, src_addr ? src_addr : reinterpret_cast<sockaddr*>(&any), "rdma_resolve_addr")) return -1;
    } else if (i.state != State::kBound) {
      return fail("rdma_resolve_addr", EINVAL, "the ID is resolved, listening or connected already");
    }
    DeviceRef* d = device();
    i.mtu = d->mtu;
    // Another of the host's own addresses is this very device when it
    // stands for the host (host_addrs.cc). Loopback addresses stay as they
    // are: with SRDMA_ADDR, 127.0.0.2 is another process's device.
    std::uint32_t peer = dst_ip;
    if ((dst_ip >> 24) != 127 && !IN_MULTICAST(dst_ip) && device_stands_for_host() && host_ipv4(dst_ip))
      peer = d->ipv4;
    fill_route_addrs(i, d->ipv4, i.port, peer, dst_port);
    i.state = State::kAddrResolved;
    queue_event(i, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
    sync = i.sync;
    }
  }
  return sync ? sync_wait(id, RDMA_CM_EVENT_ADDR_RESOLVED) : 0;
}

int rdma_resolve_route(rdma_cm_id* id, int timeout_ms) {
  (void)timeout_ms;
  bool sync;
  {
    std::lock_guard lock(g_mu);
    if (!live(id)) return fail("rdma_resolve_route", EINVAL, "not a live rdma_cm_id");
    Id& i = *to_id(id);
    if (i.state != State::kAddrResolved) return fail("rdma_resolve_route", EINVAL, "the address is not resolved");
    fill_path(i);
    i.state = State::kRouteResolved;
    queue_event(i, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
    sync = i.sync;
  }
  return sync ? sync_wait(id, RDMA_CM_EVENT_ROUTE_RESOLVED) : 0;
}

}  // extern "C"
