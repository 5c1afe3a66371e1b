#include "ops.h"

#include <cerrno>

namespace srdma::verbs {
namespace {

int bind_mw(ibv_qp*, ibv_mw*, ibv_mw_bind*) { return EOPNOTSUPP; }
int dealloc_mw(ibv_mw*) { return EOPNOTSUPP; }

}  // namespace

void fill_context_ops(ibv_context_ops& ops) {
  ops = ibv_context_ops{};
  ops.post_send = post_send;
  ops.post_recv = post_recv;
  ops.post_srq_recv = post_srq_recv;
  ops.poll_cq = poll_cq;
  ops.req_notify_cq = req_notify_cq;
  ops.bind_mw = bind_mw;
  ops.dealloc_mw = dealloc_mw;
}

}  // namespace srdma::verbs
