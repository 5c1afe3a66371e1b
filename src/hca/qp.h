// A queue pair of the software device: its queues, its state machine,
// and the per-role state of the transport engine. RC runs all three roles;
// UC and UD send without a completer (a WQE completes once handed to the
// link) and receive in uc_responder.cc and ud_responder.cc.
//
// Roles (one file each): the requester (requester.cc) turns send WQEs into
// request packets; the responder (responder.cc) executes request packets
// that arrive and answers them; the completer (completer.cc) matches
// response packets to WQEs and writes CQEs. Each role's state is a struct
// of its own, but the completer still reaches into the requester's where a
// response moves the send point: rewind_to (next, next_psn, offset),
// comp_rnr_nak (rnr_until), retire_oldest (rd_atomic_outstanding) and
// note_retired / note_progress (the retry counts); and fail_wqe, the
// requester's, flushes the receive queue under rq_mu_. The roles are to
// become objects that own their state and answer each other by named calls.
//
// Locking: `sq_mu_` guards the send queue, the requester and the completer;
// `rq_mu_` guards the receive queue and the responder (except a whole
// in-sequence RDMA WRITE, which runs without it: responder_unlocked). The send
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
// std::mutex, cheaper uncontended.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "hca/delivery_scope.h"
#include "hca/engine_clock.h"
#include "hca/fast_mutex.h"
#include "hca/packet.h"
#include "hca/qp_counters.h"
#include "hca/recv_wqe.h"
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

// The transport's fixed limits. A requester keeps at most kMaxUnackedPsns
// PSNs unacknowledged (its window; one READ larger than that goes alone)
// and asks for an ACK at least every kAckEveryPsns packets (packet.h). kMaxRdAtomic is
// the device's max_qp_rd_atom and max_qp_init_rd_atom: modify_qp refuses
// max_rd_atomic and max_dest_rd_atomic above it.
constexpr std::uint32_t kMaxUnackedPsns = 256;
constexpr std::uint8_t kMaxRdAtomic = 16;

// The responder's bounds (responder.cc). Where the link takes single
// packets, a READ's responses go out at most kResponseBurst packets per
// turn: the first burst where the request arrives, the rest on the engine
// thread a burst per turn, other QPs' work between (64 KiB at MTU 4096 still
// goes at once). Answers behind a READ's queued responses wait with them,
// at most kMaxQueuedAnswers (a peer within its max_rd_atomic never has so
// many). A duplicate READ is executed again only with a token: a QP holds
// at most kDupReadBudget, gets one back every kDupReadRefill of the engine
// clock and one per new READ it executes; the rest are dropped and counted
// (DropReason::kRateLimited). One 28-byte request can no longer keep a
// device's receive thread streaming a whole region.
constexpr std::uint32_t kResponseBurst = 16;
constexpr std::size_t kMaxQueuedAnswers = 64;
constexpr std::uint32_t kDupReadBudget = 2 * kMaxRdAtomic;
constexpr Clock::duration kDupReadRefill = std::chrono::microseconds(100);

class Qp : public std::enable_shared_from_this<Qp> {
 public:
  Qp(QueueEngine& engine, TranslationTables& tables, std::uint32_t qpn, QpInit init);
  ~Qp();

  std::uint32_t qpn() const { return qpn_; }
  // The QP it is connected to (QP_DEST_QPN); 0 before RTR.
  std::uint32_t peer_qpn() const { return resp_.peer_qpn.load(std::memory_order_relaxed); }
  std::uint32_t pdn() const { return init_.pdn; }
  QpType type() const { return init_.type; }
  const QpCaps& caps() const { return init_.caps; }
  void* context() const { return init_.qp_context; }
  const std::shared_ptr<Cq>& send_cq() const { return init_.send_cq; }
  const std::shared_ptr<Cq>& recv_cq() const { return init_.recv_cq; }
  const std::shared_ptr<Srq>& srq() const { return init_.srq; }
  QpState state() const { return state_.load(std::memory_order_acquire); }
  QpAttr attr() const;
  // What the transport did on this QP so far (any thread; see qp_counters.h).
  TransportCounters counters() const { return QpCounters::snapshot(send_counters_, recv_counters_); }

