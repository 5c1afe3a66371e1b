// A completion channel (like ibv_comp_channel): a pollable file descriptor
// on which completion events of the CQs bound to it arrive.
//
// The CQ's event handler calls notify(cq); the consumer waits for the fd to
// become readable (poll/epoll, or get_event(true)), takes the event with
// get_event(), re-arms and polls the CQ, and acknowledges events with
// ack_events() (in batches if it likes, as with ibv_ack_cq_events). A CQ may
// be destroyed only once all events returned for it were acknowledged
// (unacked(cq) == 0), and the channel only once no CQ is bound (usecnt == 0)
// and every event was acknowledged.
//
// Invariants / memory ordering: `queue_`, `unacked_`, `total_unacked_`,
// `signalled_` and `fd_` are guarded by `mu_`. The eventfd's counter is
// non-zero exactly when `signalled_` (it is written when that becomes true
// and read when it becomes false, under mu_), and `signalled_` is true
// exactly when `queue_` is non-empty, with one exception: an event made by
// a thread inside a Taking scope for this channel (a consumer blocked in
// get_event that receives from the wire itself, and takes what it made
// before it returns) leaves the fd alone. The write and the read it would
// cost are two system calls per event for no one: the fd would be
// readable only while that same thread goes from the push to the take.
// Whoever takes an event and leaves others waiting makes the fd readable
// for them (get_event), so a thread that polls the fd is never left
// asleep with events queued once the taker is through. Counters are
// relaxed atomics.
// Thread safety: every member function may be called from any thread;
// close() must not race with a blocked get_event().
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "srdma/status.h"

namespace srdma::hca {

class Cq;

class CompChannel {
 public:
  // A new channel with its eventfd (EFD_CLOEXEC, blocking); the error
  // of eventfd(2) (EMFILE, ENFILE, ENOMEM) if it fails.
  static Result<std::unique_ptr<CompChannel>> create();
  // Closes the fd if close() did not.
  ~CompChannel();

  CompChannel(const CompChannel&) = delete;
  CompChannel& operator=(const CompChannel&) = delete;

  // Readable (POLLIN) while events are waiting; -1 once closed.
  int fd() const;

  // The CQ's event handler: queues one event for `cq` and makes fd()
  // readable. Events for a closed channel are dropped.
  void notify(Cq* cq);

  // The oldest waiting event's CQ (it counts as unacknowledged until
  // ack_events). EAGAIN when none is waiting and !block; with `block`,
  // waits for one with poll(2). EBADF once closed.
  Result<Cq*> get_event(bool block);

  // Acknowledges `n` events returned for `cq` (more than were returned is
  // clamped).
  void ack_events(Cq* cq, unsigned n);

  // Events returned by get_event for `cq` and not yet acknowledged.
  std::uint64_t unacked(Cq* cq) const;
  // Drops events queued for `cq` and not yet returned (destroy_cq).
  void forget(Cq* cq);

  // While one is alive, events this thread makes for `channel` do not make
  // its fd readable: the thread takes them itself (get_event(false) after
  // each batch it receives) before it leaves the scope. Nests nothing:
  // one channel per thread at a time.
  class Taking {
   public:
    explicit Taking(const CompChannel& channel) : prev_(taker_) { taker_ = &channel; }
    ~Taking() { taker_ = prev_; }
    Taking(const Taking&) = delete;
    Taking& operator=(const Taking&) = delete;

   private:
    const CompChannel* prev_;
  };

  // Closes the fd. EBUSY while CQs are bound (usecnt) or events are
  // unacknowledged; the channel is then unchanged. Closing twice is fine.
  Result<void> close();

  // CQs bound to this channel (the device counts them).
  std::atomic<int> usecnt{0};

  std::uint64_t events_notified() const { return notified_.load(std::memory_order_relaxed); }

 private:
  explicit CompChannel(int fd) : fd_(fd) {}

  mutable std::mutex mu_;  // guards queue_, unacked_, total_unacked_, fd_
  int fd_;
  // Makes the fd readable if it is not. REQUIRES mu_ held, fd_ open.
  void signal_locked();
  // Drains the fd if it is readable. REQUIRES mu_ held, fd_ open.
  void unsignal_locked();

  static thread_local const CompChannel* taker_;  // the Taking scope's channel
  std::deque<Cq*> queue_;                         // events not yet returned, oldest first
  bool signalled_ = false;                        // the eventfd's counter is non-zero
  std::unordered_map<Cq*, std::uint64_t> unacked_;  // returned, not acknowledged
  std::uint64_t total_unacked_ = 0;
  std::atomic<std::uint64_t> notified_{0};
};

}  // namespace srdma::hca
