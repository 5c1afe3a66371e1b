// Connections over the device's IB CM agent (srdma_cm_private.h), with the
// RDMA CM's conventions (rdma-core librdmacm/cma.c, Linux
// drivers/infiniband/core/cma.c):
//  - the service ID is (port space << 16) | port; the REQ's private data
//    starts with the 36-byte cma_hdr (version 0, IP version 4 in the high
//    nibble, the active side's port, source and destination addresses), the
//    user's follows (56 bytes of room, reported as 56);
//  - active: REP -> the QP to RTR/RTS with the REP's QPN and PSN, the RTU,
//    then ESTABLISHED with the REP's private data (196); without a QP,
//    CONNECT_RESPONSE and rdma_establish sends the RTU; REJ -> REJECTED,
//    status = the IB reason, the REJ's private data (148); no answer ->
//    UNREACHABLE, status -ETIMEDOUT;
//  - passive: REQ -> CONNECT_REQUEST on a new ID (listen_id the listener);
//    rdma_accept moves the QP to RTR/RTS and sends the REP; the RTU ->
//    ESTABLISHED;
//  - either: DREQ or DREP -> DISCONNECTED; rdma_disconnect moves the QP to
//    ERR and sends the DREQ.
// Events come on the agent's thread; the handlers take g_mu and check that
// the ID is still live (rdma_destroy_id waits for a running handler).
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "common/secure_random.h"
#include "errors.h"
#include "objects.h"

