// The device's queue engine: CQs on completion vectors (event queues and
// their threads), QPs and the transport roles that run them, the engine
// timer and its clock, async events, the device's place on the link, and
// the transport counters.
//
// This is half of the software HCA (soft_hca.h); it reaches the other half,
// the translation tables, only through translate() and the fast
// registration calls its QPs make.
//
// Thread safety: every call from any thread; the queue tables are guarded
// by a shared mutex, the engine's threads start with the first CQ or QP.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "alloc/index_allocator.h"
#include "hca/async_events.h"
#include "hca/cq.h"
#include "hca/dcqcn.h"
#include "hca/engine_clock.h"
#include "hca/event_queue.h"
#include "hca/impaired_link.h"
#include "hca/link.h"
#include "hca/qp.h"
#include "hca/srq.h"
#include "srdma/counters.h"
#include "srdma/impair.h"
#include "srdma/profile.h"
#include "srdma/status.h"
#include "srdma/usage.h"

namespace srdma::hca {

class EngineTimer;
class TranslationTables;

namespace detail {
// Bumped (under the device's queues_mu_) by every QP creation and
// destruction on any device: a cached QP pointer is good while the
// generation it was taken at is current.
inline std::atomic<std::uint64_t> qp_generation{1};
}  // namespace detail
// Read before looking a QP up for a cache (seq_cst: the DeliveryScope
// handshake with destroy_qp).
inline std::uint64_t qp_table_generation() { return detail::qp_generation.load(std::memory_order_seq_cst); }

class QueueEngine {
 public:
  // `qpn_base` goes into every QPN above the allocator's bits (a shared
  // address's slot, host_steering.h; 0 otherwise).
  QueueEngine(const Profile& profile, TranslationTables& tables, alloc::IndexAllocator qp,
              alloc::IndexAllocator cq, std::uint64_t address, Link& link, std::uint32_t qpn_base = 0);
  ~QueueEngine();
  QueueEngine(const QueueEngine&) = delete;
  QueueEngine& operator=(const QueueEngine&) = delete;
  // The owner's handle on this engine (for callbacks that may outlive it).
  void set_self(std::weak_ptr<QueueEngine> self) { self_ = std::move(self); }

  TranslationTables& tables() const { return tables_; }
  std::uint64_t address() const { return address_; }
  // EINVAL: cqe outside 1..max_cqe, comp_vector >= num_comp_vectors.
  Result<std::shared_ptr<Cq>> create_cq(std::uint32_t cqe, std::uint32_t comp_vector, void* context);
  // EBUSY while QPs use it.
  Result<void> destroy_cq(const std::shared_ptr<Cq>& cq);
  // EINVAL naming the cap beyond the device's limits.
  Result<std::shared_ptr<Qp>> create_qp(QpInit init);
  Result<void> destroy_qp(const std::shared_ptr<Qp>& qp);
  // An SRQ of `max_wr` WQEs of `max_sge` SGEs in PD `pdn` (EINVAL naming
  // the field beyond the device's limits; srq_limit above max_wr);
  // `context` is what its limit event carries.
  // `xrc`: an XRC SRQ of that (live) domain, completing on that CQ of this
  // device (EINVAL otherwise); it can be found by its SRQN (find_xrc_srq).
  Result<std::shared_ptr<Srq>> create_srq(std::uint32_t pdn, std::uint32_t max_wr, std::uint32_t max_sge,
                                          std::uint32_t srq_limit, void* context, Srq::XrcBinding xrc = {});
  // The live XRC SRQ numbered `srqn` here, or null (a TGT QP's lookup of
  // an XRCETH; a basic SRQ is never returned).
  std::shared_ptr<Srq> find_xrc_srq(std::uint32_t srqn) const;
  // XRC domains (IBA A14.2): a number each, never reused while the device
  // lives, so a stale one names no domain. alloc never fails.
  std::uint32_t alloc_xrcd();
  void free_xrcd(std::uint32_t xrcdn);
  bool xrcd_allocated(std::uint32_t xrcdn) const;
  // EBUSY while QPs use it.
  Result<void> destroy_srq(const std::shared_ptr<Srq>& srq);
  // The device's SRQ limits: the SRQ table is as large as the QP table
  // (SRQN 0 reserved), an SRQ as deep and as wide as a QP's receive queue.
  std::uint32_t max_srq() const;
  std::uint32_t max_srq_wr() const;
  std::uint32_t max_srq_sge() const;
  // A tag-matching SRQ's limits: tags in its list, and list operations
  // (they run when posted, so none is ever outstanding; max_ops is only
  // checked).
  static constexpr std::uint32_t kMaxNumTags = 1024;
  static constexpr std::uint32_t kMaxTmOps = 1024;
  EventQueue& event_queue(std::uint32_t vector);
  AsyncEventDispatcher& async_events();

