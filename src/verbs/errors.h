// How the verbs report a failure: libibverbs' conventions (NULL or -1 with
// errno, or the errno value returned), plus the reason on stderr when
// SRDMA_VERBS_DEBUG is set, since errno alone rarely says which argument.
#pragma once

#include <cerrno>
#include <string_view>

#include "srdma/status.h"

namespace srdma::verbs {

// Logs `reason` (under SRDMA_VERBS_DEBUG), sets errno, returns `code`.
int fail(const char* verb, int code, std::string_view reason);
inline int fail(const char* verb, const Error& e) { return fail(verb, e.code, e.reason); }

// For verbs that return a pointer: NULL with errno set.
template <class T>
T* fail_null(const char* verb, int code, std::string_view reason) {
  fail(verb, code, reason);
  return nullptr;
}
template <class T>
T* fail_null(const char* verb, const Error& e) {
  return fail_null<T>(verb, e.code, e.reason);
}

}  // namespace srdma::verbs