namespace srdma::rdmacm {
namespace {

constexpr std::size_t kCmaHdr = 36;
constexpr std::size_t kReqPrivate = 92;
constexpr std::size_t kReqUser = kReqPrivate - kCmaHdr;  // 56
constexpr std::size_t kRepPrivate = 196;
constexpr std::size_t kRejPrivate = 148;
constexpr std::uint8_t kResponseTimeout = 16;  // 268 ms
constexpr std::uint8_t kMaxCmRetries = 8;      // a refused or lost peer is reported within seconds

std::uint32_t ip_of(const sockaddr_in& s) { return ntohl(s.sin_addr.s_addr); }

void put_ipv4(std::uint8_t* at, std::uint32_t ip) {
  std::memset(at, 0, 12);
  at[12] = static_cast<std::uint8_t>(ip >> 24);
  at[13] = static_cast<std::uint8_t>(ip >> 16);
  at[14] = static_cast<std::uint8_t>(ip >> 8);
  at[15] = static_cast<std::uint8_t>(ip);
}
std::uint32_t get_ipv4(const std::uint8_t* at) {
  return std::uint32_t{at[12]} << 24 | std::uint32_t{at[13]} << 16 | std::uint32_t{at[14]} << 8 | at[15];
}

// RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH: as much as the device (and the
// peer's offer, when there is one) allows.
int depth(const char* call, std::uint8_t asked, std::uint8_t dev_max, std::uint8_t offer, std::uint8_t& out) {
  if (asked == 0xFF) {
    out = std::min(dev_max, offer);
    return 0;
  }
  if (asked > dev_max) return fail(call, EINVAL, "more RDMA READ/atomic depth than the device has");
  out = asked;
  return 0;
}

rdma_conn_param conn_of(const srdma_cm_event& e, std::size_t skip) {
  rdma_conn_param p{};
  p.private_data = e.private_data ? e.private_data + skip : nullptr;
  p.private_data_len = static_cast<std::uint8_t>(e.private_data_len > skip ? e.private_data_len - skip : 0);
  // ib_cm reports the sender's values from the receiver's side.
  p.responder_resources = e.initiator_depth;
  p.initiator_depth = e.responder_resources;
  p.flow_control = e.flow_control;
  p.retry_count = e.retry_count;
  p.rnr_retry_count = e.rnr_retry_count;
  p.srq = e.srq;
  p.qp_num = e.qpn;
  return p;
}

}  // namespace

void format_cma_header(const Id& i, std::uint8_t* out) {
  const rdma_addr& a = i.id.route.addr;
  out[0] = 0;  // CMA_VERSION
  std::memcpy(out + 2, &a.src_sin.sin_port, 2);  // sin_port and sin6_port share their place
  if (a.src_addr.sa_family == AF_INET6) {
    out[1] = 6 << 4;
    std::memcpy(out + 4, &a.src_sin6.sin6_addr, 16);
    std::memcpy(out + 20, &a.dst_sin6.sin6_addr, 16);
    return;
  }
  out[1] = 4 << 4;
  put_ipv4(out + 4, ip_of(a.src_sin));
  put_ipv4(out + 20, ip_of(a.dst_sin));
}

bool parse_cma_header(const std::uint8_t* pd, std::size_t len, std::uint16_t& src_port, std::uint32_t& src_ip,
                      in6_addr* src_ip6) {
  if (!pd || len < kCmaHdr || pd[0] != 0 || (pd[1] >> 4) != (src_ip6 ? 6 : 4)) return false;
  src_port = static_cast<std::uint16_t>(pd[2] << 8 | pd[3]);
  if (src_ip6)
    std::memcpy(src_ip6, pd + 4, 16);
  else
    src_ip = get_ipv4(pd + 4);
  return true;
}

namespace {

// REQUIRES g_mu. The events every connection gets after its handshake.
void common_event(Id& i, const srdma_cm_event& e) {
  switch (e.type) {
    case SRDMA_CM_REJECTED: {
      i.state = State::kFailed;
      rdma_conn_param p = conn_of(e, 0);
      queue_event(i, RDMA_CM_EVENT_REJECTED, e.rej_reason, &p);
      break;
    }
    case SRDMA_CM_TIMED_OUT:
      i.state = State::kFailed;
      queue_event(i, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
      break;
    case SRDMA_CM_DISCONNECTED:
      if (i.state == State::kDisconnected) break;
      i.state = State::kDisconnected;
      queue_event(i, RDMA_CM_EVENT_DISCONNECTED, 0);
      break;
    case SRDMA_CM_TIMEWAIT_EXIT:  // the kernel's cma gives it to an ID not yet destroyed
      queue_event(i, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0);
      break;
    case SRDMA_CM_ESTABLISHED:
      if (i.state == State::kAccepting) {
        i.state = State::kConnected;
        queue_event(i, RDMA_CM_EVENT_ESTABLISHED, 0);
      }
      break;
    case SRDMA_CM_REQ_RECEIVED:
    case SRDMA_CM_REP_RECEIVED:
    case SRDMA_CM_SIDR_REQ_RECEIVED:  // UD's (ud.cc): never on an RC ID
    case SRDMA_CM_SIDR_REP_RECEIVED:
      break;
  }
}

void active_handler(const srdma_cm_event* e, void* context) {
  DeviceRef* d = device();
  std::lock_guard lock(g_mu);
  auto* i = static_cast<Id*>(context);
  if (!live(&i->id)) return;
  if (e->type != SRDMA_CM_REP_RECEIVED) return common_event(*i, *e);
  if (i->state != State::kConnecting) return;
  i->peer_qpn = e->qpn;
  i->peer_psn = e->starting_psn;
  i->rnr_retry_count = std::min<std::uint8_t>(e->rnr_retry_count, 7);  // ib_cm: the REP's, on the active side
  rdma_conn_param p = conn_of(*e, 0);
  if (!i->id.qp) {
    i->state = State::kConnectResponse;
    queue_event(*i, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, &p);
    return;
  }
  if (move_qp(*i, IBV_QPS_RTR) || move_qp(*i, IBV_QPS_RTS)) {
    const int err = errno;
    (void)srdma_cm_reject(d->cm, e->id, nullptr, 0);
    i->state = State::kFailed;
    queue_event(*i, RDMA_CM_EVENT_CONNECT_ERROR, -err);
    return;
  }
  if (srdma_cm_ready(d->cm, e->id)) {
    i->state = State::kFailed;
    queue_event(*i, RDMA_CM_EVENT_CONNECT_ERROR, -errno);
    return;
  }
  i->state = State::kConnected;
  queue_event(*i, RDMA_CM_EVENT_ESTABLISHED, 0, &p);
}

void passive_handler(const srdma_cm_event* e, void* context) {
  std::lock_guard lock(g_mu);
  auto* i = static_cast<Id*>(context);
  if (live(&i->id)) common_event(*i, *e);
}

void listen_handler(const srdma_cm_event* e, void* context) {
  DeviceRef* d = device();
  std::unique_lock lock(g_mu);
  auto* l = static_cast<Id*>(context);
  if (!live(&l->id) || l->state != State::kListening) return;
  if (e->type == SRDMA_CM_SIDR_REQ_RECEIVED) return sidr_request_received(*l, *e, lock);
  if (e->type != SRDMA_CM_REQ_RECEIVED) return;
  // Only RDMA CM requests over IPv4 (a cma_hdr of version 0, IP version 4),
  // and for an RC listener (a REQ to an RDMA_PS_UDP service is the peer's
  // mistake: cma_check_req_qp_type refuses it).
  std::uint16_t src_port = 0;
  std::uint32_t src_ip = 0;
  in6_addr src_ip6{};
  const bool ours =
      parse_cma_header(e->private_data, e->private_data_len, src_port, src_ip, d->v6 ? &src_ip6 : nullptr) &&
      !is_ud(*l);
  auto* n = ours ? new (std::nothrow) Id : nullptr;
  if (!n) {
    lock.unlock();
    (void)srdma_cm_reject(d->cm, e->id, nullptr, 0);
    srdma_cm_destroy(d->cm, e->id);  // from its own handler: allowed
    return;
  }
  std::memset(&n->id, 0, sizeof n->id);
  n->id.verbs = l->id.verbs;
  n->id.pd = l->id.pd;
  n->id.channel = l->id.channel;
  n->id.context = l->id.context;
  n->id.ps = l->id.ps;
  n->id.port_num = 1;
  n->id.qp_type = IBV_QPT_RC;
  n->listener = l;
  n->tos = l->tos;
  n->ack_timeout = l->ack_timeout;
  n->comm = true;
  n->comm_id = e->id;
  n->state = State::kConnectRequest;
  n->peer_qpn = e->qpn;
  n->peer_psn = e->starting_psn;
  // Our starting PSN, chosen now (the kernel's ID has its seq_num from the
  // start): a program with a QP of its own moves it to RTS through
  // rdma_init_qp_attr before rdma_accept, and the REP must carry that PSN.
  n->psn = srdma::random_psn();
  n->mtu = std::min(e->path_mtu, d->mtu);
  n->peer_responder_resources = e->responder_resources;
  n->peer_initiator_depth = e->initiator_depth;
  n->peer_retry_count = std::min<std::uint8_t>(e->retry_count, 7);
  n->peer_rnr_retry_count = std::min<std::uint8_t>(e->rnr_retry_count, 7);
  if (d->v6) {
    const in6_addr peer = peer6_of(*e, src_ip6);
    fill_route_addrs6(*n, d->ip6, l->port, &peer, src_port);
  } else {
    fill_route_addrs(*n, d->ipv4, l->port, e->peer_ipv4 ? e->peer_ipv4 : src_ip, src_port);
  }
  fill_path(*n);
  g_ids.insert(n);
  rdma_conn_param p = conn_of(*e, kCmaHdr);
  queue_event(*n, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &p, l);
}

// REQUIRES g_mu. The REQ of an RC ID.
int connect_rc(Id& i, const rdma_conn_param& p) {
  if (p.private_data_len > kReqUser) return fail("rdma_connect", EINVAL, "at most 56 bytes of private data");
  if (p.private_data_len && !p.private_data) return fail("rdma_connect", EINVAL, "private_data_len without data");
  if (!i.id.qp && !p.qp_num) return fail("rdma_connect", EINVAL, "no QP on the ID and no qp_num");
  DeviceRef* d = device();
  if (depth("rdma_connect", p.responder_resources, d->max_rd_atomic, d->max_rd_atomic, i.responder_resources) ||
      depth("rdma_connect", p.initiator_depth, d->max_rd_atomic, d->max_rd_atomic, i.initiator_depth))
    return -1;
  i.retry_count = std::min<std::uint8_t>(p.retry_count, 7);
  i.rnr_retry_count = std::min<std::uint8_t>(p.rnr_retry_count, 7);
  i.psn = srdma::random_psn();

  std::uint8_t data[kReqPrivate] = {};
  const rdma_addr& a = i.id.route.addr;
  format_cma_header(i, data);
  if (p.private_data_len) std::memcpy(data + kCmaHdr, p.private_data, p.private_data_len);

  srdma_cm_connect_params c{};
  if (a.dst_addr.sa_family == AF_INET6)
    std::memcpy(c.peer_gid, &a.dst_sin6.sin6_addr, sizeof c.peer_gid);
  else
    c.peer_ipv4 = ip_of(a.dst_sin);
  c.service_id = service_id(i, ntohs(a.dst_sin.sin_port));
  c.local_qpn = i.id.qp ? i.id.qp->qp_num : p.qp_num;
  c.starting_psn = i.psn;
  c.path_mtu = i.mtu;
  c.responder_resources = i.responder_resources;
  c.initiator_depth = i.initiator_depth;
  c.retry_count = i.retry_count;
  c.rnr_retry_count = i.rnr_retry_count;
  c.local_ack_timeout = i.ack_timeout;
  c.response_timeout = kResponseTimeout;
  c.max_cm_retries = kMaxCmRetries;
  c.private_data = data;
  c.private_data_len = sizeof data;
  i.state = State::kConnecting;
  std::uint32_t comm_id = 0;
  if (srdma_cm_connect(d->cm, &c, active_handler, &i, &comm_id)) {
    i.state = State::kRouteResolved;
    return -1;
  }
  i.comm = true;
  i.comm_id = comm_id;
  return 0;
}

}  // namespace
}  // namespace srdma::rdmacm

using namespace srdma::rdmacm;

extern "C" {

int rdma_listen(rdma_cm_id* id, int backlog) {
  (void)backlog;  // the CM queues every request
  DeviceRef* d = nullptr;
  std::uint64_t sid;
  {
    std::lock_guard lock(g_mu);
    if (!live(id)) return fail("rdma_listen", EINVAL, "not a live rdma_cm_id");
    Id& i = *to_id(id);
    if (i.state == State::kListening) return 0;
    if (i.state != State::kBound) return fail("rdma_listen", EINVAL, "bind the ID first");
    d = device();
    sid = service_id(i, i.port);
    if (srdma_cm_listen(d->cm, sid, listen_handler, &i)) return -1;  // EADDRINUSE: a listener on the port
    i.service_id = sid;
    i.state = State::kListening;
  }
  return 0;
}

int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id) {
  if (!id) return fail("rdma_get_request", EINVAL, "NULL id");
  {
    std::lock_guard lock(g_mu);
    if (!live(listen)) return fail("rdma_get_request", EINVAL, "not a live rdma_cm_id");
    if (!to_id(listen)->sync || to_id(listen)->state != State::kListening)
      return fail("rdma_get_request", EINVAL, "a synchronous (rdma_create_ep) listening ID only");
  }
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(listen->channel, &ev)) return -1;
    if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
      rdma_ack_cm_event(ev);
      continue;
    }
    rdma_cm_id* n = ev->id;
    rdma_ack_cm_event(ev);
    // The new ID is synchronous too: its events on a channel of its own.
    if (rdma_migrate_id(n, nullptr)) return -1;
    // rdma_create_ep's attributes give it its QP (a copy: the call may
    // write the caps back).
    bool make_qp = false;
    ibv_qp_init_attr attr{};
    ibv_pd* pd = nullptr;
    {
      std::lock_guard lock(g_mu);
      if (live(listen) && to_id(listen)->ep_has_qp_init) {
        make_qp = true;
        attr = to_id(listen)->ep_qp_init;
        pd = to_id(listen)->ep_pd;
      }
    }
    if (make_qp && rdma_create_qp(n, pd, &attr)) {
      const int e = errno;
      rdma_reject(n, nullptr, 0);
      rdma_destroy_id(n);
      errno = e;
      return -1;
    }
    *id = n;
    return 0;
  }
}