  Result<void> modify(const QpAttr& attr, std::uint32_t mask);
  // Posts a list; on error *bad_wr names the first WR not posted (everything
  // before it is posted, nothing after it).
  // `resolve` turns a REG_MR WR's MR into its mapping; without one, REG_MR
  // is refused (EINVAL). `resolve_ah` does the same for a UD WR's AH.
  Result<void> post_send(const SendWr* wr, const SendWr** bad_wr, FastRegResolver resolve = nullptr,
                         AhResolver resolve_ah = nullptr);
  Result<void> post_recv(const RecvWr* wr, const RecvWr** bad_wr);

  // From the link: a request for the responder, a response for the completer.
  void receive_request(Packet&& pkt);
  void receive_response(Packet&& pkt);
  // receive_response() of ack.packet() (QueueEngine::deliver_ack).
  void receive_ack(const Ack& ack);
  // Moves the QP to ERR and flushes (CQ overrun, device fatal, class C errors).
  void set_error();
  // Runs the send side if no thread does (timer expiry, new responses).
  void kick();
  // After letting go of sq_mu_: runs the send side for a response that
  // arrived while we held it.
  void take_stranded_responses();
  // Its fence: the poster's half of the Dekker pair with kick() (qp.cc).
  void poster_fence() const;
  // The engine timer's callback: runs the send side (waits for the lock).
  void on_timer();
  // A responder turn on the engine thread (QueueEngine::schedule_response_turn):
  // the next kResponseBurst packets of what waits in its answer queue, sent
  // without rq_mu_.
  void respond_turn();
  // The QP is being destroyed: what waits in its answer queue is dropped.
  void drop_queued_answers();
  Clock::time_point timer_deadline() const;

