// A queue pair of the software device: its queues, its state machine,
// and the roles of the transport engine. RC runs all three; a UC or UD WQE
// needs no response (it is acknowledged once handed to the link, and the
// completer retires it), and UC and UD receive in uc_responder.cc and
// ud_responder.cc.
//
// Roles (one object and one file each): the requester (requester.h) turns
// send WQEs into request packets; the completer (completer.h) matches
// response packets to WQEs and writes CQEs; both work on the shared send
// queue (send_queue.h), whose WQEs carry their state, and read the path
// modify_qp set (send_path.h). Each owns its state: the completer moves the
// requester only through its calls (rewind_to, wait_rnr, rd_atomic_retired,
// stop), the requester asks the completer to time a request or retire what
// has nothing left to wait for, and a failure that ends the QP goes through
// the QP (fail_wqe), which flushes the receive side. The responder
// (responder.cc) executes request packets that arrive and answers them.
//
// Locking: `sq_mu_` guards the send queue, the requester and the completer;
// `rq_mu_` guards the receive queue and the responder (except a whole
// in-sequence RDMA WRITE, which runs without it: Responder::write_unlocked). The send
// side runs in whatever thread holds sq_mu_: a poster (post_send executes
// in the poster's thread), the link's receive path, or the device timer.
// Responses arrive in `inbox_` (its own small lock) and are drained by the
// holder of sq_mu_; kick() makes sure some thread drains them. Lock order:
// sq_mu_ of one QP, then rq_mu_ of any QP, then inbox/CQ locks. Never
// rq_mu_ then sq_mu_.
// Fast registration (REG_MR, LOCAL_INV, SEND_WITH_INV) takes the device's
// control mutex under sq_mu_ or rq_mu_; it is a leaf lock (nothing takes
// a QP, CQ or inbox lock while holding it).
// The three are FastMutex (fast_mutex.h): same acquire/release ordering as
// std::mutex, cheaper uncontended. Fields name the lock that guards them
// (GUARDED_BY) and functions the locks they need (REQUIRES) or take
// (EXCLUDES); the roles name theirs through sq_mutex()/rq_mutex()
// (qp_locks.h). Clang checks all of it (scripts/thread_safety.sh).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "common/thread_annotations.h"
#include "hca/delivery_scope.h"
#include "hca/engine_clock.h"
#include "hca/fast_mutex.h"
#include "hca/packet.h"
#include "hca/completer.h"
#include "hca/qp_counters.h"
#include "hca/qp_locks.h"
#include "hca/recv_queue.h"
#include "hca/recv_wqe.h"
#include "hca/requester.h"
#include "hca/responder.h"
#include "hca/send_path.h"
#include "hca/send_queue.h"
#include "hca/transport_limits.h"
#include "hca/wr_opcode_table.h"
#include "srdma/counters.h"
#include "srdma/qp_attr.h"
#include "srdma/status.h"
#include "srdma/wr.h"

