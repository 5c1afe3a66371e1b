// How librdmacm's calls report a failure: -1 with errno (or NULL), as
// rdma-core's librdmacm does, plus the reason on stderr under
// SRDMA_VERBS_DEBUG (errno alone rarely says which argument).
#pragma once

#include <cerrno>

namespace srdma::rdmacm {

// Logs `reason` (under SRDMA_VERBS_DEBUG), sets errno to `code`, returns -1.
int fail(const char* call, int code, const char* reason);

template <class T>
T* fail_null(const char* call, int code, const char* reason) {
  fail(call, code, reason);
  return nullptr;
}

}  // namespace srdma::rdmacm
