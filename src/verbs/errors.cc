#include "errors.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace srdma::verbs {

int fail(const char* verb, int code, std::string_view reason) {
  static const bool debug = std::getenv("SRDMA_VERBS_DEBUG") != nullptr;
  if (debug)
    std::fprintf(stderr, "softrdma: %s: %s: %.*s\n", verb, errno_name(code).c_str(), static_cast<int>(reason.size()),
                 reason.data());
  errno = code;
  return code;
}

}  // namespace srdma::verbs