 private:
  struct SendWqe {
    std::uint64_t wr_id = 0;
    WrOpcode opcode = WrOpcode::kSend;
    std::uint32_t flags = 0;
    std::uint32_t imm = 0;
    std::uint64_t remote_addr = 0;
    std::uint32_t rkey = 0;
    std::uint64_t compare_add = 0;
    std::uint64_t swap = 0;
    std::vector<Sge> sges;
    std::vector<std::byte> inline_data;
    bool is_inline = false;
    std::uint32_t length = 0;
    std::uint32_t psn = 0;   // of its first packet (a READ's request), set when it is first sent
    std::uint32_t npsn = 1;  // PSNs it takes: one per packet; a READ, one per response packet
    // REG_MR (rkey holds the key; LOCAL_INV's key is in rkey too): the MR's
    // mapping, copied at post time into vectors that keep their capacity.
    std::uint32_t access = 0;
    std::uint8_t page_shift = 12;
    std::uint64_t iova = 0;
    std::uint64_t mr_length = 0;
    std::vector<std::uint64_t> pages;
    // A local operation (REG_MR, LOCAL_INV) that has executed: it has no
    // PSN and no response; the completer retires it when it reaches it, and
    // a resend from an earlier WQE passes it without executing it again.
    bool local_done = false;
    // UD: the datagram's destination, from the WR and its AH at post time.
    std::uint64_t ud_dest_addr = 0;
    std::uint32_t ud_qpn = 0;
    std::uint32_t ud_qkey = 0;
    bool ud_own_qkey = false;  // remote_qkey had the high bit: send the QP's
    std::uint8_t ud_hop_limit = 64;
    std::uint8_t ud_traffic_class = 0;
  };
  // Requester (requester.cc): written only by it (and modify_qp, which
  // holds every lock); the path attributes are copied here at modify time
  // so the data path reads no shared attributes.
  struct RequesterState {
    std::uint64_t dest_addr = 0;
    std::uint32_t dest_qpn = 0;
    std::uint8_t timeout = 14;
    std::uint8_t retry_cnt = 7;
    std::uint8_t rnr_retry = 7;
    std::uint32_t mtu = 4096;               // path_mtu
    std::uint8_t mtu_shift = 12;            // log2(mtu)
    std::uint8_t max_rd_atomic = 16;        // READs and atomics outstanding at most
    std::uint32_t rd_atomic_outstanding = 0;  // READ and atomic WQEs in [comp_.consumer, next)
    std::uint32_t next_psn = 0;
    std::uint64_t next = 0;                 // next WQE index to send
    std::uint32_t offset = 0;               // bytes of WQE `next` already sent (a resume point after a NAK)
    // PSNs before this one were sent before: sending one again is a
    // retransmission (go-back-N after a timeout, a NAK or an RNR wait).
    std::uint32_t sent_end_psn = 0;
    Clock::time_point rnr_until{};          // no sends before this
    std::uint8_t rnr_retries_left = 7;
    std::uint8_t retries_left = 7;
    std::uint32_t qkey = 0;                 // UD: the QP's, sent for a WR that asks for it
  };
  // Completer (completer.cc): written only by it.
  struct CompleterState {
    std::uint64_t consumer = 0;  // next WQE index to retire
    std::uint32_t psn = 0;       // oldest PSN not acknowledged yet
    // A READ was asked again from `psn` because a response went missing;
    // responses after the gap that are still on their way are dropped
    // without asking again, until the response at `psn` arrives.
    bool read_retry_pending = false;
    Clock::time_point timeout_at{};
    // An answer is outstanding but its deadline is not stamped yet: a
    // transport timer armed at most one timeout ago is pending and stamps
    // it when it runs (see start_transport_timer).
    bool timeout_unstamped = false;
  };
  // A READ or atomic the responder executed, kept to answer its duplicate
  // (IBA 9.7.5.1.1, rxe's resp_res): a READ again from the PSN asked, an
  // atomic from the saved original value, never executed twice.
  struct RdAtomicResource {
    bool valid = false;
    bool atomic = false;
    std::uint32_t first_psn = 0, last_psn = 0;
    std::uint64_t va = 0;
    std::uint32_t rkey = 0;
    std::uint32_t length = 0;
    std::uint64_t orig = 0;  // an atomic's result
  };
  // READ responses still to send: packets [next, n) of the answer to the
  // READ request at `psn` (a new READ, or a duplicate asking again from
  // there), with the MSN they carry (the READ is counted after them).
  struct ReadTrain {
    std::uint64_t dst_addr = 0;
    std::uint32_t dst_qpn = 0;
    std::uint32_t psn = 0;
    std::uint32_t n = 0, next = 0;
    std::uint64_t va = 0;  // of packet 0
    std::uint32_t rkey = 0;
    std::uint32_t length = 0;
    std::uint32_t mtu = 0;
    std::uint32_t msn = 0;
  };
  // An answer waiting its turn: the rest of a READ's responses, or a packet
  // (ACK, NAK, atomic ACK) that may not overtake them.
  struct QueuedAnswer {
    bool read = false;
    ReadTrain train;
    Packet packet;
  };
  // Responder (responder.cc): written only by it (and modify_qp). A whole
  // in-sequence RDMA WRITE runs without rq_mu_ (it touches neither the
  // receive queue nor a message in progress): what it reads or moves is
  // atomic (access, expected_psn, mtu, msn, nak_sent, in_message).
  struct ResponderState {
    std::atomic<std::uint32_t> access{0};  // qp_access_flags
    std::uint8_t min_rnr_timer = 1;
    std::atomic<std::uint32_t> expected_psn{0};
    std::atomic<std::uint32_t> mtu{4096};  // path_mtu (read by the unlocked path too)
    // Messages completed (AETH MSN), and whether a sequence-error NAK for
    // expected_psn is out (the rest is dropped silently until it arrives).
    // Atomics: the unlocked path reads or moves them too.
    std::atomic<std::uint32_t> msn{0};
    std::atomic<bool> nak_sent{false};
    // Answers wait in `queued` (below), or a turn is sending what it took
    // from there: every answer then queues, and the unlocked path leaves its
    // WRITE to the locked one (here: the line every request reads anyway).
    std::atomic<bool> answers_queued{false};
    // The multi-packet message in progress (FIRST seen, LAST not yet):
    // what the next packet must continue. Read without rq_mu_ by the
    // unlocked path (a WRITE ONLY is a sequence error in the middle of one).
    // Its kind (kSend or kWrite; kNone between messages), as the opcode
    // table names it: continues_sequence() checks the next packet against it.
    using InMessage = MsgKind;
    std::atomic<InMessage> in_message{InMessage::kNone};
    std::uint32_t offset = 0;     // bytes of it placed so far
    std::uint64_t write_va = 0;   // RETH of the WRITE in progress
    std::uint32_t write_rkey = 0;
    std::uint32_t write_length = 0;
    std::vector<RdAtomicResource> resources;  // max_dest_rd_atomic of them
    std::uint32_t next_resource = 0;          // the one reused next (the oldest)
    // The connected peer (IBA 9.6 / C9-xx: a connected QP accepts requests
    // only from its destination address and QPN), set at modify time.
    std::atomic<std::uint64_t> peer_addr{0};
    std::atomic<std::uint32_t> peer_qpn{0};
    std::atomic<std::uint32_t> qkey{0};  // UD: what a datagram must carry
  };
  // The responder's bounds (responder.cc), guarded by rq_mu_; apart from
  // ResponderState, whose lines every request reads, as these are not.
  struct ResponderQueue {
    // A QP's answers leave in PSN order: while a READ's responses wait for
    // their turns (a link of single packets only), every later answer
    // waits behind them, here (resp_.answers_queued is set while it is not
    // empty).
    std::deque<QueuedAnswer> queued;
    bool turn_sending = false;    // a turn sends outside rq_mu_
    bool turn_scheduled = false;  // a turn is due on the engine thread
    // Duplicate READs executed again: a token bucket on the engine clock.
    std::uint32_t dup_read_tokens = kDupReadBudget;
    Clock::time_point dup_read_refilled{};
  };

