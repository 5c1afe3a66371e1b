// The responder: checks each request packet's PSN, opcode sequence and
// length, translates the rkey (or takes a receive WQE), moves the bytes, and
// answers with ACK, READ response packets, atomic ACK or NAK. Class C errors
// (invalid request, remote access, remote operation) end the responder's QP
// too (IBA 9.9.3.1.2); RNR does not.
//
// A state machine as rxe's rxe_resp.c: execute() runs one small
// function per state, each returning the next; the IBA rule each applies is
// cited beside it.
#include <algorithm>
#include <array>
#include <atomic>

#include "hca/copy.h"
#include "hca/cq.h"
#include "hca/delivery_scope.h"
#include "hca/link.h"
#include "hca/qp.h"
#include "hca/responder.h"
#include "hca/qp_rules.h"
#include "hca/queue_engine.h"
#include "hca/srq.h"
#include "hca/translation_tables.h"
#include "srdma/access.h"

namespace srdma::hca {
namespace {

// The atomics' target must be 8-byte aligned and 8 bytes long (IBA 9.4.5).
std::atomic_ref<std::uint64_t> atomic_at(std::byte* p) {
  return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(p));
}

}  // namespace

std::string_view Responder::state_str(State s) {
  switch (s) {
    case State::kCheckPsn: return "check_psn";
    case State::kCheckOpSequence: return "check_op_sequence";
    case State::kCheckXrcSrq: return "check_xrc_srq";
    case State::kCheckLength: return "check_length";
    case State::kCheckResources: return "check_resources";
    case State::kExecuteSend: return "execute_send";
    case State::kExecuteWrite: return "execute_write";
    case State::kExecuteRead: return "execute_read";
    case State::kExecuteAtomic: return "execute_atomic";
    case State::kAcknowledge: return "acknowledge";
    case State::kDuplicate: return "duplicate";
    case State::kNakSequence: return "nak_sequence";
    case State::kNakRnr: return "nak_rnr";
    case State::kNakInvalidSequence: return "nak_invalid_sequence";
    case State::kNakInvalidLength: return "nak_invalid_length";
    case State::kNakInvalidNoResources: return "nak_invalid_no_resources";
    case State::kNakInvalidRecvTooShort: return "nak_invalid_recv_too_short";
    case State::kNakInvalidInvalidate: return "nak_invalid_invalidate";
    case State::kNakInvalidUnaligned: return "nak_invalid_unaligned";
    case State::kNakAccessNotEnabled: return "nak_access_not_enabled";
    case State::kNakAccessRkey: return "nak_access_rkey";
    case State::kNakOperational: return "nak_operational";
    case State::kNakXrcSrq: return "nak_xrc_srq";
    case State::kDrop: return "drop";
    case State::kDone: return "done";
  }
  return "?";
}

void Responder::configure(const QpAttr& attr, std::uint32_t mtu) {
  resp_.qkey.store(attr.qkey, std::memory_order_relaxed);
  resp_.mtu.store(mtu, std::memory_order_relaxed);
  if (resp_.resources.size() != attr.max_dest_rd_atomic) {
    resp_.resources.assign(attr.max_dest_rd_atomic, RdAtomicResource{});
    resp_.next_resource = 0;
  }
  resp_.access.store(attr.qp_access_flags, std::memory_order_relaxed);
  resp_.peer_addr.store(attr.dest_addr, std::memory_order_relaxed);
  resp_.peer_qpn.store(attr.dest_qp_num, std::memory_order_relaxed);
  resp_.min_rnr_timer = attr.min_rnr_timer;
  resp_.max_rd_atomic = attr.max_rd_atomic;
}

void Responder::set_rq_psn(std::uint32_t psn) {
  resp_.expected_psn.store(psn, std::memory_order_release);
  resp_.nak_sent.store(false, std::memory_order_relaxed);
}

void Responder::reset() {
  last_wqe_reported_ = false;
  resp_.xrc_srq.reset();
  resp_.in_message.store(ResponderState::InMessage::kNone, std::memory_order_relaxed);
  for (auto& r : resp_.resources) r.valid = false;
  respq_.queued.clear();  // a turn that is sending finds the queue empty and ends it
  if (!respq_.turn_sending) resp_.answers_queued.store(false, std::memory_order_release);
  respq_.dup_read_tokens = kDupReadBudget;
}

bool Responder::from_peer(const Packet& pkt) const {
  return pkt.src_addr == resp_.peer_addr.load(std::memory_order_relaxed) &&
         pkt.src_qpn == resp_.peer_qpn.load(std::memory_order_relaxed);
}

Responder::Admission Responder::admit(const Packet& pkt) const {
  if (!accepts_requests(qp_.state())) return Admission::kBadState;
  // IBA 9.6.1.5 (header validation of a connected QP): a request from any
  // address or QPN but the peer's is silently dropped. Executing it would
  // let a third party write our memory and move our expected PSN.
  if (!from_peer(pkt)) return Admission::kBadSource;
  return Admission::kAccept;
}

bool Responder::count_refusal(Admission a) {
  if (a == Admission::kAccept) return false;
  (a == Admission::kBadState ? qp_.recv_counters_.dropped_bad_state : qp_.recv_counters_.dropped_bad_source).bump();
  return true;
}

bool Responder::whole_message_in_sequence(const Packet& pkt) const {
  return starts_message(pkt.op) && ends_message(pkt.last_op) &&
         pkt.psn == resp_.expected_psn.load(std::memory_order_relaxed) &&
         resp_.in_message.load(std::memory_order_relaxed) == ResponderState::InMessage::kNone;
}

