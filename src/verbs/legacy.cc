// The historical exports other rdma-core libraries still import (librdmacm
// imports the sysfs and kernel-struct helpers): there is no sysfs device
// and no kernel ABI, so the sysfs reads fail with ENOENT and the kernel
// copies clear their destination. L2 resolution is not supported
// (multicast is multicast.cc's).
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>

#include "errors.h"

using namespace srdma::verbs;

extern "C" {

const char* ibv_get_sysfs_path(void) { return "/sys"; }

int ibv_read_sysfs_file(const char*, const char*, char*, size_t) {
  errno = ENOENT;
  return -1;
}

void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, const void*) {
  if (dst) std::memset(dst, 0, sizeof *dst);
}
void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, const void*) {
  if (dst) std::memset(dst, 0, sizeof *dst);
}
void ibv_copy_path_rec_from_kern(void*, const void*) {}
void ibv_copy_path_rec_to_kern(void*, const void*) {}

int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, std::uint8_t[6], std::uint16_t*) {
  return fail("ibv_resolve_eth_l2_from_gid", EOPNOTSUPP, "RoCE over UDP sockets has no L2 to resolve");
}

}  // extern "C"
