// The responder (responder.cc, responder_queue.cc, uc_responder.cc,
// ud_responder.cc): executes the request packets that arrive for its QP and
// answers them. It owns the expected PSN, the message in progress, the
// READ and atomic resources, the MSN and its queue of answers; it takes
// receive WQEs from the QP's receive queue (recv_queue.h). modify_qp moves
// it only through configure, set_rq_psn and reset.
//
// Locking: rq_mu_ guards all of it, except what a whole in-sequence RDMA
// WRITE reads or moves without the lock (see ResponderState).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string_view>
#include <vector>

#include "hca/engine_clock.h"
#include "common/thread_annotations.h"
#include "hca/opcode_table.h"
#include "hca/packet.h"
#include "hca/qp_counters.h"
#include "hca/qp_locks.h"
#include "hca/transport_limits.h"
#include "srdma/counters.h"
#include "srdma/qp_attr.h"
#include "srdma/wc.h"

namespace srdma::hca {

class Qp;
class Srq;

// The responder's bounds. Where the link takes single packets, a READ's
// responses go out at most kResponseBurst packets per turn: the first burst
// where the request arrives, the rest on the engine thread a burst per
// turn, other QPs' work between (64 KiB at MTU 4096 still goes at once).
// Answers behind a READ's queued responses wait with them, at most
// kMaxQueuedAnswers (a peer within its max_rd_atomic never has so many). A
// duplicate READ is executed again only with a token: a QP holds at most
// kDupReadBudget, gets one back every kDupReadRefill of the engine clock
// and one per new READ it executes; the rest are dropped and counted
// (DropReason::kRateLimited). One 28-byte request can no longer keep a
// device's receive thread streaming a whole region.
constexpr std::uint32_t kResponseBurst = 16;
constexpr std::size_t kMaxQueuedAnswers = 64;
constexpr std::uint32_t kDupReadBudget = 2 * kMaxRdAtomic;
constexpr Clock::duration kDupReadRefill = std::chrono::microseconds(100);

class Responder {
 public:
  explicit Responder(Qp& qp) : qp_(qp) {}
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;

  // The RC state machine, as rxe's rxe_resp.c: one small function per
  // state, each returning the next; named for tracing.
  enum class State : std::uint8_t {
    kCheckPsn, kCheckOpSequence, kCheckXrcSrq, kCheckLength, kCheckResources, kExecuteSend, kExecuteWrite, kExecuteRead,
    kExecuteAtomic, kAcknowledge, kDuplicate, kNakSequence, kNakRnr,
    // The class C NAKs, one state per cause, in NakCause's order.
    kNakInvalidSequence, kNakInvalidLength, kNakInvalidNoResources, kNakInvalidRecvTooShort,
    kNakInvalidInvalidate, kNakInvalidUnaligned, kNakAccessNotEnabled, kNakAccessRkey, kNakOperational,
    kNakXrcSrq,
    kDrop, kDone,
  };
  static std::string_view state_str(State s);

  // A request from the link (any thread; takes rq_mu_ as it needs).
  void receive(Packet&& pkt);
  // A turn on the engine thread (QueueEngine::schedule_response_turn): the
  // next kResponseBurst packets of what waits in the answer queue, sent
  // without rq_mu_.
  void respond_turn();
  // The QP is being destroyed: what waits in the answer queue is dropped.
  void drop_queued_answers();

  // The QP's calls, REQUIRES rq_mu_.
  // ERR: every receive WQE completes with a flush error (with an SRQ, the
  // one the QP holds, and the last WQE reached event).
  void flush() REQUIRES(rq_mutex(qp_));
  // A receive WQE completes. `imm` is the immediate data with WC_WITH_IMM,
  // the invalidated rkey with WC_WITH_INVALIDATE.
  void complete_recv(std::uint64_t wr_id, WcStatus status, WcOpcode op, std::uint32_t byte_len, std::uint32_t imm,
                     std::uint32_t flags, std::uint32_t src_qp, bool solicited = false) REQUIRES(rq_mutex(qp_));
  // The connected peer's QPN (QP_DEST_QPN; 0 before RTR), any thread.
  std::uint32_t peer_qpn() const { return resp_.peer_qpn.load(std::memory_order_relaxed); }
  std::uint64_t peer_addr() const { return resp_.peer_addr.load(std::memory_order_relaxed); }

  // modify_qp's calls (every lock held). `mtu`: the path MTU (a UD QP: the port's).
  void configure(const QpAttr& attr, std::uint32_t mtu) REQUIRES(rq_mutex(qp_));
  void set_rq_psn(std::uint32_t psn) REQUIRES(rq_mutex(qp_));
  void reset() REQUIRES(rq_mutex(qp_));  // RESET: no message in progress, no resources, no answers waiting