void Responder::receive(Packet&& pkt) {
  // A whole RDMA WRITE (one packet, or a train of all of them) enters the
  // machine without the lock; whatever that entry does not finish, the
  // locked machine runs from the start.
  if (qp_.rc_entries_ && takes_unlocked_entry(pkt) && write_unlocked(pkt)) return;
  // An XRC TGT QP runs RC's machine (its checks choose the XRC SRQ).
  if (qp_.init_.type != QpType::kRc && qp_.init_.type != QpType::kXrcTgt) [[unlikely]]
    return qp_.init_.type == QpType::kUd ? receive_datagram(pkt) : receive_uc(pkt);
  FastLock lock(qp_.rq_mu_);
  if (count_refusal(admit(pkt))) return;
  qp_.recv_counters_.requests_received.bump(pkt.count);
  // A train that is a whole message at the expected PSN runs through the
  // state machine at once (each check covers its packets); any other is
  // taken apart and its packets run one by one.
  if (pkt.count == 1 || whole_message_in_sequence(pkt)) return execute(pkt);
  unroll(pkt, resp_.mtu.load(std::memory_order_relaxed), [&](Packet& p) {
    qp_.rq_mu_.assert_held();  // (unroll calls it here, inside the lock)
    if (accepts_requests(qp_.state())) execute(p);  // a NAK on the way ended the QP
  });
}

bool Responder::write_unlocked(Packet& pkt) {
  // The machine's own states, in its order, for a whole in-sequence RDMA
  // WRITE without rq_mu_. Requests to a QP come from its one peer, whose
  // requester sends them one at a time (under its sq_mu_), and such a WRITE
  // touches neither the receive queue nor a message in progress: the checks
  // read only ResponderState's atomics, and on the path below
  // execute_write writes nothing the lock guards. Any state's answer but
  // the next on this path (a duplicate, a gap, a sequence, length, access
  // or key error) leaves the packet, untouched and uncounted, to the locked
  // machine, which runs every state again and acts on it. Two packets of
  // one PSN at once (a link that duplicates, a misconfigured peer) can both
  // pass check_psn; each access is still translated and checked, and both
  // store the same bytes.
  if (admit(pkt) != Admission::kAccept) return false;  // the locked machine counts the drop
  // A NAK out for a gap, or answers queued behind a READ's responses (its
  // ACK must wait with them): the locked machine's turn.
  if (resp_.nak_sent.load(std::memory_order_relaxed) || resp_.answers_queued.load(std::memory_order_acquire))
      [[unlikely]]
    return false;
  if (check_psn(pkt) != State::kCheckOpSequence || check_op_sequence(pkt) != State::kCheckLength ||
      check_length(pkt) != State::kCheckResources || check_resources(pkt) != State::kExecuteWrite ||
      execute_write(pkt) != State::kAcknowledge)
    return false;
  qp_.recv_counters_.requests_received.bump(pkt.count);
  (void)acknowledge_state(pkt);
  return true;
}

void Responder::respond(const Packet& req, Opcode op, Packet&& resp, std::uint32_t psn) {
  resp.transport = peer_transport(qp_.init_.type);  // an XRC TGT answers an INI
  resp.op = op;
  resp.src_addr = qp_.engine_.address();
  resp.dst_addr = req.src_addr;
  resp.src_qpn = qp_.qpn_;
  resp.dst_qpn = req.src_qpn;
  resp.udp_sport = qp_.udp_sport_;
  resp.psn = psn;
  if (has_aeth(op)) resp.msn = resp_.msn.load(std::memory_order_relaxed);
  if (resp_.answers_queued.load(std::memory_order_relaxed)) [[unlikely]]
    return queue_answer(std::move(resp));  // behind a READ's responses (counted when sent)
  qp_.recv_counters_.responses_sent.bump(resp.count);
  qp_.engine_.link().send(std::move(resp));
}

void Responder::acknowledge(const Packet& req, std::uint32_t psn) {
  if (resp_.answers_queued.load(std::memory_order_relaxed)) [[unlikely]] return acknowledge_queued(req, psn);
  // The compact ACK (Link::send_ack) is RC's: an XRC ACK is a Packet.
  if (qp_.init_.type == QpType::kXrcTgt) [[unlikely]] return respond(req, Opcode::kAck, Packet{}, psn);
  qp_.recv_counters_.responses_sent.bump();
  qp_.engine_.link().send_ack(Ack{qp_.engine_.address(), req.src_addr, qp_.qpn_, req.src_qpn, psn,
                              resp_.msn.load(std::memory_order_relaxed), qp_.udp_sport_});
}

void Responder::nak(const Packet& req, Syndrome code, std::uint8_t rnr_timer) {
  Packet m;
  m.syndrome = code;
  m.rnr_timer = rnr_timer;
  if (code == Syndrome::kRnrNak) qp_.recv_counters_.rnr_naks_sent.bump();
  // A sequence-error NAK names the PSN the responder expects (IBA 9.7.5.2.2);
  // every other NAK names the packet it refuses.
  std::uint32_t psn = req.psn;
  if (code == Syndrome::kPsnSequenceError) {
    qp_.recv_counters_.seq_naks_sent.bump();
    psn = resp_.expected_psn.load(std::memory_order_relaxed);
  }
  respond(req, Opcode::kAck, std::move(m), psn);
  if (code == Syndrome::kInvalidRequest || code == Syndrome::kRemoteAccessError ||
      code == Syndrome::kRemoteOperationalError || code == Syndrome::kInvalidRdRequest) {
    qp_.state_.store(QpState::kErr, std::memory_order_release);
    resp_.in_message.store(ResponderState::InMessage::kNone, std::memory_order_relaxed);
    flush();
    qp_.engine_.kick_later(qp_.shared_from_this());  // its send side flushes too
  }
}

