// Asynchronous events of the device (like ib_event / ibv_async_event) and
// their dispatcher.
//
// The device raises an event (a CQ overrun, a QP that hit a fatal error,
// the last WQE of an SRQ-attached QP, a port coming up, the device dying);
// the dispatcher hands it to the registered handler on its own thread, so a
// handler may call verbs (modify_qp, destroy_cq ...) without deadlocking on
// the locks held where the event was raised.
//
// Invariants / memory ordering: `queue_`, `handler_`, `raised_`, `handled_`
// and `stop_` are guarded by `mu_`. Events are handled one at a time, in the
// order raised, with `mu_` released around the handler. raised_ counts
// events queued, handled_ events whose handler returned (or that had no
// handler); flush() waits for handled_ to reach the raised_ it saw. Per-type
// counters are relaxed atomics.
// Thread safety: every member function may be called from any thread;
// flush() from the handler itself returns at once (it cannot wait for
// itself).
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>

#include "srdma/async_event.h"

namespace srdma::hca {

// AsyncEventType and AsyncEvent are public (srdma/async_event.h).
using srdma::AsyncEvent;
using srdma::AsyncEventType;
using srdma::kAsyncEventTypes;

class AsyncEventDispatcher {
 public:
  using Handler = std::function<void(const AsyncEvent&)>;

  AsyncEventDispatcher();
  // Handles the events still queued, then stops and joins the thread.
  // REQUIRES: not called from the handler.
  ~AsyncEventDispatcher();

  AsyncEventDispatcher(const AsyncEventDispatcher&) = delete;
  AsyncEventDispatcher& operator=(const AsyncEventDispatcher&) = delete;

  // Replaces the handler; events handled afterwards go to it. An empty
  // handler drops events (they are still counted).
  void set_handler(Handler h);

  // Queues `e` for the handler; never blocks on the handler.
  void raise(AsyncEvent e);

  // Waits until every event raised before the call was handled.
  void flush();

  // Events of type `t` raised.
  std::uint64_t count(AsyncEventType t) const {
    return counts_[static_cast<std::size_t>(t)].load(std::memory_order_relaxed);
  }

 private:
  void run();

  mutable std::mutex mu_;  // guards queue_, handler_, raised_, handled_, stop_
  std::condition_variable work_;  // queue_ non-empty or stop_
  std::condition_variable done_;  // handled_ advanced
  std::deque<AsyncEvent> queue_;
  std::shared_ptr<const Handler> handler_;
  std::uint64_t raised_ = 0, handled_ = 0;
  bool stop_ = false;
  std::array<std::atomic<std::uint64_t>, kAsyncEventTypes> counts_{};

  std::thread thread_;
  std::thread::id thread_id_;
};

}  // namespace srdma::hca