  // What the transport did: the sum over this device's QPs, past and
  // present, plus the packets no QP could take (unknown destination QPN).
  TransportCounters counters() const;
  // The transport and RNR timers run on `clock` from now on (tests).
  // REQUIRES: `clock` outlives the device; called before the first QP.
  void use_manual_clock(ManualClock& clock);
  const EngineClock& clock() const { return clock_; }
  // Returns once every timer task due by the clock's now has run: a test's
  // barrier after ManualClock::advance (what fell due has happened).
  void drain_timer();
  // From now on the device sends through a link that impairs its packets
  // as `spec` says (impair.h); a spec without any impairment restores the
  // plain link. EBUSY once the device has a QP (its roles hold on to the
  // link they send on); EINVAL for a spec out of range.
  Result<void> impair(const ImpairSpec& spec);
  // What the impairing link did (zeros without one).
  ImpairStats impair_stats() const;

  // For the engine.
  Link& link() { return *out_.load(std::memory_order_acquire); }
  bool link_knows(std::uint64_t addr) const;
  std::uint32_t active_mtu() const { return link_.active_mtu(); }
  // Receives what the wire holds, in the calling thread (Link::poll).
  int poll_link() { return link_.poll(); }
  // What a blocked consumer sleeps on besides its channel (Link::prepare_sleep).
  bool prepare_link_sleep(std::vector<pollfd>& fds) { return link_.prepare_sleep(fds); }
  void end_link_sleep() { link_.end_sleep(); }
  std::int64_t link_busy_poll_ns() const { return link_.busy_poll_ns(); }
  // Hands what the calling thread left pending or deferred to the wire
  // (Link::end_batch), before it blocks.
  void flush_link() { link_.end_batch(); }
  // Whether polling is how the wire gets received when consumers spin
  // (the RoCEv2 link); the in-process link delivers by itself.
  bool link_is_polled() const { return polled_link_; }
  // Congestion control (dcqcn.h): on unless the profile or SRDMA_CC=0
  // turned it off; its parameters.
  bool congestion_control() const { return congestion_control_; }
  const DcqcnParams& dcqcn() const { return dcqcn_; }
  // A packet for this device: dropped if corrupted or for no QP here,
  // else handed to its QP.
  void receive(Packet&& msg);
  // The QP `qpn` names here, or null. A cache may keep the plain pointer
  // while qp_table_generation(), read BEFORE this call, is current, inside
  // a DeliveryScope.
  std::shared_ptr<Qp> find_qp(std::uint32_t qpn) const;
  // receive() for a packet whose QP the sender's cache found.
  void deliver(Qp& qp, Packet&& msg) {
    if (msg.corrupted) [[unlikely]] {
      dropped_bad_icrc_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    dispatch(qp, std::move(msg));
  }
  // deliver() of ack.packet(), without building it.
  void deliver_ack(Qp& qp, const Ack& ack) {
    if (qp.type() != QpType::kRc) [[unlikely]] {  // as dispatch: another transport's packet
      dropped_wrong_transport_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    qp.receive_ack(ack);
  }
  void schedule_timer(std::weak_ptr<Qp> qp, Clock::time_point at);
  void kick_later(std::shared_ptr<Qp> qp);
  // Runs `qp`'s next responder turn (Qp::respond_turn) on the engine thread,
  // one tick of the engine clock from now, behind everything due before: a
  // train of READ responses goes out a burst per turn, and what other QPs
  // have due runs between its bursts. On a ManualClock a test steps the
  // turns (advance one tick, drain_timer(): each QP with answers waiting
  // gets one).
  void schedule_response_turn(std::weak_ptr<Qp> qp);

  // The QP and CQ rows of the device's usage table.
  std::vector<TableUsage> table_usage() const;
  std::size_t allocator_bytes() const;  // the QP and CQ allocators' bitmaps
  // Every CQ of the device, by CQN; state_bytes counts the device's CQ
  // object (the caller adds its own); shared and cqe_used are left to it.
  std::vector<CqUsage> cq_usage() const;

 private:
  // A packet for `qp` (found by its QPN): to its responder or completer.
  void dispatch(Qp& qp, Packet&& msg) {
    // A CNP names no transport: it is for the requester of an RC or UC QP,
    // through the send side's inbox (the completer admits its source).
    if (msg.op == Opcode::kCnp) [[unlikely]] {
      if (!qp.congestion_control()) {
        dropped_wrong_transport_.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      msg.transport = qp.type();
      if (msg.src_qpn == kSrcQpnFromPath) msg.src_qpn = qp.peer_qpn();
      qp.receive_response(std::move(msg));
      return;
    }
    // IBA 9.6.1.5: a packet of another transport than the QP's is dropped.
    if (msg.transport != qp.type()) [[unlikely]] {
      dropped_wrong_transport_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    // From a wire whose RC packets do not name their source QP: the QP's
    // peer is the only one it would hear anyway.
    if (msg.src_qpn == kSrcQpnFromPath) msg.src_qpn = qp.peer_qpn();
    if (is_request(msg.op)) {
      if (ecn_marked(msg.traffic_class) && qp.congestion_control()) [[unlikely]] notify_congestion(qp, msg);
      qp.receive_request(std::move(msg));
    } else {
      qp.receive_response(std::move(msg));
    }
  }
  // The notification point (dcqcn.h): a CNP to the QP that sent `req`, a
  // request that arrived marked CE, at most one per min_time_between_cnps.
  void notify_congestion(Qp& qp, const Packet& req);
  // The engine, started with the first CQ or QP so that an idle device
  // costs no threads.
  void start_engine();
  void on_cq_overrun(Cq& cq);

  const Profile& profile_;
  TranslationTables& tables_;
  std::weak_ptr<QueueEngine> self_;
  mutable std::mutex alloc_mu_;  // guards qp_alloc_, cq_alloc_ and srq_alloc_
  alloc::IndexAllocator qp_alloc_;
  const std::uint32_t qpn_base_;
  bool gsi_taken_ = false;  // QP1 exists (it is outside qp_alloc_'s range)
  alloc::IndexAllocator cq_alloc_;
  alloc::IndexAllocator srq_alloc_;
  const std::uint64_t address_;
  Link& link_;  // the wire to other devices
  const bool polled_link_;
  const bool congestion_control_;
  const DcqcnParams dcqcn_;
  std::unique_ptr<ImpairedLink> impaired_;  // around link_, when asked for
  std::atomic<Link*> out_;  // what the roles send on: link_ or impaired_
  std::once_flag engine_once_;
  std::unique_ptr<EngineTimer> timer_;
  std::unique_ptr<AsyncEventDispatcher> async_;
  std::vector<std::unique_ptr<EventQueue>> eqs_;
  mutable std::mutex xrc_mu_;  // guards xrc_srqs_, xrcds_, next_xrcdn_
  std::unordered_map<std::uint32_t, std::weak_ptr<Srq>> xrc_srqs_;
  std::unordered_set<std::uint32_t> xrcds_;
  std::uint32_t next_xrcdn_ = 1;
  mutable std::shared_mutex queues_mu_;  // guards qps_ and cqs_
  std::unordered_map<std::uint32_t, std::shared_ptr<Qp>> qps_;
  std::unordered_map<std::uint32_t, std::weak_ptr<Cq>> cqs_;
  EngineClock clock_;
  std::atomic<std::uint64_t> dropped_unknown_qp_{0};
  std::atomic<std::uint64_t> dropped_bad_icrc_{0};
  std::atomic<std::uint64_t> dropped_wrong_transport_{0};
  mutable std::mutex retired_mu_;  // guards retired_counters_
  TransportCounters retired_counters_;  // of destroyed QPs
};

}  // namespace srdma::hca