namespace {
// The AETH syndrome each cause is answered with (IBA 9.7.5.2.5).
// An XRCETH naming no XRC SRQ of the TGT's domain: Invalid RD Request, the
// NAK of RD's domain violation (an RDD that does not match, IBA 9.7.5.2.5):
// the XRC domain is what the RD domain was, and the requester's count
// (NakCode::kInvalidRdRequest) says it was the SRQ it named, not its rkey
// or the request's form.
constexpr Syndrome kNakCauseSyndrome[kNumNakCauses] = {
    Syndrome::kInvalidRequest,      Syndrome::kInvalidRequest,    Syndrome::kInvalidRequest,
    Syndrome::kInvalidRequest,      Syndrome::kInvalidRequest,    Syndrome::kInvalidRequest,
    Syndrome::kRemoteAccessError,   Syndrome::kRemoteAccessError, Syndrome::kRemoteOperationalError,
    Syndrome::kInvalidRdRequest,
};
static_assert(kNakCauseSyndrome[static_cast<std::size_t>(NakCause::kAccessNotEnabled)] == Syndrome::kRemoteAccessError);
// The NAK states are NakCause's values, in order, from kNakInvalidSequence.
static_assert(static_cast<std::size_t>(Responder::State::kNakXrcSrq) -
                  static_cast<std::size_t>(Responder::State::kNakInvalidSequence) ==
              static_cast<std::size_t>(NakCause::kXrcSrqRefused));
static_assert(static_cast<std::size_t>(NakCause::kXrcSrqRefused) + 1 == kNumNakCauses);
static_assert(kNakCauseSyndrome[static_cast<std::size_t>(NakCause::kOperationalPlacement)] ==
              Syndrome::kRemoteOperationalError);
}  // namespace

void Responder::nak_fatal(const Packet& req, NakCause cause) {
  qp_.recv_counters_.naks_sent[static_cast<std::size_t>(cause)].bump();
  nak(req, kNakCauseSyndrome[static_cast<std::size_t>(cause)]);
}

void Responder::advance_expected(std::uint32_t next_psn) {
  resp_.nak_sent.store(false, std::memory_order_relaxed);
  resp_.expected_psn.store(next_psn, std::memory_order_release);
}

void Responder::execute(Packet& pkt) {
  execute_states(pkt);
  // An XRC TGT lets go of the SRQ its message named once the message is
  // done and no receive of it is held: a destroyed SRQ (and its CQ) is not
  // kept alive by the QP that last received into it.
  if (qp_.init_.type == QpType::kXrcTgt && resp_.xrc_srq &&
      resp_.in_message.load(std::memory_order_relaxed) == ResponderState::InMessage::kNone && qp_.rq_.empty()) {
    resp_.xrc_srq.reset();
    qp_.rq_.select_srq(nullptr);
  }
}

void Responder::execute_states(Packet& pkt) {
  State s = State::kCheckPsn;
  while (s != State::kDone) {
    switch (s) {
      case State::kCheckPsn: s = check_psn(pkt); break;
      case State::kCheckOpSequence: s = check_op_sequence(pkt); break;
      case State::kCheckXrcSrq: s = check_xrc_srq(pkt); break;
      case State::kCheckLength: s = check_length(pkt); break;
      case State::kCheckResources: s = check_resources(pkt); break;
      case State::kExecuteSend: s = execute_send(pkt); break;
      case State::kExecuteWrite: s = execute_write(pkt); break;
      case State::kExecuteRead: s = execute_read(pkt); break;
      case State::kExecuteAtomic: s = execute_atomic(pkt); break;
      case State::kAcknowledge: s = acknowledge_state(pkt); break;
      case State::kDuplicate: s = duplicate(pkt); break;
      case State::kNakSequence:
        resp_.nak_sent.store(true, std::memory_order_relaxed);  // one per gap (C9-66)
        resp_.nak_high = pkt.psn;
        nak(pkt, Syndrome::kPsnSequenceError);
        s = State::kDone;
        break;
      case State::kNakRnr:
        // The rest of the message behind it is dropped silently until the
        // requester, after its RNR wait, sends this PSN again: answered as
        // a gap (one NAK each), those packets drew a sequence NAK that cut
        // the wait short and spent the requester's retry_cnt, one per
        // round, until a slow receiver's peer ended in RETRY_EXC_ERR.
        resp_.nak_sent.store(true, std::memory_order_relaxed);
        resp_.nak_high = pkt.psn;
        nak(pkt, Syndrome::kRnrNak, resp_.min_rnr_timer);  // IBA 9.7.5.2.8
        s = State::kDone;
        break;
      case State::kNakInvalidSequence:
      case State::kNakInvalidLength:
      case State::kNakInvalidNoResources:
      case State::kNakInvalidRecvTooShort:
      case State::kNakInvalidInvalidate:
      case State::kNakInvalidUnaligned:
      case State::kNakAccessNotEnabled:
      case State::kNakAccessRkey:
      case State::kNakOperational:
      case State::kNakXrcSrq:
        nak_fatal(pkt, static_cast<NakCause>(static_cast<std::uint8_t>(s) -
                                             static_cast<std::uint8_t>(State::kNakInvalidSequence)));
        s = State::kDone;
        break;
      case State::kDrop:
        if (renak(pkt)) {
          s = State::kDone;
          break;
        }
        qp_.recv_counters_.dropped_bad_psn.bump();
        s = State::kDone;
        break;
      case State::kDone: break;
    }
  }
}

// One NAK per gap (C9-66) means one per go-back-N of the requester: a
// packet just past the expected PSN (within an ACK group of it) but
// before the newest dropped since the NAK is a resend, so the requester
// went back and its resend of the expected PSN was lost as well. That gap
// is answered too (with one NAK, as the first), where silence would leave
// the requester to its timers. A duplicate of the newest is not a resend;
// a stale reordered packet may draw a NAK the requester did not need,
// which costs a go-back-N, never data. A stranger's guessed PSNs land in
// that window one time in a million (`tests/identifier_test.cc`).
bool Responder::renak(const Packet& pkt) {
  const std::uint32_t expected = resp_.expected_psn.load(std::memory_order_relaxed);
  if (!resp_.nak_sent.load(std::memory_order_relaxed)) return false;
  const std::int32_t past = psn_diff(pkt.psn, expected);
  if (past <= 0) return false;
  const bool went_back = psn_diff(pkt.psn, resp_.nak_high) < 0 && past <= static_cast<std::int32_t>(kAckEveryPsns);
  resp_.nak_high = pkt.psn;
  if (!went_back) return false;
  nak(pkt, Syndrome::kPsnSequenceError);
  return true;
}