namespace srdma::hca {

class Cq;
class QueueEngine;
class Srq;
class TranslationTables;

struct QpInit {
  std::uint32_t pdn = 0;
  std::shared_ptr<Cq> send_cq;
  std::shared_ptr<Cq> recv_cq;
  QpCaps caps;
  bool sq_sig_all = false;
  void* qp_context = nullptr;
  // Receives come from this SRQ (caps.max_recv_wr and max_recv_sge are
  // then ignored, and post_recv on the QP is refused).
  std::shared_ptr<Srq> srq = nullptr;
  QpType type = QpType::kRc;
  bool gsi = false;  // QP1 (see QP_CREATE_GSI)
  // An XRC TGT QP: its XRC domain (QueueEngine::alloc_xrcd). It has no PD,
  // no CQs and no send queue: each request names the XRC SRQ of this
  // domain it lands in, whose PD and CQ serve it. An XRC INI QP has a PD
  // and a send CQ only.
  std::uint32_t xrcdn = 0;
  // The machines' early entries (the plain-WR post, the whole-message send,
  // the unlocked WRITE, the compact ACK) are on. false runs every WR and
  // packet through the full machines only: the differential test's
  // reference, which must end in the same states, completions, counters
  // and bytes.
  bool fast_entries = true;
  // Congestion control (dcqcn.h) on this QP, where the device has it on:
  // QP_CREATE_NO_CONGESTION_CONTROL clears it.
  bool congestion_control = true;
};


// A REG_MR work request's mapping as the device sees it: the verbs core
// resolves the WR's MemoryRegion into this page-list view at post time (the
// device never looks inside a core object). The span is copied before
// post_send returns.
struct FastRegView {
  std::uint8_t page_shift = 12;
  std::uint64_t iova = 0;
  std::uint64_t length = 0;
  std::span<const std::uint64_t> pages;
};
// Fills `out` for a live fast-registration MR (alloc_mr(kMemReg)); false
// for anything else.
using FastRegResolver = bool (*)(const MemoryRegion* mr, FastRegView& out);

// A BIND_MW work request's window and region as the device sees them,
// resolved by the core at post time (it knows the handles).
struct MwBindView {
  std::uint32_t mw_alloc_key = 0;  // the window's alloc_mw key
  std::uint32_t mr_key = 0;        // the region's lkey (0 without one)
  bool type1_verb = false;         // posted by the type 1 bind verb
};
// Fills `out` for a WR whose window (and MR, if any) are live; false
// otherwise (the WR is refused with EINVAL).
using MwResolver = bool (*)(const SendWr& wr, MwBindView& out);

// A UD WR's address handle as the device sees it, resolved by the core at
// post time like a REG_MR's mapping.
struct UdAddress {
  std::uint32_t pdn = 0;  // the AH's PD: it must be the QP's
  std::uint64_t dest_addr = 0;
  std::uint8_t hop_limit = 64;
  std::uint8_t traffic_class = 0;
};
// Fills `out` for a live AH; false for anything else.
using AhResolver = bool (*)(const AddressHandle* ah, UdAddress& out);

// What post_send needs from the layer that knows the handles: one pointer
// (three function pointers as arguments cost the posting loop registers).
struct PostResolvers {
  FastRegResolver fast_reg = nullptr;  // REG_MR's MR -> its mapping
  AhResolver ah = nullptr;             // a UD WR's AH -> its address
  MwResolver mw = nullptr;             // BIND_MW's window and MR -> their keys
};

class Qp : public std::enable_shared_from_this<Qp> {
  // The roles reach the QP's context (its queues, path, link, tables,
  // counters and timer) but each other only by their public calls.
  friend class Requester;
  friend class Completer;
  friend class Responder;
  friend FastMutex& sq_mutex(Qp& qp);
  friend FastMutex& rq_mutex(Qp& qp);

 public:
  Qp(QueueEngine& engine, TranslationTables& tables, std::uint32_t qpn, QpInit init);
  ~Qp();

  std::uint32_t qpn() const { return qpn_; }
  // The QP it is connected to (QP_DEST_QPN); 0 before RTR.
  std::uint32_t peer_qpn() const { return responder_.peer_qpn(); }
  std::uint64_t peer_addr() const { return responder_.peer_addr(); }  // (0 before RTR)
  std::uint32_t pdn() const { return init_.pdn; }
  QpType type() const { return init_.type; }
  const QpCaps& caps() const { return init_.caps; }
  void* context() const { return init_.qp_context; }
  const std::shared_ptr<Cq>& send_cq() const { return init_.send_cq; }
  const std::shared_ptr<Cq>& recv_cq() const { return init_.recv_cq; }
  const std::shared_ptr<Srq>& srq() const { return init_.srq; }
  std::uint32_t xrcdn() const { return init_.xrcdn; }
  QpState state() const { return state_.load(std::memory_order_acquire); }
  QpAttr attr() const;
  // Congestion control runs on this QP (the device's and the QP's choice).
  bool congestion_control() const { return congestion_control_; }
  // The notification point: whether a CNP may go to this QP's peer now, at
  // most one per `gap` (several receive threads may ask; one wins).
  bool claim_cnp(Clock::time_point now, Clock::duration gap);
  void count_cnp_sent() { recv_counters_.cnps_sent.bump(); }
  // What the transport did on this QP so far (any thread; see qp_counters.h).
  TransportCounters counters() const { return QpCounters::snapshot(send_counters_, recv_counters_); }

