// An asymmetric store->load fence (as in folly's asymmetricLightBarrier /
// asymmetricHeavyBarrier): the frequent side of a Dekker-style handshake
// pays a compiler barrier, the rare side a membarrier(2) system call, which
// runs a full memory barrier on every thread of the process that is running
// (a thread that is not passes through one when it is switched in).
//
// Pairing rule: if thread A runs `store x; light_fence(); load y` and thread
// B runs `store y; heavy_fence(); load x`, at least one of them sees the
// other's store. Where membarrier's private expedited command is not
// available, both sides are seq_cst fences.
#pragma once

#include <atomic>

namespace srdma {

namespace detail {
// 0 until decided, then 1 (membarrier registered) or -1 (fences on both sides).
inline std::atomic<int> membarrier_state{0};
bool decide_membarrier();
}  // namespace detail

// Registers the process for membarrier on first use (once); inline because
// every light fence asks.
inline bool asymmetric_fence_is_membarrier() {
  const int s = detail::membarrier_state.load(std::memory_order_relaxed);
  if (s != 0) [[likely]]
    return s > 0;
  return detail::decide_membarrier();
}

inline void asymmetric_light_fence() {
  if (asymmetric_fence_is_membarrier()) [[likely]]
    std::atomic_signal_fence(std::memory_order_seq_cst);  // the compiler keeps the order
  else
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

void asymmetric_heavy_fence();

}  // namespace srdma
