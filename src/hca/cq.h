// A completion queue of the software device, with its arming state, its
// moderation and its completion-vector binding.
//
// Producer side (the engine's completer and responder): push(). Consumer
// side: poll(), req_notify(). A CQ never overwrites an unread CQE: a push
// into a full CQ fails, the CQ enters the error state, and the owner (the
// device) raises a CQ-error async event and moves the CQ's QPs to ERR; it
// learns of the overrun through the overrun handler (set_overrun_handler),
// called once, on the pushing thread, outside the CQ's lock.
//
// Completion events (IBA 11.4.2.2, o11-5.x): req_notify arms the CQ; the
// first qualifying CQE pushed afterwards (any CQE for NOTIFY_NEXT_COMP; a
// solicited or error CQE for NOTIFY_SOLICITED) makes one event, which
// disarms the CQ: an event fires at most once per arming. The event goes to
// the CQ's EventQueue, whose thread runs the event handler. Arming when CQEs
// are already waiting does not by itself make an event (that is what
// NOTIFY_REPORT_MISSED_EVENTS is for).
//
// Moderation (modify_cq): with (count, usec) != (0, 0), a qualifying CQE on
// an armed CQ makes the event only once `count` CQEs are waiting (count > 0)
// or `usec` microseconds after the first qualifying CQE since arming
// (usec > 0), whichever comes first. count == 0 disables the count trigger,
// usec == 0 the timer. Without an EventQueue (eq == nullptr, tests) the
// timer is ignored and events are delivered inline on the pushing thread.
//
// Invariants / memory ordering: the ring (ring_, head_, count_), the arming
// state (armed_, event_due_, timer_*), moderation and the handlers are
// guarded by `mu_` (a FastMutex, see fast_mutex.h). A CQE becomes visible to poll() by the push's unlock of
// mu_ (release) and the poll's lock (acquire). `error_` only goes false ->
// true, under mu_ (so the overrun handler runs once); it is also read
// without the lock (acquire). `cqe_` mirrors ring_.size() for lock-free
// reads. Counters are relaxed atomics. Lock order: mu_ -> EventQueue::mu_;
// handlers run with no lock held, so they may call any member.
// Thread safety: push, poll, req_notify, resize and modify may be called
// concurrently from any threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "hca/fast_mutex.h"
#include "srdma/status.h"
#include "srdma/wc.h"

namespace srdma::hca {

class EventQueue;

enum NotifyFlags : std::uint32_t {
  NOTIFY_NEXT_COMP = 1u << 0,              // an event on the next completion
  NOTIFY_SOLICITED = 1u << 1,              // only on a solicited (or error) completion
  NOTIFY_REPORT_MISSED_EVENTS = 1u << 2,   // return 1 if CQEs are already waiting
};

class Cq {
 public:
  using EventHandler = std::function<void(Cq&)>;    // runs on the vector's thread
  using OverrunHandler = std::function<void(Cq&)>;  // runs on the pushing thread

  // REQUIRES: 1 <= cqe <= the device's max_cqe (checked by the device).
  // `eq` (may be null: events are then delivered inline by push) must
  // outlive the CQ; it sums the CQ's counters (attach/detach).
  Cq(std::uint32_t cqn, std::uint32_t cqe, EventQueue* eq, std::uint32_t comp_vector, void* context);
  // Cancels pending events and waits until the vector's thread is out of
  // this CQ's handler (unless destroyed from that handler).
  // REQUIRES: no concurrent push/req_notify (no QP attached: usecnt == 0).
  ~Cq();

  Cq(const Cq&) = delete;
  Cq& operator=(const Cq&) = delete;

  std::uint32_t cqn() const { return cqn_; }
  std::uint32_t cqe() const { return cqe_.load(std::memory_order_relaxed); }  // entries, exactly as asked
  std::uint32_t comp_vector() const { return comp_vector_; }
  void* context() const { return context_; }
  EventQueue* eq() const { return eq_; }

  // Consumer: up to out.size() completions, oldest first. Returns how many.
  // Still returns the waiting CQEs after the CQ entered the error state.
  int poll(std::span<Wc> out);

