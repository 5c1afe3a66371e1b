// `srdma --version`: softrdma's version, the git commit srdma was built
// from, and the ABI the libibverbs and librdmacm drop-ins implement (their
// library versions and symbol version nodes, as src/verbs and src/rdmacm
// declare them). cmake/version.cmake makes what this reads.
#pragma once

#include <string>

namespace srdma::tools {

// "0.1": the project's version.
std::string version_number();

// The lines `srdma --version` prints (no final newline).
std::string version_text();

}  // namespace srdma::tools
