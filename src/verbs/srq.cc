// Shared receive queues.
#include "errors.h"
#include "objects.h"
#include "ops.h"

using namespace srdma::verbs;

namespace srdma::verbs {

int post_srq_recv(ibv_srq*, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  if (bad_wr) *bad_wr = wr;
  return fail("ibv_post_srq_recv", EOPNOTSUPP, "SRQs are not supported yet");
}

}  // namespace srdma::verbs

extern "C" {

ibv_srq* ibv_create_srq(ibv_pd*, ibv_srq_init_attr*) {
  return fail_null<ibv_srq>("ibv_create_srq", EOPNOTSUPP, "SRQs are not supported yet");
}
int ibv_modify_srq(ibv_srq*, ibv_srq_attr*, int) { return fail("ibv_modify_srq", EOPNOTSUPP, "no SRQs"); }
int ibv_query_srq(ibv_srq*, ibv_srq_attr*) { return fail("ibv_query_srq", EOPNOTSUPP, "no SRQs"); }
int ibv_destroy_srq(ibv_srq*) { return fail("ibv_destroy_srq", EOPNOTSUPP, "no SRQs"); }

}  // extern "C"
