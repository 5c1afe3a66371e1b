// Extended QPs (ibv_create_qp_ex with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) and
// the ibv_wr_* posting API.
//
// The builders stage core SendWrs directly (no ibv_send_wr in between) and
// wr_complete hands the chain to the core's post_send in one call, so this
// path does less work per WR than ibv_post_send, which converts 16 at a
// time. A builder that is refused (an opcode not in send_ops_flags, too
// many SGEs, inline data over the QP's limit, a type 1 window) latches its
// errno; wr_complete then posts nothing and returns it, and wr_abort drops
// everything: nothing reaches the wire before wr_complete.
#include "qp_ex.h"

#include <arpa/inet.h>

#include <array>
#include <cstring>
#include <new>

#include "convert.h"
#include "errors.h"
#include "objects.h"

namespace srdma::verbs {

namespace {

// Which ibv_wr_* each QP type takes (the core refuses the rest at post
// time anyway); TSO and atomic writes are not this device's.
struct OpsRule {
  ibv_qp_type type;
  std::uint64_t allowed;
};
constexpr std::uint64_t kRcOps = IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
                                 IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                                 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
                                 IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_BIND_MW;
constexpr std::uint64_t kUcOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
                                 IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW;
constexpr std::uint64_t kUdOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
constexpr std::uint64_t kNeverOps = IBV_QP_EX_WITH_TSO;
// An XRC_SEND QP sends what RC sends.
constexpr std::array<OpsRule, 4> kOpsRules{
    {{IBV_QPT_RC, kRcOps}, {IBV_QPT_UC, kUcOps}, {IBV_QPT_UD, kUdOps}, {IBV_QPT_XRC_SEND, kRcOps}}};

constexpr std::uint32_t kKnownInitMask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
                                         IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_XRCD |
                                         IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_IND_TABLE |
                                         IBV_QP_INIT_ATTR_RX_HASH;

QpExPost& post_of(ibv_qp_ex* qx) { return *reinterpret_cast<Qp*>(qx)->ext; }

// The first refusal since wr_start wins; wr_complete reports it.
void refuse(QpExPost& p, int err, const char* why) {
  if (p.err == 0) {
    p.err = err;
    p.why = why;
  }
}

// A new WR of `op` if the QP was created for it (`flag`); null if refused.
QpExPost::Staged* begin(ibv_qp_ex* qx, WrOpcode op, std::uint64_t flag) {
  QpExPost& p = post_of(qx);
  if (!p.started) {
    fail("ibv_wr_*", EINVAL, "a builder outside wr_start .. wr_complete: ignored");
    return nullptr;
  }
  if (!(p.ops & flag)) {
    refuse(p, EINVAL, "an ibv_wr_* opcode not in the QP's send_ops_flags");
    return nullptr;
  }
  constexpr unsigned kKnownFlags = IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE;
  if (qx->wr_flags & ~kKnownFlags) {
    refuse(p, EINVAL, "wr_flags other than FENCE, SIGNALED, SOLICITED, INLINE");
    return nullptr;
  }
  QpExPost::Staged& s = p.wrs.emplace_back();
  s.wr.wr_id = qx->wr_id;
  s.wr.opcode = op;
  if (qx->wr_flags & IBV_SEND_FENCE) s.wr.send_flags |= SEND_FENCE;
  if (qx->wr_flags & IBV_SEND_SIGNALED) s.wr.send_flags |= SEND_SIGNALED;
  if (qx->wr_flags & IBV_SEND_SOLICITED) s.wr.send_flags |= SEND_SOLICITED;
  s.sge_first = static_cast<std::uint32_t>(p.sges.size());
  return &s;
}

// The WR the data and address setters apply to: the last one built, once.
QpExPost::Staged* current_for_data(QpExPost& p) {
  if (!p.started) {
    fail("ibv_wr_set_*", EINVAL, "a setter outside wr_start .. wr_complete: ignored");
    return nullptr;
  }
  if (p.err) return nullptr;  // its builder was refused: nothing to attach to
  if (p.wrs.empty()) {
    refuse(p, EINVAL, "ibv_wr_set_* before any builder");
    return nullptr;
  }
  QpExPost::Staged& s = p.wrs.back();
  if (s.has_data) {
    refuse(p, EINVAL, "a second data setter for one WR");
    return nullptr;
  }
  if (s.wr.opcode == WrOpcode::kLocalInv || s.wr.opcode == WrOpcode::kBindMw) {
    refuse(p, EINVAL, "LOCAL_INV and BIND_MW carry no data");
    return nullptr;
  }
  s.has_data = true;
  return &s;
}

void wr_send(ibv_qp_ex* qx) { begin(qx, WrOpcode::kSend, IBV_QP_EX_WITH_SEND); }
void wr_send_imm(ibv_qp_ex* qx, __be32 imm) {
  if (auto* s = begin(qx, WrOpcode::kSendWithImm, IBV_QP_EX_WITH_SEND_WITH_IMM)) s->wr.imm_data = ntohl(imm);
}
void wr_send_inv(ibv_qp_ex* qx, std::uint32_t rkey) {
  if (auto* s = begin(qx, WrOpcode::kSendWithInv, IBV_QP_EX_WITH_SEND_WITH_INV)) s->wr.invalidate_rkey = rkey;
}
void wr_rdma_write(ibv_qp_ex* qx, std::uint32_t rkey, std::uint64_t addr) {
  if (auto* s = begin(qx, WrOpcode::kRdmaWrite, IBV_QP_EX_WITH_RDMA_WRITE)) {
    s->wr.rkey = rkey;
    s->wr.remote_addr = addr;
  }
}
void wr_rdma_write_imm(ibv_qp_ex* qx, std::uint32_t rkey, std::uint64_t addr, __be32 imm) {
  if (auto* s = begin(qx, WrOpcode::kRdmaWriteWithImm, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)) {
    s->wr.rkey = rkey;
    s->wr.remote_addr = addr;
    s->wr.imm_data = ntohl(imm);
  }
}
void wr_rdma_read(ibv_qp_ex* qx, std::uint32_t rkey, std::uint64_t addr) {
  if (auto* s = begin(qx, WrOpcode::kRdmaRead, IBV_QP_EX_WITH_RDMA_READ)) {
    s->wr.rkey = rkey;
    s->wr.remote_addr = addr;
  }
}
void wr_atomic_cmp_swp(ibv_qp_ex* qx, std::uint32_t rkey, std::uint64_t addr, std::uint64_t compare,
                       std::uint64_t swap) {
  if (auto* s = begin(qx, WrOpcode::kAtomicCmpAndSwp, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP)) {
    s->wr.rkey = rkey;
    s->wr.remote_addr = addr;
    s->wr.compare_add = compare;
    s->wr.swap = swap;
  }
}
void wr_atomic_fetch_add(ibv_qp_ex* qx, std::uint32_t rkey, std::uint64_t addr, std::uint64_t add) {
  if (auto* s = begin(qx, WrOpcode::kAtomicFetchAndAdd, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)) {
    s->wr.rkey = rkey;
    s->wr.remote_addr = addr;
    s->wr.compare_add = add;
  }
}
void wr_local_inv(ibv_qp_ex* qx, std::uint32_t rkey) {
  if (auto* s = begin(qx, WrOpcode::kLocalInv, IBV_QP_EX_WITH_LOCAL_INV)) s->wr.invalidate_rkey = rkey;
}

// A type 2 window's bind (ibv_post_send's IBV_WR_BIND_MW); a type 1
// window, a NULL one or bad access bits latch EINVAL.
void wr_bind_mw(ibv_qp_ex* qx, ibv_mw* mw, std::uint32_t rkey, const ibv_mw_bind_info* info) {
  auto* s = begin(qx, WrOpcode::kBindMw, IBV_QP_EX_WITH_BIND_MW);
  if (!s) return;
  QpExPost& p = post_of(qx);
  if (!mw || !info) return refuse(p, EINVAL, "ibv_wr_bind_mw: NULL window or bind_info");
  if (mw->type != IBV_MW_TYPE_2) return refuse(p, EINVAL, "ibv_wr_bind_mw binds type 2 windows (type 1: ibv_bind_mw)");
  auto access = mw_access_flags(info->mw_access_flags);
  if (!access) return refuse(p, EINVAL, "ibv_wr_bind_mw: a window grants remote access (and ZERO_BASED) only");
  s->wr.bind_mw.mw = &to_mw(mw)->core;
  s->wr.bind_mw.rkey = rkey;
  s->wr.bind_mw.info = {info->mr ? &mr_of(info->mr).core : nullptr, info->addr, info->length, *access};
}
void wr_send_tso(ibv_qp_ex* qx, void*, std::uint16_t, std::uint16_t) {
  if (post_of(qx).started) refuse(post_of(qx), EOPNOTSUPP, "TSO is for raw packet QPs");
}
// IBA 1.5 ATOMIC WRITE: its 8 bytes are copied now, into the WR (as
// inline data, whatever max_inline_data: an atomic's operands ride in the
// WQE).
void wr_atomic_write(ibv_qp_ex* qx, std::uint32_t rkey, std::uint64_t addr, const void* atomic_wr) {
  auto* s = begin(qx, WrOpcode::kAtomicWrite, IBV_QP_EX_WITH_ATOMIC_WRITE);
  if (!s) return;
  QpExPost& p = post_of(qx);
  if (!atomic_wr) return refuse(p, EINVAL, "ibv_wr_atomic_write: NULL data");
  s->wr.rkey = rkey;
  s->wr.remote_addr = addr;
  const std::size_t at = p.inline_bytes.size();
  p.inline_bytes.resize(at + 8);
  std::memcpy(p.inline_bytes.data() + at, atomic_wr, 8);
  p.sges.push_back(Sge{at, 8, 0});
  s->wr.num_sge = 1;
  s->wr.send_flags |= SEND_INLINE;
  s->inline_data = true;
  s->has_data = true;  // no setter may follow
}
void wr_set_xrc_srqn(ibv_qp_ex* qx, std::uint32_t remote_srqn) {
  QpExPost& p = post_of(qx);
  if (!p.started || p.err) return;
  if (!p.xrc || p.wrs.empty()) return refuse(p, EINVAL, "ibv_wr_set_xrc_srqn: not an XRC_SEND QP, or no WR built");
  p.wrs.back().wr.xrc.remote_srqn = remote_srqn;  // 24 bits: the core refuses more
  p.wrs.back().xrc_srqn_set = true;
}

void wr_set_ud_addr(ibv_qp_ex* qx, ibv_ah* ah, std::uint32_t remote_qpn, std::uint32_t remote_qkey) {
  QpExPost& p = post_of(qx);
  if (!p.started || p.err) return;
  if (!p.ud || p.wrs.empty()) return refuse(p, EINVAL, "ibv_wr_set_ud_addr: not a UD QP, or no WR built");
  if (!ah) return refuse(p, EINVAL, "ibv_wr_set_ud_addr: NULL address handle");
  SendWr& w = p.wrs.back().wr;
  w.ud.ah = to_ah(ah)->core.get();
  w.ud.remote_qpn = remote_qpn;
  w.ud.remote_qkey = remote_qkey;
}

void wr_set_sge(ibv_qp_ex* qx, std::uint32_t lkey, std::uint64_t addr, std::uint32_t length) {
  QpExPost& p = post_of(qx);
  QpExPost::Staged* s = current_for_data(p);
  if (!s) return;
  p.sges.push_back(Sge{addr, length, lkey});
  s->wr.num_sge = 1;
}

void wr_set_sge_list(ibv_qp_ex* qx, std::size_t num_sge, const ibv_sge* list) {
  QpExPost& p = post_of(qx);
  QpExPost::Staged* s = current_for_data(p);
  if (!s) return;
  if (num_sge > p.max_send_sge) return refuse(p, EINVAL, "more SGEs than the QP's max_send_sge");
  if (num_sge && !list) return refuse(p, EINVAL, "NULL SGE list");
  for (std::size_t i = 0; i < num_sge; ++i) p.sges.push_back(Sge{list[i].addr, list[i].length, list[i].lkey});
  s->wr.num_sge = static_cast<int>(num_sge);
}

// Inline data is copied now: the application may reuse its buffers as soon
// as the setter returns. The core copies it again at wr_complete.
void set_inline(QpExPost& p, QpExPost::Staged& s, std::size_t num, const ibv_data_buf* bufs) {
  std::size_t total = 0;
  for (std::size_t i = 0; i < num; ++i) {
    if (bufs[i].length && !bufs[i].addr) return refuse(p, EINVAL, "inline data at NULL");
    total += bufs[i].length;
  }
  if (total > p.max_inline) return refuse(p, EINVAL, "inline data over the QP's max_inline_data");
  const std::size_t at = p.inline_bytes.size();
  p.inline_bytes.resize(at + total);
  std::size_t off = at;
  for (std::size_t i = 0; i < num; ++i) {
    std::memcpy(p.inline_bytes.data() + off, bufs[i].addr, bufs[i].length);
    off += bufs[i].length;
  }
  p.sges.push_back(Sge{at, static_cast<std::uint32_t>(total), 0});
  s.wr.num_sge = 1;
  s.wr.send_flags |= SEND_INLINE;
  s.inline_data = true;
}
void wr_set_inline_data(ibv_qp_ex* qx, void* addr, std::size_t length) {
  QpExPost& p = post_of(qx);
  QpExPost::Staged* s = current_for_data(p);
  if (!s) return;
  const ibv_data_buf one{addr, length};
  set_inline(p, *s, 1, &one);
}
void wr_set_inline_data_list(ibv_qp_ex* qx, std::size_t num_buf, const ibv_data_buf* list) {
  QpExPost& p = post_of(qx);
  QpExPost::Staged* s = current_for_data(p);
  if (!s) return;
  if (num_buf && !list) return refuse(p, EINVAL, "NULL inline buffer list");
  set_inline(p, *s, num_buf, list);
}

void reset(QpExPost& p) {
  p.wrs.clear();
  p.sges.clear();
  p.inline_bytes.clear();
  p.err = 0;
  p.why = nullptr;
}

void wr_start(ibv_qp_ex* qx) {
  QpExPost& p = post_of(qx);
  p.mu.lock();
  reset(p);
  p.started = true;
}

void wr_abort(ibv_qp_ex* qx) {
  QpExPost& p = post_of(qx);
  if (!p.started) return;
  reset(p);
  p.started = false;
  p.mu.unlock();
}

int wr_complete(ibv_qp_ex* qx) {
  QpExPost& p = post_of(qx);
  if (!p.started) return fail("ibv_wr_complete", EINVAL, "no wr_start");
  int r = 0;
  if (p.err) {
    r = fail("ibv_wr_complete", p.err, p.why);
  } else if (p.wrs.size() > p.max_send_wr) {
    r = fail("ibv_wr_complete", ENOMEM, "more WRs than the send queue holds");
  } else if (!p.wrs.empty()) {
    // The arrays stopped moving: point each WR at its SGEs and chain them.
    for (std::size_t i = 0; i < p.wrs.size(); ++i) {
      QpExPost::Staged& s = p.wrs[i];
      s.wr.sg_list = s.wr.num_sge ? &p.sges[s.sge_first] : nullptr;
      if (s.inline_data) p.sges[s.sge_first].addr += reinterpret_cast<std::uintptr_t>(p.inline_bytes.data());
      if (p.ud && !s.wr.ud.ah) {
        r = fail("ibv_wr_complete", EINVAL, "a UD WR without ibv_wr_set_ud_addr");
        break;
      }
      if (p.xrc && !s.xrc_srqn_set) {
        r = fail("ibv_wr_complete", EINVAL, "an XRC_SEND WR without ibv_wr_set_xrc_srqn");
        break;
      }
      s.wr.next = i + 1 < p.wrs.size() ? &p.wrs[i + 1].wr : nullptr;
    }
    if (r == 0) {
      // As ibv_post_send: on a refusal the WRs before the bad one are posted.
      if (auto posted = reinterpret_cast<Qp*>(qx)->core->post_send(p.wrs[0].wr); !posted)
        r = fail("ibv_wr_complete", posted.error());
    }
  }
  reset(p);
  p.started = false;
  p.mu.unlock();
  return r;
}

}  // namespace

QpExPost* make_qp_ex_post() { return new (std::nothrow) QpExPost; }

ibv_qp* create_qp_ex_op(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  constexpr const char* verb = "ibv_create_qp_ex";
  if (!context || !attr) return fail_null<ibv_qp>(verb, EINVAL, "NULL context or attribute");
  if (attr->comp_mask & ~kKnownInitMask) return fail_null<ibv_qp>(verb, EINVAL, "unknown comp_mask bits");
  if (attr->comp_mask & (IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH))
    return fail_null<ibv_qp>(verb, EOPNOTSUPP, "TSO and RSS (raw packet) QPs are not supported");
  // An XRC_RECV QP is of an XRC domain, not of a PD; no other QP has one.
  if (attr->qp_type == IBV_QPT_XRC_RECV) return create_xrc_recv_qp(context, attr);
  if (attr->comp_mask & IBV_QP_INIT_ATTR_XRCD)
    return fail_null<ibv_qp>(verb, EINVAL, "only an XRC_RECV QP takes an XRCD (IBV_QP_INIT_ATTR_XRCD)");
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd)
    return fail_null<ibv_qp>(verb, EINVAL, "a QP needs a PD (IBV_QP_INIT_ATTR_PD)");
  if (attr->pd->context != context) return fail_null<ibv_qp>(verb, EINVAL, "the PD is of another context");
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags)
    return fail_null<ibv_qp>(verb, EOPNOTSUPP, "no create_flags are supported");
  const bool with_ops = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
  const std::uint64_t ops = with_ops ? attr->send_ops_flags : 0;
  if (with_ops) {
    if (ops & kNeverOps)
      return fail_null<ibv_qp>(verb, EOPNOTSUPP, "send_ops_flags: memory windows, TSO and atomic writes are not supported");
    const OpsRule* rule = nullptr;
    for (const OpsRule& r : kOpsRules)
      if (r.type == attr->qp_type) rule = &r;
    if (rule && (ops & ~rule->allowed))
      return fail_null<ibv_qp>(verb, EINVAL, "send_ops_flags has an opcode this QP type does not send");
    if (!ops) return fail_null<ibv_qp>(verb, EINVAL, "SEND_OPS_FLAGS with no opcode");
  }
  std::unique_ptr<QpExPost> post;
  if (with_ops) {
    post.reset(make_qp_ex_post());
    if (!post) return fail_null<ibv_qp>(verb, ENOMEM, "out of memory");
  }
  // The leading fields are ibv_qp_init_attr's, as libibverbs' own cast assumes.
  Qp* qp = make_qp(verb, attr->pd, reinterpret_cast<ibv_qp_init_attr*>(attr));
  if (!qp) return nullptr;
  if (!post) return &qp->ibv;
  post->ops = ops;
  post->ud = attr->qp_type == IBV_QPT_UD;
  post->xrc = attr->qp_type == IBV_QPT_XRC_SEND;
  post->max_send_wr = qp->caps.max_send_wr;
  post->max_send_sge = qp->caps.max_send_sge;
  post->max_inline = qp->caps.max_inline_data;
  post->wrs.reserve(post->max_send_wr < 64 ? post->max_send_wr : 64);
  qp->ext = std::move(post);
  ibv_qp_ex& x = qp->ex;
  x.comp_mask = 0;
  x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  x.wr_atomic_fetch_add = wr_atomic_fetch_add;
  x.wr_bind_mw = wr_bind_mw;
  x.wr_local_inv = wr_local_inv;
  x.wr_rdma_read = wr_rdma_read;
  x.wr_rdma_write = wr_rdma_write;
  x.wr_rdma_write_imm = wr_rdma_write_imm;
  x.wr_send = wr_send;
  x.wr_send_imm = wr_send_imm;
  x.wr_send_inv = wr_send_inv;
  x.wr_send_tso = wr_send_tso;
  x.wr_set_ud_addr = wr_set_ud_addr;
  x.wr_set_xrc_srqn = wr_set_xrc_srqn;
  x.wr_set_inline_data = wr_set_inline_data;
  x.wr_set_inline_data_list = wr_set_inline_data_list;
  x.wr_set_sge = wr_set_sge;
  x.wr_set_sge_list = wr_set_sge_list;
  x.wr_start = wr_start;
  x.wr_complete = wr_complete;
  x.wr_abort = wr_abort;
  x.wr_atomic_write = wr_atomic_write;
  return &qp->ibv;
}

}  // namespace srdma::verbs
