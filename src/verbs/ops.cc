// The verbs <infiniband/verbs.h> calls through ibv_context::ops: the
// data path, and memory windows (ibv_alloc_mw, ibv_bind_mw and
// ibv_dealloc_mw are inline there and call these).
#include "ops.h"

#include <cerrno>
#include <new>

#include "convert.h"
#include "errors.h"
#include "objects.h"
#include "srdma/access.h"

namespace srdma::verbs {
namespace {

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type) {
  constexpr const char* kVerb = "ibv_alloc_mw";
  if (!pd) return fail_null<ibv_mw>(kVerb, EINVAL, "NULL PD");
  MwType t;
  switch (type) {
    case IBV_MW_TYPE_1: t = MwType::kType1; break;
    case IBV_MW_TYPE_2: t = MwType::kType2; break;
    default: return fail_null<ibv_mw>(kVerb, EINVAL, "a window type other than IBV_MW_TYPE_1 or _2");
  }
  auto* mw = new (std::nothrow) Mw{};
  if (!mw) return fail_null<ibv_mw>(kVerb, ENOMEM, "out of memory");
  auto core = pd_core(pd).alloc_mw(t);
  if (!core) {
    delete mw;
    return fail_null<ibv_mw>(kVerb, core.error());
  }
  mw->core = std::move(*core);
  mw->ibv.context = pd->context;
  mw->ibv.pd = pd;
  mw->ibv.rkey = mw->core.rkey();
  mw->ibv.handle = mw->core.rkey() >> 8;  // the MPT index: fixed for the window's life
  mw->ibv.type = type;
  to_ctx(pd->context)->adopt(Kind::kMw, mw);
  return &mw->ibv;
}

// ibv_bind_mw (type 1). verbs.h checked the type, an address or length
// without an MR and the PDs already; a caller through ops directly gets
// the same answers here.
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) {
  constexpr const char* kVerb = "ibv_bind_mw";
  if (!qp || !mw || !bind) return fail(kVerb, EINVAL, "NULL QP, window or bind");
  const ibv_mw_bind_info& bi = bind->bind_info;
  if (mw->type != IBV_MW_TYPE_1) return fail(kVerb, EINVAL, "ibv_bind_mw binds type 1 windows (type 2: a BIND_MW WR)");
  if (!bi.mr && (bi.addr || bi.length)) return fail(kVerb, EINVAL, "an address or length without an MR");
  if (bi.mr && bi.mr->pd != mw->pd) return fail(kVerb, EPERM, "the MR and the window are in other PDs");
  auto access = mw_access_flags(bi.mw_access_flags);
  if (!access) return fail(kVerb, access.error());
  // o10-36.2.2 (and rxe's provider): a type 1 window is never zero-based.
  if (*access & ACCESS_ZERO_BASED) return fail(kVerb, EINVAL, "a type 1 window cannot be zero-based");
  constexpr unsigned kKnown = IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
  if (bind->send_flags & ~kKnown) return fail(kVerb, EINVAL, "send_flags other than FENCE, SIGNALED, SOLICITED");
  std::uint32_t flags = 0;
  if (bind->send_flags & IBV_SEND_FENCE) flags |= SEND_FENCE;
  if (bind->send_flags & IBV_SEND_SIGNALED) flags |= SEND_SIGNALED;
  if (bind->send_flags & IBV_SEND_SOLICITED) flags |= SEND_SOLICITED;
  const MwBindInfo info{bi.mr ? &mr_of(bi.mr).core : nullptr, bi.addr, bi.length, *access};
  auto rkey = to_qp(qp)->core->bind_mw(to_mw(mw)->core, info, bind->wr_id, flags);
  if (!rkey) return fail(kVerb, rkey.error());
  mw->rkey = *rkey;  // the new key, as ibv_bind_mw promises
  return 0;
}

int dealloc_mw(ibv_mw* mw) {
  if (!mw) return fail("ibv_dealloc_mw", EINVAL, "NULL window");
  if (auto r = to_mw(mw)->core.dealloc(); !r) return fail("ibv_dealloc_mw", r.error());
  to_ctx(mw->context)->release(Kind::kMw, mw);
  delete to_mw(mw);
  return 0;
}

}  // namespace

void fill_context_ops(ibv_context_ops& ops) {
  ops = ibv_context_ops{};
  ops.post_send = post_send;
  ops.post_recv = post_recv;
  ops.post_srq_recv = post_srq_recv;
  ops.poll_cq = poll_cq;
  ops.req_notify_cq = req_notify_cq;
  ops.alloc_mw = alloc_mw;
  ops.bind_mw = bind_mw;
  ops.dealloc_mw = dealloc_mw;
}

}  // namespace srdma::verbs