  enum class ReqStep { kIdle, kSend, kWaitRnr, kFlush };  // requester.cc state machine
 public:
  // The responder's and the completer's state machines (responder.cc,
  // completer.cc): one small function per state, named for tracing.
  enum class RespState : std::uint8_t {
    kCheckPsn, kCheckOpSequence, kCheckLength, kCheckResources, kExecuteSend, kExecuteWrite, kExecuteRead,
    kExecuteAtomic, kAcknowledge, kDuplicate, kNakSequence, kNakRnr,
    // The class C NAKs, one state per cause, in NakCause's order.
    kNakInvalidSequence, kNakInvalidLength, kNakInvalidNoResources, kNakInvalidRecvTooShort,
    kNakInvalidInvalidate, kNakInvalidUnaligned, kNakAccessNotEnabled, kNakAccessRkey, kNakOperational,
    kDrop, kDone,
  };
  enum class CompState : std::uint8_t {
    kCheckPsn, kImpliedAcks, kCheckOpcode, kAck, kReadData, kAtomicData, kComplete, kRetryRead, kRnrNak,
    kSequenceNak, kFatalNak,
    kDrop,          // outside the PSN window (DropReason::kBadPsn)
    kDropOpcode,    // does not answer the WQE its PSN names (DropReason::kBadOpcode)
    kDone,
  };
  static std::string_view resp_state_str(RespState s);
  static std::string_view comp_state_str(CompState s);

 private:

  Result<void> modify_locked(const QpAttr& attr, std::uint32_t mask);  // takes and drops the locks
  // post_send's parts (REQUIRES sq_mu_): whether `wr` is an RC SEND or
  // WRITE that needs no check beyond these (its length then in `length`),
  // the WQE such a WR makes, and every other WR, checked and queued.
  // (Inline, and defined in qp.cc, its only user: part of every post.)
  [[gnu::always_inline]] inline bool plain_data_wr(const SendWr& wr, std::uint64_t& length) const;
  [[gnu::always_inline]] inline void fill_data_wqe(SendWqe& w, const SendWr& wr, std::uint64_t length);
  [[gnu::noinline]] Result<void> post_one_checked(const SendWr& wr, FastRegResolver resolve, AhResolver resolve_ah);
  // Send side, REQUIRES sq_mu_.
  // check_timeout: the engine timer's run (see requester.cc).
  void run_send_side(bool check_timeout = false);
  ReqStep requester_next_step();
  // PSNs the window has left while something is outstanding:
  // kMaxUnackedPsns less those sent since the oldest unacknowledged one.
  std::int32_t window_room() const {
    return static_cast<std::int32_t>(kMaxUnackedPsns) - psn_diff(req_.next_psn, comp_.psn);
  }
  void requester_send_one();
  // An RC SEND or WRITE sent whole from its start: in one packet (n == 1,
  // every message of a small-message stream, so what it calls is inlined
  // into it: flatten), or as one train of all its n packets where the link
  // carries trains and the window has room for them.
  [[gnu::flatten]] void requester_send_whole(SendWqe& w, std::uint32_t n);
  // Whether the packet ending at `last_psn` (the WQE's last if `last`)
  // asks for an ACK.
  bool wants_ack(const SendWqe& w, std::uint32_t last_psn, bool last) const;
  // `p` went out taking `psns` PSNs: the counters and the next PSN move.
  void note_sent(const Packet& p, std::uint32_t psns);
  void time_if_unanswered();  // the transport timer for a request just sent
  // A request's BTH fields from the QP (its next PSN).
  void start_request(Packet& p) const;
  // The rest of an ONLY packet carrying the whole WQE `w`: false if its
  // memory does not translate.
  bool fill_only(const SendWqe& w, Packet& p) const;
  // The next packet (or train) of a SEND or WRITE longer than the MTU, or
  // resumed in its middle: false if its memory does not translate.
  [[gnu::noinline]] bool segment(const SendWqe& w, Packet& p, std::uint32_t& psns, bool& last);
  void requester_execute_local(SendWqe& w);
  // UD: the WQE as one datagram (ud_responder.cc's counterpart).
  void requester_send_datagram(SendWqe& w);
  // UC and UD: the oldest WQE completes, its last packet handed to the link.
  void retire_sent_wqe();
  void retire_local_wqes();
  void completer_handle(Packet& pkt);
  // A plain ACK (own_ack_) through the completer: its common case, the
  // last PSN of an outstanding WQE with only SENDs and WRITEs before it,
  // without building a packet; any other as a packet through
  // completer_handle.
  void completer_handle_ack(const Ack& ack);
  // Their uncommon cases, out of line (a Packet would widen the frames of
  // the common ones).
  [[gnu::noinline, gnu::cold]] void completer_handle_packet(const Ack& ack);
  [[gnu::noinline, gnu::cold]] void receive_response_packet(const Ack& ack);
  CompState comp_check_psn(Packet& pkt);
  CompState comp_implied_acks(Packet& pkt) { return comp_implied_acks_before(pkt.psn); }
  CompState comp_implied_acks_before(std::uint32_t psn);  // comp_implied_acks' work
  CompState comp_check_opcode(Packet& pkt);
  CompState comp_ack(Packet& pkt);
  CompState comp_read_data(Packet& pkt);
  CompState comp_atomic_data(Packet& pkt);
  CompState comp_complete(Packet& pkt);
  CompState comp_complete_now();  // comp_complete's work
  CompState comp_retry_read(Packet& pkt);
  CompState comp_rnr_nak(Packet& pkt);
  CompState comp_sequence_nak(Packet& pkt);
  CompState comp_fatal_nak(Packet& pkt);
  // Go-back-N: the next send is the packet `psn` of the WQE at `index`
  // (REQUIRES sq_mu_, index < req_.next and the WQE holds `psn`).
  void rewind_to(std::uint64_t index, std::uint32_t psn);
  void retire_wqe();  // the oldest outstanding WQE completed successfully
  // retire_wqe's steps: the WQE `w` (the oldest) completes and leaves the
  // queue; after one or more, the retry counters start again (IBA
  // 9.7.5.2.8: progress).
  void retire_oldest(SendWqe& w) {
    if (init_.sq_sig_all || (w.flags & SEND_SIGNALED)) complete_send(w, WcStatus::kSuccess, false, wc_byte_len(w));
    if (is_rd_atomic(w.opcode)) [[unlikely]] --req_.rd_atomic_outstanding;
    comp_.psn = psn_add(w.psn, w.npsn);
    ++comp_.consumer;
  }
  void note_retired() {
    req_.rnr_retries_left = req_.rnr_retry;
    req_.retries_left = req_.retry_cnt;
  }
  static std::uint32_t wc_byte_len(const SendWqe& w) {
    const std::uint32_t fixed = wr_row(w.opcode).wc_byte_len;
    return fixed != 0 ? fixed : w.length;
  }
  void completer_check_timeout();
  void complete_send(SendWqe& w, WcStatus status, bool force, std::uint32_t byte_len = 0);
  void flush_send_queue();
  void fail_wqe(std::uint64_t index, WcStatus status);
  bool translate_local(const std::vector<Sge>& sges, std::uint32_t access, PieceList& out) const;
  // The bytes [offset, offset + len) of an SGE list, translated piece by
  // piece (each piece's key, access and bounds checked).
  // `pdn`: the PD the keys must be of (a receive from an SRQ: the SRQ's).
  bool translate_slice(const std::vector<Sge>& sges, std::uint64_t offset, std::uint64_t len, std::uint32_t access,
                       std::uint32_t pdn, PieceList& out) const;
  Clock::time_point transport_deadline() const;
  std::uint32_t packets_at_mtu(std::uint64_t bytes) const;  // packets_for() at the requester's path MTU, by shift