  Result<void> modify(const QpAttr& attr, std::uint32_t mask) EXCLUDES(sq_mu_, rq_mu_);
  // Posts a list; on error *bad_wr names the first WR not posted (everything
  // before it is posted, nothing after it).
  // `resolve` turns a REG_MR WR's MR into its mapping; without one, REG_MR
  // is refused (EINVAL). `resolve_ah` does the same for a UD WR's AH, and
  // `resolve_mw` for a BIND_MW's window and MR.
  Result<void> post_send(const SendWr* wr, const SendWr** bad_wr, const PostResolvers* resolvers = nullptr)
      EXCLUDES(sq_mu_);
  Result<void> post_recv(const RecvWr* wr, const RecvWr** bad_wr) EXCLUDES(rq_mu_);

  // From the link: a request for the responder, a response for the completer.
  void receive_request(Packet&& pkt) {
    // Responses that arrived before this request but found the send side
    // busy (stranded in the inbox) complete first: one QP's packets
    // complete in arrival order, as an HCA's do. Otherwise a send's CQE
    // (its ACK stranded behind a timer's turn) could follow the CQE of the
    // peer's next message, and a program that waits for both on one
    // channel (perftest's -e) reads the wrong CQ.
    if (inbox_ready_.load(std::memory_order_acquire)) [[unlikely]] drain_stranded_responses();
    responder_.receive(std::move(pkt));
    // A rendezvous the responder matched (queue_rndv) is the send side's:
    // run it now that rq_mu_ is let go.
    if (rndv_kick_.load(std::memory_order_relaxed)) [[unlikely]] kick_rndv();
  }
  void receive_response(Packet&& pkt);
  // receive_response() of ack.packet() (QueueEngine::deliver_ack).
  void receive_ack(const Ack& ack);
  // Moves the QP to ERR and flushes (CQ overrun, device fatal, class C errors).
  void set_error();
  // Runs the send side if no thread does (timer expiry, new responses).
  void kick();
  // After letting go of sq_mu_: runs the send side for a response that
  // arrived while we held it (send_side.cc says why the fence). Inline: it
  // follows every post.
  void take_stranded_responses() {
    poster_fence();
    if (inbox_ready_.load(std::memory_order_relaxed)) [[unlikely]] kick();
  }
  // Waits for the send side and runs it, for receive_request (only on a
  // thread that runs no send side: send_side.cc says why).
  void drain_stranded_responses();
  // Its fence: the poster's half of the Dekker pair with kick() (qp.cc).
  void poster_fence() const;
  // The engine timer's callback for the deadline `at` armed: runs the send
  // side (waits for the lock), unless an earlier deadline superseded `at`.
  void on_timer(Clock::time_point at) EXCLUDES(sq_mu_);
  // A responder turn on the engine thread (QueueEngine::schedule_response_turn):
  // the next kResponseBurst packets of what waits in its answer queue, sent
  // without rq_mu_.
  void respond_turn() { responder_.respond_turn(); }
  // The QP is being destroyed: what waits in its answer queue is dropped.
  void drop_queued_answers() { responder_.drop_queued_answers(); }
  Clock::time_point timer_deadline() const;