// IBA 9.7.5.1.1 (responder PSN checks): the expected PSN executes; an
// earlier one is a duplicate; a later one means packets were lost: one
// sequence-error NAK per gap (C9-66), and every packet after it is dropped
// until the expected PSN arrives.
// The checks (this one to check_resources) only read: the states they lead
// to act, so the unlocked entry can run them and leave the rest to the
// locked machine. (Acquire: a packet at the PSN the locked machine just
// moved to sees the message state it left.)
Responder::State Responder::check_psn(const Packet& pkt) const {
  const std::int32_t d = psn_diff(pkt.psn, resp_.expected_psn.load(std::memory_order_acquire));
  if (d > 0) return resp_.nak_sent.load(std::memory_order_relaxed) ? State::kDrop : State::kNakSequence;
  return d < 0 ? State::kDuplicate : State::kCheckOpSequence;
}

// IBA 9.8.3 (opcode sequence): inside a multi-packet message only its
// MIDDLE and LAST packets may follow; outside one, only a packet that starts
// a message. Anything else (a MIDDLE without its FIRST) is an invalid
// request (class C, as rxe's missing FIRST/LAST).
Responder::State Responder::check_op_sequence(const Packet& pkt) const {
  if (!continues_sequence(resp_.in_message.load(std::memory_order_relaxed), pkt.op)) return State::kNakInvalidSequence;
  return qp_.init_.type == QpType::kXrcTgt ? State::kCheckXrcSrq : State::kCheckLength;
}

// IBA A14.4.1: each XRC request carries the XRC SRQ it is for; the SRQ must
// be an XRC SRQ of this device in the TGT QP's XRC domain (the domain is
// the boundary an INI may reach through a TGT). A message keeps the SRQ its
// first packet named: the XRCETH of the packets that follow is not read
// again. A refusal places nothing and ends the QP (nak_fatal).
Responder::State Responder::check_xrc_srq(const Packet& pkt) {
  if (!starts_message(pkt.op)) return resp_.xrc_srq ? State::kCheckLength : State::kNakXrcSrq;
  std::shared_ptr<Srq> srq = qp_.engine_.find_xrc_srq(pkt.xrc_srqn);
  if (!srq || srq->xrcdn() != qp_.init_.xrcdn) return State::kNakXrcSrq;
  qp_.rq_.select_srq(srq);
  resp_.xrc_srq = std::move(srq);
  return State::kCheckLength;
}

std::uint32_t Responder::request_pdn() const {
  return qp_.init_.type == QpType::kXrcTgt && resp_.xrc_srq ? resp_.xrc_srq->pdn() : qp_.init_.pdn;
}

// IBA 9.7.5.1.4 (length checks): FIRST and MIDDLE carry exactly the path
// MTU, LAST 1..MTU, ONLY 0..MTU; a WRITE's packets add up to its RETH DMA
// length; READ requests and atomics carry none. A message longer than its
// DMA length (or than the receive, below) is an invalid request.
Responder::State Responder::check_length(const Packet& pkt) const {
  const std::uint32_t mtu = resp_.mtu.load(std::memory_order_relaxed);
  const std::uint32_t len = pkt.payload_length;
  if (pkt.count > 1) {
    // A whole message's train: every packet but the last the MTU, the last
    // 1..MTU.
    if (packets_for(len, mtu) != pkt.count || len == 0) return State::kNakInvalidLength;
    if (is_write(pkt.op) && pkt.dma_length != len) return State::kNakInvalidLength;
    return State::kCheckResources;
  }
  if (has_payload(pkt.op)) {
    if (!ends_message(pkt.op)) {
      if (len != mtu) return State::kNakInvalidLength;
    } else if (!starts_message(pkt.op)) {
      if (len == 0 || len > mtu) return State::kNakInvalidLength;
    } else if (len > mtu) {
      return State::kNakInvalidLength;
    }
  } else if (len != 0) {
    return State::kNakInvalidLength;
  }
  if (is_write(pkt.op)) {
    if (is_atomic_write(pkt.op) && len != 8) return State::kNakInvalidLength;  // exactly its 8 bytes
    if (starts_message(pkt.op)) {
      // ONLY: the one packet is the message; FIRST: more than one follows.
      if (ends_message(pkt.op) ? pkt.dma_length != len : pkt.dma_length <= mtu) return State::kNakInvalidLength;
    } else {
      const std::uint64_t end = std::uint64_t{resp_.offset} + len;
      if (end > resp_.write_length || (ends_message(pkt.op) && end != resp_.write_length))
        return State::kNakInvalidLength;
    }
  }
  return State::kCheckResources;
}

// A SEND (at its first packet) and a WRITE with immediate (at its last)
// need a receive WQE: none is an RNR NAK (IBA 9.7.5.2.8). A READ or atomic
// needs a responder resource: max_dest_rd_atomic 0 allows none (class C).
Responder::State Responder::check_resources(const Packet& pkt) const {
  if (is_send(pkt.op)) {
    if (starts_message(pkt.op)) {
      if (qp_.rq_.is_tm()) [[unlikely]] {
        // A tag-matching SRQ matches on the TMH (and a rendezvous request's
        // RVH): the first bytes, copied out of the payload (fewer when the
        // message is shorter), and the message's length if this packet
        // ends it.
        std::array<std::byte, kTmhSize + kRvhSize> first{};
        const std::size_t n = std::min<std::size_t>(first.size(), pkt.payload_length);
        const MemPiece to{first.data(), n};
        const std::size_t got = copy_pieces(std::span<const MemPiece>(&to, 1), pkt.payload);
        const std::uint64_t length = ends_message(last_opcode(pkt)) ? pkt.payload_length : UINT64_MAX;
        if (!qp_.rq_.ready(std::span<const std::byte>(first.data(), std::min(n, got)), length))
          return State::kNakRnr;
      } else if (!qp_.rq_.ready()) {
        return State::kNakRnr;
      }
    }
    return State::kExecuteSend;
  }
  if (is_write(pkt.op)) {
    if (has_imm(last_opcode(pkt)) && !qp_.rq_.ready()) return State::kNakRnr;
    return State::kExecuteWrite;
  }
  if (resp_.resources.empty()) return State::kNakInvalidNoResources;
  return pkt.op == Opcode::kReadRequest ? State::kExecuteRead : State::kExecuteAtomic;
}

