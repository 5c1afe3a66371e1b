// Queue pairs: create, modify (ibv_qp_attr to softrdma's QpAttr, the
// address vector to a peer's RoCEv2 address), query, destroy, and the
// posting verbs.
#include <arpa/inet.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <new>

#include "convert.h"
#include "errors.h"
#include "objects.h"
#include "ops.h"
#include "signals.h"
#include "srdma/access.h"
#include "post_list.h"
#include "srdma/net.h"

using namespace srdma;
using namespace srdma::verbs;

// An ibv_sge is passed to the core as it is.
static_assert(sizeof(ibv_sge) == sizeof(Sge) && offsetof(ibv_sge, addr) == offsetof(Sge, addr) &&
              offsetof(ibv_sge, length) == offsetof(Sge, length) && offsetof(ibv_sge, lkey) == offsetof(Sge, lkey));

namespace srdma::verbs {
namespace {

Result<WrOpcode> wr_opcode(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE: return WrOpcode::kRdmaWrite;
    case IBV_WR_RDMA_WRITE_WITH_IMM: return WrOpcode::kRdmaWriteWithImm;
    case IBV_WR_SEND: return WrOpcode::kSend;
    case IBV_WR_SEND_WITH_IMM: return WrOpcode::kSendWithImm;
    case IBV_WR_RDMA_READ: return WrOpcode::kRdmaRead;
    case IBV_WR_ATOMIC_CMP_AND_SWP: return WrOpcode::kAtomicCmpAndSwp;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return WrOpcode::kAtomicFetchAndAdd;
    case IBV_WR_LOCAL_INV: return WrOpcode::kLocalInv;
    case IBV_WR_SEND_WITH_INV: return WrOpcode::kSendWithInv;
    case IBV_WR_BIND_MW: return WrOpcode::kBindMw;
    case IBV_WR_ATOMIC_WRITE: return WrOpcode::kAtomicWrite;
    case IBV_WR_TSO:
    case IBV_WR_DRIVER1:
      return make_error(EOPNOTSUPP, "TSO and driver opcodes are not supported");
  }
  return make_error(EINVAL, "unknown opcode");
}

Result<SendWr> to_send_wr(const ibv_send_wr& in, bool ud, bool xrc) {
  SendWr out;
  if (xrc) out.xrc.remote_srqn = in.qp_type.xrc.remote_srqn;  // (the union is the WR's only on XRC_SEND)
  auto op = wr_opcode(in.opcode);
  if (!op) return std::unexpected(op.error());
  constexpr unsigned known = IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE;
  if (in.send_flags & ~known) return make_error(EINVAL, "unsupported send_flags (IP_CSUM or unknown bits)");
  if (in.num_sge < 0) return make_error(EINVAL, "negative num_sge");
  out.wr_id = in.wr_id;
  out.opcode = *op;
  out.sg_list = reinterpret_cast<const Sge*>(in.sg_list);
  out.num_sge = in.num_sge;
  if (in.send_flags & IBV_SEND_FENCE) out.send_flags |= SEND_FENCE;
  if (in.send_flags & IBV_SEND_SIGNALED) out.send_flags |= SEND_SIGNALED;
  if (in.send_flags & IBV_SEND_SOLICITED) out.send_flags |= SEND_SOLICITED;
  if (in.send_flags & IBV_SEND_INLINE) out.send_flags |= SEND_INLINE;
  switch (*op) {
    case WrOpcode::kSendWithImm:
      out.imm_data = ntohl(in.imm_data);
      break;
    case WrOpcode::kRdmaWriteWithImm:
      out.imm_data = ntohl(in.imm_data);
      [[fallthrough]];
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaRead:
    case WrOpcode::kAtomicWrite:  // its 8 bytes: the SGE (or inline)
      out.remote_addr = in.wr.rdma.remote_addr;
      out.rkey = in.wr.rdma.rkey;
      break;
    case WrOpcode::kAtomicCmpAndSwp:
    case WrOpcode::kAtomicFetchAndAdd:
      out.remote_addr = in.wr.atomic.remote_addr;
      out.rkey = in.wr.atomic.rkey;
      out.compare_add = in.wr.atomic.compare_add;
      out.swap = in.wr.atomic.swap;
      break;
    case WrOpcode::kSendWithInv:
    case WrOpcode::kLocalInv:
      out.invalidate_rkey = in.invalidate_rkey;
      break;
    case WrOpcode::kBindMw: {
      // A type 2 window (the core refuses a type 1 one: ibv_bind_mw binds it).
      if (!in.bind_mw.mw) return make_error(EINVAL, "BIND_MW without a window");
      auto access = mw_access_flags(in.bind_mw.bind_info.mw_access_flags);
      if (!access) return std::unexpected(access.error());
      out.bind_mw.mw = &to_mw(in.bind_mw.mw)->core;
      out.bind_mw.rkey = in.bind_mw.rkey;
      out.bind_mw.info = {in.bind_mw.bind_info.mr ? &mr_of(in.bind_mw.bind_info.mr).core : nullptr,
                          in.bind_mw.bind_info.addr, in.bind_mw.bind_info.length, *access};
      break;
    }
    case WrOpcode::kSend:
    case WrOpcode::kRegMr:
      break;
  }
  if (ud) {
    if (!in.wr.ud.ah) return make_error(EINVAL, "a UD send without an address handle");
    out.ud.ah = to_ah(in.wr.ud.ah)->core.get();
    out.ud.remote_qpn = in.wr.ud.remote_qpn;
    out.ud.remote_qkey = in.wr.ud.remote_qkey;
  }
  return out;
}

struct MaskBit {
  int ibv;
  std::uint32_t core;
};
constexpr std::array<MaskBit, 18> kMaskBits{{
    {IBV_QP_QKEY, QP_QKEY},
    {IBV_QP_STATE, QP_STATE},
    {IBV_QP_CUR_STATE, QP_CUR_STATE},
    {IBV_QP_EN_SQD_ASYNC_NOTIFY, QP_EN_SQD_ASYNC_NOTIFY},
    {IBV_QP_ACCESS_FLAGS, QP_ACCESS_FLAGS},
    {IBV_QP_PKEY_INDEX, QP_PKEY_INDEX},
    {IBV_QP_PORT, QP_PORT},
    {IBV_QP_AV, QP_AV},
    {IBV_QP_PATH_MTU, QP_PATH_MTU},
    {IBV_QP_TIMEOUT, QP_TIMEOUT},
    {IBV_QP_RETRY_CNT, QP_RETRY_CNT},
    {IBV_QP_RNR_RETRY, QP_RNR_RETRY},
    {IBV_QP_RQ_PSN, QP_RQ_PSN},
    {IBV_QP_MAX_QP_RD_ATOMIC, QP_MAX_QP_RD_ATOMIC},
    {IBV_QP_MIN_RNR_TIMER, QP_MIN_RNR_TIMER},
    {IBV_QP_SQ_PSN, QP_SQ_PSN},
    {IBV_QP_MAX_DEST_RD_ATOMIC, QP_MAX_DEST_RD_ATOMIC},
    {IBV_QP_DEST_QPN, QP_DEST_QPN},
}};

Result<std::uint32_t> core_mask(int mask) {
  constexpr int unsupported = IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE | IBV_QP_CAP | IBV_QP_RATE_LIMIT;
  if (mask & unsupported)
    return make_error(EOPNOTSUPP, "alternate paths, path migration, resizing and rate limits are not supported");
  std::uint32_t out = 0;
  int seen = 0;
  for (const MaskBit& b : kMaskBits) {
    if (mask & b.ibv) {
      out |= b.core;
      seen |= b.ibv;
    }
  }
  if (mask & ~seen) return make_error(EINVAL, "unknown attr_mask bits");
  return out;
}

Result<QpAttr> to_core_attr(const Context& ctx, const ibv_qp_attr& a, int mask) {
  QpAttr out;
  if (mask & IBV_QP_STATE) {
    auto s = qp_state(a.qp_state);
    if (!s) return std::unexpected(s.error());
    out.qp_state = *s;
  }
  if (mask & IBV_QP_CUR_STATE) {
    auto s = qp_state(a.cur_qp_state);
    if (!s) return std::unexpected(s.error());
    out.cur_qp_state = *s;
  }
  if (mask & IBV_QP_ACCESS_FLAGS) {
    auto f = access_flags(static_cast<unsigned>(a.qp_access_flags));
    if (!f) return std::unexpected(f.error());
    // ON_DEMAND is a region's attribute; a QP's rights do not carry it
    // (pyverbs' ODP tests pass the MR's flags to the QP, mlx5 ignores it).
    out.qp_access_flags = *f & ~std::uint32_t{ACCESS_ON_DEMAND};
  }
  out.pkey_index = a.pkey_index;
  out.port_num = a.port_num;
  if (mask & IBV_QP_AV) {
    auto peer = peer_address(ctx.ipv4, a.ah_attr);
    if (!peer) return std::unexpected(peer.error());
    out.dest_addr = *peer;
  }
  if (mask & IBV_QP_PATH_MTU) {
    out.path_mtu = mtu_bytes(a.path_mtu);
    if (out.path_mtu == 0) return make_error(EINVAL, "path_mtu is not an IBV_MTU_* value");
  }
  out.timeout = a.timeout;
  out.retry_cnt = a.retry_cnt;
  out.rnr_retry = a.rnr_retry;
  out.rq_psn = a.rq_psn;
  out.sq_psn = a.sq_psn;
  out.max_rd_atomic = a.max_rd_atomic;
  out.max_dest_rd_atomic = a.max_dest_rd_atomic;
  out.min_rnr_timer = a.min_rnr_timer;
  out.dest_qp_num = a.dest_qp_num;
  out.qkey = a.qkey;
  return out;
}

}  // namespace

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  if (!qp || !bad_wr) return fail("ibv_post_send", EINVAL, "NULL QP or bad_wr");
  QueuePair& core = *to_qp(qp)->core;
  const bool ud = qp->qp_type == IBV_QPT_UD, xrc = qp->qp_type == IBV_QPT_XRC_SEND;
  return post_list<SendWr>(
      "ibv_post_send", wr, bad_wr, [ud, xrc](const ibv_send_wr& w) { return to_send_wr(w, ud, xrc); },
      [&](const SendWr& first, const SendWr** bad) { return core.post_send(first, bad); });
}