  // A whole in-sequence RDMA WRITE (ONLY, or a train FIRST..LAST), without
  // rq_mu_: true if it executed it, false if the locked path must (anything
  // else: a duplicate, a gap, a NAK, a state that drops it).
  bool responder_unlocked(const Packet& pkt);
  // The request comes from the connected peer's address and QPN.
  bool from_peer(const Packet& pkt) const;
  // A message completed: the AETH MSN moves on.
  void count_message() {
    resp_.msn.store(psn_add(resp_.msn.load(std::memory_order_relaxed), 1), std::memory_order_relaxed);
  }
  // The key a translation window names for placing into an SGE list: the
  // one lkey, or any key when the list has several.
  static std::uint32_t window_key(const std::vector<Sge>& sges) {
    return sges.size() == 1 ? sges[0].lkey : hca::detail::kAnyKey;
  }
  // UD (ud_responder.cc) and UC (uc_responder.cc): what arrives for a QP of
  // those transports; they take rq_mu_.
  void receive_datagram(const Packet& pkt);
  void receive_uc(Packet& pkt);
  // REQUIRES rq_mu_: one UC packet; a message given up, counted under `why`.
  void uc_execute(Packet& pkt);
  void uc_abandon_message(Counter& why);
  // Receive side, REQUIRES rq_mu_.
  void responder_execute(Packet& pkt);
  RespState resp_check_psn(Packet& pkt);
  RespState resp_check_op_sequence(Packet& pkt);
  RespState resp_check_length(Packet& pkt);
  RespState resp_check_resources(Packet& pkt);
  RespState resp_execute_send(Packet& pkt);
  RespState resp_execute_write(Packet& pkt);
  RespState resp_execute_read(Packet& pkt);
  RespState resp_execute_atomic(Packet& pkt);
  RespState resp_acknowledge(Packet& pkt);
  void acknowledge_before_completion(Packet& pkt);
  RespState resp_duplicate(Packet& pkt);
  // Sends the READ response packets for [va, va + length) from `first_psn`
  // (a new READ or a duplicate asking again from the middle): at once as a
  // train, else a burst now and the rest queued for later turns (all of
  // it queued behind answers already waiting); false if the rkey does not
  // grant it.
  bool send_read_responses(const Packet& req, std::uint32_t first_psn, std::uint64_t va, std::uint32_t rkey,
                           std::uint32_t length);
  // send_read_responses() of a READ longer than a burst, or behind answers
  // that wait: the key checked for all of it, then a burst now and the rest
  // queued, or all of it queued.
  [[gnu::noinline]] bool start_read_train(const ReadTrain& train);
  // Packets [from, to) of `t`, translated anew (the key is checked again);
  // false, and nothing sent, if it no longer translates.
  bool send_read_packets(const ReadTrain& t, std::uint32_t from, std::uint32_t to);
  // REQUIRES rq_mu_, answers_queued: `p` waits its turn behind what waits
  // (a plain ACK merges with one waiting last: it covers it); beyond
  // kMaxQueuedAnswers it is dropped and counted.
  // (Out of line, as everything of the queue: the common answer, an ACK
  // with nothing waiting, stays a few instructions inlined into its caller.)
  [[gnu::noinline, gnu::cold]] void queue_answer(Packet&& p);
  [[gnu::noinline, gnu::cold]] void acknowledge_queued(const Packet& req, std::uint32_t psn);
  [[gnu::noinline]] void queue_train(const ReadTrain& t);
  void schedule_turn();  // REQUIRES rq_mu_: a turn is due, unless one is already
  // A duplicate READ may be executed again (REQUIRES rq_mu_).
  bool take_dup_read_token();
  RdAtomicResource* find_resource(std::uint32_t psn);
  RdAtomicResource& take_resource();
  // The expected PSN moves past `pkt` (and past a READ's response PSNs).
  void advance_expected(std::uint32_t next_psn);
  void respond(const Packet& req, Opcode op, Packet&& resp, std::uint32_t psn);
  // respond() with a plain ACK of `psn`, handed over as an Ack.
  void acknowledge(const Packet& req, std::uint32_t psn);
  void nak(const Packet& req, Syndrome code, std::uint8_t rnr_timer = 0);
  // A class C NAK for `cause`: counted, sent, and the QP ends.
  void nak_fatal(const Packet& req, NakCause cause);
  void flush_recv_queue();
  // `imm` is the immediate data with WC_WITH_IMM, the invalidated rkey with
  // WC_WITH_INVALIDATE.
  void complete_recv(std::uint64_t wr_id, WcStatus status, WcOpcode op, std::uint32_t byte_len,
                     std::uint32_t imm, std::uint32_t flags, std::uint32_t src_qp, bool solicited = false);

