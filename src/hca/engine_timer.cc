#include "hca/engine_timer.h"

#include <sys/prctl.h>

#include <future>

namespace srdma::hca {

EngineTimer::EngineTimer(const EngineClock& clock) : clock_(clock), thread_([this] { run(); }) {}

void EngineTimer::poke() {
  { std::lock_guard lock(mu_); }  // a thread about to sleep has seen the old time and will get this notify
  cv_.notify_all();
}

EngineTimer::~EngineTimer() { stop(); }

void EngineTimer::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EngineTimer::schedule(std::weak_ptr<Qp> qp, Clock::time_point at) {
  bool wake;
  {
    std::lock_guard lock(mu_);
    auto it = tasks_.emplace(at, [qp = std::move(qp), at] {
      if (auto q = qp.lock()) q->on_timer(at);
    });
    // A sleeping thread needs waking only for a new first deadline; a
    // running one looks at tasks_ (under mu_) before it sleeps again.
    wake = sleeping_ && it == tasks_.begin();
  }
  if (wake) cv_.notify_one();
}

void EngineTimer::post(std::function<void()> task) { schedule_task(Clock::time_point{}, std::move(task)); }

void EngineTimer::schedule_task(Clock::time_point at, std::function<void()> task) {
  bool wake;
  {
    std::lock_guard lock(mu_);
    auto it = tasks_.emplace(at, std::move(task));
    wake = sleeping_ && it == tasks_.begin();
  }
  if (wake) cv_.notify_one();
}

void EngineTimer::drain() {
  // Tasks run in deadline order and a posted one comes first: a task due
  // now runs after everything due earlier and what that posted.
  std::promise<void> ran;
  std::future<void> done = ran.get_future();
  bool wake;
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    auto it = tasks_.emplace(clock_.now(), [&ran] { ran.set_value(); });
    wake = sleeping_ && it == tasks_.begin();
  }
  if (wake) cv_.notify_one();
  done.wait();
}

void EngineTimer::run() {
  // Deadlines here are tens of microseconds apart (a tail-loss probe on the
  // in-process link): the kernel's default 50 us of timer slack would be
  // most of them. (Per thread; the call cannot fail with these arguments.)
  (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (tasks_.empty()) {
      sleeping_ = true;
      cv_.wait(lock);
      sleeping_ = false;
      continue;
    }
    auto first = tasks_.begin();
    if (first->first > clock_.now()) {
      sleeping_ = true;
      if (clock_.is_manual())
        cv_.wait(lock);  // poke() when the clock moves
      else
        cv_.wait_until(lock, Clock::time_point(first->first));  // a copy: the node may go
      sleeping_ = false;
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