int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  if (!qp || !bad_wr) return fail("ibv_post_recv", EINVAL, "NULL QP or bad_wr");
  return post_recv_list("ibv_post_recv", wr, bad_wr, [&](const RecvWr& first, const RecvWr** bad) {
    return to_qp(qp)->core->post_recv(first, bad);
  });
}

Qp* make_qp(const char* verb, ibv_pd* pd, ibv_qp_init_attr* init) {
  if (!pd || !init) return fail_null<Qp>(verb, EINVAL, "NULL PD or init_attr");
  QpType type;
  switch (init->qp_type) {
    case IBV_QPT_RC: type = QpType::kRc; break;
    case IBV_QPT_UC: type = QpType::kUc; break;
    case IBV_QPT_UD: type = QpType::kUd; break;
    case IBV_QPT_XRC_SEND: type = QpType::kXrcIni; break;
    case IBV_QPT_XRC_RECV:
      return fail_null<Qp>(verb, EINVAL, "an XRC_RECV QP is made by ibv_create_qp_ex with an XRCD, not a PD");
    case IBV_QPT_RAW_PACKET:
    case IBV_QPT_DRIVER:
    default: return fail_null<Qp>(verb, EOPNOTSUPP, "RC, UC, UD and XRC queue pairs only (no raw packet)");
  }
  const bool ini = type == QpType::kXrcIni;
  // An XRC_SEND QP has no receive side: its recv_cq, if given, is not used
  // (as libibverbs' providers ignore it).
  if (!init->send_cq || (!init->recv_cq && !ini)) return fail_null<Qp>(verb, EINVAL, "a QP needs both CQs");
  if (ini && init->srq) return fail_null<Qp>(verb, EINVAL, "an XRC_SEND QP has no receive side: no SRQ");
  auto* qp = new_object<Qp>(pd);
  if (qp) std::memset(&qp->ex, 0, sizeof qp->ex);
  if (!qp) return fail_null<Qp>(verb, ENOMEM, "out of memory");
  QpInitAttr attr;
  attr.send_cq = to_cq(init->send_cq)->core.get();
  attr.recv_cq = ini ? nullptr : to_cq(init->recv_cq)->core.get();
  // verbs allows an empty queue (qperf's receiver has no sends); the core
  // wants at least one entry, which costs nothing.
  attr.cap.max_send_wr = std::max(init->cap.max_send_wr, 1u);
  attr.cap.max_recv_wr = ini ? 0 : std::max(init->cap.max_recv_wr, 1u);
  attr.cap.max_send_sge = std::max(init->cap.max_send_sge, 1u);
  attr.cap.max_recv_sge = ini ? 0 : std::max(init->cap.max_recv_sge, 1u);
  attr.cap.max_inline_data = init->cap.max_inline_data;
  attr.sq_sig_all = init->sq_sig_all != 0;
  attr.qp_type = type;
  attr.srq = init->srq ? to_srq(init->srq)->core.get() : nullptr;
  attr.qp_context = qp;  // async events and completions find the wrapper through it
  SignalsBlocked quiet;
  auto core = pd_core(pd).create_qp(attr);
  if (!core) {
    delete_object(qp);
    return fail_null<Qp>(verb, core.error());
  }
  qp->core = std::move(*core);
  qp->caps = attr.cap;
  init->cap.max_send_sge = attr.cap.max_send_sge;
  init->cap.max_recv_sge = attr.cap.max_recv_sge;
  ibv_qp& q = qp->ibv;
  q.context = pd->context;
  q.qp_context = init->qp_context;
  q.pd = pd;
  q.send_cq = init->send_cq;
  q.recv_cq = ini ? nullptr : init->recv_cq;
  q.srq = init->srq;
  q.qp_num = qp->core->qp_num();
  q.handle = q.qp_num;
  q.state = IBV_QPS_RESET;
  q.qp_type = init->qp_type;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  qp->sq_sig_all = init->sq_sig_all;
  to_ctx(pd->context)->adopt(Kind::kQp, qp);
  return qp;
}


}  // namespace srdma::verbs

