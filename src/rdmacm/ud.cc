// UD IDs (RDMA_PS_UDP) over service ID resolution (IBA 12.11), as the
// kernel's cma.c and librdmacm run them on an IB or RoCE device:
//  - the service ID is (0x0111 << 16) | port; the SIDR_REQ's private data
//    starts with the RDMA CM's 36-byte IP header, the user's follows (180
//    bytes of room);
//  - the UD QP is at RTS from rdma_create_qp with Q_Key RDMA_UDP_QKEY;
//  - active: rdma_connect sends the SIDR_REQ; a SIDR_REP of status 0 ->
//    ESTABLISHED with param.ud (the peer's QPN and Q_Key, an AH attribute
//    for ibv_create_ah, the SIDR_REP's 136 bytes of private data); any other
//    status -> UNREACHABLE with that status (cma_sidr_rep_handler: 1 nobody
//    listens, 2 rejected); no answer after the retries -> UNREACHABLE,
//    -ETIMEDOUT;
//  - passive: a SIDR_REQ -> CONNECT_REQUEST on a new UD ID with param.ud
//    (the user's private data; the AH attribute back to the requester,
//    which the kernel leaves zero); rdma_accept answers SIDR_REP status 0
//    with the QP's number and RDMA_UDP_QKEY and returns (no ESTABLISHED
//    follows); rdma_reject answers status 2 with the user's private data.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "errors.h"
#include "objects.h"