 private:
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
    std::uint32_t pdn = 0;   // the PD its rkey was checked in (an XRC TGT's: its SRQ's)
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
    std::uint32_t pdn = 0;  // the PD the rkey is checked in (an XRC TGT's: the SRQ's)
  };
  // An answer waiting its turn: the rest of a READ's responses, or a packet
  // (ACK, NAK, atomic ACK) that may not overtake them.
  struct QueuedAnswer {
    bool read = false;
    ReadTrain train;
    Packet packet;
  };
  // What every request reads: written only by the responder (and by
  // modify_qp through configure, set_rq_psn and reset). A whole
  // in-sequence RDMA WRITE runs without rq_mu_ (it touches neither the
  // receive queue nor a message in progress): what it reads or moves is
  // atomic (access, expected_psn, mtu, msn, nak_sent, in_message).
  struct ResponderState {
    std::atomic<std::uint32_t> access{0};  // qp_access_flags
    std::uint8_t min_rnr_timer = 1;
    std::uint8_t max_rd_atomic = 0;  // the QP's own READs (a TM SRQ's rendezvous needs one)
    std::atomic<std::uint32_t> expected_psn{0};
    std::atomic<std::uint32_t> mtu{4096};  // path_mtu (read by the unlocked path too)
    // Messages completed (AETH MSN), and whether a sequence-error NAK for
    // expected_psn is out (the rest is dropped silently until it arrives).
    // Atomics: the unlocked path reads or moves them too.
    std::atomic<std::uint32_t> msn{0};
    std::atomic<bool> nak_sent{false};
    // The newest PSN dropped since that NAK (the locked machine's): one
    // before it means the requester went back, and its resend of
    // expected_psn was lost too.
    std::uint32_t nak_high = 0;
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
    // XRC TGT: the XRC SRQ the message in progress (or the last one) named
    // in its XRCETH: its receives, its PD for rkeys, its CQ.
    std::shared_ptr<Srq> xrc_srq;
  };
  // The responder's bounds, guarded by rq_mu_; apart from ResponderState,
  // whose lines every request reads, as these are not.
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


