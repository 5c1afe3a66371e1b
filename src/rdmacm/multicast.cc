// Multicast on UD IDs, as the kernel's cma.c does it on a RoCE device
// (cma_iboe_join_multicast): the group's MGID is its IPv4-mapped address
// (::ffff:224.x.y.z), nothing goes to an SA; the ID's QP is attached to it
// (ibv_attach_mcast, librdmacm's ucma_process_join) and MULTICAST_JOIN
// carries param.ud: the AH attribute that reaches the group (GRH to the
// MGID), QPN 0xFFFFFF, Q_Key RDMA_UDP_QKEY, and the join's context as
// private_data (librdmacm's). The device's UDP link joins the IPv4 group
// (udp_multicast.cc).
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>

#include "errors.h"
#include "objects.h"

namespace srdma::rdmacm {
namespace {

constexpr std::uint32_t kMulticastQpn = 0xFFFFFF;

ibv_gid mgid_of(std::uint32_t group) {
  ibv_gid g{};
  g.raw[10] = g.raw[11] = 0xff;
  g.raw[12] = static_cast<std::uint8_t>(group >> 24);
  g.raw[13] = static_cast<std::uint8_t>(group >> 16);
  g.raw[14] = static_cast<std::uint8_t>(group >> 8);
  g.raw[15] = static_cast<std::uint8_t>(group);
  return g;
}

// The IPv4 group of `addr`; -1 with errno otherwise.
int group_of(const char* call, const sockaddr* addr, std::uint32_t& group) {
  if (!addr) return fail(call, EINVAL, "NULL address");
  if (addr->sa_family != AF_INET) return fail(call, EAFNOSUPPORT, "IPv4 groups only");
  group = ntohl(reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr);
  if (!IN_MULTICAST(group)) return fail(call, EINVAL, "not an IPv4 multicast address (224.0.0.0/4)");
  return 0;
}

// REQUIRES g_mu.
int join_locked(Id& i, std::uint32_t group, void* context, bool attach, const char* call) {
  if (!is_ud(i)) return fail(call, EINVAL, "multicast needs an RDMA_PS_UDP ID");
  if (i.state != State::kBound && i.state != State::kAddrResolved && i.state != State::kRouteResolved)
    return fail(call, EINVAL, "bind or resolve the ID first");
  if (std::any_of(i.groups.begin(), i.groups.end(), [&](const Id::Membership& m) { return m.group == group; }))
    return fail(call, EADDRINUSE, "the ID has joined that group already");
  const ibv_gid mgid = mgid_of(group);
  if (attach && i.id.qp && ibv_attach_mcast(i.id.qp, &mgid, 0)) return -1;
  i.groups.push_back({group, context, attach});
  rdma_ud_param ud{};
  ud.private_data = context;  // librdmacm: the join's context, no length
  ud.ah_attr.is_global = 1;
  ud.ah_attr.grh.dgid = mgid;
  ud.ah_attr.grh.sgid_index = 0;
  ud.ah_attr.grh.hop_limit = 64;
  ud.ah_attr.grh.traffic_class = i.tos;
  ud.ah_attr.port_num = 1;
  ud.qp_num = kMulticastQpn;
  ud.qkey = RDMA_UDP_QKEY;
  queue_ud_event(i, RDMA_CM_EVENT_MULTICAST_JOIN, 0, ud);
  return 0;
}

}  // namespace

void detach_groups(Id& i) {
  if (!i.id.qp) return;
  for (const Id::Membership& m : i.groups) {
    if (!m.full) continue;
    const ibv_gid mgid = mgid_of(m.group);
    (void)ibv_detach_mcast(i.id.qp, &mgid, 0);
  }
}

int attach_groups(Id& i) {
  if (!i.id.qp) return 0;
  for (const Id::Membership& m : i.groups) {
    if (!m.full) continue;
    const ibv_gid mgid = mgid_of(m.group);
    if (ibv_attach_mcast(i.id.qp, &mgid, 0)) return -1;
  }
  return 0;
}

}  // namespace srdma::rdmacm

using namespace srdma::rdmacm;

extern "C" {

int rdma_join_multicast(rdma_cm_id* id, sockaddr* addr, void* context) {
  std::uint32_t group = 0;
  if (group_of("rdma_join_multicast", addr, group)) return -1;
  std::lock_guard lock(g_mu);
  if (!live(id)) return fail("rdma_join_multicast", EINVAL, "not a live rdma_cm_id");
  return join_locked(*to_id(id), group, context, true, "rdma_join_multicast");
}

int rdma_join_multicast_ex(rdma_cm_id* id, rdma_cm_join_mc_attr_ex* attr, void* context) {
  if (!attr) return fail("rdma_join_multicast_ex", EINVAL, "NULL attributes");
  if (!(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS))
    return fail("rdma_join_multicast_ex", EINVAL, "no address in comp_mask");
  std::uint32_t flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
  if (attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) flags = attr->join_flags;
  if (flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
    return fail("rdma_join_multicast_ex", EINVAL, "join_flags: FULLMEMBER or SENDONLY_FULLMEMBER");
  std::uint32_t group = 0;
  if (group_of("rdma_join_multicast_ex", attr->addr, group)) return -1;
  std::lock_guard lock(g_mu);
  if (!live(id)) return fail("rdma_join_multicast_ex", EINVAL, "not a live rdma_cm_id");
  // A send-only member sends to the group and receives nothing from it.
  return join_locked(*to_id(id), group, context, flags == RDMA_MC_JOIN_FLAG_FULLMEMBER, "rdma_join_multicast_ex");
}

int rdma_leave_multicast(rdma_cm_id* id, sockaddr* addr) {
  std::uint32_t group = 0;
  if (group_of("rdma_leave_multicast", addr, group)) return -1;
  std::lock_guard lock(g_mu);
  if (!live(id)) return fail("rdma_leave_multicast", EINVAL, "not a live rdma_cm_id");
  Id& i = *to_id(id);
  auto it = std::find_if(i.groups.begin(), i.groups.end(), [&](const Id::Membership& m) { return m.group == group; });
  if (it == i.groups.end()) return fail("rdma_leave_multicast", EADDRNOTAVAIL, "the ID has not joined that group");
  if (i.id.qp && it->full) {
    const ibv_gid mgid = mgid_of(group);
    (void)ibv_detach_mcast(i.id.qp, &mgid, 0);
  }
  i.groups.erase(it);
  return 0;
}

}  // extern "C"
