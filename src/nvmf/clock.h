// The time the NVMe-oF timers read: KATO enforcement on the target, Keep
// Alive and I/O timeouts on the host. The default is steady_clock; a test
// passes a ManualClock and moves time itself, so timer paths run without
// real seconds and without racing a real deadline.
//
// A timer thread waits with wait_until() on its own condition variable and
// re-reads now() whenever it wakes (wakes may be spurious). A clock that
// moves by other means than the passing of time (ManualClock::advance)
// wakes such a thread through the callback the thread's owner subscribed:
// the owner's callback takes the owner's mutex and notifies its condition
// variable, so a wake between the thread's now() and its wait is not lost.
// Lock order: the clock's mutex -> the owner's mutex; now() takes no lock.
// Thread safety: every member may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

namespace srdma::nvmf {

class Clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;

  virtual ~Clock() = default;
  virtual time_point now() const = 0;
  // Blocks on `cv` (`lock` held, as for cv.wait) until notified or until
  // `deadline` on this clock may have passed; the caller re-checks now().
  virtual void wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                          time_point deadline) const = 0;
  // `wake` runs (with no lock of the subscriber held) whenever the time
  // jumps; steady time never jumps, so the default does nothing. Returns an
  // id for unsubscribe(), after which `wake` no longer runs.
  // REQUIRES: not called with the mutex `wake` takes held.
  virtual std::uint64_t subscribe(std::function<void()> wake) {
    (void)wake;
    return 0;
  }
  virtual void unsubscribe(std::uint64_t id) { (void)id; }

  // The process-wide steady clock (the default of every option).
  static std::shared_ptr<Clock> steady();
};

// Time that moves only when a test says so.
class ManualClock final : public Clock {
 public:
  time_point now() const override { return time_point(duration(ticks_.load(std::memory_order_acquire))); }
  // Waits for a notify only: time here moves by advance(), which notifies.
  void wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, time_point deadline) const override {
    if (now() < deadline) cv.wait(lock);
  }
  std::uint64_t subscribe(std::function<void()> wake) override;
  void unsubscribe(std::uint64_t id) override;

  // Moves time forward by `d` and wakes every subscriber: when it returns,
  // every timer thread has been told (it may still be on its way to look).
  void advance(duration d);

 private:
  std::atomic<duration::rep> ticks_{0};
  std::mutex mu_;  // guards wakes_ and next_id_; held while the wakes run
  std::map<std::uint64_t, std::function<void()>> wakes_;
  std::uint64_t next_id_ = 1;
};

}  // namespace srdma::nvmf
