// What softrdma's librdmacm does not do: SRQs on IDs, rdma_notify and
// ECE. Each exists (programs link against it) and fails
// with ENOSYS (or EOPNOTSUPP where librdmacm would), never touching its
// arguments.
#include "errors.h"
#include "objects.h"

using srdma::rdmacm::fail;

namespace {
int nosys(const char* call) { return fail(call, ENOSYS, "not supported by softrdma's librdmacm"); }
}  // namespace

extern "C" {

int rdma_notify(rdma_cm_id*, ibv_event_type) { return nosys("rdma_notify"); }
int rdma_create_srq(rdma_cm_id*, ibv_pd*, ibv_srq_init_attr*) { return nosys("rdma_create_srq"); }
int rdma_create_srq_ex(rdma_cm_id*, ibv_srq_init_attr_ex*) { return nosys("rdma_create_srq_ex"); }
void rdma_destroy_srq(rdma_cm_id*) { nosys("rdma_destroy_srq"); }
int rdma_set_local_ece(rdma_cm_id*, ibv_ece*) {
  return fail("rdma_set_local_ece", EOPNOTSUPP, "no enhanced connection establishment");
}
int rdma_get_remote_ece(rdma_cm_id*, ibv_ece*) {
  return fail("rdma_get_remote_ece", EOPNOTSUPP, "no enhanced connection establishment");
}

}  // extern "C"
