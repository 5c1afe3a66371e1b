// QPs on IDs: rdma_create_qp (the default PD and CQs of its own when the
// application gives none, the QP moved to INIT, as librdmacm does), the
// attributes of each transition (rdma_init_qp_attr: what the kernel's
// rdma_init_qp_attr fills), the moves to RTR/RTS librdmacm makes in
// rdma_connect's response and rdma_accept, and rdma_create_ep.
#include <cstring>

#include "errors.h"
#include "objects.h"

namespace srdma::rdmacm {

namespace {

// A UD QP's transitions, as the kernel's cma_ib_init_qp_attr and
// librdmacm's ucma_init_ud_qp make them: INIT with the port space's Q_Key,
// RTR and RTS with nothing but the state (and SQ PSN 0).
int init_ud_qp_attr(ibv_qp_attr& a, int& mask) {
  switch (static_cast<int>(a.qp_state)) {
    case IBV_QPS_INIT:
      a.pkey_index = 0;
      a.port_num = 1;
      a.qkey = RDMA_UDP_QKEY;
      mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
      return 0;
    case IBV_QPS_RTR:
    case IBV_QPS_ERR:
      mask = IBV_QP_STATE;
      return 0;
    case IBV_QPS_RTS:
      a.sq_psn = 0;
      mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
      return 0;
    default: return fail("rdma_init_qp_attr", EINVAL, "INIT, RTR, RTS or ERR only");
  }
}

}  // namespace

int init_qp_attr(const Id& id, ibv_qp_attr& a, int& mask) {
  const ibv_qp_state to = a.qp_state;
  std::memset(&a, 0, sizeof a);
  a.qp_state = to;
  if (is_ud(id)) return init_ud_qp_attr(a, mask);
  switch (static_cast<int>(to)) {
    case IBV_QPS_INIT:
      a.pkey_index = 0;
      a.port_num = 1;
      // ib_cm: remote writes always, reads and atomics when we answer them.
      a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
      if (id.responder_resources)
        a.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
      mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      return 0;
    case IBV_QPS_RTR:
      if (!id.comm) return fail("rdma_init_qp_attr", EINVAL, "RTR needs the peer's REQ or REP");
      a.path_mtu = id.mtu;
      a.dest_qp_num = id.peer_qpn;
      a.rq_psn = id.peer_psn;
      a.max_dest_rd_atomic = id.responder_resources;
      a.min_rnr_timer = 12;  // 0.64 ms
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.dgid = id.id.route.addr.addr.ibaddr.dgid;
      a.ah_attr.grh.sgid_index = 0;
      a.ah_attr.grh.hop_limit = 64;
      a.ah_attr.grh.traffic_class = id.tos;
      a.ah_attr.port_num = 1;
      mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      return 0;
    case IBV_QPS_RTS:
      if (!id.comm) return fail("rdma_init_qp_attr", EINVAL, "RTS needs the peer's REQ or REP");
      a.sq_psn = id.psn;
      a.timeout = id.ack_timeout;
      a.retry_cnt = id.retry_count;
      a.rnr_retry = id.rnr_retry_count;
      a.max_rd_atomic = id.initiator_depth;
      mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
             IBV_QP_MAX_QP_RD_ATOMIC;
      return 0;
    case IBV_QPS_ERR:
      mask = IBV_QP_STATE;
      return 0;
    default: return fail("rdma_init_qp_attr", EINVAL, "INIT, RTR, RTS or ERR only");
  }
}

int move_qp(Id& id, ibv_qp_state to) {
  ibv_qp* qp = id.id.qp;
  if (!qp) return 0;
  if (to == IBV_QPS_RTR) {
    // librdmacm refreshes INIT's attributes first: the access flags depend on
    // the responder resources agreed on.
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    int mask = 0;
    if (init_qp_attr(id, a, mask) || ibv_modify_qp(qp, &a, mask)) return -1;
  }
  ibv_qp_attr a{};
  a.qp_state = to;
  int mask = 0;
  if (init_qp_attr(id, a, mask)) return -1;
  if (ibv_modify_qp(qp, &a, mask)) return -1;
  return 0;
}

}  // namespace srdma::rdmacm

