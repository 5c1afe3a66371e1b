#include "hca/event_queue.h"

#include <pthread.h>

#include <algorithm>
#include <string>

#include "common/cpu_affinity.h"
#include "hca/cq.h"

namespace srdma::hca {

EventQueue::EventQueue(std::uint32_t vector) : vector_(vector) {
  // Under mu_ so the thread (which starts by taking mu_) sees thread_id_.
  std::lock_guard lk(mu_);
  thread_ = std::thread([this] { run(); });
  thread_id_ = thread_.get_id();
  pin();
}

EventQueue::~EventQueue() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  work_.notify_all();
  idle_.notify_all();  // a drain() racing with destruction returns
  if (thread_.joinable()) thread_.join();
}

void EventQueue::pin() {
  // The vector-th CPU this process may run on (modulo their number).
  const int n = allowed_cpu_count();
  if (n <= 0) return;
  const int c = nth_allowed_cpu(static_cast<int>(vector_ % static_cast<std::uint32_t>(n)));
  if (pin_thread(thread_.native_handle(), c)) cpu_.store(c, std::memory_order_relaxed);
  std::string name = "srdma-eq" + std::to_string(vector_);
  name.resize(std::min<std::size_t>(name.size(), 15));  // the kernel's limit
  pthread_setname_np(thread_.native_handle(), name.c_str());
}

void EventQueue::attach(const Cq* cq) {
  std::lock_guard lk(cqs_mu_);
  cqs_.push_back(cq);
}

void EventQueue::detach(const Cq* cq) {
  std::lock_guard lk(cqs_mu_);
  if (std::erase(cqs_, cq) == 0) return;
  retired_cqes_ += cq->cqes_written();
  retired_completions_ += cq->cqes_polled();
}

std::uint64_t EventQueue::cqes() const {
  std::lock_guard lk(cqs_mu_);
  std::uint64_t n = retired_cqes_;
  for (const Cq* cq : cqs_) n += cq->cqes_written();
  return n;
}

std::uint64_t EventQueue::completions_handled() const {
  std::lock_guard lk(cqs_mu_);
  std::uint64_t n = retired_completions_;
  for (const Cq* cq : cqs_) n += cq->cqes_polled();
  return n;
}

void EventQueue::schedule(Cq* cq) {
  bool wake;
  {
    std::lock_guard lk(mu_);
    pending_.push_back(Pending{cq, ++seq_});
    // A thread that is not asleep looks at pending_ (under mu_) before it
    // sleeps again: only a sleeping one needs the futex wake.
    wake = sleeping_;
  }
  if (wake) work_.notify_one();
}

void EventQueue::schedule_at(Cq* cq, Clock::time_point when) {
  bool earliest;
  {
    std::lock_guard lk(mu_);
    timers_.push_back(Timer{when, cq, ++seq_});
    std::push_heap(timers_.begin(), timers_.end(), later);
    earliest = sleeping_ && timers_.front().cq == cq && timers_.front().when == when;
  }
  // Only a new earliest deadline changes how long a sleeping thread sleeps.
  if (earliest) work_.notify_one();
}

void EventQueue::cancel(Cq* cq) {
  std::unique_lock lk(mu_);
  std::erase_if(pending_, [cq](const Pending& p) { return p.cq == cq; });
  if (std::erase_if(timers_, [cq](const Timer& t) { return t.cq == cq; }) > 0)
    std::make_heap(timers_.begin(), timers_.end(), later);
  if (idle_waiters_ > 0) idle_.notify_all();  // a drain() may have waited for what went
  if (on_thread()) return;  // inside a handler: waiting would deadlock
  ++idle_waiters_;
  idle_.wait(lk, [&] { return current_ != cq; });
  --idle_waiters_;
}

bool EventQueue::busy_through(std::uint64_t seq, Timers timers, Clock::time_point now) const {
  if (current_ != nullptr && current_seq_ <= seq) return true;
  if (std::any_of(pending_.begin(), pending_.end(), [seq](const Pending& p) { return p.seq <= seq; })) return true;
  return std::any_of(timers_.begin(), timers_.end(), [&](const Timer& t) {
    return t.seq <= seq && (timers == Timers::kAll || t.when <= now);
  });
}

void EventQueue::drain(Timers timers) {
  if (on_thread()) return;  // inside a handler: waiting would deadlock
  std::unique_lock lk(mu_);
  const std::uint64_t through = seq_;
  // "Due" is fixed at the call: a timer that falls due later was not due then.
  const Clock::time_point now = Clock::now();
  ++idle_waiters_;
  idle_.wait(lk, [&] { return stop_ || !busy_through(through, timers, now); });
  --idle_waiters_;
}

void EventQueue::run() {
  std::unique_lock lk(mu_);
  while (!stop_) {
    // Due moderation timers become pending events (no clock read without
    // timers).
    if (!timers_.empty()) {
      const Clock::time_point now = Clock::now();
      while (!timers_.empty() && timers_.front().when <= now) {
        std::pop_heap(timers_.begin(), timers_.end(), later);
        pending_.push_back(Pending{timers_.back().cq, timers_.back().seq});
        timers_.pop_back();
      }
    }
    if (pending_.empty()) {
      sleeping_ = true;
      if (timers_.empty())
        work_.wait(lk);
      else
        work_.wait_until(lk, Clock::time_point(timers_.front().when));  // a copy: timers_ may grow
      sleeping_ = false;
      continue;
    }
    // One "interrupt": drain what is pending, one CQ at a time, so that
    // cancel() can remove entries between deliveries.
    std::uint64_t delivered = 0;
    while (!pending_.empty() && !stop_) {
      const Pending p = pending_.front();
      pending_.pop_front();
      Cq* cq = p.cq;
      current_ = cq;
      current_seq_ = p.seq;
      lk.unlock();
      const bool d = cq->try_deliver_event();
      lk.lock();
      current_ = nullptr;
      if (idle_waiters_ > 0) idle_.notify_all();
      if (d) {
        if (delivered++ == 0) interrupts_.fetch_add(1, std::memory_order_relaxed);
        events_.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
}

}  // namespace srdma::hca