  // The rings are a power of two long (an index is masked, not divided:
  // a division per WQE lookup was a measurable part of a small message);
  // the depth the consumer asked for is what post_send/post_recv enforce.
  SendWqe& wqe(std::uint64_t index) { return sq_[index & sq_mask_]; }
  const SendWqe& wqe(std::uint64_t index) const { return sq_[index & sq_mask_]; }
  std::uint64_t sq_depth() const { return std::max<std::uint32_t>(init_.caps.max_send_wr, 1); }
  void push_cqe(Cq& cq, const Wc& wc, bool solicited);
  // `transport`: `at` is a transport deadline (now + the timeout req_.timeout
  // gave then), so the timer runs at most one timeout from now.
  void arm_timer(Clock::time_point at, bool transport = false);
  // The transport timer for what is outstanding (REQUIRES sq_mu_).
  void start_transport_timer();
  void note_progress();  // a response moved the window: retry count and timer restart

  // The send sides running on this thread, innermost first (one delivers
  // to a peer QP, whose response can run another inside it): a response
  // that finds sq_mu_ held by one of them is drained by that one's loop.
  struct SendSideHere {
    explicit SendSideHere(const Qp* q) : qp(q), outer(top) { top = this; }
    ~SendSideHere() { top = outer; }
    SendSideHere(const SendSideHere&) = delete;
    SendSideHere& operator=(const SendSideHere&) = delete;
    static bool runs(const Qp* q) {
      for (const SendSideHere* s = top; s != nullptr; s = s->outer)
        if (s->qp == q) return true;
      return false;
    }
    const Qp* qp;
    SendSideHere* outer;
    static inline thread_local SendSideHere* top = nullptr;
  };

