// A completion vector of the software device: an event queue and its
// "interrupt" thread (like an EQ with its MSI-X vector and IRQ handler).
//
// A CQ that has decided to raise a completion event calls schedule() (or
// schedule_at() for a moderation timer); the vector's thread wakes, calls
// Cq::try_deliver_event(), which runs the CQ's event handler on this thread.
// The thread is pinned to one CPU where possible (the vector-th CPU of the
// process's affinity mask, modulo its size); failure to pin is ignored.
//
// Invariants / memory ordering: `pending_`, `timers_`, `seq_`, `current_`,
// `stop_`, `sleeping_` and `idle_waiters_` are guarded by `mu_`; the thread never holds `mu_` while it runs a
// CQ's handler, and never takes a CQ's lock while holding `mu_`, so a CQ may
// call schedule() with its own lock held (lock order: Cq::mu_ -> mu_). A
// scheduled entry is only a hint: the CQ re-checks under its own lock
// whether an event is due, so stale or duplicate entries deliver nothing.
// Counters are relaxed atomics (statistics only; they order nothing).
// Thread safety: every member function may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace srdma::hca {

class Cq;

class EventQueue {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts the vector's thread (named "srdma-eq<vector>").
  explicit EventQueue(std::uint32_t vector);
  // Stops and joins the thread; events still pending are dropped.
  // REQUIRES: not called from the vector's own thread (from a handler).
  ~EventQueue();

  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;

  std::uint32_t vector() const { return vector_; }
  // The CPU the thread is pinned to, or -1 if pinning failed.
  int cpu() const { return cpu_.load(std::memory_order_relaxed); }
  // True when called on this vector's thread (i.e. from a CQ's handler).
  bool on_thread() const { return std::this_thread::get_id() == thread_id_; }

  // `cq` has an event to deliver now: wakes the thread.
  // REQUIRES: `cq` stays alive until cancel(cq) returns.
  void schedule(Cq* cq);
  // `cq` may have an event due at `when` (moderation timer).
  void schedule_at(Cq* cq, Clock::time_point when);
  // Removes every pending entry for `cq` and waits until the thread is not
  // inside `cq`'s handler, so `cq` can be destroyed afterwards. Called on
  // the vector's own thread (from a handler) it does not wait.
  // REQUIRES: nothing schedules `cq` again afterwards.
  void cancel(Cq* cq);

  // Which entries drain() waits for besides the events scheduled now.
  enum class Timers {
    kDue,  // moderation timers whose deadline has passed: due events
    kAll,  // every moderation timer set before the call: waits out its deadline
  };
  // Quiesce: returns once every event scheduled before this call (and the
  // timers `timers` names) has been delivered, i.e. its CQ's handler has
  // returned, or cancelled. Events scheduled during the wait, by handlers
  // or other threads, are not waited for. So after a push that could have
  // raised an event, drain() and then "no handler ran" is a proof, not a
  // guess. Called on the vector's own thread it returns at once (waiting
  // would deadlock).
  void drain(Timers timers = Timers::kDue);

  // The CQs on this vector, for the counters below: a CQ attaches itself
  // when built and detaches when destroyed (its counts stay in the totals).
  // The CQs count under their own locks; the vector sums on demand, so a
  // push or poll touches no line shared with other CQs or threads.
  void attach(const Cq* cq);
  void detach(const Cq* cq);

  // Wake-ups of the thread that delivered at least one event.
  std::uint64_t interrupts() const { return interrupts_.load(std::memory_order_relaxed); }
  // Completion events delivered (handler calls).
  std::uint64_t events() const { return events_.load(std::memory_order_relaxed); }
  // CQEs written to CQs on this vector.
  std::uint64_t cqes() const;
  // CQEs polled from CQs on this vector.
  std::uint64_t completions_handled() const;

 private:
  // Every entry carries the sequence number of its schedule call, so that
  // drain() can tell entries older than itself from newer ones.
  struct Pending {
    Cq* cq;
    std::uint64_t seq;
  };
  struct Timer {
    Clock::time_point when;
    Cq* cq;
    std::uint64_t seq;
  };
  // Min-heap order on `when`.
  static bool later(const Timer& a, const Timer& b) { return a.when > b.when; }

  void run();
  void pin();
  // mu_ held: an entry scheduled at or before `seq` is still to deliver.
  bool busy_through(std::uint64_t seq, Timers timers, Clock::time_point now) const;

  const std::uint32_t vector_;
  std::atomic<int> cpu_{-1};

  std::mutex mu_;                 // guards pending_, timers_, current_, stop_
  std::condition_variable work_;  // pending_ or timers_ changed, or stop_
  std::condition_variable idle_;  // current_ changed (for cancel and drain)
  std::deque<Pending> pending_;   // events to deliver now, in order
  std::vector<Timer> timers_;     // heap of moderation deadlines
  std::uint64_t seq_ = 0;         // schedule calls so far
  Cq* current_ = nullptr;         // the CQ whose handler is running
  std::uint64_t current_seq_ = 0; // the entry it runs for
  bool stop_ = false;
  bool sleeping_ = false;         // the thread waits on work_ (notify only then)
  int idle_waiters_ = 0;          // threads waiting on idle_ in cancel() or drain()

  std::atomic<std::uint64_t> interrupts_{0};
  std::atomic<std::uint64_t> events_{0};

  mutable std::mutex cqs_mu_;     // guards cqs_ and the retired counts
  std::vector<const Cq*> cqs_;    // attached CQs
  std::uint64_t retired_cqes_ = 0, retired_completions_ = 0;  // of detached CQs

  std::thread thread_;              // last: started once everything above is built
  std::thread::id thread_id_;       // written before the thread can run a handler
};

}  // namespace srdma::hca
