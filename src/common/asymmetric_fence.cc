#include "common/asymmetric_fence.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace srdma {
namespace {

bool register_membarrier() {
  const long cmds = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (cmds < 0 || (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
  return syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

}  // namespace

namespace detail {

bool decide_membarrier() {
  // Decided once (a thread-safe static), before any light fence can pair
  // with a heavy one: both sides ask first, and the answer never changes.
  static const bool registered = [] {
    const bool r = register_membarrier();
    membarrier_state.store(r ? 1 : -1, std::memory_order_relaxed);
    return r;
  }();
  return registered;
}

}  // namespace detail

void asymmetric_heavy_fence() {
  // Once registered the command does not fail (EPERM means unregistered);
  // the fence covers a process where registration did not happen.
  if (!asymmetric_fence_is_membarrier() || syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace srdma