 private:
  Result<void> modify_locked(const QpAttr& attr, std::uint32_t mask) EXCLUDES(sq_mu_, rq_mu_);  // takes and drops the locks
  // post_send's parts (REQUIRES sq_mu_). The checks every WR takes first
  // (its SGE list, opcode and flags): the first that fails, for both
  // entries below to refuse or report.
  enum class WrFault : std::uint8_t { kNone, kNumSge, kNullSgList, kOpcode, kFlags };
  [[gnu::always_inline]] inline WrFault wr_fault(const SendWr& wr) const REQUIRES(sq_mu_);
  static std::uint64_t sge_length(const SendWr& wr) {
    std::uint64_t n = 0;
    for (int i = 0; i < wr.num_sge; ++i) n += wr.sg_list[i].length;
    return n;
  }
  // A message of `length` bytes may be posted: at most 2^31 (IBA 9.4.4),
  // and inline data within max_inline_data.
  static constexpr std::uint64_t kMaxMessageBytes = 0x80000000ull;
  bool message_length_fits(std::uint32_t send_flags, std::uint64_t length) const {
    return length <= ((send_flags & SEND_INLINE) ? init_.caps.max_inline_data : kMaxMessageBytes);
  }
  // The early entry: whether `wr` is an RC SEND or WRITE that passes
  // every check by passing these (its length then in `length`); the WQE
  // such a WR makes; and every other WR, checked and queued.
  // (Inline, and defined in qp.cc, its only user: part of every post.)
  [[gnu::always_inline]] inline bool plain_data_wr(const SendWr& wr, std::uint64_t& length) const REQUIRES(sq_mu_);
  [[gnu::always_inline]] inline void fill_data_wqe(SendWqe& w, const SendWr& wr, std::uint64_t length)
      REQUIRES(sq_mu_);
  [[gnu::noinline]] Result<void> post_one_checked(const SendWr& wr, const PostResolvers& resolvers) REQUIRES(sq_mu_);
  // The send side (send_side.cc), REQUIRES sq_mu_: drains the responses
  // that arrived into the completer, then runs the requester until it
  // idles. check_timeout: the engine timer's run.
  void run_send_side(bool check_timeout = false) REQUIRES(sq_mu_);
  // receive_ack()'s uncommon case, out of line (a Packet would widen the
  // frame of the common one).
  [[gnu::noinline, gnu::cold]] void receive_response_packet(const Ack& ack);
  // Responses are here that the send side has not taken yet.
  bool answers_waiting() const REQUIRES(sq_mu_) {
    return own_answers_pending() || inbox_ready_.load(std::memory_order_acquire);
  }
  // The QP fails at the send WQE `index` (IBA 10.8.3.3): the WQEs before it
  // can no longer be acknowledged and flush, it completes with `status`,
  // the receive queue flushes, and the rest of the send queue flushes when
  // the send side next runs.
  void fail_wqe(std::uint64_t index, WcStatus status) REQUIRES(sq_mu_) EXCLUDES(rq_mu_);
  // ERR: both queues flush.
  void flush_send_queue() REQUIRES(sq_mu_);
  bool translate_local(const std::vector<Sge>& sges, std::uint32_t access, PieceList& out) const {
    return translate_local(sges, access, out, init_.pdn);
  }
  // ... its SGEs' keys of the PD `pdn` (a device WQE's: local_pdn).
  bool translate_local(const std::vector<Sge>& sges, std::uint32_t access, PieceList& out, std::uint32_t pdn) const;
  // The PD a send WQE's local keys are of: the QP's, or for a rendezvous
  // READ the TM SRQ's (its tag's buffer).
  std::uint32_t local_pdn(const SendWqe& w) const { return w.device == DeviceWqe::kNone ? init_.pdn : w.tm_pdn; }
  // The bytes [offset, offset + len) of an SGE list, translated piece by
  // piece (each piece's key, access and bounds checked).
  // `pdn`: the PD the keys must be of (a receive from an SRQ: the SRQ's).
  bool translate_slice(const std::vector<Sge>& sges, std::uint64_t offset, std::uint64_t len, std::uint32_t access,
                       std::uint32_t pdn, PieceList& out) const;

  // The key a translation window names for placing into an SGE list: the
  // one lkey, or any key when the list has several.
  static std::uint32_t window_key(const std::vector<Sge>& sges) {
    return sges.size() == 1 ? sges[0].lkey : hca::detail::kAnyKey;
  }
  void push_cqe(Cq& cq, const Wc& wc, bool solicited);
  // `transport`: `at` is a transport deadline (now + the path's timeout),
  // so the timer runs at most one timeout from now.
  void arm_timer(Clock::time_point at, bool transport = false) REQUIRES(sq_mu_);
  // A transport deadline for the path's current timeout is pending on the
  // engine timer (it runs within one timeout from now).
  bool transport_timer_pending() const REQUIRES(sq_mu_) {
    return timer_armed_ != Clock::time_point{} && timer_armed_timeout_ == path_.timeout;
  }