Responder::State Responder::execute_send(Packet& pkt) {
  using M = ResponderState::InMessage;
  // The receive stays at the head of the queue until the message's last
  // packet completes it (post_recv appends behind it).
  const RecvWqe& r = qp_.rq_.head();
  if (r.tm == TmDisposition::kRndv) [[unlikely]] return execute_rndv(pkt);
  // A matched tag's buffer takes the message without its TMH: the first
  // packet's first r.skip bytes are not placed, and `offset` counts
  // placed bytes.
  const std::uint32_t offset = starts_message(pkt.op) ? 0 : resp_.offset;
  const std::uint32_t skip = starts_message(pkt.op) ? r.skip : 0;
  if (skip > pkt.payload_length) [[unlikely]] {
    // (take_tm matched on a whole TMH, so never: kept as the invariant's check.)
    resp_.in_message.store(M::kNone, std::memory_order_relaxed);
    complete_recv(qp_.rq_.take().wr_id, WcStatus::kLocLenErr, WcOpcode::kRecv, 0, 0, 0, pkt.src_qpn);
    return State::kNakInvalidRecvTooShort;
  }
  const std::uint32_t placed_length = pkt.payload_length - skip;
  if (std::uint64_t{offset} + placed_length > r.length) {
    // The receive is too small: the receiver sees a local length error,
    // the sender an invalid request (IBA 9.7.5.2.4).
    resp_.in_message.store(M::kNone, std::memory_order_relaxed);
    complete_recv(qp_.rq_.take().wr_id, WcStatus::kLocLenErr, WcOpcode::kRecv, 0, 0, 0, pkt.src_qpn);
    return State::kNakInvalidRecvTooShort;
  }
  // Translate and place inside one translation window, and nothing else in
  // it (the NAK below may block on a peer's lock).
  const std::uint32_t pdn = qp_.rq_.pdn();
  const bool placed = [&] {
    TranslationWindow window(Qp::window_key(r.sges));
    PieceList dst;
    if (!qp_.translate_slice(r.sges, offset, placed_length, ACCESS_LOCAL_WRITE, pdn, dst)) return false;
    if (skip == 0) {
      copy_pieces(dst, pkt.payload);
    } else {
      PieceCursor cursor(pkt.payload);
      PieceList src, tmh;
      cursor.take(skip, tmh);
      cursor.take(placed_length, src);
      copy_pieces(dst, src);
    }
    return true;
  }();
  if (!placed) {
    resp_.in_message.store(M::kNone, std::memory_order_relaxed);
    complete_recv(qp_.rq_.take().wr_id, WcStatus::kLocProtErr, WcOpcode::kRecv, 0, 0, 0, pkt.src_qpn);
    return State::kNakOperational;
  }
  const Opcode last_op = last_opcode(pkt);
  if (!ends_message(last_op)) {
    resp_.in_message.store(M::kSend, std::memory_order_relaxed);
    resp_.offset = offset + placed_length;
    return State::kAcknowledge;
  }
  resp_.in_message.store(M::kNone, std::memory_order_relaxed);
  const std::uint32_t byte_len = offset + placed_length;
  if (r.tm != TmDisposition::kNone) [[unlikely]] {
    // A message a tag-matching SRQ took: kTmRecv (matched, or unexpected)
    // or kTmNoTag, with the TMH's tag and app_ctx. (A SEND with
    // invalidate or immediate gets no special treatment here: the TMH
    // protocol has neither.)
    const RecvWqe& w = qp_.rq_.take();
    count_message();
    Wc wc;
    wc.wr_id = w.wr_id;
    wc.opcode = w.tm == TmDisposition::kNoTag ? WcOpcode::kTmNoTag : WcOpcode::kTmRecv;
    wc.byte_len = byte_len;
    if (w.tm == TmDisposition::kMatched) {
      wc.wc_flags = WC_TM_MATCH | WC_TM_DATA_VALID;
      wc.tm_tag = w.tm_tag;
      wc.tm_priv = w.tm_priv;
    }
    wc.qp_num = qp_.qpn_;
    wc.qp_context = qp_.init_.qp_context;
    wc.src_qp = pkt.src_qpn;
    acknowledge_before_completion(pkt);
    if (Cq* cq = qp_.init_.recv_cq ? qp_.init_.recv_cq.get() : qp_.rq_.srq()->cq().get())
      qp_.push_cqe(*cq, wc, pkt.solicited);
    return State::kDone;
  }
  const std::uint64_t done = qp_.rq_.take().wr_id;
  count_message();
  if (has_ieth(last_op)) {
    // IETH (IBA 9.4.1.3): after the message is placed, the responder
    // invalidates the R_Key it names, in this QP's PD, before the receive
    // completes; from the completion on the key fails. The key must name a
    // valid-or-free fast-registration MR of our PD, with its current key,
    // or a type 2 window of our PD bound through this QP.
    // If not, we choose (and IBA's class C handling allows) NAK Invalid
    // Request: the sender sees kRemInvReqErr, the receive completes with
    // kMemMgmtOpErr carrying the key, and both QPs go to error.
    if (!qp_.tables_.local_invalidate(pkt.imm, request_pdn(), qp_.qpn())) {
      complete_recv(done, WcStatus::kMemMgmtOpErr, WcOpcode::kRecv, byte_len, pkt.imm, WC_WITH_INVALIDATE,
                    pkt.src_qpn);
      return State::kNakInvalidInvalidate;
    }
    acknowledge_before_completion(pkt);
    complete_recv(done, WcStatus::kSuccess, WcOpcode::kRecv, byte_len, pkt.imm, WC_WITH_INVALIDATE, pkt.src_qpn,
                  pkt.solicited);
    return State::kDone;
  }
  const bool imm = has_imm(last_op);
  acknowledge_before_completion(pkt);
  complete_recv(done, WcStatus::kSuccess, WcOpcode::kRecv, byte_len, imm ? pkt.imm : 0, imm ? WC_WITH_IMM : 0u,
                pkt.src_qpn, pkt.solicited);
  return State::kDone;
}