  // Arms the CQ (an existing arming is kept if stronger: NEXT_COMP wins
  // over SOLICITED until the event fires). With NOTIFY_REPORT_MISSED_EVENTS
  // returns 1 when CQEs are already waiting (the caller should poll again
  // instead of sleeping; the CQ is armed anyway), else 0. EINVAL for flags
  // without NEXT_COMP or SOLICITED, or with unknown bits.
  Result<int> req_notify(std::uint32_t flags);

  // Producer: appends a CQE. false when the CQ is full (overrun: the CQ
  // enters the error state and the overrun handler runs, once) or already
  // in the error state; the CQE is then not written. `solicited`: the
  // message had the solicited-event bit (for NOTIFY_SOLICITED).
  bool push(const Wc& wc, bool solicited);

  // EINVAL if cqe < 1, > max_cqe or < the CQEs currently waiting. Keeps the
  // waiting CQEs, in order.
  Result<void> resize(std::uint32_t cqe, std::uint32_t max_cqe);
  // Event moderation: an event once `count` CQEs are waiting or `usec`
  // microseconds after the first unreported one, whichever is first
  // (0, 0: every completion). Applies from the next CQE on.
  Result<void> modify(std::uint16_t count, std::uint16_t usec);
  std::uint16_t moderation_count() const;
  std::uint16_t moderation_usec() const;

  // Handlers may be set or replaced at any time; an empty one drops events.
  void set_event_handler(EventHandler h);
  void set_overrun_handler(OverrunHandler h);

  bool in_error() const { return error_.load(std::memory_order_acquire); }
  std::uint32_t waiting() const;  // CQEs written and not yet polled
  bool armed() const;             // armed and the event not yet fired

  // QPs attached (destroy refuses while non-zero).
  std::atomic<int> usecnt{0};

  // Counters.
  std::uint64_t cqes_written() const { return cqes_written_.load(std::memory_order_relaxed); }
  std::uint64_t cqes_polled() const { return cqes_polled_.load(std::memory_order_relaxed); }
  std::uint64_t events() const { return events_.load(std::memory_order_relaxed); }

  // Called by the EventQueue thread: delivers the event if one is due (an
  // immediate one, or a moderation deadline that has passed while still
  // armed) by running the event handler; true if it did. A stale call
  // (the event already delivered, the timer superseded) does nothing.
  bool try_deliver_event();
  void deliver_event() { (void)try_deliver_event(); }

 private:
  using Clock = std::chrono::steady_clock;
  enum class Schedule { kNone, kNow, kAt };

  // REQUIRES: mu_ held, count_ < ring_.size().
  void append_locked(const Wc& wc);
  // REQUIRES: mu_ held. What a qualifying CQE just appended does to an armed CQ.
  Schedule on_qualifying_locked(Clock::time_point* when);

  const std::uint32_t cqn_;
  const std::uint32_t comp_vector_;
  void* const context_;
  EventQueue* const eq_;

  mutable FastMutex mu_;  // guards everything below up to the atomics
  std::vector<Wc> ring_;
  std::uint32_t head_ = 0, count_ = 0;  // oldest CQE, CQEs waiting
  // Written only under mu_ (plain increments, no locked instruction), on
  // the lock's cache line; read lock-free by the EventQueue's sums.
  std::atomic<std::uint64_t> cqes_written_{0};
  std::atomic<std::uint64_t> cqes_polled_{0};
  std::uint32_t armed_ = 0;             // NOTIFY_NEXT_COMP | NOTIFY_SOLICITED bits, 0 = disarmed
  bool event_due_ = false;              // an event was decided and not yet delivered
  bool timer_pending_ = false;          // armed, moderation timer running until timer_deadline_
  Clock::time_point timer_deadline_{};
  std::uint16_t mod_count_ = 0, mod_usec_ = 0;
  std::shared_ptr<const EventHandler> handler_;  // copied out to run unlocked
  OverrunHandler overrun_handler_;

  std::atomic<std::uint32_t> cqe_;
  std::atomic<bool> error_{false};
  std::atomic<std::uint64_t> events_{0};
};

}  // namespace srdma::hca
