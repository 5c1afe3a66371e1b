#include "hca/engine_timer.h"

namespace srdma::hca {

EngineTimer::EngineTimer() : thread_([this] { run(); }) {}

EngineTimer::~EngineTimer() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void EngineTimer::schedule(std::weak_ptr<Qp> qp, Clock::time_point at) {
  {
    std::lock_guard lock(mu_);
    tasks_.emplace(at, [qp = std::move(qp)] {
      if (auto q = qp.lock()) q->on_timer();
    });
  }
  cv_.notify_one();
}

void EngineTimer::post(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    tasks_.emplace(Clock::time_point{}, std::move(task));
  }
  cv_.notify_one();
}

void EngineTimer::run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (tasks_.empty()) {
      cv_.wait(lock);
      continue;
    }
    auto first = tasks_.begin();
    if (first->first > Clock::now()) {
      cv_.wait_until(lock, first->first);
      continue;
    }
    auto task = std::move(first->second);
    tasks_.erase(first);
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace srdma::hca