  // The request comes from the connected peer's address and QPN.
  bool from_peer(const Packet& pkt) const;
  // Admission, shared by every entry of a connected QP's responder: its
  // state takes requests (IBA 10.3.1) and the packet is from its peer
  // (IBA 9.6.1.5). Only reads; count_refusal() counts a refusal under its
  // reason (REQUIRES rq_mu_) and says whether there was one.
  enum class Admission : std::uint8_t { kAccept, kBadState, kBadSource };
  Admission admit(const Packet& pkt) const;
  bool count_refusal(Admission a) REQUIRES(rq_mutex(qp_));
  // A train (count > 1) that is a whole message at the expected PSN,
  // between messages: executed at once rather than packet by packet.
  bool whole_message_in_sequence(const Packet& pkt) const;
  // A message completed: the AETH MSN moves on.
  void count_message() {
    resp_.msn.store(psn_add(resp_.msn.load(std::memory_order_relaxed), 1), std::memory_order_relaxed);
  }
  // The unlocked entry (without rq_mu_) is for a whole RDMA WRITE without
  // immediate: ONLY, or a train FIRST..LAST. It neither takes a receive
  // nor continues a message, so the states it passes read only atomics.
  static bool takes_unlocked_entry(const Packet& pkt) {
    return pkt.op == Opcode::kWriteOnly ||
           (pkt.op == Opcode::kWriteFirst && pkt.count > 1 && pkt.last_op == Opcode::kWriteLast);
  }
  // The machine's states for such a WRITE, run without rq_mu_: true if
  // they executed it, false (and nothing done or counted) if the locked
  // machine must run it: anything but an in-sequence WRITE that lands.
  // (Outside clang's analysis: it runs states that REQUIRE rq_mu_ in
  // general, on the one path where they touch nothing it guards, which
  // execute_write's comment states and TSan checks.)
  // (flatten: the states inlined into it, as the copy of them it replaced was.)
  [[gnu::flatten]] bool write_unlocked(Packet& pkt) NO_THREAD_SAFETY_ANALYSIS;
  // UD (ud_responder.cc) and UC (uc_responder.cc): what arrives for a QP of
  // those transports; they take rq_mu_.
  void receive_datagram(const Packet& pkt);
  void receive_uc(Packet& pkt);
  // REQUIRES rq_mu_: one UC packet; a message given up, counted under `why`.
  void uc_execute(Packet& pkt) REQUIRES(rq_mutex(qp_));
  void uc_abandon_message(Counter& why) REQUIRES(rq_mutex(qp_));
  // The RC machine and its states, REQUIRES rq_mu_.
  void execute(Packet& pkt) REQUIRES(rq_mutex(qp_));
  void execute_states(Packet& pkt) REQUIRES(rq_mutex(qp_));  // the loop; execute() adds XRC's release
  // The checks only read (the states they lead to act): the unlocked
  // entry runs them too.
  State check_psn(const Packet& pkt) const;
  // A packet check_psn dropped: true if it drew a NAK again (responder.cc).
  bool renak(const Packet& pkt) REQUIRES(rq_mutex(qp_));
  State check_op_sequence(const Packet& pkt) const;
  State check_length(const Packet& pkt) const;
  State check_resources(const Packet& pkt) const REQUIRES(rq_mutex(qp_));
  // XRC TGT: the XRCETH of a packet that starts a message names an XRC SRQ
  // of this device in the QP's XRC domain, which the message then uses.
  State check_xrc_srq(const Packet& pkt) REQUIRES(rq_mutex(qp_));
  // The PD a request's rkeys and IETH are checked in: the QP's, or an XRC
  // TGT's, that of the SRQ its message named.
  std::uint32_t request_pdn() const REQUIRES(rq_mutex(qp_));
  State execute_send(Packet& pkt) REQUIRES(rq_mutex(qp_));
  // A rendezvous request that matched a tag (execute_send's, out of line).
  [[gnu::noinline, gnu::cold]] State execute_rndv(Packet& pkt) REQUIRES(rq_mutex(qp_));
  State execute_write(Packet& pkt) REQUIRES(rq_mutex(qp_));
  State execute_read(Packet& pkt) REQUIRES(rq_mutex(qp_));
  State execute_atomic(Packet& pkt) REQUIRES(rq_mutex(qp_));
  State acknowledge_state(Packet& pkt) REQUIRES(rq_mutex(qp_));
  void acknowledge_before_completion(Packet& pkt) REQUIRES(rq_mutex(qp_));
  State duplicate(Packet& pkt) REQUIRES(rq_mutex(qp_));
  // Sends the READ response packets for [va, va + length) from `first_psn`
  // (a new READ or a duplicate asking again from the middle): at once as a
  // train, else a burst now and the rest queued for later turns (all of
  // it queued behind answers already waiting); false if the rkey does not
  // grant it.
  bool send_read_responses(const Packet& req, std::uint32_t first_psn, std::uint64_t va, std::uint32_t rkey,
                           std::uint32_t length, std::uint32_t pdn) REQUIRES(rq_mutex(qp_));
  // send_read_responses() of a READ longer than a burst, or behind answers
  // that wait: the key checked for all of it, then a burst now and the rest
  // queued, or all of it queued.
  [[gnu::noinline]] bool start_read_train(const ReadTrain& train) REQUIRES(rq_mutex(qp_));
  // Packets [from, to) of `t`, translated anew (the key is checked again);
  // false, and nothing sent, if it no longer translates.
  bool send_read_packets(const ReadTrain& t, std::uint32_t from, std::uint32_t to);
  // REQUIRES rq_mu_, answers_queued: `p` waits its turn behind what waits
  // (a plain ACK merges with one waiting last: it covers it); beyond
  // kMaxQueuedAnswers it is dropped and counted.
  // (Out of line, as everything of the queue: the common answer, an ACK
  // with nothing waiting, stays a few instructions inlined into its caller.)
  [[gnu::noinline, gnu::cold]] void queue_answer(Packet&& p) REQUIRES(rq_mutex(qp_));
  [[gnu::noinline, gnu::cold]] void acknowledge_queued(const Packet& req, std::uint32_t psn) REQUIRES(rq_mutex(qp_));
  [[gnu::noinline]] void queue_train(const ReadTrain& t) REQUIRES(rq_mutex(qp_));
  void schedule_turn() REQUIRES(rq_mutex(qp_));  // a turn is due, unless one is already
  // A duplicate READ may be executed again (REQUIRES rq_mu_).
  bool take_dup_read_token() REQUIRES(rq_mutex(qp_));
  RdAtomicResource* find_resource(std::uint32_t psn) REQUIRES(rq_mutex(qp_));
  RdAtomicResource& take_resource() REQUIRES(rq_mutex(qp_));
  // The expected PSN moves past `pkt` (and past a READ's response PSNs).
  void advance_expected(std::uint32_t next_psn) REQUIRES(rq_mutex(qp_));
  void respond(const Packet& req, Opcode op, Packet&& resp, std::uint32_t psn) REQUIRES(rq_mutex(qp_));
  // respond() with a plain ACK of `psn`, handed over as an Ack.
  void acknowledge(const Packet& req, std::uint32_t psn) REQUIRES(rq_mutex(qp_));
  void nak(const Packet& req, Syndrome code, std::uint8_t rnr_timer = 0) REQUIRES(rq_mutex(qp_));
  // A class C NAK for `cause`: counted, sent, and the QP ends.
  void nak_fatal(const Packet& req, NakCause cause) REQUIRES(rq_mutex(qp_));

  Qp& qp_;
  // (Not annotated: its atomics are read by the unlocked entry, its other
  // fields only under rq_mu_.)
  ResponderState resp_;
  ResponderQueue respq_ GUARDED_BY(rq_mutex(qp_));
  bool last_wqe_reported_ GUARDED_BY(rq_mutex(qp_)) = false;  // kQpLastWqeReached raised for this ERR
};

}  // namespace srdma::hca
