// The time the transport and RNR timers run on. By default the real
// steady clock; a test installs a ManualClock and advances it by hand, and
// the engine timer runs what fell due, so timer paths (retry exceeded, RNR
// waits) run without real seconds passing and without sleeps.
//
// Thread safety: now() and advance() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <vector>

namespace srdma::hca {

using Clock = std::chrono::steady_clock;

class ManualClock {
 public:
  explicit ManualClock(Clock::time_point start = Clock::time_point{} + std::chrono::hours(1))
      : now_ns_(start.time_since_epoch().count()) {}
  Clock::time_point now() const { return Clock::time_point(Clock::duration(now_ns_.load(std::memory_order_acquire))); }
  // Moves time forward and wakes every timer that runs on this clock.
  void advance(Clock::duration d) {
    now_ns_.fetch_add(d.count(), std::memory_order_acq_rel);
    std::vector<std::function<void()>> wake;
    {
      std::lock_guard lock(mu_);
      wake = listeners_;
    }
    for (auto& f : wake) f();
  }
  // `f` runs after every advance (the engine timer's wake-up).
  void on_advance(std::function<void()> f) {
    std::lock_guard lock(mu_);
    listeners_.push_back(std::move(f));
  }

 private:
  std::atomic<Clock::rep> now_ns_;
  std::mutex mu_;  // guards listeners_
  std::vector<std::function<void()>> listeners_;
};

// What the engine reads: the steady clock, or a ManualClock when one is
// installed (a test). One predictable branch per read.
class EngineClock {
 public:
  Clock::time_point now() const {
    if (const ManualClock* m = manual_.load(std::memory_order_acquire)) [[unlikely]]
      return m->now();
    return Clock::now();
  }
  bool is_manual() const { return manual_.load(std::memory_order_acquire) != nullptr; }
  // REQUIRES: `m` outlives the device; set before the device's first QP.
  void use(ManualClock* m) { manual_.store(m, std::memory_order_release); }

 private:
  std::atomic<ManualClock*> manual_{nullptr};
};

}  // namespace srdma::hca