namespace srdma::rdmacm {
namespace {

constexpr std::size_t kSidrReqPrivate = 216;
constexpr std::size_t kSidrReqUser = kSidrReqPrivate - kCmaHeaderBytes;  // 180
constexpr std::size_t kSidrRepPrivate = 136;
constexpr std::uint8_t kSidrReject = 2;        // IB_SIDR_REJECT
constexpr std::uint8_t kResponseTimeout = 16;  // 268 ms a try
constexpr std::uint8_t kMaxCmRetries = 8;      // nobody there: UNREACHABLE within 2.4 s

// The AH attribute that reaches the ID's peer: the GRH names it by its
// IPv4-mapped GID (RoCEv2), as ib_init_ah_attr_from_path fills it.
ibv_ah_attr peer_ah(const Id& i) {
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.grh.dgid = i.id.route.addr.addr.ibaddr.dgid;
  ah.grh.sgid_index = 0;
  ah.grh.hop_limit = 64;
  ah.grh.traffic_class = i.tos;
  ah.port_num = 1;
  return ah;
}

void active_ud_handler(const srdma_cm_event* e, void* context) {
  std::lock_guard lock(g_mu);
  auto* i = static_cast<Id*>(context);
  if (!live(&i->id) || i->state != State::kConnecting) return;
  rdma_ud_param ud{};
  if (e->type == SRDMA_CM_TIMED_OUT) {
    i->state = State::kFailed;
    queue_ud_event(*i, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, ud);
    return;
  }
  if (e->type != SRDMA_CM_SIDR_REP_RECEIVED) return;
  ud.private_data = e->private_data;
  ud.private_data_len = e->private_data_len;
  if (e->sidr_status != 0) {
    i->state = State::kFailed;
    queue_ud_event(*i, RDMA_CM_EVENT_UNREACHABLE, e->sidr_status, ud);
    return;
  }
  ud.qp_num = e->qpn;
  ud.qkey = e->qkey;
  ud.ah_attr = peer_ah(*i);
  i->peer_qpn = e->qpn;
  i->state = State::kConnected;
  queue_ud_event(*i, RDMA_CM_EVENT_ESTABLISHED, 0, ud);
}

}  // namespace

int connect_ud(Id& i, const rdma_conn_param& p) {
  if (p.private_data_len > kSidrReqUser) return fail("rdma_connect", EINVAL, "at most 180 bytes of private data (UD)");
  if (p.private_data_len && !p.private_data) return fail("rdma_connect", EINVAL, "private_data_len without data");
  std::uint8_t data[kSidrReqPrivate] = {};
  format_cma_header(i, data);
  if (p.private_data_len) std::memcpy(data + kCmaHeaderBytes, p.private_data, p.private_data_len);
  const rdma_addr& a = i.id.route.addr;
  srdma_cm_sidr_params s{};
  if (a.dst_addr.sa_family == AF_INET6)
    std::memcpy(s.peer_gid, &a.dst_sin6.sin6_addr, sizeof s.peer_gid);
  else
    s.peer_ipv4 = ntohl(a.dst_sin.sin_addr.s_addr);
  s.service_id = service_id(i, ntohs(a.dst_sin.sin_port));
  s.response_timeout = kResponseTimeout;
  s.max_cm_retries = kMaxCmRetries;
  s.private_data = data;
  s.private_data_len = sizeof data;
  i.state = State::kConnecting;
  std::uint32_t comm_id = 0;
  if (srdma_cm_sidr_request(device()->cm, &s, active_ud_handler, &i, &comm_id)) {
    i.state = State::kRouteResolved;
    return -1;
  }
  i.comm = true;
  i.comm_id = comm_id;
  return 0;
}

int accept_ud(Id& i, const rdma_conn_param& p) {
  if (p.private_data_len > kSidrRepPrivate) return fail("rdma_accept", EINVAL, "at most 136 bytes of private data (UD)");
  if (p.private_data_len && !p.private_data) return fail("rdma_accept", EINVAL, "private_data_len without data");
  if (!i.id.qp && !p.qp_num) return fail("rdma_accept", EINVAL, "no QP on the ID and no qp_num");
  const std::uint32_t qpn = i.id.qp ? i.id.qp->qp_num : p.qp_num;
  if (srdma_cm_sidr_reply(device()->cm, i.comm_id, 0, qpn, RDMA_UDP_QKEY, p.private_data, p.private_data_len))
    return -1;
  i.state = State::kConnected;
  i.listener = nullptr;
  return 0;
}

int reject_ud(Id& i, const void* private_data, std::uint8_t len) {
  if (len > kSidrRepPrivate) return fail("rdma_reject", EINVAL, "at most 136 bytes of private data (UD)");
  if (srdma_cm_sidr_reply(device()->cm, i.comm_id, kSidrReject, 0, 0, private_data, len)) return -1;
  i.state = State::kFailed;
  return 0;
}

void sidr_request_received(Id& l, const srdma_cm_event& e, std::unique_lock<std::mutex>& lock) {
  DeviceRef* d = device();
  std::uint16_t src_port = 0;
  std::uint32_t src_ip = 0;
  in6_addr src_ip6{};
  const bool ours =
      parse_cma_header(e.private_data, e.private_data_len, src_port, src_ip, d->v6 ? &src_ip6 : nullptr) && is_ud(l);
  auto* n = ours ? new (std::nothrow) Id : nullptr;
  if (!n) {
    lock.unlock();
    srdma_cm_destroy(d->cm, e.id);  // from its own handler: allowed; answers SIDR_REP "rejected"
    return;
  }
  std::memset(&n->id, 0, sizeof n->id);
  n->id.verbs = l.id.verbs;
  n->id.pd = l.id.pd;
  n->id.channel = l.id.channel;
  n->id.context = l.id.context;
  n->id.ps = l.id.ps;
  n->id.port_num = 1;
  n->id.qp_type = IBV_QPT_UD;
  n->listener = &l;
  n->tos = l.tos;
  n->comm = true;
  n->comm_id = e.id;
  n->state = State::kConnectRequest;
  n->mtu = d->mtu;
  if (d->v6) {
    const in6_addr peer = peer6_of(e, src_ip6);
    fill_route_addrs6(*n, d->ip6, l.port, &peer, src_port);
  } else {
    fill_route_addrs(*n, d->ipv4, l.port, e.peer_ipv4 ? e.peer_ipv4 : src_ip, src_port);
  }
  fill_path(*n);
  g_ids.insert(n);
  rdma_ud_param ud{};
  ud.private_data = e.private_data + kCmaHeaderBytes;
  ud.private_data_len = static_cast<std::uint8_t>(e.private_data_len - kCmaHeaderBytes);
  ud.ah_attr = peer_ah(*n);
  queue_ud_event(*n, RDMA_CM_EVENT_CONNECT_REQUEST, 0, ud, &l);
}

}  // namespace srdma::rdmacm
