// Shared receive queues.
#include <array>
#include <new>

#include "errors.h"
#include "objects.h"
#include "ops.h"
#include "post_list.h"
#include "signals.h"
#include "post_list.h"

using namespace srdma;
using namespace srdma::verbs;

namespace srdma::verbs {

int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  if (!srq || !bad_wr) return fail("ibv_post_srq_recv", EINVAL, "NULL SRQ or bad_wr");
  return post_recv_list("ibv_post_srq_recv", wr, bad_wr, [&](const RecvWr& first, const RecvWr** bad) {
    return to_srq(srq)->core->post_recv(first, bad);
  });
}

ibv_srq* make_srq(const char* verb, ibv_pd* pd, ibv_srq_init_attr* init, ibv_xrcd* xrcd, ibv_cq* cq,
                  const ibv_tm_cap* tm) {
  if (!pd || !init) return fail_null<ibv_srq>(verb, EINVAL, "NULL PD or init_attr");
  if (tm ? (xrcd || !cq) : !xrcd != !cq)
    return fail_null<ibv_srq>(verb, EINVAL, "an XRC SRQ needs both an XRCD and a CQ, a TM SRQ a CQ only");
  auto* srq = new_object<Srq>(pd);
  if (!srq) return fail_null<ibv_srq>(verb, ENOMEM, "out of memory");
  SrqInitAttr attr;
  attr.max_wr = init->attr.max_wr;
  attr.max_sge = std::max(init->attr.max_sge, 1u);
  attr.srq_limit = init->attr.srq_limit;
  attr.srq_context = srq;  // the limit event finds the wrapper through it
  if (xrcd) {
    attr.xrcd = &xrcd_core(xrcd);
    attr.cq = to_cq(cq)->core.get();
  }
  if (tm) {
    attr.cq = to_cq(cq)->core.get();
    attr.max_num_tags = tm->max_num_tags;
    attr.max_ops = tm->max_ops;
  }
  SignalsBlocked quiet;
  auto core = pd_core(pd).create_srq(attr);
  if (!core) {
    delete_object(srq);
    return fail_null<ibv_srq>(verb, core.error());
  }
  srq->core = std::move(*core);
  const SrqAttr got = srq->core->query();
  init->attr.max_wr = got.max_wr;
  init->attr.max_sge = got.max_sge;
  srq->ibv.context = pd->context;
  srq->ibv.srq_context = init->srq_context;
  srq->ibv.pd = pd;
  srq->ibv.handle = srq->core->srq_num();
  pthread_mutex_init(&srq->ibv.mutex, nullptr);
  pthread_cond_init(&srq->ibv.cond, nullptr);
  to_ctx(pd->context)->adopt(Kind::kSrq, srq);
  return &srq->ibv;
}

int post_srq_ops_op(ibv_srq* srq, ibv_ops_wr* wr, ibv_ops_wr** bad_wr) {
  constexpr const char* verb = "ibv_post_srq_ops";
  if (!srq) return fail(verb, EINVAL, "NULL SRQ");
  SharedReceiveQueue& core = *to_srq(srq)->core;
  if (!core.is_tm()) {
    if (bad_wr) *bad_wr = wr;
    return fail(verb, EINVAL, "not a tag-matching SRQ");
  }
  // One op at a time into the core's form (the core runs each as posted),
  // the ADD's handle written back.
  for (; wr; wr = wr->next) {
    TmOpWr op;
    op.wr_id = wr->wr_id;
    switch (wr->opcode) {
      case IBV_WR_TAG_ADD: op.opcode = TmOpcode::kAdd; break;
      case IBV_WR_TAG_DEL: op.opcode = TmOpcode::kDel; break;
      case IBV_WR_TAG_SYNC: op.opcode = TmOpcode::kSync; break;
      default:
        if (bad_wr) *bad_wr = wr;
        return fail(verb, EINVAL, "unknown ibv_ops_wr opcode");
    }
    if (wr->flags & ~(IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC)) {
      if (bad_wr) *bad_wr = wr;
      return fail(verb, EINVAL, "unknown ibv_ops_wr flags");
    }
    op.flags = ((wr->flags & IBV_OPS_SIGNALED) ? TM_OP_SIGNALED : 0u) | ((wr->flags & IBV_OPS_TM_SYNC) ? TM_OP_SYNC : 0u);
    op.unexpected_cnt = wr->tm.unexpected_cnt;
    op.handle = wr->tm.handle;
    if (op.opcode == TmOpcode::kAdd) {
      op.recv_wr_id = wr->tm.add.recv_wr_id;
      op.num_sge = wr->tm.add.num_sge;
      op.sg_list = reinterpret_cast<const Sge*>(wr->tm.add.sg_list);
      op.tag = wr->tm.add.tag;
      op.mask = wr->tm.add.mask;
    }
    if (auto r = core.post_srq_ops(op); !r) {
      if (bad_wr) *bad_wr = wr;
      return fail(verb, r.error());
    }
    if (op.opcode == TmOpcode::kAdd) wr->tm.handle = op.handle;
  }
  return 0;
}

}  // namespace srdma::verbs

extern "C" {

ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* init) {
  return make_srq("ibv_create_srq", pd, init, nullptr, nullptr);
}

int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  if (!srq || !attr) return fail("ibv_modify_srq", EINVAL, "NULL SRQ or attr");
  if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return fail("ibv_modify_srq", EINVAL, "unknown srq_attr_mask bits");
  SrqAttr a;
  a.max_wr = attr->max_wr;
  a.max_sge = attr->max_sge;
  a.srq_limit = attr->srq_limit;
  std::uint32_t m = 0;
  if (mask & IBV_SRQ_MAX_WR) m |= SRQ_MAX_WR;
  if (mask & IBV_SRQ_LIMIT) m |= SRQ_LIMIT;
  if (auto r = to_srq(srq)->core->modify(a, m); !r) return fail("ibv_modify_srq", r.error());
  return 0;
}

int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  if (!srq || !attr) return fail("ibv_query_srq", EINVAL, "NULL SRQ or attr");
  const SrqAttr a = to_srq(srq)->core->query();
  attr->max_wr = a.max_wr;
  attr->max_sge = a.max_sge;
  attr->srq_limit = a.srq_limit;
  return 0;
}

int ibv_destroy_srq(ibv_srq* srq) {
  if (!srq) return fail("ibv_destroy_srq", EINVAL, "NULL SRQ");
  if (auto r = to_srq(srq)->core->destroy(); !r) return fail("ibv_destroy_srq", r.error());
  retire_async_events(*to_ctx(srq->context), srq);
  pthread_mutex_destroy(&srq->mutex);
  pthread_cond_destroy(&srq->cond);
  to_ctx(srq->context)->release(Kind::kSrq, srq);
  delete_object(to_srq(srq));
  return 0;
}

}  // extern "C"
