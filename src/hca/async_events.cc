#include "hca/async_events.h"

#include <utility>

namespace srdma {

std::string_view async_event_str(AsyncEventType t) {
  switch (t) {
    case AsyncEventType::kCqErr: return "CQ error";
    case AsyncEventType::kQpFatal: return "QP fatal error";
    case AsyncEventType::kQpLastWqeReached: return "last WQE reached";
    case AsyncEventType::kPortActive: return "port active";
    case AsyncEventType::kDeviceFatal: return "device fatal error";
    case AsyncEventType::kSrqLimitReached: return "SRQ limit reached";
  }
  return "unrecognized event";
}

}  // namespace srdma

namespace srdma::hca {


AsyncEventDispatcher::AsyncEventDispatcher() {
  std::lock_guard lk(mu_);  // the thread starts by taking mu_: it sees thread_id_
  thread_ = std::thread([this] { run(); });
  thread_id_ = thread_.get_id();
}

AsyncEventDispatcher::~AsyncEventDispatcher() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  work_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void AsyncEventDispatcher::set_handler(Handler h) {
  auto p = std::make_shared<const Handler>(std::move(h));
  std::lock_guard lk(mu_);
  handler_ = std::move(p);
}

void AsyncEventDispatcher::raise(AsyncEvent e) {
  counts_[static_cast<std::size_t>(e.type)].fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard lk(mu_);
    queue_.push_back(e);
    ++raised_;
  }
  work_.notify_one();
}

void AsyncEventDispatcher::flush() {
  std::unique_lock lk(mu_);
  if (std::this_thread::get_id() == thread_id_) return;  // from the handler
  const std::uint64_t target = raised_;
  done_.wait(lk, [&] { return handled_ >= target; });
}

void AsyncEventDispatcher::run() {
  std::unique_lock lk(mu_);
  for (;;) {
    work_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and everything raised was handled
    const AsyncEvent e = queue_.front();
    queue_.pop_front();
    std::shared_ptr<const Handler> h = handler_;
    lk.unlock();
    if (h && *h) (*h)(e);
    lk.lock();
    ++handled_;
    done_.notify_all();
  }
}

}  // namespace srdma::hca
