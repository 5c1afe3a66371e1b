#include "errors.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace srdma::rdmacm {

int fail(const char* call, int code, const char* reason) {
  static const bool debug = std::getenv("SRDMA_VERBS_DEBUG") != nullptr;
  if (debug) std::fprintf(stderr, "softrdma: %s: %s: %s\n", call, std::strerror(code), reason);
  errno = code;
  return -1;
}

}  // namespace srdma::rdmacm