  QueueEngine& engine_;
  TranslationTables& tables_;
  const std::uint32_t qpn_;
  const QpInit init_;
  const bool trains_;  // the device's link carries trains (packet.h)
  const bool answers_inline_;  // the device's link answers on the sending thread (link.h)
  const std::uint16_t udp_sport_;  // RoCEv2 UDP source port of its packets
  std::atomic<QpState> state_{QpState::kReset};

  mutable std::mutex attr_mu_;  // guards attr_
  QpAttr attr_;

  FastMutex sq_mu_;  // guards sq_, sq_prod_, req_, comp_ (and writes to send_counters_)
  std::vector<SendWqe> sq_;
  std::uint64_t sq_mask_ = 0;  // sq_.size() - 1
  std::uint64_t sq_prod_ = 0;
  RequesterState req_;
  CompleterState comp_;
  QpCounters::SendSide send_counters_;
  PieceList req_pieces_;              // scratch for translations
  PieceList comp_pieces_;             // the completer's
  std::vector<Packet> drain_;        // the inbox's other half, reused
  // Responses that the thread running the send side delivered itself
  // (receive_response): taken by that send side's loop before it returns.
  // The usual one, a plain ACK with nothing before it, waits in own_ack_
  // (older than all of own_inbox_): the in-process link answers every
  // signaled WRITE with one, and a slot costs no packet moved and none
  // destroyed.
  Ack own_ack_;
  bool own_ack_valid_ = false;
  std::vector<Packet> own_inbox_;
  bool own_answers_pending() const { return own_ack_valid_ || !own_inbox_.empty(); }
  Clock::time_point timer_armed_{};   // earliest deadline the engine timer holds for us
  std::uint8_t timer_armed_timeout_ = 0xff;  // req_.timeout it was a transport deadline for, else 0xff

  FastMutex rq_mu_;  // guards rq_, rq_head_, rq_tail_, resp_, recv_counters_ (see ResponderState)
  std::vector<RecvWqe> rq_;  // a ring: [rq_head_, rq_tail_) are posted, oldest first
  std::uint64_t rq_mask_ = 0;  // rq_.size() - 1
  std::uint64_t rq_head_ = 0, rq_tail_ = 0;
  // With an SRQ: the WQE taken from it for the message in progress (or
  // taken for one that found it and then failed a check), kept until the
  // message completes.
  RecvWqe srq_wqe_;
  bool srq_wqe_held_ = false;
  bool last_wqe_reported_ = false;  // kQpLastWqeReached raised for this ERR
  const std::uint32_t recv_pdn_;    // the PD receive WQEs' lkeys belong to
  // The receive side's queue, whichever it is (REQUIRES rq_mu_): whether a
  // WQE is there for a new message (with an SRQ, this takes one from it),
  // the one a message in progress places into, and taking it off to
  // complete it (valid until the next post_recv or recv_ready()).
  bool recv_ready();
  RecvWqe& recv_head() { return init_.srq ? srq_wqe_ : rq_[rq_head_ & rq_mask_]; }
  RecvWqe& take_recv() {
    if (init_.srq) {
      srq_wqe_held_ = false;
      return srq_wqe_;
    }
    return rq_[rq_head_++ & rq_mask_];
  }
  bool rq_empty() const { return init_.srq ? !srq_wqe_held_ : rq_head_ == rq_tail_; }
  ResponderState resp_;
  QpCounters::RecvSide recv_counters_;

  FastMutex inbox_mu_;  // guards inbox_
  std::vector<Packet> inbox_;
  std::atomic<bool> inbox_ready_{false};

  std::atomic<std::int64_t> timer_ns_{0};  // deadline for the device timer, 0 = none

  ResponderQueue respq_;  // guarded by rq_mu_
};

}  // namespace srdma::hca
