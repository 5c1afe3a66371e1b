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
// no thread is running it (unless called from that very item). drain()
// waits until every item queued before it has run (or was cancelled).
// Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
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
  // Quiesce (like flush_workqueue()): returns once every item queued before
  // this call has finished running or was cancelled. Items queued during the
  // wait, by items or other threads, are not waited for. Called from an item
  // it does not wait for that item itself (it waits for the others).
  void drain();

 private:
  // seq: the number of the queue() call, so that drain() can tell the items
  // older than itself from newer ones.
  struct Item {
    const void* key;
    std::uint64_t seq;
    std::function<void()> fn;
  };
  struct Running {
    std::thread::id thread;
    const void* key;
    std::uint64_t seq;
  };

  void run();
  bool running(const void* key) const;  // mu_ held

  std::mutex mu_;  // guards everything below but threads_
  std::condition_variable work_, idle_;
  std::deque<Item> items_;
  std::vector<Running> running_;  // what each busy thread runs
  std::uint64_t seq_ = 0;         // items queued so far
  bool stop_ = false;
  int sleepers_ = 0;    // workers waiting on work_ (queue() signals only then)
  int waiters_ = 0;     // cancel() and drain() calls waiting on idle_
  std::vector<std::thread> threads_;
};

}  // namespace srdma::core
