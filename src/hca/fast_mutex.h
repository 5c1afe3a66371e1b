// A small mutex for the data path's short critical sections (a QP's queue
// locks, its inbox, a CQ's consumer lock): an uncontended lock is one atomic
// instruction, inline, and an unlock is a plain store, where std::mutex
// costs two calls into pthreads and two locked instructions. Contended
// waiters spin briefly, then sleep on the word (a futex).
//
// The unlock's store and its check for sleepers are a Dekker pair with the
// sleeper's announcement: the unlocker runs `store state 0; light fence;
// load sleepers`, a waiter `sleepers++; heavy fence; load state` before it
// sleeps (common/asymmetric_fence.h). So either the waiter sees the lock
// free, or the unlocker sees the waiter and wakes it; the cost of the fence
// falls on the thread that is about to sleep anyway. The sleep and the
// wake are the futex system calls themselves: the kernel compares the word
// under its own lock, so a waiter whose fence saw the lock held cannot
// miss a wake issued after it (std::atomic::wait's notify would add a
// check of its own, a load not ordered after our plain store).
//
// Acquire on lock, release on unlock, so it orders memory exactly like
// std::mutex; ThreadSanitizer sees the atomics. Meets Lockable (lock_guard,
// unique_lock with try_to_lock). Not recursive.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "common/asymmetric_fence.h"
#include "common/thread_annotations.h"

namespace srdma::hca {

class CAPABILITY("mutex") FastMutex {
 public:
  FastMutex() = default;
  FastMutex(const FastMutex&) = delete;
  FastMutex& operator=(const FastMutex&) = delete;

  void lock() ACQUIRE() {
    if (try_lock()) [[likely]]
      return;
    lock_slow();
  }
  bool try_lock() TRY_ACQUIRE(true) {
    std::uint32_t c = 0;
    return state_.compare_exchange_strong(c, 1, std::memory_order_acquire, std::memory_order_relaxed);
  }
  // Tells clang's analysis that this thread holds it, where the analysis
  // cannot see it taken (a lambda run inside the lock; a thread that knows
  // by other means, Qp::SendSideHere). Checks nothing at run time.
  void assert_held() const ASSERT_CAPABILITY(this) {}
  // Whether some thread holds it (a snapshot, for a Dekker pair's check).
  bool locked() const { return state_.load(std::memory_order_relaxed) != 0; }
  // Threads asleep (or about to sleep) waiting for it: a snapshot, which
  // tests use to know that a thread has reached the lock and waits there.
  std::uint32_t sleepers() const { return sleepers_.load(std::memory_order_relaxed); }
  void unlock() RELEASE() {
    state_.store(0, std::memory_order_release);
    asymmetric_light_fence();
    if (sleepers_.load(std::memory_order_relaxed) != 0) [[unlikely]]
      wake_one();
  }

 private:
  [[gnu::noinline]] void lock_slow() ACQUIRE() {
    for (int spin = 0; spin < 64; ++spin) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      if (state_.load(std::memory_order_relaxed) == 0 && try_lock()) return;
    }
    sleepers_.fetch_add(1, std::memory_order_relaxed);
    asymmetric_heavy_fence();
    while (!try_lock()) futex(FUTEX_WAIT_PRIVATE, 1);  // returns at once unless the word is still 1
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
  [[gnu::noinline, gnu::cold]] void wake_one() { futex(FUTEX_WAKE_PRIVATE, 1); }
  void futex(int op, std::uint32_t val) {
    static_assert(sizeof(state_) == sizeof(std::uint32_t) && std::atomic<std::uint32_t>::is_always_lock_free);
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&state_), op, val, nullptr, nullptr, 0);
  }

  std::atomic<std::uint32_t> state_{0};     // 0 free, 1 held
  std::atomic<std::uint32_t> sleepers_{0};  // threads past spinning, in lock_slow
};

// A FastMutex held for a scope (std::lock_guard, which clang's analysis
// cannot see take the lock).
class SCOPED_CAPABILITY FastLock {
 public:
  explicit FastLock(FastMutex& m) ACQUIRE(m) : m_(m) { m_.lock(); }
  ~FastLock() RELEASE() { m_.unlock(); }
  FastLock(const FastLock&) = delete;
  FastLock& operator=(const FastLock&) = delete;

 private:
  FastMutex& m_;
};

// A FastMutex held from here until unlock() or the scope's end
// (std::unique_lock's use here).
class SCOPED_CAPABILITY FastUniqueLock {
 public:
  explicit FastUniqueLock(FastMutex& m) ACQUIRE(m) : m_(m) { m_.lock(); }
  ~FastUniqueLock() RELEASE() {
    if (held_) m_.unlock();
  }
  FastUniqueLock(const FastUniqueLock&) = delete;
  FastUniqueLock& operator=(const FastUniqueLock&) = delete;
  void unlock() RELEASE() {
    m_.unlock();
    held_ = false;
  }

 private:
  FastMutex& m_;
  bool held_ = true;
};

}  // namespace srdma::hca
