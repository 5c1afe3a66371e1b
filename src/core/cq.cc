#include "srdma/cq.h"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/cq_impl.h"
#include "srdma/device.h"

namespace srdma {

// The public flags are passed to the device as they are.
static_assert(std::uint32_t{CQ_NEXT_COMP} == hca::NOTIFY_NEXT_COMP &&
              std::uint32_t{CQ_SOLICITED} == hca::NOTIFY_SOLICITED &&
              std::uint32_t{CQ_REPORT_MISSED_EVENTS} == hca::NOTIFY_REPORT_MISSED_EVENTS);

CompletionQueue::CompletionQueue(std::unique_ptr<detail::CqImpl> s, void* context)
    : state_(std::move(s)), context_(context) {}

CompletionQueue::~CompletionQueue() {
  if (!state_ || state_->destroyed) return;
  state_->shared = false;  // its owner, the pool, is releasing it
  if (!destroy()) {
    // QPs still complete into it: the device keeps it for them, but nothing
    // may call back into this object any more.
    state_->cq->set_event_handler(nullptr);
    state_->cq->eq()->cancel(state_->cq.get());
    if (state_->worker) state_->worker->cancel(state_.get());
    if (state_->channel) state_->channel->channel->forget(state_->cq.get());
  }
}

int CompletionQueue::poll(std::span<Wc> wc) {
  const int n = state_->cq->poll(wc);
  if (n != 0 || !state_->polled_link) return n;
  // Nothing yet: on a wire that is received by polling, receive what has
  // arrived in this thread, as a polling consumer of a NIC's queue would
  // (udp_link.h), and look again.
  if (state_->hca->engine().poll_link() == 0) return 0;
  return state_->cq->poll(wc);
}
Result<int> CompletionQueue::req_notify(std::uint32_t flags) { return state_->cq->req_notify(flags); }
static std::unexpected<Error> shared_refusal(const char* verb) {
  return make_error(EOPNOTSUPP, fmt::format("{} is refused on a shared (pool) CQ", verb));
}

Result<void> CompletionQueue::resize(std::uint32_t cqe) {
  if (state_->shared) return shared_refusal("resize");
  return state_->cq->resize(cqe, static_cast<std::uint32_t>(state_->hca->profile().max_cqe));
}
Result<void> CompletionQueue::modify(std::uint16_t count, std::uint16_t usec) {
  if (state_->shared) return shared_refusal("changing moderation");
  return state_->cq->modify(count, usec);
}

Result<void> CompletionQueue::destroy() {
  if (state_->shared) return shared_refusal("destroy");
  if (state_->destroyed) return make_error(EINVAL, "the CQ is already destroyed");
  if (state_->channel && state_->channel->channel->unacked(state_->cq.get()) > 0)
    return make_error(EBUSY, "the CQ has unacknowledged channel events (ack_events first)");
  auto r = state_->hca->engine().destroy_cq(state_->cq);
  if (!r) return r;
  state_->cq->set_event_handler(nullptr);
  if (state_->worker) state_->worker->cancel(state_.get());
  if (state_->channel) state_->channel->channel->forget(state_->cq.get());
  state_->destroyed = true;
  return {};
}

std::uint32_t CompletionQueue::cqe() const { return state_->cq->cqe(); }
std::uint32_t CompletionQueue::cqn() const { return state_->cq->cqn(); }
std::uint32_t CompletionQueue::comp_vector() const { return state_->cq->comp_vector(); }
std::uint64_t CompletionQueue::cqes_written() const { return state_->cq->cqes_written(); }
std::uint64_t CompletionQueue::events() const { return state_->cq->events(); }
bool CompletionQueue::in_error() const { return state_->cq->in_error(); }

CompChannel::CompChannel(std::shared_ptr<detail::ChannelImpl> s) : state_(std::move(s)) {}
CompChannel::~CompChannel() = default;
int CompChannel::fd() const { return state_->channel->fd(); }

namespace {

// A consumer blocked on a channel of a device whose wire is polled receives
// from the wire itself while it waits: the completion it waits for is
// pushed, and its event made, by its own thread, with no hop through the
// receive thread and an eventfd between the packet and the wakeup (what
// made an event-driven round trip cost twice or four times a polled one).
// Whatever else arrives is delivered as a polling consumer's would be; the
// receive thread takes over again once this one stops polling.
//
// Waits until ready() answers non-zero (that is returned) or one of `fds`
// (the caller's; the link's descriptors are poll()ed beside them) is ready
// (their count is returned, revents set), receiving what the wire holds in
// this thread meanwhile; ready() is asked first and after every batch
// received. -1 with errno when poll(2) fails (EINTR: a signal); 0 when
// `timeout_ms` (poll's meaning) passes.
template <class Ready>
int wait_receiving(hca::QueueEngine& engine, pollfd* fds, std::size_t nfds, int timeout_ms, Ready ready) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline =
      timeout_ms > 0 ? Clock::now() + std::chrono::milliseconds(timeout_ms) : Clock::time_point{};
  std::vector<pollfd> all;
  all.reserve(nfds + 8);
  bool wire_busy = false;  // the wire had something, and another thread was receiving it
  // The device's busy-poll window, spent by the thread that waits rather
  // than by the receive thread (which stands aside while a consumer polls):
  // still one spinning thread per process, and none once the wire is idle.
  // At most kWaiterSpin of it: a round trip's answer comes well inside
  // that, and a signal that lands while we spin is handled without ending
  // the wait (no system call to interrupt), so a program that counts on
  // EINTR to notice its flag (qperf's SIGALRM) has a window this long in
  // which it would wait for the next event instead.
  constexpr std::chrono::nanoseconds kWaiterSpin = std::chrono::microseconds(50);
  const auto spin = std::min(std::chrono::nanoseconds(engine.link_busy_poll_ns()), kWaiterSpin);
  Clock::time_point spin_until = Clock::now() + spin;
  unsigned empty_polls = 0;
  // ready() is asked first, after every batch received (what arrived may
  // have made it ready) and after a sleep, and on every kReadyEvery-th
  // empty poll between: for poll_receiving it is a poll(2) of the caller's
  // fds, a system call, and a turn of the spin should be a look at the
  // wire. What becomes ready meanwhile (another thread's doing) is seen at
  // most that many turns later, or at once by the sleep's poll(), which has
  // the caller's fds too.
  constexpr unsigned kReadyEvery = 8;
  for (;;) {
    if (empty_polls % kReadyEvery == 0) {
      if (const int r = ready(); r != 0) return r;
    }
    if (engine.poll_link() > 0) {
      wire_busy = false;
      empty_polls = 0;
      continue;  // what arrived may have made it ready
    }
    if (timeout_ms == 0) return 0;
    if (empty_polls++ == 0) engine.flush_link();  // what this thread sent or deferred leaves first
    // The clock is read every 16th empty poll: it costs more than a poll on
    // some virtual machines.
    if (spin.count() > 0 && empty_polls % 16 != 0) continue;
    const Clock::time_point now = Clock::now();
    if (timeout_ms > 0 && now >= deadline) return 0;
    if (now < spin_until) continue;
    int wait = timeout_ms;
    if (timeout_ms > 0) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
      if (left <= 0) return 0;
      wait = static_cast<int>(left);
    }
    if (wire_busy) std::this_thread::yield();  // let the thread receiving finish
    engine.flush_link();  // answers this thread deferred leave before it sleeps
    all.assign(fds, fds + nfds);
    const bool sleep = engine.prepare_link_sleep(all);
    const int n = sleep ? ::poll(all.data(), static_cast<nfds_t>(all.size()), wait) : 0;
    const int err = errno;
    engine.end_link_sleep();
    if (n < 0) {
      errno = err;
      return -1;
    }
    int user = 0;
    for (std::size_t i = 0; i < nfds; ++i) {
      fds[i].revents = all[i].revents;
      if (all[i].revents) ++user;
    }
    if (user > 0) return user;
    wire_busy = false;
    for (std::size_t i = nfds; i < all.size(); ++i) wire_busy = wire_busy || (all[i].revents & POLLIN) != 0;
    if (wire_busy) spin_until = Clock::now() + spin;  // traffic again: a new window
    empty_polls = 0;
  }
}

