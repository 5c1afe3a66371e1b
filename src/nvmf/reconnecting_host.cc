#include "nvmf/reconnecting_host.h"

#include <fmt/format.h>

namespace srdma::nvmf {

Result<std::unique_ptr<ReconnectingHost>> ReconnectingHost::connect(Device& dev, std::uint64_t target_addr,
                                                                   std::uint16_t port, const HostOptions& opts,
                                                                   const ReconnectOptions& r) {
  if (r.reconnect_delay <= std::chrono::milliseconds::zero()) return make_error(EINVAL, "reconnect delay must be positive");
  if (r.ctrl_loss_tmo < std::chrono::milliseconds::zero()) return make_error(EINVAL, "ctrl_loss_tmo must not be negative");
  if (!opts.clock) return make_error(EINVAL, "no clock");
  std::unique_ptr<ReconnectingHost> h(new ReconnectingHost(dev, target_addr, port, opts, r));
  auto c = HostController::connect(dev, target_addr, port, opts);
  if (!c) return std::unexpected(c.error());
  h->io_queues_ = (*c)->io_queues();
  h->namespaces_ = (*c)->namespaces();
  h->ctrl_ = std::move(*c);
  // A clock that jumps (a test's ManualClock) wakes the reconnect thread.
  h->clock_wake_ = opts.clock->subscribe([p = h.get()] {
    { std::lock_guard lock(p->mu_); }
    p->cv_.notify_all();
  });
  h->thread_ = std::thread([p = h.get()] { p->reconnect_loop(); });
  return h;
}

ReconnectingHost::ReconnectingHost(Device& dev, std::uint64_t addr, std::uint16_t port, const HostOptions& opts,
                                   const ReconnectOptions& r)
    : dev_(dev), addr_(addr), port_(port), opts_(opts), ropts_(r) {}

ReconnectingHost::~ReconnectingHost() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  opts_.clock->unsubscribe(clock_wake_);
  std::shared_ptr<HostController> c;
  std::deque<Waiting> waiting;
  {
    std::lock_guard lock(mu_);
    c = std::move(ctrl_);
    waiting.swap(waiting_);
  }
  c.reset();  // its outstanding I/Os complete (ENOTCONN): stop_ lets them through
  for (const Waiting& w : waiting) {
    w.io->transport_error = ENOTCONN;
    w.io->done(*w.io);
  }
}

const NamespaceInfo* ReconnectingHost::find_namespace(std::uint32_t nsid) const {
  for (const NamespaceInfo& n : namespaces_)
    if (n.nsid == nsid) return &n;
  return nullptr;
}

std::uint64_t ReconnectingHost::reconnects() const {
  std::lock_guard lock(mu_);
  return reconnects_;
}
bool ReconnectingHost::connected() const {
  std::lock_guard lock(mu_);
  return ctrl_ && !down_;
}
std::vector<CompletionQueue*> ReconnectingHost::cqs() const {
  std::lock_guard lock(mu_);
  return ctrl_ ? ctrl_->cqs() : std::vector<CompletionQueue*>{};
}
bool ReconnectingHost::lost() const {
  std::lock_guard lock(mu_);
  return lost_;
}

bool ReconnectingHost::connection_lost(const BlockIo& io) {
  // No response at all (a closed queue, a reset, a timeout, a broken
  // protocol): the connection is gone. An NVMe status is an answer.
  return io.transport_error != 0;
}

Result<void> ReconnectingHost::submit(BlockIo& io, std::uint32_t queue) {
  if (!io.done) return make_error(EINVAL, "the I/O has no completion callback");
  if (queue >= io_queues_) return make_error(EINVAL, fmt::format("queue {} of {}", queue, io_queues_));
  std::shared_ptr<HostController> c;
  {
    std::lock_guard lock(mu_);
    if (lost_ || stop_) return make_error(ENOTCONN, "the controller is lost (ctrl_loss_tmo passed)");
    if (down_ || !ctrl_) {
      waiting_.push_back({&io, queue});
      parked_.store(true, std::memory_order_relaxed);
      return {};
    }
    c = ctrl_;
  }
  auto* o = new Owned{this, c.get(), io.done, io.context, queue};
  io.done = &ReconnectingHost::on_done;
  io.context = o;
  auto r = c->submit(io, queue);
  if (r) return {};
  io.done = o->done;
  io.context = o->context;
  delete o;
  if (r.error().code != ENOTCONN) return r;  // the caller's to handle (EINVAL, EAGAIN)
  park(io, queue, c.get());
  return {};
}

