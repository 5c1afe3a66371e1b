// Worker threads for the WORKQUEUE and UNBOUND_WORKQUEUE poll contexts (like
// the kernel's ib_comp_wq and ib_comp_unbound_wq): run queued work items,
// each tagged with the object it belongs to so that the object can cancel
// its items before it goes away.
//
// Invariants, the kernel's for a work_struct: a key is pending at most once
// (queueing it again while pending is a no-op, like queue_work() returning
// false) and never runs on two threads at once (an item queued while its
// key runs waits for that run to end), so an item may keep per-key state
// without a lock. Items run with no lock held, in queue order among the
// runnable ones. cancel(key) removes the key's pending item and waits until
// no thread is running it (unless called from that very item).
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

  // False when the key was already pending (the item is dropped).
  bool queue(const void* key, std::function<void()> item);
  void cancel(const void* key);

 private:
  void run();
  bool running(const void* key) const;  // mu_ held

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
