#include "core/work_queue.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>

namespace srdma::core {

WorkQueue::WorkQueue(unsigned threads, int cpu) {
  for (unsigned i = 0; i < std::max(threads, 1u); ++i) {
    threads_.emplace_back([this] { run(); });
    if (cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      (void)pthread_setaffinity_np(threads_.back().native_handle(), sizeof set, &set);  // best effort
    }
  }
}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    items_.clear();
  }
  work_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkQueue::queue(const void* key, std::function<void()> item) {
  bool wake;
  {
    std::lock_guard lock(mu_);
    items_.emplace_back(key, std::move(item));
    // A busy worker looks at items_ (under mu_) before it sleeps: only a
    // sleeping one needs the futex wake.
    wake = sleepers_ > 0;
  }
  if (wake) work_.notify_one();
}

void WorkQueue::cancel(const void* key) {
  std::unique_lock lock(mu_);
  std::erase_if(items_, [&](const auto& it) { return it.first == key; });
  const auto self = std::this_thread::get_id();
  ++cancellers_;
  idle_.wait(lock, [&] {
    return std::none_of(running_.begin(), running_.end(),
                        [&](const auto& r) { return r.second == key && r.first != self; });
  });
  --cancellers_;
}

void WorkQueue::run() {
  std::unique_lock lock(mu_);
  const auto self = std::this_thread::get_id();
  for (;;) {
    if (!stop_ && items_.empty()) {
      ++sleepers_;
      work_.wait(lock, [&] { return stop_ || !items_.empty(); });
      --sleepers_;
    }
    if (stop_) return;
    auto [key, item] = std::move(items_.front());
    items_.pop_front();
    running_.emplace_back(self, key);
    lock.unlock();
    item();
    lock.lock();
    std::erase_if(running_, [&](const auto& r) { return r.first == self; });
    if (cancellers_ > 0) idle_.notify_all();
  }
}

}  // namespace srdma::core
