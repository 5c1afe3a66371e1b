#include "hca/cq.h"

#include <algorithm>
#include <string>
#include <thread>
#include <utility>

#include "hca/event_queue.h"

namespace srdma::hca {

Cq::Cq(std::uint32_t cqn, std::uint32_t cqe, EventQueue* eq, std::uint32_t comp_vector,
       void* context)
    : cqn_(cqn),
      comp_vector_(comp_vector),
      context_(context),
      eq_(eq),
      ring_(std::make_unique<CqRing>(cqe)),
      ring_view_(ring_.get()),
      cqe_(std::max<std::uint32_t>(cqe, 1)) {
  if (eq_ != nullptr) eq_->attach(this);
}

Cq::~Cq() {
  if (eq_ != nullptr) {
    eq_->cancel(this);
    eq_->detach(this);
  }
}

std::uint32_t Cq::waiting() const {
  // Head first: read after tail, a poll in between could pass it.
  const std::uint64_t head = head_.load(std::memory_order_acquire);
  const std::uint64_t t = tail_.load(std::memory_order_acquire) & ~CqRing::kFrozen;
  return static_cast<std::uint32_t>(t - head);
}

bool Cq::armed() const { return armed_.load(std::memory_order_acquire) != 0; }

std::uint16_t Cq::moderation_count() const {
  std::lock_guard lk(mu_);
  return mod_count_;
}

std::uint16_t Cq::moderation_usec() const {
  std::lock_guard lk(mu_);
  return mod_usec_;
}

int Cq::poll(std::span<Wc> out) {
  std::lock_guard lk(poll_mu_);
  CqRing& ring = *ring_view_.load(std::memory_order_relaxed);  // changes only under poll_mu_
  const std::uint64_t head = head_.load(std::memory_order_relaxed);
  std::uint64_t n = 0;
  for (; n < out.size(); ++n) {
    CqRing::Cell& c = ring.at(head + n);
    // A reserved but not yet published position ends the batch: CQEs come
    // out in position order.
    if (c.seq.load(std::memory_order_acquire) != head + n + 1) break;
    out[n] = c.wc;
  }
  // Release: the cells read here may be rewritten once producers see head.
  if (n > 0) head_.store(head + n, std::memory_order_release);
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
  const std::uint32_t was = armed_.load(std::memory_order_relaxed);
  // The arming handshake with push (cq.h): this store, then the tail's
  // load, both seq_cst. A push that reserved after the load sees the arming.
  armed_.store(((was | arm) & NOTIFY_NEXT_COMP) != 0 ? NOTIFY_NEXT_COMP : NOTIFY_SOLICITED,
               std::memory_order_seq_cst);
  const std::uint64_t t = tail_.load(std::memory_order_seq_cst);  // not frozen: resize holds mu_
  const std::uint64_t head = head_.load(std::memory_order_acquire);
  // Counts a reserved CQE still being written: the caller's next poll may
  // find it a moment later, which is what it loops for.
  if ((flags & NOTIFY_REPORT_MISSED_EVENTS) != 0 && t != head) return 1;
  // A push that reserved before the load may have read armed_ before the
  // store and will make no event: wait until it has published, so that the
  // caller's next poll finds its CQE. A reservation is a few stores from
  // its publication; the range is what waits unpolled (usually little).
  CqRing& ring = *ring_view_.load(std::memory_order_relaxed);  // changes only under mu_
  for (std::uint64_t pos = head; pos < t; ++pos)
    while (static_cast<std::int64_t>(ring.at(pos).seq.load(std::memory_order_acquire) - (pos + 1)) < 0)
      std::this_thread::yield();
  return 0;
}

Cq::Schedule Cq::on_qualifying_locked(Clock::time_point* when) {
  const bool timer = eq_ != nullptr && mod_usec_ != 0;
  const bool now = (mod_count_ == 0 && !timer) || (mod_count_ != 0 && waiting() >= mod_count_);
  if (now) {
    armed_.store(0, std::memory_order_relaxed);  // once per arming
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

bool Cq::full_or_retry(std::uint64_t t, OverrunHandler* overrun) {
  std::lock_guard lk(mu_);  // a resize holds it: the size is stable here
  if (error_.load(std::memory_order_relaxed)) return false;
  const std::uint64_t now = tail_.load(std::memory_order_acquire);
  if (now != t) return true;  // moved (or unfrozen): look again
  const std::uint64_t head = head_.load(std::memory_order_acquire);
  if (t - head < cqe_.load(std::memory_order_relaxed)) {
    head_cache_.store(head, std::memory_order_release);
    return true;
  }
  // IBA 11.4.2.1 / C11-16: a CQ overrun is a CQ error (an affiliated
  // asynchronous error); the unread CQEs are kept, this one is lost.
  // error_ goes false -> true only here, under mu_: the handler runs once.
  error_.store(true, std::memory_order_release);
  *overrun = overrun_handler_;
  return false;
}

bool Cq::overran_at(std::uint64_t pos, OverrunHandler* overrun) {
  std::lock_guard lk(mu_);
  const std::uint64_t head = head_.load(std::memory_order_acquire);
  if (static_cast<std::int64_t>(pos - head) < static_cast<std::int64_t>(cqe_.load(std::memory_order_relaxed))) {
    head_cache_.store(head, std::memory_order_release);
    return false;
  }
  if (error_.load(std::memory_order_relaxed)) return true;
  error_.store(true, std::memory_order_release);
  *overrun = overrun_handler_;
  return true;
}

bool Cq::push(const Wc& wc, bool solicited) {
  if (error_.load(std::memory_order_relaxed)) return false;
  // Reserve a position.
  std::uint64_t t = tail_.load(std::memory_order_relaxed);
  for (;;) {
    if ((t & CqRing::kFrozen) != 0) {
      { std::lock_guard lk(mu_); }  // a resize holds mu_ until it unfreezes
      t = tail_.load(std::memory_order_relaxed);
      continue;
    }
    // Signed: t may be stale enough to lie behind the cached head.
    if (static_cast<std::int64_t>(t - head_cache_.load(std::memory_order_acquire)) >=
        static_cast<std::int64_t>(cqe_.load(std::memory_order_relaxed))) {
      OverrunHandler overrun;
      if (!full_or_retry(t, &overrun)) {
        if (overrun) overrun(*this);
        return false;
      }
      t = tail_.load(std::memory_order_relaxed);
      continue;
    }
    // Seq_cst: the arming handshake's barrier (below); acquire: a resize's
    // new ring and size, through its unfreeze.
    if (tail_.compare_exchange_weak(t, t + 1, std::memory_order_seq_cst, std::memory_order_relaxed)) break;
  }
  // Write and publish. A resize waits for this publish before it moves
  // the CQEs, so the ring seen here stays valid until then.
  CqRing::Cell& cell = ring_view_.load(std::memory_order_acquire)->at(t);
  cell.wc = wc;
  cell.seq.store(t + 1, std::memory_order_release);
  // A shrinking resize between the room check and the CAS leaves the tail
  // as it was, so the CAS cannot tell: check the room again. The CQE is
  // then in the storage (which never shrinks) past the new size: an
  // overrun, with this CQE kept.
  // (Signed: by now the consumer may have polled past this CQE.)
  if (static_cast<std::int64_t>(t - head_cache_.load(std::memory_order_acquire)) >=
      static_cast<std::int64_t>(cqe_.load(std::memory_order_relaxed))) [[unlikely]] {
    OverrunHandler overrun;
    if (overran_at(t, &overrun)) {
      if (overrun) overrun(*this);
      return false;
    }
  }

  // The arming handshake with req_notify (cq.h): the reservation, then this
  // load, both seq_cst; no fence after the publish.
  const std::uint32_t armed = armed_.load(std::memory_order_seq_cst);
  if (armed == 0) return true;
  if ((armed & NOTIFY_NEXT_COMP) == 0 && !solicited && wc.status == WcStatus::kSuccess) return true;
  Schedule sched = Schedule::kNone;
  Clock::time_point when{};
  bool inline_delivery = false;
  {
    std::lock_guard lk(mu_);
    const std::uint32_t now = armed_.load(std::memory_order_relaxed);  // may have fired meanwhile
    const bool qualifies = (now & NOTIFY_NEXT_COMP) != 0 ||
                           (now != 0 && (solicited || wc.status != WcStatus::kSuccess));
    if (qualifies) sched = on_qualifying_locked(&when);
    inline_delivery = delivery_ == Delivery::kInline;
  }
  switch (sched) {
    case Schedule::kNone: break;
    case Schedule::kNow:
      if (eq_ != nullptr && !inline_delivery)
        eq_->schedule(this);
      else
        (void)try_deliver_event();
      break;
    case Schedule::kAt: eq_->schedule_at(this, when); break;
  }
  return true;
}

std::uint64_t Cq::capacity() const {
  std::lock_guard plk(poll_mu_);  // resize replaces the ring under it
  return ring_->capacity;
}

std::uint64_t Cq::freeze_published() {
  const std::uint64_t t = tail_.fetch_or(CqRing::kFrozen, std::memory_order_acq_rel);
  CqRing& ring = *ring_;
  for (std::uint64_t pos = head_.load(std::memory_order_relaxed); pos < t; ++pos)
    while (ring.at(pos).seq.load(std::memory_order_acquire) != pos + 1) std::this_thread::yield();
  return t;
}

std::uint32_t Cq::clean(std::uint32_t qpn) {
  std::lock_guard lk(mu_);
  std::lock_guard plk(poll_mu_);
  const std::uint64_t t = freeze_published();
  const std::uint64_t head = head_.load(std::memory_order_relaxed);
  CqRing& ring = *ring_;
  // Keep the others, moved up against the tail (positions stay published);
  // the head moves past the gap.
  std::uint64_t dst = t;
  for (std::uint64_t pos = t; pos-- > head;) {
    if (ring.at(pos).wc.qp_num == qpn) continue;
    if (--dst != pos) ring.at(dst).wc = ring.at(pos).wc;
  }
  head_.store(dst, std::memory_order_release);
  tail_.store(t, std::memory_order_release);
  return static_cast<std::uint32_t>(dst - head);
}

Result<void> Cq::resize(std::uint32_t cqe, std::uint32_t max_cqe) {
  if (cqe < 1) return make_error(EINVAL, "resize_cq: cqe must be at least 1");
  if (cqe > max_cqe)
    return make_error(EINVAL, "resize_cq: cqe " + std::to_string(cqe) + " exceeds max_cqe " +
                                  std::to_string(max_cqe));
  std::lock_guard lk(mu_);
  std::lock_guard plk(poll_mu_);
  const std::uint64_t t = freeze_published();
  const std::uint64_t head = head_.load(std::memory_order_relaxed);
  CqRing& old = *ring_;
  Result<void> result;
  if (cqe < t - head) {
    result = make_error(EINVAL, "resize_cq: cqe " + std::to_string(cqe) + " is below the " +
                                    std::to_string(t - head) + " CQEs waiting");
  } else if (cqe > old.capacity) {
    // Grow the storage; positions (and so the counters) carry over.
    auto ring = std::make_unique<CqRing>(cqe);
    for (std::uint64_t pos = head; pos < t; ++pos) {
      ring->at(pos).wc = old.at(pos).wc;
      ring->at(pos).seq.store(pos + 1, std::memory_order_relaxed);
    }
    ring_view_.store(ring.get(), std::memory_order_relaxed);  // published by the unfreeze
    ring_ = std::move(ring);
    cqe_.store(cqe, std::memory_order_relaxed);
  } else {
    cqe_.store(cqe, std::memory_order_relaxed);  // fits the storage: only the limit changes
  }
  // A push that checked the old size before the freeze checks again after
  // its reservation (push).
  tail_.store(t, std::memory_order_release);
  return result;
}

Result<void> Cq::modify(std::uint16_t count, std::uint16_t usec) {
  std::lock_guard lk(mu_);
  mod_count_ = count;
  mod_usec_ = usec;
  return {};
}

void Cq::set_event_handler(EventHandler h, Delivery where) {
  auto p = std::make_shared<const EventHandler>(std::move(h));
  std::lock_guard lk(mu_);
  handler_ = std::move(p);
  delivery_ = where;
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
    } else if (timer_pending_ && armed_.load(std::memory_order_relaxed) != 0 && Clock::now() >= timer_deadline_) {
      timer_pending_ = false;
      armed_.store(0, std::memory_order_relaxed);  // once per arming
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