int rdma_connect(rdma_cm_id* id, rdma_conn_param* conn_param) {
  bool sync;
  {
    std::lock_guard lock(g_mu);
    if (!live(id)) return fail("rdma_connect", EINVAL, "not a live rdma_cm_id");
    Id& i = *to_id(id);
    if (i.state != State::kRouteResolved) return fail("rdma_connect", EINVAL, "resolve the address and route first");
    rdma_conn_param none{};
    const rdma_conn_param& p = conn_param ? *conn_param : none;
    if (is_ud(i) ? connect_ud(i, p) : connect_rc(i, p)) return -1;
    sync = i.sync;
  }
  return sync ? sync_wait(id, RDMA_CM_EVENT_ESTABLISHED) : 0;
}

int rdma_establish(rdma_cm_id* id) {
  std::lock_guard lock(g_mu);
  if (!live(id)) return fail("rdma_establish", EINVAL, "not a live rdma_cm_id");
  Id& i = *to_id(id);
  if (i.state != State::kConnectResponse) return fail("rdma_establish", EINVAL, "no CONNECT_RESPONSE to answer");
  if (srdma_cm_ready(device()->cm, i.comm_id)) return -1;
  i.state = State::kConnected;
  return 0;
}

int rdma_accept(rdma_cm_id* id, rdma_conn_param* conn_param) {
  bool sync;
  {
    std::lock_guard lock(g_mu);
    if (!live(id)) return fail("rdma_accept", EINVAL, "not a live rdma_cm_id");
    Id& i = *to_id(id);
    if (i.state != State::kConnectRequest) return fail("rdma_accept", EINVAL, "not a connection request");
    if (is_ud(i)) {
      // No ESTABLISHED follows on the passive side of a UD ID (librdmacm
      // returns at once): the SIDR_REP is all.
      rdma_conn_param none{};
      return accept_ud(i, conn_param ? *conn_param : none);
    }
    rdma_conn_param none{};
    none.responder_resources = RDMA_MAX_RESP_RES;
    none.initiator_depth = RDMA_MAX_INIT_DEPTH;
    const rdma_conn_param& p = conn_param ? *conn_param : none;
    if (p.private_data_len > kRepPrivate) return fail("rdma_accept", EINVAL, "at most 196 bytes of private data");
    if (p.private_data_len && !p.private_data) return fail("rdma_accept", EINVAL, "private_data_len without data");
    if (!id->qp && !p.qp_num) return fail("rdma_accept", EINVAL, "no QP on the ID and no qp_num");
    DeviceRef* d = device();
    // What the peer's REQ offers bounds what we take.
    if (depth("rdma_accept", p.responder_resources, d->max_rd_atomic, i.peer_initiator_depth, i.responder_resources) ||
        depth("rdma_accept", p.initiator_depth, d->max_rd_atomic, i.peer_responder_resources, i.initiator_depth))
      return -1;
    i.retry_count = i.peer_retry_count;  // ib_cm: the REQ's, on the passive side
    i.rnr_retry_count = i.peer_rnr_retry_count;
    if (move_qp(i, IBV_QPS_RTR) || move_qp(i, IBV_QPS_RTS)) return -1;
    srdma_cm_reply r{};
    r.local_qpn = id->qp ? id->qp->qp_num : p.qp_num;
    r.starting_psn = i.psn;
    r.responder_resources = i.responder_resources;
    r.initiator_depth = i.initiator_depth;
    r.rnr_retry_count = std::min<std::uint8_t>(p.rnr_retry_count, 7);
    r.srq = id->qp ? id->qp->srq != nullptr : p.srq;
    r.private_data = p.private_data;
    r.private_data_len = p.private_data_len;
    i.state = State::kAccepting;
    if (srdma_cm_accept(d->cm, i.comm_id, &r, passive_handler, &i)) {
      i.state = State::kConnectRequest;
      return -1;
    }
    i.listener = nullptr;
    sync = i.sync;
  }
  return sync ? sync_wait(id, RDMA_CM_EVENT_ESTABLISHED) : 0;
}

