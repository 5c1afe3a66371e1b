#include "nvmf/clock.h"

namespace srdma::nvmf {
namespace {

class SteadyClock final : public Clock {
 public:
  time_point now() const override { return std::chrono::steady_clock::now(); }
  void wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, time_point deadline) const override {
    cv.wait_until(lock, deadline);
  }
};

}  // namespace

std::shared_ptr<Clock> Clock::steady() {
  static const std::shared_ptr<Clock> clock = std::make_shared<SteadyClock>();
  return clock;
}

std::uint64_t ManualClock::subscribe(std::function<void()> wake) {
  std::lock_guard lock(mu_);
  wakes_.emplace(next_id_, std::move(wake));
  return next_id_++;
}

void ManualClock::unsubscribe(std::uint64_t id) {
  std::lock_guard lock(mu_);  // waits for an advance() that is running the wake
  wakes_.erase(id);
}

void ManualClock::advance(duration d) {
  ticks_.fetch_add(d.count(), std::memory_order_acq_rel);
  std::lock_guard lock(mu_);
  for (auto& [id, wake] : wakes_) wake();
}

}  // namespace srdma::nvmf