using namespace srdma::rdmacm;

namespace {

// REQUIRES g_mu. CQs of the ID's own when the application gives none.
int create_qp_locked(Id& i, ibv_pd* pd, ibv_qp_init_attr* attr) {
  rdma_cm_id* id = &i.id;
  if (!id->verbs) return fail("rdma_create_qp", EINVAL, "the ID is not bound to a device (bind or resolve first)");
  if (id->qp) return fail("rdma_create_qp", EINVAL, "the ID has a QP already");
  if (!pd) pd = device()->pd;
  if (pd->context != id->verbs) return fail("rdma_create_qp", EINVAL, "the PD is not on the ID's device");
  if (attr->qp_type != id->qp_type)
    return fail("rdma_create_qp", EINVAL,
                id->qp_type == IBV_QPT_UD ? "an RDMA_PS_UDP ID takes a UD QP" : "an RDMA_PS_TCP ID takes an RC QP");
  ibv_qp_init_attr init = *attr;
  bool own = false;
  if (!init.send_cq || !init.recv_cq) {
    if (init.send_cq || init.recv_cq) return fail("rdma_create_qp", EINVAL, "both CQs or neither");
    id->send_cq_channel = ibv_create_comp_channel(id->verbs);
    id->send_cq = id->send_cq_channel
                      ? ibv_create_cq(id->verbs, static_cast<int>(std::max(init.cap.max_send_wr, 1u)), id,
                                      id->send_cq_channel, 0)
                      : nullptr;
    id->recv_cq_channel = id->send_cq ? ibv_create_comp_channel(id->verbs) : nullptr;
    id->recv_cq = id->recv_cq_channel
                      ? ibv_create_cq(id->verbs, static_cast<int>(std::max(init.cap.max_recv_wr, 1u)), id,
                                      id->recv_cq_channel, 0)
                      : nullptr;
    if (!id->recv_cq) {
      int e = errno;
      if (id->send_cq) ibv_destroy_cq(id->send_cq);
      if (id->send_cq_channel) ibv_destroy_comp_channel(id->send_cq_channel);
      if (id->recv_cq_channel) ibv_destroy_comp_channel(id->recv_cq_channel);
      id->send_cq = id->recv_cq = nullptr;
      id->send_cq_channel = id->recv_cq_channel = nullptr;
      return fail("rdma_create_qp", e, "cannot create the ID's CQs");
    }
    init.send_cq = id->send_cq;
    init.recv_cq = id->recv_cq;
    own = true;
  }
  ibv_qp* qp = ibv_create_qp(pd, &init);
  if (!qp) return -1;
  // INIT; a UD QP goes on to RTS at once (librdmacm's ucma_init_ud_qp):
  // it needs no peer, SIDR only tells the peer its number.
  for (ibv_qp_state to : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
    ibv_qp_attr a{};
    a.qp_state = to;
    int mask = 0;
    if (init_qp_attr(i, a, mask) || ibv_modify_qp(qp, &a, mask)) {
      int e = errno;
      ibv_destroy_qp(qp);
      return fail("rdma_create_qp", e, "cannot move the QP to INIT (RTS for UD)");
    }
    if (!is_ud(i)) break;
  }
  attr->cap = init.cap;
  attr->send_cq = init.send_cq;
  attr->recv_cq = init.recv_cq;
  id->qp = qp;
  // Groups the ID joined before it had a QP take it now (librdmacm
  // attaches on the join; the kernel's join needs no QP).
  if (attach_groups(i)) {
    const int e = errno;
    detach_groups(i);
    id->qp = nullptr;
    ibv_destroy_qp(qp);
    return fail("rdma_create_qp", e, "cannot attach the QP to the groups the ID joined");
  }
  id->pd = pd;
  i.own_cqs = own;
  return 0;
}

}  // namespace

extern "C" {

int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (!qp_init_attr) return fail("rdma_create_qp", EINVAL, "NULL init attributes");
  std::lock_guard lock(g_mu);
  if (!live(id)) return fail("rdma_create_qp", EINVAL, "not a live rdma_cm_id");
  return create_qp_locked(*to_id(id), pd, qp_init_attr);
}