extern "C" {

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* init) {
  Qp* qp = make_qp("ibv_create_qp", pd, init);
  return qp ? &qp->ibv : nullptr;
}

int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  if (!qp || !attr) return fail("ibv_modify_qp", EINVAL, "NULL QP or attr");
  auto mask = core_mask(attr_mask);
  if (!mask) return fail("ibv_modify_qp", mask.error());
  auto core_attr = to_core_attr(*to_ctx(qp->context), *attr, attr_mask);
  if (!core_attr) return fail("ibv_modify_qp", core_attr.error());
  if (auto r = to_qp(qp)->core->modify(*core_attr, *mask); !r) return fail("ibv_modify_qp", r.error());
  qp->state = ibv_state(to_qp(qp)->core->state());
  return 0;
}

int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int, ibv_qp_init_attr* init) {
  if (!qp || !attr || !init) return fail("ibv_query_qp", EINVAL, "NULL argument");
  Qp& w = *to_qp(qp);
  const QpAttr a = w.core->query();
  std::memset(attr, 0, sizeof *attr);
  attr->qp_state = ibv_state(a.qp_state);
  attr->cur_qp_state = ibv_state(a.cur_qp_state);
  attr->path_mtu = mtu_enum(a.path_mtu);
  attr->path_mig_state = IBV_MIG_MIGRATED;
  attr->rq_psn = a.rq_psn;
  attr->sq_psn = a.sq_psn;
  attr->dest_qp_num = a.dest_qp_num;
  attr->qkey = a.qkey;
  attr->qp_access_flags = static_cast<int>(a.qp_access_flags);  // IBTA's bits: the same values
  attr->cap.max_send_wr = w.caps.max_send_wr;
  attr->cap.max_recv_wr = w.caps.max_recv_wr;
  attr->cap.max_send_sge = w.caps.max_send_sge;
  attr->cap.max_recv_sge = w.caps.max_recv_sge;
  attr->cap.max_inline_data = w.caps.max_inline_data;
  if (is_roce_link_address(a.dest_addr)) {
    const Gid g = gid_of_roce_address(a.dest_addr);
    attr->ah_attr.is_global = 1;
    std::memcpy(attr->ah_attr.grh.dgid.raw, g.data(), g.size());
    attr->ah_attr.grh.hop_limit = 64;
    attr->ah_attr.dlid = is_roce_address(a.dest_addr) ? static_cast<std::uint16_t>(roce_ipv4(a.dest_addr)) : 0;
    attr->ah_attr.port_num = 1;
  }
  attr->pkey_index = a.pkey_index;
  attr->sq_draining = 0;
  attr->max_rd_atomic = a.max_rd_atomic;
  attr->max_dest_rd_atomic = a.max_dest_rd_atomic;
  attr->min_rnr_timer = a.min_rnr_timer;
  attr->port_num = a.port_num;
  attr->timeout = a.timeout;
  attr->retry_cnt = a.retry_cnt;
  attr->rnr_retry = a.rnr_retry;
  std::memset(init, 0, sizeof *init);
  init->qp_context = qp->qp_context;
  init->send_cq = qp->send_cq;
  init->recv_cq = qp->recv_cq;
  init->srq = qp->srq;
  init->cap = attr->cap;
  init->qp_type = qp->qp_type;
  init->sq_sig_all = w.sq_sig_all;
  return 0;
}