Result<hca::Cq*> channel_wait_receiving(hca::CompChannel& ch, hca::QueueEngine& engine) {
  Result<hca::Cq*> cq = make_error(EAGAIN, "");
  const auto taken = [&] {
    cq = ch.get_event(false);
    return cq || cq.error().code != EAGAIN ? 1 : 0;
  };
  // What this thread receives for the channel it takes itself (taken()
  // after every batch): its events need not make the fd readable.
  const hca::CompChannel::Taking taking(ch);
  for (;;) {
    pollfd p{ch.fd(), POLLIN, 0};
    if (p.fd < 0) return ch.get_event(false);  // closed: EBADF
    const int r = wait_receiving(engine, &p, 1, -1, taken);
    if (r < 0) {
      // A signal ends the wait, as it ends libibverbs' read(2) of the fd.
      const int err = errno;
      if (err == EINTR) return make_error(EINTR, "get_cq_event: interrupted by a signal");
      return make_error(err, fmt::format("get_cq_event: poll: {}", std::strerror(err)));
    }
    if (cq) return cq;  // else the fd fired: take the event on the next turn
  }
}

}  // namespace

Result<CompletionQueue*> CompChannel::get_event(bool block) {
  hca::QueueEngine* engine = state_->hca ? &state_->hca->engine() : nullptr;
  const bool receive = block && engine != nullptr && engine->link_is_polled();
  auto cq = receive ? channel_wait_receiving(*state_->channel, *engine) : state_->channel->get_event(block);
  if (!cq) return std::unexpected(cq.error());
  // The device CQ's context is its public object (set by create_cq).
  return static_cast<CompletionQueue*>((*cq)->context());
}

