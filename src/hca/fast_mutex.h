// A small mutex for the data path's short critical sections (a QP's queue
// locks, its inbox, a CQ's ring): an uncontended lock and unlock are one
// atomic instruction each, inline, where std::mutex costs two calls into
// pthreads. Contended waiters spin briefly, then sleep on the word (C++20
// atomic wait, a futex on Linux).
//
// States: 0 free, 1 locked, 2 locked with (possible) sleepers (Drepper,
// "Futexes are tricky", mutex #3). Acquire on lock, release on unlock, so it
// orders memory exactly like std::mutex; ThreadSanitizer sees the atomics.
// Meets Lockable (lock_guard, unique_lock with try_to_lock). Not recursive.
#pragma once

#include <atomic>
#include <cstdint>

namespace srdma::hca {

class FastMutex {
 public:
  FastMutex() = default;
  FastMutex(const FastMutex&) = delete;
  FastMutex& operator=(const FastMutex&) = delete;

  void lock() {
    std::uint32_t c = 0;
    if (state_.compare_exchange_strong(c, 1, std::memory_order_acquire, std::memory_order_relaxed)) [[likely]]
      return;
    lock_slow(c);
  }
  bool try_lock() {
    std::uint32_t c = 0;
    return state_.compare_exchange_strong(c, 1, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void unlock() {
    if (state_.exchange(0, std::memory_order_release) == 2) [[unlikely]]
      state_.notify_one();
  }

 private:
  [[gnu::noinline]] void lock_slow(std::uint32_t c) {
    for (int spin = 0; spin < 64; ++spin) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      c = 0;
      if (state_.load(std::memory_order_relaxed) == 0 &&
          state_.compare_exchange_weak(c, 1, std::memory_order_acquire, std::memory_order_relaxed))
        return;
    }
    // Mark sleepers present; whoever unlocks from 2 wakes one of us.
    if (c != 2) c = state_.exchange(2, std::memory_order_acquire);
    while (c != 0) {
      state_.wait(2, std::memory_order_relaxed);
      c = state_.exchange(2, std::memory_order_acquire);
    }
  }

  std::atomic<std::uint32_t> state_{0};
};

}  // namespace srdma::hca
