// The device's engine thread: runs QP timers (RNR waits, transport
// timeouts) and deferred kicks (work that must not run in the thread that
// found it, e.g. moving QPs to ERR from inside a CQ push).
//
// Invariants: tasks run in deadline order on one thread, never under a
// caller's lock. A QP is held by weak_ptr: a destroyed QP's timers vanish.
// Thread-safe.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "hca/engine_clock.h"
#include "hca/qp.h"

namespace srdma::hca {

class EngineTimer {
 public:
  // Deadlines are read on `clock` (it outlives the timer). With a manual
  // clock the thread sleeps until poke() (ManualClock::advance calls it).
  explicit EngineTimer(const EngineClock& clock);
  ~EngineTimer();  // stop()s; pending tasks are dropped

  // Stops and joins the thread; idempotent. After it returns no task runs
  // (schedule/post still queue, harmlessly). A running task may schedule
  // again through its owner, so the owner stops the timer before it lets
  // go of the pointer.
  void stop();

  // Looks at the deadlines again (the clock moved).
  void poke();

  // Kicks `qp` at `at` (or soon after).
  void schedule(std::weak_ptr<Qp> qp, Clock::time_point at);
  // Runs `task` on the engine thread as soon as possible.
  void post(std::function<void()> task);
  // Runs `task` on the engine thread at `at` (after what is due before it).
  void schedule_task(Clock::time_point at, std::function<void()> task);
  // Returns once every task due by now (and what those posted) has run.
  // Not from a task (it waits for the engine thread).
  void drain();

 private:
  void run();

  const EngineClock& clock_;

  std::mutex mu_;  // guards tasks_, stop_ and sleeping_
  std::condition_variable cv_;
  std::multimap<Clock::time_point, std::function<void()>> tasks_;
  bool stop_ = false;
  bool sleeping_ = false;  // the thread waits on cv_ (notify only then)
  std::thread thread_;
};

}  // namespace srdma::hca