void ReconnectingHost::on_done(BlockIo& io) {
  auto* o = static_cast<Owned*>(io.context);
  ReconnectingHost* h = o->host;
  const std::uint32_t queue = o->queue;
  const HostController* ctrl = o->ctrl;
  io.done = o->done;
  io.context = o->context;
  delete o;
  if (connection_lost(io) && h->park(io, queue, ctrl)) return;
  io.done(io);
  if (h->parked_.load(std::memory_order_relaxed)) {
    std::lock_guard lock(h->mu_);  // room in a queue: the waiting I/Os may go
    h->cv_.notify_all();
  }
}

void ReconnectingHost::mark_down() {
  if (down_) return;
  down_ = true;
  lost_at_ = opts_.clock->now();
}

bool ReconnectingHost::park(BlockIo& io, std::uint32_t queue, const HostController* from) {
  std::lock_guard lock(mu_);
  if (lost_ || stop_) return false;
  // Waits for the next controller; its result so far means nothing. Only
  // the current controller's failure is a loss: a late failure from the
  // one already replaced just goes again.
  io.transport_error = 0;
  io.status = NvmeStatus::success();
  if (from == ctrl_.get()) mark_down();
  waiting_.push_back({&io, queue});
  parked_.store(true, std::memory_order_relaxed);
  cv_.notify_all();
  return true;
}

void ReconnectingHost::resubmit_waiting(std::unique_lock<std::mutex>& lock) {
  std::deque<Waiting> waiting;
  waiting.swap(waiting_);
  parked_.store(false, std::memory_order_relaxed);
  const bool fail = lost_ || stop_;
  lock.unlock();
  for (const Waiting& w : waiting) {
    if (!fail) {
      auto r = submit(*w.io, w.queue);
      if (r) continue;
      if (r.error().code == EAGAIN) {  // the queue is full: again once something completes
        std::lock_guard again(mu_);
        waiting_.push_back(w);
        parked_.store(true, std::memory_order_relaxed);
        continue;
      }
      w.io->transport_error = r.error().code;
    } else {
      w.io->transport_error = ENOTCONN;
    }
    w.io->done(*w.io);
  }
  lock.lock();
}

void ReconnectingHost::reconnect_loop() {
  const Clock& clock = *opts_.clock;
  std::unique_lock lock(mu_);
  while (!stop_ && !lost_) {
    // A controller that failed with nothing in flight shows it only here.
    if (!down_ && ctrl_ && ctrl_->failed()) mark_down();
    if (!down_) {
      if (!waiting_.empty()) {
        resubmit_waiting(lock);
        if (!waiting_.empty()) cv_.wait(lock);  // a completion makes room (on_done notifies)
        continue;
      }
      clock.wait_until(cv_, lock, clock.now() + ropts_.reconnect_delay);
      continue;
    }
    // The old controller goes first: its outstanding I/Os complete with
    // ENOTCONN and join the waiting ones (on_done takes mu_).
    std::shared_ptr<HostController> old = std::move(ctrl_);
    lock.unlock();
    old.reset();
    lock.lock();
    // An attempt at once, then one every reconnect_delay from the loss
    // (the schedule, not the attempts' own duration, sets the times).
    auto next = lost_at_ + ropts_.reconnect_delay;
    while (!stop_) {
      lock.unlock();
      auto c = HostController::connect(dev_, addr_, port_, opts_);
      lock.lock();
      if (c && (*c)->io_queues() >= io_queues_) {
        ctrl_ = std::move(*c);
        down_ = false;
        ++reconnects_;
        break;
      }
      if (clock.now() - lost_at_ >= ropts_.ctrl_loss_tmo) {
        lost_ = true;
        break;
      }
      while (!stop_ && clock.now() < next) clock.wait_until(cv_, lock, next);
      next += ropts_.reconnect_delay;
    }
    // Connected again: what waited goes to the new controller. Lost: it fails.
    resubmit_waiting(lock);
  }
}

}  // namespace srdma::nvmf