int rdma_reject(rdma_cm_id* id, const void* private_data, std::uint8_t private_data_len) {
  std::lock_guard lock(g_mu);
  if (!live(id)) return fail("rdma_reject", EINVAL, "not a live rdma_cm_id");
  Id& i = *to_id(id);
  if (i.state != State::kConnectRequest && i.state != State::kConnectResponse)
    return fail("rdma_reject", EINVAL, "no connection request or response to reject");
  if (private_data_len > kRejPrivate) return fail("rdma_reject", EINVAL, "at most 148 bytes of private data");
  if (private_data_len && !private_data) return fail("rdma_reject", EINVAL, "private_data_len without data");
  if (is_ud(i)) return reject_ud(i, private_data, private_data_len);
  if (srdma_cm_reject(device()->cm, i.comm_id, private_data, private_data_len)) return -1;
  i.state = State::kFailed;
  return 0;
}

int rdma_reject_ece(rdma_cm_id* id, const void* private_data, std::uint8_t private_data_len) {
  return rdma_reject(id, private_data, private_data_len);
}

int rdma_disconnect(rdma_cm_id* id) {
  std::lock_guard lock(g_mu);
  if (!live(id)) return fail("rdma_disconnect", EINVAL, "not a live rdma_cm_id");
  Id& i = *to_id(id);
  if (is_ud(i)) {
    // A UD ID has no connection to end: its QP is flushed (the kernel's
    // rdma_disconnect moves it to ERR and finds no CM connection to close).
    if (id->qp) {
      ibv_qp_attr a{};
      a.qp_state = IBV_QPS_ERR;
      (void)ibv_modify_qp(id->qp, &a, IBV_QP_STATE);
    }
    return 0;
  }
  const bool connection = i.state == State::kConnected || i.state == State::kAccepting ||
                          i.state == State::kConnecting || i.state == State::kConnectResponse ||
                          i.state == State::kDisconnected;
  if (!connection) return fail("rdma_disconnect", EINVAL, "not connected");
  if (id->qp) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    (void)ibv_modify_qp(id->qp, &a, IBV_QP_STATE);  // flush what is posted, as librdmacm's ucma_shutdown
  }
  if (i.state == State::kDisconnected) return 0;  // the peer's DREQ came: the CM answered it
  // Fails only when the CM has the connection gone already (its DREQ came).
  (void)srdma_cm_disconnect(device()->cm, i.comm_id);
  return 0;
}

}  // extern "C"
