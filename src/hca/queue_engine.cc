// The software device's queues: CQs on completion vectors, QPs, message
// dispatch from the link, and the engine's threads (started on first use).
#include <algorithm>
#include <array>
#include <atomic>

#include <fmt/format.h>

#include "hca/engine_timer.h"
#include "hca/inproc_link.h"
#include "hca/queue_engine.h"
#include "hca/translation_tables.h"

namespace srdma::hca {
namespace {

// Each thread remembers the last QPs it delivered to (a few, for ping-pong
// and request/response pairs): a stream of messages to one QP then costs a
// generation check instead of the device's shared lock, hash lookup and
// reference count. Keyed by the device's address (never reused) and the
// full QPN. The pointer is good while the generation is current, inside a
// DeliveryScope (destroy_qp waits for the scopes that may hold it).
struct QpRoute {
  std::uint64_t generation = 0;
  std::uint64_t dev_addr = 0;
  std::uint32_t qpn = 0;
  Qp* qp = nullptr;
};
constexpr std::size_t kQpRoutes = 16;
thread_local std::array<QpRoute, kQpRoutes> tls_qp_routes;

}  // namespace

QueueEngine::QueueEngine(const Profile& profile, TranslationTables& tables, alloc::IndexAllocator qp,
                         alloc::IndexAllocator cq, std::uint64_t address, Link& link, std::uint32_t qpn_base)
    : profile_(profile),
      tables_(tables),
      qp_alloc_(std::move(qp)),
      qpn_base_(qpn_base),
      cq_alloc_(std::move(cq)),
      srq_alloc_(alloc::IndexAllocator::create(static_cast<std::uint32_t>(profile.num_qp), (1u << 24) - 1, 1).value()),
      address_(address),
      link_(link),
      polled_link_(link.polled()),
      congestion_control_(profile.congestion_control != 0),
      out_(&link) {}

QueueEngine::~QueueEngine() {
  // Join the engine thread before the pointer goes: a task it is running
  // (a QP's timeout) may arm the next timer through timer_.
  if (timer_) timer_->stop();
  timer_.reset();
  {
    std::unique_lock lock(queues_mu_);
    qps_.clear();
    // (The link detached this device first, which retires the senders'
    // routes to it; this retires the QP pointers too.)
    detail::qp_generation.fetch_add(1, std::memory_order_seq_cst);
  }
  eqs_.clear();
  async_.reset();
}

void QueueEngine::start_engine() {
  std::call_once(engine_once_, [this] {
    timer_ = std::make_unique<EngineTimer>(clock_);
    async_ = std::make_unique<AsyncEventDispatcher>();
    for (std::int64_t v = 0; v < profile_.num_comp_vectors; ++v)
      eqs_.push_back(std::make_unique<EventQueue>(static_cast<std::uint32_t>(v)));

  });
}

EventQueue& QueueEngine::event_queue(std::uint32_t vector) {
  start_engine();
  return *eqs_.at(vector);
}

AsyncEventDispatcher& QueueEngine::async_events() {
  start_engine();
  return *async_;
}

Result<void> QueueEngine::impair(const ImpairSpec& spec) {
  if (auto ok = validate_impair(spec); !ok) return ok;
  // Under the queue lock: no QP can appear, so no role sends on the link
  // being replaced.
  std::unique_lock lock(queues_mu_);
  if (!qps_.empty())
    return make_error(EBUSY, fmt::format("the device has {} QP(s): impair the link before the first", qps_.size()));
  out_.store(&link_, std::memory_order_release);
  impaired_.reset();
  if (spec.any()) {
    impaired_ = std::make_unique<ImpairedLink>(link_, spec, &clock_);
    out_.store(impaired_.get(), std::memory_order_release);
  }
  return {};
}

ImpairStats QueueEngine::impair_stats() const {
  std::shared_lock lock(queues_mu_);
  return impaired_ ? impaired_->stats() : ImpairStats{};
}

bool QueueEngine::link_knows(std::uint64_t addr) const { return link_.knows(addr); }

Result<std::shared_ptr<Cq>> QueueEngine::create_cq(std::uint32_t cqe, std::uint32_t comp_vector, void* context) {
  if (cqe < 1 || cqe > profile_.max_cqe)
    return make_error(EINVAL, fmt::format("cqe {} outside 1..max_cqe {}", cqe, profile_.max_cqe));
  if (comp_vector >= profile_.num_comp_vectors)
    return make_error(EINVAL, fmt::format("comp_vector {} beyond num_comp_vectors {}", comp_vector,
                                          profile_.num_comp_vectors));
  start_engine();
  std::uint32_t cqn;
  {
    std::lock_guard lock(alloc_mu_);
    auto n = cq_alloc_.alloc();
    if (!n) return make_error(ENOMEM, "CQ table exhausted: " + n.error().reason);
    cqn = *n;
  }
  auto cq = std::make_shared<Cq>(cqn, cqe, eqs_[comp_vector].get(), comp_vector, context);
  cq->set_overrun_handler([self = self_](Cq& c) {
    if (auto engine = self.lock()) engine->on_cq_overrun(c);
  });
  std::unique_lock lock(queues_mu_);
  cqs_[cqn] = cq;
  return cq;
}

Result<void> QueueEngine::destroy_cq(const std::shared_ptr<Cq>& cq) {
  if (int n = cq->usecnt.load(); n > 0)
    return make_error(EBUSY, fmt::format("CQ {:#x} is used by {} QP(s)", cq->cqn(), n));
  cq->eq()->cancel(cq.get());
  {
    std::unique_lock lock(queues_mu_);
    cqs_.erase(cq->cqn());
  }
  std::lock_guard lock(alloc_mu_);
  (void)cq_alloc_.free(cq->cqn());
  return {};
}

void QueueEngine::on_cq_overrun(Cq& cq) {
  // IBA 11.4.2.1: a CQ overrun is a CQ error; every QP on that CQ goes to
  // ERR. Done on the engine thread: the overrun is found inside a push,
  // under the pushing role's locks.
  async_->raise(AsyncEvent{AsyncEventType::kCqErr, cq.cqn(), 0, cq.context()});
  Cq* target = &cq;
  timer_->post([this, target] {
    std::vector<std::shared_ptr<Qp>> victims;
    {
      std::shared_lock lock(queues_mu_);
      for (auto& [qpn, qp] : qps_)
        if (qp->send_cq().get() == target || qp->recv_cq().get() == target) victims.push_back(qp);
    }
    for (auto& qp : victims) {
      if (qp->state() == QpState::kErr) continue;
      qp->set_error();
      // No WQE can report this error: it is an affiliated async event.
      async_->raise(AsyncEvent{AsyncEventType::kQpFatal, 0, qp->qpn(), qp->context()});
    }
  });
}

Result<std::shared_ptr<Qp>> QueueEngine::create_qp(QpInit init) {
  const QpCaps& c = init.caps;
  auto beyond = [](const char* cap, std::uint64_t v, std::int64_t max) {
    return make_error(EINVAL, fmt::format("{} {} beyond the device's {}", cap, v, max));
  };
  if (!is_valid(init.type))
    return make_error(EINVAL, fmt::format("qp_type {} is not a QP type", static_cast<unsigned>(init.type)));
  const bool tgt = init.type == QpType::kXrcTgt, ini = init.type == QpType::kXrcIni;
  if (tgt) {
    // IBA A14.2.2: a TGT QP has an XRC domain and nothing else; what it
    // receives completes on the CQ of the XRC SRQ each request names.
    if (init.send_cq || init.recv_cq || init.srq || init.gsi)
      return make_error(EINVAL, "an XRC TGT QP has no CQs, no SRQ of its own and is not the GSI QP");
    if (!xrcd_allocated(init.xrcdn)) return make_error(EINVAL, fmt::format("XRCD {} is not allocated", init.xrcdn));
    init.caps = QpCaps{0, 0, 0, 0, 0};
  } else if (ini) {
    // An INI QP sends only: no receive CQ, queue or SRQ.
    if (!init.send_cq) return make_error(EINVAL, "an XRC INI QP needs a send CQ");
    if (init.srq || init.caps.max_recv_wr || init.caps.max_recv_sge)
      return make_error(EINVAL, "an XRC INI QP has no receive queue (max_recv_wr, max_recv_sge 0, no SRQ)");
    init.recv_cq = nullptr;
  } else if (!init.send_cq || !init.recv_cq) {
    return make_error(EINVAL, "a QP needs a send CQ and a receive CQ");
  }
  if (!tgt && (c.max_send_wr < 1 || c.max_send_wr > profile_.max_qp_wr))
    return beyond("max_send_wr", c.max_send_wr, profile_.max_qp_wr);
  // With an SRQ the receive caps are ignored (IBA 11.2.5.2).
  if (init.srq) {
    init.caps.max_recv_wr = 0;
    init.caps.max_recv_sge = 0;
  }
  if (c.max_recv_wr > profile_.max_qp_wr) return beyond("max_recv_wr", c.max_recv_wr, profile_.max_qp_wr);
  if (c.max_send_sge > profile_.max_sge) return beyond("max_send_sge", c.max_send_sge, profile_.max_sge);
  if (c.max_recv_sge > profile_.max_sge) return beyond("max_recv_sge", c.max_recv_sge, profile_.max_sge);
  if (c.max_inline_data > profile_.max_inline_data)
    return beyond("max_inline_data", c.max_inline_data, profile_.max_inline_data);
  start_engine();
  std::uint32_t qpn;
  if (!tgt && !tables_.pd_allocated(init.pdn))
    return make_error(EINVAL, fmt::format("PD {} is not allocated", init.pdn));
  if (init.gsi) {
    // QP1 is among the profile's reserved QPNs: never handed out by the
    // allocator, taken by the one GSI QP.
    if (init.type != QpType::kUd) return make_error(EINVAL, "the GSI QP is a UD QP");
    std::lock_guard lock(alloc_mu_);
    if (qp_alloc_.reserved() <= kGsiQpn) return make_error(EINVAL, "the profile's reserved_qps leave no QP1");
    if (gsi_taken_) return make_error(EBUSY, "the device's GSI QP (QP1) exists");
    gsi_taken_ = true;
    qpn = kGsiQpn;
  } else {
    std::lock_guard lock(alloc_mu_);
    auto n = qp_alloc_.alloc();
    if (!n) return make_error(ENOMEM, "QP table exhausted: " + n.error().reason);
    qpn = qpn_base_ | *n;
  }
  if (init.send_cq) init.send_cq->usecnt.fetch_add(1);
  if (init.recv_cq) init.recv_cq->usecnt.fetch_add(1);
  if (init.srq) init.srq->usecnt.fetch_add(1);
  auto qp = std::make_shared<Qp>(*this, tables_, qpn, std::move(init));
  // Published only once built: a message can find it from now on.
  std::unique_lock lock(queues_mu_);
  qps_[qpn & 0xffffff] = qp;
  detail::qp_generation.fetch_add(1, std::memory_order_release);
  return qp;
}

Result<void> QueueEngine::destroy_qp(const std::shared_ptr<Qp>& qp) {
  {
    std::unique_lock lock(queues_mu_);
    if (qps_.erase(qp->qpn() & 0xffffff) == 0)
      return make_error(EINVAL, fmt::format("QP {:#x} is not on this device", qp->qpn()));
    detail::qp_generation.fetch_add(1, std::memory_order_seq_cst);
  }
  // A delivery that found the QP through a route cache may still run in it.
  quiesce_deliveries();
  qp->drop_queued_answers();  // a destroyed QP sends no more of a READ's responses
  // Its type 2 windows die with it (their QPN may come back on a new QP).
  tables_.invalidate_windows_of_qp(qp->qpn());
  {
    std::lock_guard lock(retired_mu_);
    retired_counters_ += qp->counters();  // the device's totals keep what it did
  }
  if (qp->send_cq()) qp->send_cq()->usecnt.fetch_sub(1);
  if (qp->recv_cq()) qp->recv_cq()->usecnt.fetch_sub(1);
  if (qp->srq()) qp->srq()->usecnt.fetch_sub(1);
  std::lock_guard lock(alloc_mu_);
  if (qp->qpn() == kGsiQpn)
    gsi_taken_ = false;
  else
    (void)qp_alloc_.free(qp->qpn() & qp_alloc_.mask());
  return {};
}

std::uint32_t QueueEngine::max_srq() const { return srq_alloc_.num() - srq_alloc_.reserved(); }
std::uint32_t QueueEngine::max_srq_wr() const { return static_cast<std::uint32_t>(profile_.max_qp_wr); }
std::uint32_t QueueEngine::max_srq_sge() const { return static_cast<std::uint32_t>(profile_.max_sge); }

Result<std::shared_ptr<Srq>> QueueEngine::create_srq(std::uint32_t pdn, std::uint32_t max_wr, std::uint32_t max_sge,
                                                     std::uint32_t srq_limit, void* context, Srq::XrcBinding xrc) {
  if (xrc.max_num_tags != 0 || xrc.max_ops != 0) {
    if (xrc.xrcdn != 0) return make_error(EINVAL, "an SRQ is XRC or tag-matching, not both");
    if (xrc.max_num_tags < 1 || xrc.max_num_tags > kMaxNumTags)
      return make_error(EINVAL, fmt::format("max_num_tags {} outside 1..{}", xrc.max_num_tags, kMaxNumTags));
    if (xrc.max_ops < 1 || xrc.max_ops > kMaxTmOps)
      return make_error(EINVAL, fmt::format("max_ops {} outside 1..{}", xrc.max_ops, kMaxTmOps));
    if (!xrc.cq) return make_error(EINVAL, "a tag-matching SRQ needs the CQ its list operations complete on");
  }
  if (xrc.xrcdn != 0 || xrc.cq) {
    if (xrc.max_num_tags == 0 && !xrcd_allocated(xrc.xrcdn))
      return make_error(EINVAL, fmt::format("XRCD {} is not allocated", xrc.xrcdn));
    if (!xrc.cq) return make_error(EINVAL, "an XRC SRQ needs the CQ its receives complete on");
    std::shared_lock lock(queues_mu_);
    auto it = cqs_.find(xrc.cq->cqn());
    if (it == cqs_.end() || it->second.lock() != xrc.cq) return make_error(EINVAL, "the CQ is not of this device");
  }
  if (max_wr < 1 || max_wr > max_srq_wr())
    return make_error(EINVAL, fmt::format("max_wr {} outside 1..max_srq_wr {}", max_wr, max_srq_wr()));
  if (max_sge < 1 || max_sge > max_srq_sge())
    return make_error(EINVAL, fmt::format("max_sge {} outside 1..max_srq_sge {}", max_sge, max_srq_sge()));
  if (srq_limit > max_wr) return make_error(EINVAL, fmt::format("srq_limit {} beyond max_wr {}", srq_limit, max_wr));
  if (!tables_.pd_allocated(pdn)) return make_error(EINVAL, fmt::format("PD {} is not allocated", pdn));
  start_engine();
  std::uint32_t srqn;
  {
    std::lock_guard lock(alloc_mu_);
    auto n = srq_alloc_.alloc();
    if (!n) return make_error(ENOMEM, "SRQ table exhausted: " + n.error().reason);
    srqn = *n;
  }
  const bool is_xrc = xrc.xrcdn != 0;
  auto srq = std::make_shared<Srq>(srqn, pdn, max_wr, max_sge, srq_limit, context, *async_, std::move(xrc));
  if (is_xrc) {  // published built: a TGT QP can find it from now on
    std::lock_guard lock(xrc_mu_);
    xrc_srqs_[srqn] = srq;
  }
  return srq;
}

std::shared_ptr<Srq> QueueEngine::find_xrc_srq(std::uint32_t srqn) const {
  std::lock_guard lock(xrc_mu_);
  auto it = xrc_srqs_.find(srqn);
  return it == xrc_srqs_.end() ? nullptr : it->second.lock();
}

std::uint32_t QueueEngine::alloc_xrcd() {
  std::lock_guard lock(xrc_mu_);
  const std::uint32_t n = next_xrcdn_++;
  xrcds_.insert(n);
  return n;
}

void QueueEngine::free_xrcd(std::uint32_t xrcdn) {
  std::lock_guard lock(xrc_mu_);
  xrcds_.erase(xrcdn);
}

bool QueueEngine::xrcd_allocated(std::uint32_t xrcdn) const {
  std::lock_guard lock(xrc_mu_);
  return xrcdn != 0 && xrcds_.contains(xrcdn);
}

Result<void> QueueEngine::destroy_srq(const std::shared_ptr<Srq>& srq) {
  if (int n = srq->usecnt.load(); n > 0)
    return make_error(EBUSY, fmt::format("SRQ {:#x} is used by {} QP(s)", srq->srqn(), n));
  if (srq->is_xrc()) {
    // Unpublished first: a TGT QP that already holds it finishes the
    // message it is placing; the next request naming it is refused.
    std::lock_guard lock(xrc_mu_);
    xrc_srqs_.erase(srq->srqn());
  }
  std::lock_guard lock(alloc_mu_);
  (void)srq_alloc_.free(srq->srqn());
  return {};
}

void QueueEngine::receive(Packet&& msg) {
  // A packet whose ICRC failed is dropped before any of its fields is
  // believed (IBA 7.8.1): not even its destination QPN.
  if (msg.corrupted) [[unlikely]] {
    dropped_bad_icrc_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  DeliveryScope scope;  // before the generation check (nests in the link's)
  QpRoute& route = tls_qp_routes[(msg.dst_qpn ^ (msg.dst_qpn >> 4) ^ address_) % kQpRoutes];
  // The generation is read before the table: an entry cached below is
  // tagged no newer than the table it came from.
  const std::uint64_t generation = qp_table_generation();
  Qp* qp;
  std::shared_ptr<Qp> held;  // on the locked path only
  if (route.generation == generation && route.dev_addr == address_ && route.qpn == msg.dst_qpn) [[likely]] {
    qp = route.qp;
  } else {
    held = find_qp(msg.dst_qpn);
    if (!held) {  // no such QP: dropped (IBA 9.6.1.5)
      dropped_unknown_qp_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    route = QpRoute{generation, address_, msg.dst_qpn, held.get()};
    qp = held.get();
  }
  dispatch(*qp, std::move(msg));
}

std::shared_ptr<Qp> QueueEngine::find_qp(std::uint32_t qpn) const {
  std::shared_lock lock(queues_mu_);
  auto it = qps_.find(qpn & 0xffffff);
  return it != qps_.end() && it->second->qpn() == qpn ? it->second : nullptr;
}

void QueueEngine::use_manual_clock(ManualClock& clock) {
  clock_.use(&clock);
  start_engine();
  clock.on_advance([weak = self_] {
    if (auto engine = weak.lock()) engine->timer_->poke();
  });
}

void QueueEngine::drain_timer() {
  start_engine();
  timer_->drain();
}

std::vector<TableUsage> QueueEngine::table_usage() const {
  std::lock_guard lock(alloc_mu_);
  auto row = [](const char* name, const alloc::IndexAllocator& a) {
    return TableUsage{name, a.used(), a.reserved(), a.num()};
  };
  return {row("QP", qp_alloc_), row("CQ", cq_alloc_)};
}

std::vector<CqUsage> QueueEngine::cq_usage() const {
  std::vector<std::shared_ptr<Cq>> cqs;
  {
    std::shared_lock lock(queues_mu_);
    for (const auto& [cqn, weak] : cqs_)
      if (auto cq = weak.lock()) cqs.push_back(std::move(cq));
  }
  // Queried outside queues_mu_: a CQ's own locks are never taken under it.
  std::vector<CqUsage> out;
  out.reserve(cqs.size());
  for (const auto& cq : cqs)
    out.push_back(CqUsage{.cqn = cq->cqn(),
                          .comp_vector = cq->comp_vector(),
                          .cqe = cq->cqe(),
                          .cqe_capacity = cq->capacity(),
                          .cqe_bytes = Cq::kCqeBytes,
                          .state_bytes = sizeof(Cq),
                          .qps = cq->usecnt.load(std::memory_order_relaxed)});
  std::sort(out.begin(), out.end(), [](const CqUsage& a, const CqUsage& b) { return a.cqn < b.cqn; });
  return out;
}

std::size_t QueueEngine::allocator_bytes() const { return qp_alloc_.bytes() + cq_alloc_.bytes(); }

TransportCounters QueueEngine::counters() const {
  TransportCounters sum;
  {
    std::lock_guard lock(retired_mu_);
    sum = retired_counters_;
  }
  {
    std::shared_lock lock(queues_mu_);
    for (const auto& [qpn, qp] : qps_) sum += qp->counters();
  }
  sum.dropped_for(DropReason::kUnknownQp) += dropped_unknown_qp_.load(std::memory_order_relaxed);
  sum.dropped_for(DropReason::kBadIcrc) += dropped_bad_icrc_.load(std::memory_order_relaxed);
  sum.dropped_for(DropReason::kBadOpcode) += dropped_wrong_transport_.load(std::memory_order_relaxed);
  link_.add_drops(sum);
  return sum;
}

void QueueEngine::notify_congestion(Qp& qp, const Packet& req) {
  // Only the QP's own peer is told, and only of its own packets: a forged
  // CE-marked request from elsewhere makes no CNP, and a CNP never goes to
  // an address a packet merely claimed.
  const std::uint64_t peer = qp.peer_addr();
  if (peer == 0 || req.src_addr != peer || req.src_qpn != qp.peer_qpn()) return;
  if (!qp.claim_cnp(clock_.now(), std::chrono::microseconds(dcqcn_.min_time_between_cnps))) return;
  Packet cnp;
  cnp.transport = qp.type();
  cnp.op = Opcode::kCnp;
  cnp.src_addr = address_;
  cnp.dst_addr = peer;
  cnp.src_qpn = qp.qpn();
  cnp.dst_qpn = qp.peer_qpn();
  cnp.udp_sport = entropy_port(qp.qpn());
  qp.count_cnp_sent();
  (void)link().send(std::move(cnp));  // (lost: the next mark asks again)
}

void QueueEngine::schedule_timer(std::weak_ptr<Qp> qp, Clock::time_point at) {
  start_engine();
  timer_->schedule(std::move(qp), at);
}

void QueueEngine::kick_later(std::shared_ptr<Qp> qp) {
  start_engine();
  timer_->post([qp = std::move(qp)] { qp->kick(); });
}

void QueueEngine::schedule_response_turn(std::weak_ptr<Qp> qp) {
  start_engine();
  timer_->schedule_task(clock_.now() + Clock::duration(1), [qp = std::move(qp)] {
    if (auto q = qp.lock()) q->respond_turn();
  });
}

}  // namespace srdma::hca
