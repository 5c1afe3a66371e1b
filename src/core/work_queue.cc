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
  {
    std::lock_guard lock(mu_);
    items_.emplace_back(key, std::move(item));
  }
  work_.notify_one();
}

void WorkQueue::cancel(const void* key) {
  std::unique_lock lock(mu_);
  std::erase_if(items_, [&](const auto& it) { return it.first == key; });
  const auto self = std::this_thread::get_id();
  idle_.wait(lock, [&] {
    return std::none_of(running_.begin(), running_.end(),
                        [&](const auto& r) { return r.second == key && r.first != self; });
  });
}

void WorkQueue::run() {
  std::unique_lock lock(mu_);
  const auto self = std::this_thread::get_id();
  for (;;) {
    work_.wait(lock, [&] { return stop_ || !items_.empty(); });
    if (stop_) return;
    auto [key, item] = std::move(items_.front());
    items_.pop_front();
    running_.emplace_back(self, key);
    lock.unlock();
    item();
    lock.lock();
    std::erase_if(running_, [&](const auto& r) { return r.first == self; });
    idle_.notify_all();
  }
}

}  // namespace srdma::core