int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* attr) {
  if (!attr) return fail("rdma_create_qp_ex", EINVAL, "NULL init attributes");
  if (attr->comp_mask & ~static_cast<std::uint32_t>(IBV_QP_INIT_ATTR_PD))
    return fail("rdma_create_qp_ex", EOPNOTSUPP, "only IBV_QP_INIT_ATTR_PD in comp_mask");
  ibv_qp_init_attr init{};
  init.qp_context = attr->qp_context;
  init.send_cq = attr->send_cq;
  init.recv_cq = attr->recv_cq;
  init.srq = attr->srq;
  init.cap = attr->cap;
  init.qp_type = attr->qp_type;
  init.sq_sig_all = attr->sq_sig_all;
  ibv_pd* pd = (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : nullptr;
  if (rdma_create_qp(id, pd, &init)) return -1;
  attr->cap = init.cap;
  return 0;
}

void rdma_destroy_qp(rdma_cm_id* id) {
  std::lock_guard lock(g_mu);
  if (!live(id) || !id->qp) {
    fail("rdma_destroy_qp", EINVAL, "not a live rdma_cm_id with a QP");
    return;
  }
  Id& i = *to_id(id);
  detach_groups(i);
  ibv_destroy_qp(id->qp);
  id->qp = nullptr;
  if (i.own_cqs) {
    ibv_destroy_cq(id->send_cq);
    ibv_destroy_cq(id->recv_cq);
    ibv_destroy_comp_channel(id->send_cq_channel);
    ibv_destroy_comp_channel(id->recv_cq_channel);
    id->send_cq = id->recv_cq = nullptr;
    id->send_cq_channel = id->recv_cq_channel = nullptr;
    i.own_cqs = false;
  }
}

int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  if (!qp_attr || !qp_attr_mask) return fail("rdma_init_qp_attr", EINVAL, "NULL attr or mask");
  std::lock_guard lock(g_mu);
  if (!live(id)) return fail("rdma_init_qp_attr", EINVAL, "not a live rdma_cm_id");
  if (!id->verbs) return fail("rdma_init_qp_attr", EINVAL, "the ID is not bound to a device");
  return init_qp_attr(*to_id(id), *qp_attr, *qp_attr_mask);
}

int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (!id || !res) return fail("rdma_create_ep", EINVAL, "NULL id or addrinfo");
  rdma_cm_id* cm_id = nullptr;
  if (rdma_create_id(nullptr, &cm_id, nullptr, static_cast<rdma_port_space>(res->ai_port_space)) == -1) return -1;
  int r;
  if (res->ai_flags & RAI_PASSIVE) {
    r = res->ai_src_addr ? rdma_bind_addr(cm_id, res->ai_src_addr) : fail("rdma_create_ep", EINVAL, "no address");
    // A listener has no QP: each request's ID gets one from these
    // (rdma_get_request), of the addrinfo's QP type, as librdmacm does.
    if (!r && qp_init_attr) {
      std::lock_guard lock(g_mu);
      Id& i = *to_id(cm_id);
      i.ep_has_qp_init = true;
      i.ep_qp_init = *qp_init_attr;
      i.ep_qp_init.qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
      i.ep_pd = pd;
    }
  } else {
    r = rdma_resolve_addr(cm_id, res->ai_src_addr, res->ai_dst_addr, 2000);
    if (!r) r = rdma_resolve_route(cm_id, 2000);
    if (!r && qp_init_attr) {
      qp_init_attr->qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);  // librdmacm's rule
      r = rdma_create_qp(cm_id, pd, qp_init_attr);
    }
  }
  if (r) {
    int e = errno;
    rdma_destroy_id(cm_id);
    errno = e;
    return -1;
  }
  *id = cm_id;
  return 0;
}

void rdma_destroy_ep(rdma_cm_id* id) {
  bool has_qp;
  {
    std::lock_guard lock(g_mu);
    if (!live(id)) return;
    has_qp = id->qp != nullptr;
  }
  if (has_qp) rdma_destroy_qp(id);
  rdma_destroy_id(id);
}

}  // extern "C"
