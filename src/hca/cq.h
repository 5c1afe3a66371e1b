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
// the CQ's EventQueue, whose thread runs the event handler (a handler set
// with Delivery::kInline, a channel's wakeup, runs on the pushing thread). Arming when CQEs
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
// The ring (see cq_ring.h for the protocol): producers never lock. A push
// reserves a position with one CAS on the producers' tail, writes the CQE
// into that position's cell and publishes it with a release store of the
// cell's sequence; the consumer (poll, under its own lock) reads published
// cells in order and advances head. Producers learn of the room left from
// a cached head, refreshed only when the ring looks full, so the consumer's
// line is not read on every push. Capacity is a power of two >= cqe; cqe,
// the logical size, is what overrun is checked against.
//
// Arming: armed_ is read lock-free by every push after it reserved its
// position and published its CQE; req_notify stores armed_ and then reads
// the tail. The four are seq_cst, and the reservation is a locked
// instruction anyway, so a push pays no fence: either the push reserved
// after the arming's read of the tail, and it sees the arming and decides
// the event under mu_; or the arming's side sees the reservation. Then it
// reports a missed event (REPORT_MISSED_EVENTS), or waits until the CQE is
// published, so the caller's next poll finds it. No event is lost between
// them.
// mu_ (a FastMutex) guards the arming and moderation state, the handlers,
// the overrun decision and resize; poll_mu_ orders pollers and resize.
// error_ only goes false -> true, under mu_ (the overrun handler runs once).
// Lock order: mu_ -> poll_mu_ -> EventQueue::mu_; handlers run with no lock
// held, so they may call any member.
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

#include "hca/cq_ring.h"
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
  // Entries the ring really holds (cqe rounded up to a power of two).
  std::uint64_t capacity() const;
  static constexpr std::size_t kCqeBytes = sizeof(CqRing::Cell);  // one ring entry
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
  // Takes every unpolled CQE of QP `qpn` out of the ring, keeping the
  // others in order (mthca_cq_clean: a QP moved to RESET leaves nothing of
  // its previous life for its consumer to poll). Returns how many went.
  std::uint32_t clean(std::uint32_t qpn);
  // Event moderation: an event once `count` CQEs are waiting or `usec`
  // microseconds after the first unreported one, whichever is first
  // (0, 0: every completion). Applies from the next CQE on.
  Result<void> modify(std::uint16_t count, std::uint16_t usec);
  std::uint16_t moderation_count() const;
  std::uint16_t moderation_usec() const;

  // Where an event's handler runs: on the completion vector's thread (an
  // "interrupt", what a poll context or a consumer's handler needs), or on
  // the thread whose CQE made the event, for a handler that only wakes a
  // completion channel: one thread hop fewer between a packet and the
  // consumer blocked in get_cq_event. Moderation's timer still fires on
  // the vector's thread.
  enum class Delivery { kVectorThread, kInline };
  // Handlers may be set or replaced at any time; an empty one drops events.
  void set_event_handler(EventHandler h, Delivery where = Delivery::kVectorThread);
  void set_overrun_handler(OverrunHandler h);

  bool in_error() const { return error_.load(std::memory_order_acquire); }
  std::uint32_t waiting() const;  // CQEs written and not yet polled
  bool armed() const;             // armed and the event not yet fired

  // QPs attached (destroy refuses while non-zero).
  std::atomic<int> usecnt{0};

  // Counters.
  std::uint64_t cqes_written() const { return tail_.load(std::memory_order_relaxed) & ~CqRing::kFrozen; }
  std::uint64_t cqes_polled() const { return head_.load(std::memory_order_relaxed); }
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

  // REQUIRES: mu_ held. What a qualifying CQE just appended does to an armed CQ.
  Schedule on_qualifying_locked(Clock::time_point* when);
  // The ring looked full at `t`: decides under mu_ whether it is (overrun,
  // false) or whether the push should retry (true).
  bool full_or_retry(std::uint64_t t, OverrunHandler* overrun);
  // After a reservation at `pos`: whether it lies past the size (a resize
  // shrank the CQ meanwhile); if so the CQ enters the error state.
  bool overran_at(std::uint64_t pos, OverrunHandler* overrun);
  // REQUIRES: mu_ and poll_mu_ held. Freezes the tail and waits for the
  // pushes that reserved before it to publish (they hold no lock, and are a
  // few stores from done); returns the tail. The caller unfreezes it.
  std::uint64_t freeze_published();

  const std::uint32_t cqn_;
  const std::uint32_t comp_vector_;
  void* const context_;
  EventQueue* const eq_;

  // Read-mostly: written only by resize (under mu_ and poll_mu_, tail frozen).
  std::unique_ptr<CqRing> ring_;
  std::atomic<CqRing*> ring_view_;      // ring_.get(), for lock-free readers
  std::atomic<std::uint32_t> cqe_;      // the logical size
  std::atomic<bool> error_{false};
  std::atomic<std::uint64_t> events_{0};
  // NOTIFY_NEXT_COMP | NOTIFY_SOLICITED bits, 0 = disarmed; written under
  // mu_. Read by every push, so it sits on the line the push reads anyway.
  std::atomic<std::uint32_t> armed_{0};

  // Producers' line: the next position to reserve (kFrozen while resizing)
  // and a lower bound of head that spares them the consumer's line.
  alignas(64) std::atomic<std::uint64_t> tail_{0};
  std::atomic<std::uint64_t> head_cache_{0};

  // Consumer's line.
  alignas(64) mutable FastMutex poll_mu_;
  std::atomic<std::uint64_t> head_{0};  // next position to poll; written under poll_mu_

  // Arming (armed_, above) and moderation, under mu_.
  alignas(64) mutable FastMutex mu_;
  bool event_due_ = false;               // an event was decided and not yet delivered
  bool timer_pending_ = false;           // armed, moderation timer running until timer_deadline_
  Clock::time_point timer_deadline_{};
  std::uint16_t mod_count_ = 0, mod_usec_ = 0;
  std::shared_ptr<const EventHandler> handler_;  // copied out to run unlocked
  Delivery delivery_ = Delivery::kVectorThread;
  OverrunHandler overrun_handler_;
};

}  // namespace srdma::hca