// A rendezvous request that matched a posted tag (Srq::take_tm: one
// packet, TMH and RVH whole): nothing of it is placed; the tag completes
// now as matched (kTmRecv, WC_TM_MATCH, the TMH's tag and app_ctx,
// byte_len 0), and the device fetches the data: the READ of the RVH's
// buffer into the tag's, and then the FIN, are the send side's
// (Qp::queue_rndv), issued once rq_mu_ is let go. A request the device
// does not fetch (an RVH of 0 bytes, or of more than the tag's buffer or a
// message may hold, or a QP that may not READ) completes the tag with
// kTmRndvIncomplete instead, MATCH | DATA_VALID, its TMH and RVH (as much
// as fits) placed in the tag's buffer: the consumer carries on as for an
// unexpected one. The bytes come from a peer: each is checked before
// anything is written.
Responder::State Responder::execute_rndv(Packet& pkt) {
  resp_.in_message.store(ResponderState::InMessage::kNone, std::memory_order_relaxed);
  const std::uint32_t pdn = qp_.rq_.pdn();
  const RecvWqe& w = qp_.rq_.take();
  count_message();
  Wc wc;
  wc.wr_id = w.wr_id;
  wc.opcode = WcOpcode::kTmRecv;
  wc.wc_flags = WC_TM_MATCH;
  wc.tm_tag = w.tm_tag;
  wc.tm_priv = w.tm_priv;
  wc.qp_num = qp_.qpn_;
  wc.qp_context = qp_.init_.qp_context;
  wc.src_qp = pkt.src_qpn;
  const bool fetch = w.rndv_len != 0 && w.rndv_len <= w.length && w.rndv_len <= Qp::kMaxMessageBytes &&
                     resp_.max_rd_atomic != 0;
  if (fetch) {
    qp_.queue_rndv(Qp::RndvWork{w.wr_id, w.sges, pdn, w.rndv_va, w.rndv_rkey, w.rndv_len, w.tm_tag, w.tm_priv});
  } else {
    const std::uint32_t n = static_cast<std::uint32_t>(std::min<std::uint64_t>(kTmhSize + kRvhSize, w.length));
    const bool placed = [&] {
      TranslationWindow window(Qp::window_key(w.sges));
      PieceList dst, src;
      if (!qp_.translate_slice(w.sges, 0, n, ACCESS_LOCAL_WRITE, pdn, dst)) return false;
      PieceCursor(pkt.payload).take(n, src);
      copy_pieces(dst, src);
      return true;
    }();
    if (!placed) {
      complete_recv(w.wr_id, WcStatus::kLocProtErr, WcOpcode::kTmRecv, 0, 0, 0, pkt.src_qpn);
      return State::kNakOperational;
    }
    wc.status = WcStatus::kTmRndvIncomplete;
    wc.wc_flags |= WC_TM_DATA_VALID;
    wc.byte_len = n;
  }
  acknowledge_before_completion(pkt);
  if (Cq* cq = qp_.init_.recv_cq ? qp_.init_.recv_cq.get() : qp_.rq_.srq()->cq().get())
    qp_.push_cqe(*cq, wc, pkt.solicited);
  return State::kDone;
}

// A whole message (ONLY, or a train FIRST..LAST) is placed from its own
// RETH and leaves no message state behind; a FIRST keeps its RETH for the
// packets that follow. So a whole WRITE without immediate writes nothing
// here that rq_mu_ guards (the unlocked entry relies on it), and one whose
// key fails has placed and changed nothing.
Responder::State Responder::execute_write(Packet& pkt) {
  using M = ResponderState::InMessage;
  if (!(resp_.access.load(std::memory_order_relaxed) & ACCESS_REMOTE_WRITE)) return State::kNakAccessNotEnabled;
  if (is_atomic_write(pkt.op) && pkt.va % 8 != 0) return State::kNakInvalidUnaligned;
  const Opcode last_op = last_opcode(pkt);
  const bool whole = starts_message(pkt.op) && ends_message(last_op);
  if (starts_message(pkt.op) && !whole) {  // the RETH: the whole message's target
    resp_.write_va = pkt.va;
    resp_.write_rkey = pkt.rkey;
    resp_.write_length = pkt.dma_length;
    resp_.offset = 0;
  }
  const std::uint32_t rkey = whole ? pkt.rkey : resp_.write_rkey;
  // (The unlocked entry runs this too, never for an XRC TGT: rc_entries_.)
  const std::uint32_t pdn = qp_.init_.type == QpType::kXrcTgt ? request_pdn() : qp_.init_.pdn;
  const std::uint64_t va = whole ? pkt.va : resp_.write_va + resp_.offset;
  const bool placed = [&] {
    TranslationWindow window(rkey);
    auto t =
        qp_.tables_.translate(rkey, va, pkt.payload_length, ACCESS_REMOTE_WRITE, pdn, qp_.qpn());
    if (!t) return false;
    if (is_atomic_write(pkt.op)) [[unlikely]] {
      // Its 8 bytes as one store, never torn for a reader of the word (8
      // aligned bytes never straddle a page: one piece).
      std::uint64_t value = 0;
      const MemPiece word{reinterpret_cast<std::byte*>(&value), sizeof value};
      copy_pieces(std::span<const MemPiece>(&word, 1), pkt.payload);
      atomic_at(t->pieces().front().addr).store(value, std::memory_order_release);
      return true;
    }
    PieceList dst;
    t->for_each_piece([&](MemPiece p) { dst.push_back(p); });
    copy_pieces(dst, pkt.payload);
    return true;
  }();
  if (!placed) {
    if (!whole) resp_.in_message.store(M::kNone, std::memory_order_relaxed);
    return State::kNakAccessRkey;
  }
  if (!ends_message(last_op)) {
    resp_.offset += pkt.payload_length;
    resp_.in_message.store(M::kWrite, std::memory_order_relaxed);
    return State::kAcknowledge;
  }
  if (!whole) resp_.in_message.store(M::kNone, std::memory_order_relaxed);
  count_message();
  if (!has_imm(last_op)) return State::kAcknowledge;
  const std::uint32_t length = whole ? pkt.dma_length : resp_.write_length;
  const std::uint64_t done = qp_.rq_.take().wr_id;
  acknowledge_before_completion(pkt);
  complete_recv(done, WcStatus::kSuccess, WcOpcode::kRecvRdmaWithImm, length, pkt.imm, WC_WITH_IMM, pkt.src_qpn,
                pkt.solicited);
  return State::kDone;
}