  // Tag matching's rendezvous (a QP on a TM SRQ; DESIGN.md "Shared
  // receive queues"). The responder matched a rendezvous request to a tag
  // (Responder::execute_rndv) under rq_mu_, where the send side may not
  // run (lock order): it leaves the work in the inbox (queue_rndv, under
  // inbox_mu_, like a response) and receive_request kicks the send side
  // once rq_mu_ is let go. The send side (run_send_side) moves it to
  // rndv_pending_ and posts it (post_rndv) as device WQEs in the QP's own
  // send queue, which has kRndvSlots more slots for them than max_send_wr:
  // the READ of the RVH's buffer into the tag's; when it completes
  // (rndv_done, from the completer) the tag's DATA_VALID completion, and
  // the FIN (the TMH and RVH again, opcode FIN) as one more piece of work.
  // A READ that fails or flushes completes the tag with its status.
 public:
  struct RndvWork {
    std::uint64_t recv_wr_id = 0;  // the tag's
    std::vector<Sge> sges;         // the tag's buffer (READ)
    std::uint32_t pdn = 0;         // of the sges' keys: the SRQ's PD
    std::uint64_t va = 0;          // the RVH
    std::uint32_t rkey = 0;
    std::uint32_t len = 0;
    std::uint64_t tag = 0;         // the TMH
    std::uint32_t priv = 0;
    bool fin = false;  // the READ is done: the FIN is left
  };
  static constexpr std::uint32_t kRndvSlots = 4;

 private:
  // The responder's call (under rq_mu_; takes inbox_mu_, a leaf).
  void queue_rndv(RndvWork&& w);
  // receive_request's, after the responder: runs the send side for it.
  [[gnu::noinline, gnu::cold]] void kick_rndv();
  void post_rndv() REQUIRES(sq_mu_);
  void rndv_done(SendWqe& w, WcStatus status) REQUIRES(sq_mu_);
  // A piece of work that will not be posted completes its tag (a READ's:
  // with `status`; a FIN's: nothing).
  void drop_rndv(const RndvWork& r, WcStatus status) REQUIRES(sq_mu_);
  void complete_tag(std::uint64_t recv_wr_id, WcStatus status, std::uint32_t byte_len) REQUIRES(sq_mu_);

  // The send sides running on this thread, innermost first (one delivers
  // to a peer QP, whose response can run another inside it): a response
  // that finds sq_mu_ held by one of them is drained by that one's loop.
  // Kicks deferred until the outermost send side on this thread returns
  // (kick_rndv): its loop has then taken every answer it was delivered.
  struct SendSideHere {
    explicit SendSideHere(const Qp* q) : qp(q), outer(top) { top = this; }
    ~SendSideHere() {
      top = outer;
      if (top == nullptr && !deferred.empty()) [[unlikely]] run_deferred();
    }
    SendSideHere(const SendSideHere&) = delete;
    SendSideHere& operator=(const SendSideHere&) = delete;
    static bool runs(const Qp* q) {
      for (const SendSideHere* s = top; s != nullptr; s = s->outer)
        if (s->qp == q) return true;
      return false;
    }
    [[gnu::noinline, gnu::cold]] static void run_deferred();  // kick() each, until none is left
    const Qp* qp;
    SendSideHere* outer;
    static inline thread_local SendSideHere* top = nullptr;
    static inline thread_local std::vector<std::shared_ptr<Qp>> deferred;
  };

