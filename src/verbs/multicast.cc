// ibv_attach_mcast / ibv_detach_mcast on the RoCEv2 device: a multicast
// GID is the IPv4-mapped address of an IPv4 group (::ffff:224.x.y.z, what
// the kernel's cma derives for RoCE), and the device's UDP link joins that
// group (udp_multicast.cc). The MLID is ignored, as RoCE has none. A QP
// destroyed leaves its groups (ibv_destroy_qp), as with the kernel's uverbs.
#include <infiniband/verbs.h>

#include <cstring>
#include <mutex>

#include "errors.h"
#include "objects.h"
#include "srdma/net.h"

using namespace srdma;
using namespace srdma::verbs;

namespace {

// Guards every QP's mcast_groups (attach and detach are rare).
std::mutex groups_mu;

// The group of an IPv4-mapped multicast GID; -1 with errno otherwise.
int group_of(const char* call, ibv_qp* qp, const ibv_gid* gid, std::uint32_t& group) {
  if (!qp || !gid) return fail(call, EINVAL, "NULL QP or GID");
  if (qp->qp_type != IBV_QPT_UD) return fail(call, EINVAL, "only UD QPs join multicast groups (IBA 10.5)");
  Gid g;
  std::memcpy(g.data(), gid->raw, g.size());
  auto ip = ipv4_of_gid(g);
  if (!ip || (*ip >> 28) != 0xE)
    return fail(call, EINVAL, "not a RoCEv2 multicast GID (::ffff: and an IPv4 group, 224.0.0.0/4)");
  group = *ip;
  return 0;
}

}  // namespace

extern "C" {

int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, std::uint16_t /*lid: RoCE has none*/) {
  std::uint32_t group = 0;
  if (group_of("ibv_attach_mcast", qp, gid, group)) return errno;
  std::lock_guard lock(groups_mu);
  auto r = to_ctx(qp->context)->dev.attach_mcast(qp->qp_num, group);
  if (!r) return fail("ibv_attach_mcast", r.error());
  to_qp(qp)->mcast_groups.push_back(group);
  return 0;
}

int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, std::uint16_t /*lid*/) {
  std::uint32_t group = 0;
  if (group_of("ibv_detach_mcast", qp, gid, group)) return errno;
  std::lock_guard lock(groups_mu);
  auto r = to_ctx(qp->context)->dev.detach_mcast(qp->qp_num, group);
  if (!r) return fail("ibv_detach_mcast", r.error());
  std::erase(to_qp(qp)->mcast_groups, group);
  return 0;
}

}  // extern "C"