// A new READ takes a responder resource (the oldest is reused: a requester
// that keeps to our max_dest_rd_atomic never has more outstanding) and is
// answered packet by packet; its PSNs are the responses'.
Responder::State Responder::execute_read(Packet& pkt) {
  if (!(resp_.access.load(std::memory_order_relaxed) & ACCESS_REMOTE_READ)) return State::kNakAccessNotEnabled;
  const std::uint32_t pdn = request_pdn();
  if (!send_read_responses(pkt, pkt.psn, pkt.va, pkt.rkey, pkt.dma_length, pdn)) return State::kNakAccessRkey;
  RdAtomicResource& res = take_resource();
  res.pdn = pdn;
  res.atomic = false;
  res.first_psn = pkt.psn;
  res.last_psn = psn_add(pkt.psn, packets_for(pkt.dma_length, resp_.mtu.load(std::memory_order_relaxed)) - 1);
  res.va = pkt.va;
  res.rkey = pkt.rkey;
  res.length = pkt.dma_length;
  // A new READ earns its requester one more duplicate (a lost response asks again).
  if (respq_.dup_read_tokens < kDupReadBudget) ++respq_.dup_read_tokens;
  count_message();
  advance_expected(psn_add(res.last_psn, 1));
  return State::kDone;
}

bool Responder::send_read_responses(const Packet& req, std::uint32_t first_psn, std::uint64_t va, std::uint32_t rkey,
                             std::uint32_t length, std::uint32_t pdn) {
  // The key, access and bounds are checked for every READ, a duplicate's
  // too: an rkey invalidated since the first answer answers nothing more.
  // The responses' payload is the MR's memory, read when the link hands it
  // to its wire: that happens before the window closes (the ordered batch
  // ends first), so dereg_mr, which waits for the window, never frees
  // memory a send still reads.
  const std::uint32_t mtu = resp_.mtu.load(std::memory_order_relaxed);
  const std::uint32_t n = packets_for(length, mtu);
  const ReadTrain train{req.src_addr, req.src_qpn, first_psn, n, 0, va, rkey, length, mtu,
                        resp_.msn.load(std::memory_order_relaxed), pdn};
  if (!qp_.trains()) {
    // A link of single packets: never more than a burst here, on the
    // thread that received the request.
    if (n > kResponseBurst || resp_.answers_queued.load(std::memory_order_relaxed)) [[unlikely]]
      return start_read_train(train);
    if (!send_read_packets(train, 0, n)) return false;
    qp_.recv_counters_.responses_sent.bump(n);
    return true;
  }
  // The in-process link: all of them at once, one train whose payload the
  // requester's completer copies.
  TranslationWindow window(rkey);
  SendBatch batch(qp_.engine_.link(), SendBatch::kOrdered);
  auto t = qp_.tables_.translate(rkey, va, length, ACCESS_REMOTE_READ, pdn, qp_.qpn());
  if (!t) return false;
  Packet r;
  t->for_each_piece([&](MemPiece p) { r.payload.push_back(p); });
  r.payload_length = length;
  r.op = n == 1 ? Opcode::kReadResponseOnly : Opcode::kReadResponseFirst;
  if (n > 1) {
    r.count = n;
    r.last_op = Opcode::kReadResponseLast;
  }
  respond(req, r.op, std::move(r), first_psn);
  return true;
}

Responder::State Responder::execute_atomic(Packet& pkt) {
  if (!(resp_.access.load(std::memory_order_relaxed) & ACCESS_REMOTE_ATOMIC)) return State::kNakAccessNotEnabled;
  if (pkt.va % 8 != 0) return State::kNakInvalidUnaligned;
  std::uint64_t orig = 0;
  const std::uint32_t pdn = request_pdn();  // (read here: the lambda below is not seen to hold rq_mu_)
  const bool executed = [&] {
    TranslationWindow window(pkt.rkey);
    auto t = qp_.tables_.translate(pkt.rkey, pkt.va, 8, ACCESS_REMOTE_ATOMIC, pdn, qp_.qpn());
    if (!t) return false;
    std::byte* target = t->pieces().front().addr;  // 8 aligned bytes never straddle a page
    // A zero-based region (device memory) may put an aligned iova on an
    // unaligned address: no atomic there (C9-33's alignment is the memory's).
    if (reinterpret_cast<std::uintptr_t>(target) % 8 != 0) return false;
    auto word = atomic_at(target);
    if (pkt.op == Opcode::kCmpSwap) {
      orig = pkt.compare_add;
      word.compare_exchange_strong(orig, pkt.swap, std::memory_order_acq_rel);
    } else {
      orig = word.fetch_add(pkt.compare_add, std::memory_order_acq_rel);
    }
    return true;
  }();
  if (!executed) return State::kNakAccessRkey;
  // Saved before it is answered: a duplicate is answered from here and
  // never executed twice.
  RdAtomicResource& res = take_resource();
  res.atomic = true;
  res.first_psn = res.last_psn = pkt.psn;
  res.va = pkt.va;
  res.rkey = pkt.rkey;
  res.length = 8;
  res.orig = orig;
  count_message();
  advance_expected(psn_add(pkt.psn, 1));
  Packet m;
  m.atomic_orig = orig;
  respond(pkt, Opcode::kAtomicAck, std::move(m), pkt.psn);
  return State::kDone;
}

