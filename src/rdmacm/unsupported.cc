// What softrdma's librdmacm does not do: rsockets, SRQs on IDs,
// rdma_notify and ECE. Each exists (programs link against it) and fails
// with ENOSYS (or EOPNOTSUPP where librdmacm would), never touching its
// arguments.
#include <sys/types.h>

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

// rsockets (<rdma/rsocket.h>): argument lists are the C ABI's business;
// none is read.
int rsocket(int, int, int) { return nosys("rsocket"); }
int rbind(int, const void*, unsigned) { return nosys("rbind"); }
int rlisten(int, int) { return nosys("rlisten"); }
int raccept(int, void*, void*) { return nosys("raccept"); }
int rconnect(int, const void*, unsigned) { return nosys("rconnect"); }
int rshutdown(int, int) { return nosys("rshutdown"); }
int rclose(int) { return nosys("rclose"); }
ssize_t rrecv(int, void*, size_t, int) { return nosys("rrecv"); }
ssize_t rrecvfrom(int, void*, size_t, int, void*, void*) { return nosys("rrecvfrom"); }
ssize_t rrecvmsg(int, void*, int) { return nosys("rrecvmsg"); }
ssize_t rsend(int, const void*, size_t, int) { return nosys("rsend"); }
ssize_t rsendto(int, const void*, size_t, int, const void*, unsigned) { return nosys("rsendto"); }
ssize_t rsendmsg(int, const void*, int) { return nosys("rsendmsg"); }
ssize_t rread(int, void*, size_t) { return nosys("rread"); }
ssize_t rreadv(int, const void*, int) { return nosys("rreadv"); }
ssize_t rwrite(int, const void*, size_t) { return nosys("rwrite"); }
ssize_t rwritev(int, const void*, int) { return nosys("rwritev"); }
int rpoll(void*, unsigned long, int) { return nosys("rpoll"); }
int rselect(int, void*, void*, void*, void*) { return nosys("rselect"); }
int rgetpeername(int, void*, void*) { return nosys("rgetpeername"); }
int rgetsockname(int, void*, void*) { return nosys("rgetsockname"); }
int rsetsockopt(int, int, int, const void*, unsigned) { return nosys("rsetsockopt"); }
int rgetsockopt(int, int, int, void*, void*) { return nosys("rgetsockopt"); }
int rfcntl(int, int, ...) { return nosys("rfcntl"); }
off_t riomap(int, void*, size_t, int, int, off_t) { return nosys("riomap"); }
int riounmap(int, void*, size_t) { return nosys("riounmap"); }
size_t riowrite(int, const void*, size_t, off_t, int) {
  nosys("riowrite");
  return 0;
}

}  // extern "C"