std::uint64_t CompChannel::unacked(const CompletionQueue& cq) const {
  return state_->channel->unacked(cq.state_->cq.get());
}

void CompChannel::ack_events(CompletionQueue& cq, unsigned n) {
  state_->channel->ack_events(cq.state_->cq.get(), n);
}

int Device::poll_receiving(pollfd* fds, std::size_t nfds, int timeout_ms) {
  hca::QueueEngine& engine = state_->hca->engine();
  if (!engine.link_is_polled()) return ::poll(fds, static_cast<nfds_t>(nfds), timeout_ms);
  return wait_receiving(engine, fds, nfds, timeout_ms, [&] { return ::poll(fds, static_cast<nfds_t>(nfds), 0); });
}

Result<std::unique_ptr<CompChannel>> Device::create_comp_channel() {
  auto ch = hca::CompChannel::create();
  if (!ch) return std::unexpected(ch.error());
  auto s = std::make_shared<detail::ChannelImpl>();
  s->channel = std::move(*ch);
  s->hca = state_->hca;
  return std::unique_ptr<CompChannel>(new CompChannel(std::move(s)));
}

Result<std::unique_ptr<CompletionQueue>> Device::create_cq(const CqInit& init) {
  return detail::CqAccess::create_cq(*state_, state_, init);
}

Result<std::unique_ptr<CompletionQueue>> detail::CqAccess::create_cq(DeviceImpl& dev,
                                                                    std::shared_ptr<DeviceImpl> keep,
                                                                    const CqInit& init) {
  if (init.channel && init.handler)
    return make_error(EINVAL, "a CQ's events go to a channel or to a handler, not both");
  if (dev.removed) return make_error(ENODEV, "the device has been removed");
  auto s = std::make_unique<detail::CqImpl>();
  s->device = std::move(keep);
  s->owner = &dev;
  s->hca = dev.hca;
  s->polled_link = dev.hca->engine().link_is_polled();
  auto public_cq = std::unique_ptr<CompletionQueue>(new CompletionQueue(std::move(s), init.context));
  // The device CQ's context is the public object, so channel events and
  // handlers can find it.
  auto cq = dev.hca->engine().create_cq(init.cqe, init.comp_vector, public_cq.get());
  if (!cq) {
    public_cq->state_->destroyed = true;
    return std::unexpected(cq.error());
  }
  public_cq->state_->cq = *cq;
  if (init.channel) {
    // The CQ shares the channel's state, so the fd lives as long as either.
    public_cq->state_->channel = init.channel->state_;
    std::weak_ptr<detail::ChannelImpl> ch = init.channel->state_;
    // Waking the channel is an eventfd write under the channel's leaf lock:
    // done by the thread that made the event, not by the vector's thread.
    (*cq)->set_event_handler(
        [ch](hca::Cq& c) {
          if (auto chan = ch.lock()) chan->channel->notify(&c);
        },
        hca::Cq::Delivery::kInline);
  } else if (init.handler) {
    CompletionQueue* pub = public_cq.get();
    auto handler = init.handler;
    (*cq)->set_event_handler([pub, handler](hca::Cq&) { handler(*pub); });
  }
  return public_cq;
}

}  // namespace srdma
