// Worker threads for the WORKQUEUE and UNBOUND_WORKQUEUE poll contexts (like
// the kernel's ib_comp_wq and ib_comp_unbound_wq): run queued work items,
// each tagged with the object it belongs to so that the object can cancel
// its items before it goes away.
//
// Invariants: items run one at a time per thread, in queue order, with no
// lock held; cancel(key) removes the key's pending items and waits until no
// thread is running one (unless called from that very item).
// Thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace srdma::core {

class WorkQueue {
 public:
  // `threads` workers; cpu >= 0 pins them there (a vector-bound queue).
  WorkQueue(unsigned threads, int cpu);
  ~WorkQueue();  // drops pending items, joins

  void queue(const void* key, std::function<void()> item);
  void cancel(const void* key);

 private:
  void run();

  std::mutex mu_;  // guards everything below but threads_
  std::condition_variable work_, idle_;
  std::deque<std::pair<const void*, std::function<void()>>> items_;
  std::vector<std::pair<std::thread::id, const void*>> running_;  // what each busy thread runs
  bool stop_ = false;
  int sleepers_ = 0;    // workers waiting on work_ (queue() signals only then)
  int cancellers_ = 0;  // cancel() calls waiting on idle_
  std::vector<std::thread> threads_;
};

}  // namespace srdma::core
