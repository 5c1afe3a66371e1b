#include "hca/cq.h"

#include <algorithm>
#include <string>
#include <utility>

#include "hca/event_queue.h"

namespace srdma::hca {

Cq::Cq(std::uint32_t cqn, std::uint32_t cqe, EventQueue* eq, std::uint32_t comp_vector,
       void* context)
    : cqn_(cqn),
      comp_vector_(comp_vector),
      context_(context),
      eq_(eq),
      ring_(std::max<std::uint32_t>(cqe, 1)),
      cqe_(static_cast<std::uint32_t>(ring_.size())) {
  if (eq_ != nullptr) eq_->attach(this);
}

Cq::~Cq() {
  if (eq_ != nullptr) {
    eq_->cancel(this);
    eq_->detach(this);
  }
}

std::uint32_t Cq::waiting() const {
  std::lock_guard lk(mu_);
  return count_;
}

bool Cq::armed() const {
  std::lock_guard lk(mu_);
  return armed_ != 0;
}

std::uint16_t Cq::moderation_count() const {
  std::lock_guard lk(mu_);
  return mod_count_;
}

std::uint16_t Cq::moderation_usec() const {
  std::lock_guard lk(mu_);
  return mod_usec_;
}

int Cq::poll(std::span<Wc> out) {
  std::uint32_t n;
  {
    std::lock_guard lk(mu_);
    const auto size = static_cast<std::uint32_t>(ring_.size());
    n = static_cast<std::uint32_t>(std::min<std::size_t>(out.size(), count_));
    // At most two contiguous runs: [head_, end) then [0, ...).
    const std::uint32_t first = std::min(n, size - head_);
    std::copy_n(ring_.begin() + head_, first, out.begin());
    std::copy_n(ring_.begin(), n - first, out.begin() + first);
    head_ = (head_ + n) % size;
    count_ -= n;
    if (n > 0) cqes_polled_.store(cqes_polled_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  return static_cast<int>(n);
}

Result<int> Cq::req_notify(std::uint32_t flags) {
  constexpr std::uint32_t kKnown =
      NOTIFY_NEXT_COMP | NOTIFY_SOLICITED | NOTIFY_REPORT_MISSED_EVENTS;
  if ((flags & ~kKnown) != 0)
    return make_error(EINVAL, "req_notify: unknown flag bits " + std::to_string(flags & ~kKnown));
  const std::uint32_t arm = flags & (NOTIFY_NEXT_COMP | NOTIFY_SOLICITED);
  if (arm == 0)
    return make_error(EINVAL, "req_notify: flags need NOTIFY_NEXT_COMP or NOTIFY_SOLICITED");
  std::lock_guard lk(mu_);
  // Like rxe: an armed NEXT_COMP stays NEXT_COMP; NEXT_COMP wins when both
  // bits are given (the solicited mask is then "any completion").
  armed_ = ((armed_ | arm) & NOTIFY_NEXT_COMP) != 0 ? NOTIFY_NEXT_COMP : NOTIFY_SOLICITED;
  if ((flags & NOTIFY_REPORT_MISSED_EVENTS) != 0 && count_ > 0) return 1;
  return 0;
}

void Cq::append_locked(const Wc& wc) {
  const auto size = static_cast<std::uint32_t>(ring_.size());
  std::uint32_t tail = head_ + count_;
  if (tail >= size) tail -= size;
  ring_[tail] = wc;
  ++count_;
}

Cq::Schedule Cq::on_qualifying_locked(Clock::time_point* when) {
  const bool timer = eq_ != nullptr && mod_usec_ != 0;
  const bool now = (mod_count_ == 0 && !timer) || (mod_count_ != 0 && count_ >= mod_count_);
  if (now) {
    armed_ = 0;  // once per arming
    timer_pending_ = false;
    event_due_ = true;
    return Schedule::kNow;
  }
  if (timer && !timer_pending_) {
    timer_pending_ = true;
    timer_deadline_ = Clock::now() + std::chrono::microseconds(mod_usec_);
    *when = timer_deadline_;
    return Schedule::kAt;
  }
  return Schedule::kNone;  // waiting for the count or a running timer
}

bool Cq::push(const Wc& wc, bool solicited) {
  Schedule sched = Schedule::kNone;
  Clock::time_point when{};
  OverrunHandler overrun;
  bool written = false;
  {
    std::lock_guard lk(mu_);
    if (error_.load(std::memory_order_relaxed)) return false;
    if (count_ == ring_.size()) {
      // IBA 11.4.2.1 / C11-16: a CQ overrun is a CQ error (an affiliated
      // asynchronous error); the unread CQEs are kept, this one is lost.
      // error_ goes false -> true only here, under mu_: the handler runs once.
      error_.store(true, std::memory_order_release);
      overrun = overrun_handler_;
    } else {
      append_locked(wc);
      if (armed_ != 0) {
        const bool qualifies = (armed_ & NOTIFY_NEXT_COMP) != 0 || solicited ||
                               wc.status != WcStatus::kSuccess;
        if (qualifies) sched = on_qualifying_locked(&when);
      }
      // Written only under mu_: a plain increment, no locked instruction.
      cqes_written_.store(cqes_written_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      written = true;
    }
  }
  if (!written) {
    if (overrun) overrun(*this);
    return false;
  }
  switch (sched) {
    case Schedule::kNone: break;
    case Schedule::kNow:
      if (eq_ != nullptr)
        eq_->schedule(this);
      else
        (void)try_deliver_event();
      break;
    case Schedule::kAt: eq_->schedule_at(this, when); break;
  }
  return true;
}

Result<void> Cq::resize(std::uint32_t cqe, std::uint32_t max_cqe) {
  if (cqe < 1) return make_error(EINVAL, "resize_cq: cqe must be at least 1");
  if (cqe > max_cqe)
    return make_error(EINVAL, "resize_cq: cqe " + std::to_string(cqe) + " exceeds max_cqe " +
                                  std::to_string(max_cqe));
  std::lock_guard lk(mu_);
  if (cqe < count_)
    return make_error(EINVAL, "resize_cq: cqe " + std::to_string(cqe) + " is below the " +
                                  std::to_string(count_) + " CQEs waiting");
  std::vector<Wc> ring(cqe);
  const auto size = static_cast<std::uint32_t>(ring_.size());
  for (std::uint32_t i = 0; i < count_; ++i) ring[i] = ring_[(head_ + i) % size];
  ring_.swap(ring);
  head_ = 0;
  cqe_.store(cqe, std::memory_order_relaxed);
  return {};
}

Result<void> Cq::modify(std::uint16_t count, std::uint16_t usec) {
  std::lock_guard lk(mu_);
  mod_count_ = count;
  mod_usec_ = usec;
  return {};
}

void Cq::set_event_handler(EventHandler h) {
  auto p = std::make_shared<const EventHandler>(std::move(h));
  std::lock_guard lk(mu_);
  handler_ = std::move(p);
}

void Cq::set_overrun_handler(OverrunHandler h) {
  std::lock_guard lk(mu_);
  overrun_handler_ = std::move(h);
}

bool Cq::try_deliver_event() {
  std::shared_ptr<const EventHandler> h;
  {
    std::lock_guard lk(mu_);
    if (event_due_) {
      event_due_ = false;
    } else if (timer_pending_ && armed_ != 0 && Clock::now() >= timer_deadline_) {
      timer_pending_ = false;
      armed_ = 0;  // once per arming
    } else {
      return false;  // stale: delivered already, or a superseded deadline
    }
    h = handler_;
  }
  events_.fetch_add(1, std::memory_order_relaxed);
  if (h && *h) (*h)(*this);
  return true;
}

}  // namespace srdma::hca
