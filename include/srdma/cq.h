// A completion queue (like ib_cq / ibv_cq) and its completion channel.
//
// CompletionQueue and CompChannel are stable objects owned through
// std::unique_ptr (their addresses appear in completion callbacks and
// channel events). Destroying a CQ that QPs still use is refused by
// destroy() (EBUSY); the destructor of an owner that never called destroy()
// releases it once the last QP on it is gone.
// Thread safety: poll, req_notify and the channel calls may be made from
// any thread, concurrently with the device writing completions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "srdma/poll_context.h"
#include "srdma/status.h"
#include "srdma/wc.h"

namespace srdma {

namespace detail {
struct DeviceImpl;
struct CqImpl;
struct ChannelImpl;
struct CqAccess;
}  // namespace detail

// req_notify flags (IB_CQ_NEXT_COMP, IB_CQ_SOLICITED, IB_CQ_REPORT_MISSED_EVENTS).
enum CqNotifyFlags : std::uint32_t {
  CQ_NEXT_COMP = 1u << 0,
  CQ_SOLICITED = 1u << 1,
  CQ_REPORT_MISSED_EVENTS = 1u << 2,
};

class CompChannel;

class CompletionQueue {
 public:
  using EventHandler = std::function<void(CompletionQueue&)>;  // runs on the vector's thread

  ~CompletionQueue();
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  // Up to wc.size() completions, oldest first; returns how many.
  int poll(std::span<Wc> wc);
  // Arms for the next completion (CQ_NEXT_COMP) or the next solicited or
  // error one (CQ_SOLICITED). With CQ_REPORT_MISSED_EVENTS returns 1 when
  // completions are already waiting. EINVAL for bad flags.
  Result<int> req_notify(std::uint32_t flags);
  // EINVAL outside 1..max_cqe or below the completions waiting.
  Result<void> resize(std::uint32_t cqe);
  // Completion-event moderation: at most one event per `count` completions
  // or `usec` microseconds.
  Result<void> modify(std::uint16_t count, std::uint16_t usec);
  // EBUSY while QPs use it; afterwards the object may only be destroyed.
  // A pool CQ (shared) refuses destroy, resize and modify: EOPNOTSUPP.
  Result<void> destroy();

  // --- CQs from Device::alloc_cq (like ib_alloc_cq) ---
  // How completions are processed; kDirect also for create_cq CQs, which
  // their owner polls.
  PollContext poll_context() const;
  // DIRECT only: polls up to `budget` completions in batches of 8 and calls
  // each one's wr_cqe->done; returns how many (like ib_process_cq_direct).
  // EINVAL on a CQ that is processed by the device.
  Result<int> process_direct(int budget);
  // Completions dispatched to wr_cqe->done.
  std::uint64_t completions_processed() const;
  // Successful completions that had no wr_cqe (a consumer bug: counted,
  // never dereferenced).
  std::uint64_t completions_without_wr_cqe() const;
  // Completion events on a DIRECT CQ (a consumer bug: counted).
  std::uint64_t unexpected_events() const;
  // Owned by the device's CQ pool.
  bool shared() const;

  std::uint32_t cqe() const;
  std::uint32_t cqn() const;
  std::uint32_t comp_vector() const;
  void* context() const { return context_; }
  std::uint64_t cqes_written() const;
  std::uint64_t events() const;
  bool in_error() const;

 private:
  friend class Device;
  friend class ProtectionDomain;
  friend class CompChannel;
  friend struct detail::CqAccess;
  CompletionQueue(std::unique_ptr<detail::CqImpl> s, void* context);
  std::unique_ptr<detail::CqImpl> state_;
  void* context_;
};

// Like ibv_comp_channel: a file descriptor that becomes readable when a CQ
// bound to it has a completion event.
class CompChannel {
 public:
  ~CompChannel();
  CompChannel(const CompChannel&) = delete;
  CompChannel& operator=(const CompChannel&) = delete;

  int fd() const;
  // The CQ with an event. EAGAIN when none is pending and !block.
  Result<CompletionQueue*> get_event(bool block);
  void ack_events(CompletionQueue& cq, unsigned n);
  // Events returned for `cq` by get_event and not yet acknowledged.
  std::uint64_t unacked(const CompletionQueue& cq) const;

 private:
  friend class Device;
  friend struct detail::CqAccess;
  explicit CompChannel(std::shared_ptr<detail::ChannelImpl> s);
  std::shared_ptr<detail::ChannelImpl> state_;  // shared with the CQs bound to it
};

struct CqInit {
  std::uint32_t cqe = 1;
  std::uint32_t comp_vector = 0;
  void* context = nullptr;
  CompChannel* channel = nullptr;         // events go to the channel, or
  CompletionQueue::EventHandler handler = {};  // to this handler (not both)
};

}  // namespace srdma
