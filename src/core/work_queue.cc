#include "core/work_queue.h"

#include <algorithm>

#include "common/cpu_affinity.h"

namespace srdma::core {

WorkQueue::WorkQueue(unsigned threads, int cpu) {
  for (unsigned i = 0; i < std::max(threads, 1u); ++i) {
    threads_.emplace_back([this] { run(); });
    if (cpu >= 0) (void)pin_thread(threads_.back().native_handle(), cpu);  // best effort
  }
}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    items_.clear();
  }
  work_.notify_all();
  idle_.notify_all();
  for (auto& t : threads_) t.join();
}

bool WorkQueue::queue(const void* key, std::function<void()> item) {
  bool wake;
  {
    std::lock_guard lock(mu_);
    if (std::any_of(items_.begin(), items_.end(), [&](const Item& it) { return it.key == key; })) return false;
    items_.push_back(Item{key, ++seq_, std::move(item)});
    // A busy worker looks at items_ (under mu_) before it sleeps: only a
    // sleeping one needs the futex wake.
    wake = sleepers_ > 0;
  }
  if (wake) work_.notify_one();
  return true;
}

bool WorkQueue::running(const void* key) const {
  return std::any_of(running_.begin(), running_.end(), [&](const Running& r) { return r.key == key; });
}

void WorkQueue::cancel(const void* key) {
  std::unique_lock lock(mu_);
  std::erase_if(items_, [&](const Item& it) { return it.key == key; });
  if (waiters_ > 0) idle_.notify_all();  // a drain() may have waited for what went
  const auto self = std::this_thread::get_id();
  ++waiters_;
  idle_.wait(lock, [&] {
    return std::none_of(running_.begin(), running_.end(),
                        [&](const Running& r) { return r.key == key && r.thread != self; });
  });
  --waiters_;
}

void WorkQueue::drain() {
  std::unique_lock lock(mu_);
  const std::uint64_t through = seq_;
  const auto self = std::this_thread::get_id();
  ++waiters_;
  idle_.wait(lock, [&] {
    return stop_ ||
           (std::none_of(items_.begin(), items_.end(), [&](const Item& it) { return it.seq <= through; }) &&
            std::none_of(running_.begin(), running_.end(),
                         [&](const Running& r) { return r.seq <= through && r.thread != self; }));
  });
  --waiters_;
}

void WorkQueue::run() {
  std::unique_lock lock(mu_);
  const auto self = std::this_thread::get_id();
  for (;;) {
    if (stop_) return;
    // The first item whose key no thread is running. One that is skipped
    // here is picked up by the thread running its key when that run ends.
    const auto next = std::find_if(items_.begin(), items_.end(), [&](const Item& it) { return !running(it.key); });
    if (next == items_.end()) {
      ++sleepers_;
      work_.wait(lock);
      --sleepers_;
      continue;
    }
    Item item = std::move(*next);
    items_.erase(next);
    running_.push_back(Running{self, item.key, item.seq});
    lock.unlock();
    item.fn();
    lock.lock();
    std::erase_if(running_, [&](const Running& r) { return r.thread == self; });
    if (waiters_ > 0) idle_.notify_all();
  }
}

}  // namespace srdma::core