// A SEND or WRITE packet executed: the expected PSN moves on; an ACK only
// when asked (IBA 9.7.5.1.2, coalescing: it covers every earlier PSN).
Responder::State Responder::acknowledge_state(Packet& pkt) {
  const std::uint32_t last = last_psn_of(pkt);
  advance_expected(psn_add(last, 1));
  if (pkt.ack_req || asks_ack_inside(pkt.psn, pkt.count)) acknowledge(pkt, last);
  return State::kDone;
}

// The ACK leaves before the receive completes, as an HCA's does: a
// consumer that answers the completion (by this QP, or by another path: a
// CM REQ, a socket) must not overtake the ACK its peer's send waits for,
// and a peer waiting for both on one completion channel must see its send
// complete first. So the ACK is handed to the wire here, not at the end of
// the receive batch (the ordered batch ends with it). UC has no ACK (its
// caller moves the PSN on).
void Responder::acknowledge_before_completion(Packet& pkt) {
  if (qp_.init_.type != QpType::kRc && qp_.init_.type != QpType::kXrcTgt) return;
  SendBatch now(qp_.engine_.link(), SendBatch::kOrdered);
  acknowledge_state(pkt);
}

// IBA 9.7.5.1.1 / C9-105..108 (duplicates): a SEND or WRITE is not executed
// again, only acknowledged, every one (as rxe), with its own PSN: always
// inside what the requester sent, even after it went back N;
// a READ is executed again from the PSN it asks for, if a resource still
// holds it; an atomic is answered from its resource's saved result. A
// duplicate no resource remembers is dropped (rxe does the same).
Responder::State Responder::duplicate(Packet& pkt) {
  qp_.recv_counters_.duplicate_requests.bump();
  if (is_send(pkt.op) || is_write(pkt.op)) {
    acknowledge(pkt, pkt.psn);
    return State::kDone;
  }
  RdAtomicResource* res = find_resource(pkt.psn);
  if (res == nullptr || res->atomic != is_atomic(pkt.op)) return State::kDrop;
  if (res->atomic) {
    if (pkt.psn != res->first_psn) return State::kDrop;
    Packet m;
    m.atomic_orig = res->orig;
    respond(pkt, Opcode::kAtomicAck, std::move(m), pkt.psn);
    return State::kDone;
  }
  // It must ask for the rest of the same READ, from its PSN on.
  const std::uint64_t offset = static_cast<std::uint64_t>(psn_diff(pkt.psn, res->first_psn)) * resp_.mtu.load(std::memory_order_relaxed);
  if (pkt.op != Opcode::kReadRequest || pkt.rkey != res->rkey || offset > res->length ||
      pkt.va != res->va + offset || pkt.dma_length != res->length - offset)
    return State::kDrop;
  // Executed again only within the QP's budget: a storm of them would
  // otherwise have the device stream the region again and again.
  if (!take_dup_read_token()) {
    qp_.recv_counters_.dropped_rate_limited.bump();
    return State::kDone;
  }
  if (!send_read_responses(pkt, pkt.psn, pkt.va, pkt.rkey, pkt.dma_length, res->pdn)) return State::kNakAccessRkey;
  return State::kDone;
}

Responder::RdAtomicResource* Responder::find_resource(std::uint32_t psn) {
  for (RdAtomicResource& r : resp_.resources)
    if (r.valid && psn_diff(psn, r.first_psn) >= 0 && psn_diff(r.last_psn, psn) >= 0) return &r;
  return nullptr;
}

Responder::RdAtomicResource& Responder::take_resource() {
  RdAtomicResource& r = resp_.resources[resp_.next_resource];
  resp_.next_resource = (resp_.next_resource + 1) % resp_.resources.size();
  r = RdAtomicResource{};
  r.valid = true;
  return r;
}

void Responder::complete_recv(std::uint64_t wr_id, WcStatus status, WcOpcode op, std::uint32_t byte_len,
                       std::uint32_t imm, std::uint32_t flags, std::uint32_t src_qp, bool solicited) {
  Wc wc;
  wc.wr_id = wr_id;
  wc.status = status;
  wc.opcode = op;
  wc.byte_len = byte_len;
  if (flags & WC_WITH_INVALIDATE)
    wc.invalidated_rkey = imm;
  else
    wc.imm_data = imm;
  wc.wc_flags = flags;
  wc.qp_num = qp_.qpn_;
  wc.qp_context = qp_.init_.qp_context;
  wc.src_qp = src_qp;
  // An XRC TGT QP has no CQ: its receives complete on their SRQ's.
  Cq* cq = qp_.init_.recv_cq ? qp_.init_.recv_cq.get() : qp_.rq_.srq() ? qp_.rq_.srq()->cq().get() : nullptr;
  if (cq) qp_.push_cqe(*cq, wc, solicited);
}

void Responder::flush() {
  // With an SRQ only the WQE this QP took flushes: the rest stay for the
  // other QPs. The QP takes no more, which IBA 10.3.1 announces as the
  // last WQE reached event (once per entry into ERR).
  while (!qp_.rq_.empty()) {
    complete_recv(qp_.rq_.take().wr_id, WcStatus::kWrFlushErr, WcOpcode::kRecv, 0, 0, 0, 0);
  }
  if (qp_.init_.srq && !last_wqe_reported_) {
    last_wqe_reported_ = true;
    qp_.engine_.async_events().raise(AsyncEvent{AsyncEventType::kQpLastWqeReached, 0, qp_.qpn_, qp_.init_.qp_context});
  }
}

}  // namespace srdma::hca
