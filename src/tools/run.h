// `srdma run [--ip ADDR] -- PROGRAM ARGS...`: runs an unmodified verbs
// program on softrdma's libibverbs.so.1 (the drop-in, src/verbs) by putting
// the drop-in's directory first in LD_LIBRARY_PATH, then exec'ing it.
#pragma once

#include <string>
#include <vector>

#include "srdma/status.h"

namespace srdma::tools {

// The directories that may hold the drop-in, in the order they are tried:
// <dir of /proc/self/exe>/../lib/softrdma and ../<CMAKE_INSTALL_LIBDIR>/softrdma
// (an installed srdma), then the build tree's lib/softrdma.
std::vector<std::string> dropin_search_dirs();

// The first of dropin_search_dirs() that holds libibverbs.so.1; ENOENT
// naming every directory searched if none does.
Result<std::string> find_dropin_dir();

// Sets LD_LIBRARY_PATH (the drop-in's directory first) and, with `ip`,
// SRDMA_ADDR, then execvp()s argv[0]. Returns only on failure: EINVAL for a
// bad `ip` or an empty argv, ENOENT for no drop-in (the caller exits 1),
// or the exec's errno (the caller prints "srdma run: PROGRAM: <strerror>"
// and exits 127).
struct RunFailure {
  Error error;
  bool exec_failed = false;  // the environment was set, execvp() failed
};
RunFailure run_program(const std::string& ip, const std::vector<std::string>& argv);

}  // namespace srdma::tools