  QueueEngine& engine_;
  TranslationTables& tables_;
  const std::uint32_t qpn_;
  const QpInit init_;
  // An RC QP with its early entries on (QpInit::fast_entries): the first
  // question each entry asks, answered once.
  const bool rc_entries_;
  // The link carries trains (packet.h) to this QP's peer: the link's
  // answer when the path is set (a same-host peer, hca/udp_link.h).
  std::atomic<bool> trains_;
  bool trains() const { return trains_.load(std::memory_order_relaxed); }
  const bool answers_inline_;  // the device's link answers on the sending thread (link.h)
  const std::uint16_t udp_sport_;  // RoCEv2 UDP source port of its packets
  const bool congestion_control_;  // the device's and the QP's (QpInit)
  std::atomic<QpState> state_{QpState::kReset};

  mutable std::mutex attr_mu_;  // guards attr_
  QpAttr attr_;

  // The send side: the queue, the two roles that share it and what they
  // both read. Written only by modify_qp (every lock held): path_.
  FastMutex sq_mu_;  // guards sq_, requester_, completer_, the send side's inboxes and timer fields (and writes to send_counters_)
  SendPath path_ GUARDED_BY(sq_mu_);
  SendQueue sq_ GUARDED_BY(sq_mu_);
  Requester requester_ GUARDED_BY(sq_mu_){*this};
  Completer completer_ GUARDED_BY(sq_mu_){*this};
  QpCounters::SendSide send_counters_;
  std::vector<Packet> drain_ GUARDED_BY(sq_mu_);  // the inbox's other half, reused
  // Responses that the thread running the send side delivered itself
  // (receive_response): taken by that send side's loop before it returns.
  // The usual one, a plain ACK with nothing before it, waits in own_ack_
  // (older than all of own_inbox_): the in-process link answers every
  // signaled WRITE with one, and a slot costs no packet moved and none
  // destroyed.
  Ack own_ack_ GUARDED_BY(sq_mu_);
  bool own_ack_valid_ GUARDED_BY(sq_mu_) = false;
  std::vector<Packet> own_inbox_ GUARDED_BY(sq_mu_);
  bool own_answers_pending() const REQUIRES(sq_mu_) { return own_ack_valid_ || !own_inbox_.empty(); }
  Clock::time_point timer_armed_ GUARDED_BY(sq_mu_){};  // earliest deadline the engine timer holds for us
  // path_.timeout it was a transport deadline for, else 0xff
  std::uint8_t timer_armed_timeout_ GUARDED_BY(sq_mu_) = 0xff;
  // Rendezvous work (above) not yet in the send queue, oldest first, and
  // how many device WQEs are in it.
  std::deque<RndvWork> rndv_pending_ GUARDED_BY(sq_mu_);
  std::uint32_t rndv_in_sq_ GUARDED_BY(sq_mu_) = 0;

  // The receive side: its queue and the responder that takes from it.
  FastMutex rq_mu_;  // guards rq_, responder_ (see Responder::ResponderState), recv_counters_
  RecvQueue rq_ GUARDED_BY(rq_mu_);
  Responder responder_{*this};
  QpCounters::RecvSide recv_counters_;

  FastMutex inbox_mu_;  // guards inbox_
  std::vector<Packet> inbox_ GUARDED_BY(inbox_mu_);
  std::vector<RndvWork> rndv_inbox_ GUARDED_BY(inbox_mu_);  // from the responder (queue_rndv)
  std::atomic<bool> inbox_ready_{false};
  std::atomic<bool> rndv_kick_{false};  // queue_rndv left work: receive_request kicks

  std::atomic<std::int64_t> timer_ns_{0};  // deadline for the device timer, 0 = none
  // The notification point's gate (dcqcn.h): when the last CNP for this
  // QP's peer went out, claimed by the first receiving thread (claim_cnp).
  std::atomic<std::int64_t> cnp_sent_ns_{std::numeric_limits<std::int64_t>::min()};
};

inline FastMutex& sq_mutex(Qp& qp) LOCK_RETURNED(qp.sq_mu_) { return qp.sq_mu_; }
inline FastMutex& rq_mutex(Qp& qp) LOCK_RETURNED(qp.rq_mu_) { return qp.rq_mu_; }

}  // namespace srdma::hca
