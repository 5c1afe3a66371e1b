#include "tools/version.h"

#include <fmt/format.h>

#include "tools/git_commit.h"    // generated at each build (cmake/git_commit.cmake)
#include "tools/version_info.h"  // generated at configure time (cmake/version.cmake)

namespace srdma::tools {

std::string version_number() { return SRDMA_VERSION; }

std::string version_text() {
  return fmt::format("srdma {} (softrdma), git {}\n{}", SRDMA_VERSION, SRDMA_GIT_COMMIT, SRDMA_DROPIN_ABI);
}

}  // namespace srdma::tools