int ibv_query_qp_data_in_order(ibv_qp* qp, ibv_wr_opcode, std::uint32_t) {
  // The responder writes a message's data in order, last byte last, but
  // promises nothing to a poller of memory before the completion.
  return qp ? 0 : -1;
}

int ibv_destroy_qp(ibv_qp* qp) {
  if (!qp) return fail("ibv_destroy_qp", EINVAL, "NULL QP");
  to_qp(qp)->core.reset();  // raises nothing from here on
  retire_async_events(*to_ctx(qp->context), qp);
  pthread_mutex_destroy(&qp->mutex);
  pthread_cond_destroy(&qp->cond);
  for (std::uint32_t group : to_qp(qp)->mcast_groups) (void)to_ctx(qp->context)->dev.detach_mcast(qp->qp_num, group);
  to_ctx(qp->context)->release(Kind::kQp, qp);
  delete_object(to_qp(qp));
  return 0;
}

// The QP's ibv_qp_ex when it was created with ibv_create_qp_ex and
// IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, as libibverbs answers; NULL otherwise.
ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  if (!qp || !to_qp(qp)->ext) return fail_null<ibv_qp_ex>("ibv_qp_to_qp_ex", EINVAL, "not a QP created with send_ops_flags");
  return &to_qp(qp)->ex;
}

int ibv_query_ece(ibv_qp*, ibv_ece*) { return fail("ibv_query_ece", EOPNOTSUPP, "no enhanced connection establishment"); }
int ibv_set_ece(ibv_qp*, ibv_ece*) { return fail("ibv_set_ece", EOPNOTSUPP, "no enhanced connection establishment"); }

}  // extern "C"
