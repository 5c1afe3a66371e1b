// The responder: checks each request's PSN, translates the rkey (or takes a
// receive WQE), moves the bytes, and answers with ACK, read response, atomic
// ACK or NAK. Class C errors (invalid request, remote access, remote
// operation) end the responder's QP too (IBA 9.9.3.1.2); RNR does not.
#include <atomic>

#include "hca/copy.h"
#include "hca/cq.h"
#include "hca/delivery_scope.h"
#include "hca/link.h"
#include "hca/qp.h"
#include "hca/queue_engine.h"
#include "hca/translation_tables.h"
#include "srdma/access.h"

namespace srdma::hca {
namespace {

// The atomics' target must be 8-byte aligned and 8 bytes long (IBA 9.4.5).
std::atomic_ref<std::uint64_t> atomic_at(std::byte* p) {
  return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(p));
}

// IBA 10.3.1: only a QP in RTR, RTS or SQD executes requests; every other
// state (and any value that is no state at all) drops what arrives, and the
// requester's transport timer turns that into a retry error. A whitelist:
// a state nobody thought of is closed, not open.
bool accepts_requests(QpState s) { return s == QpState::kRtr || s == QpState::kRts || s == QpState::kSqd; }

}  // namespace

void Qp::answer_read(const Message& msg, const Translation& t, bool duplicate) {
  Message m;
  m.length = msg.length;
  t.for_each_piece([&](MemPiece p) { m.payload.push_back(p); });
  // A duplicate READ runs again (it is idempotent) but does not move the
  // expected PSN back.
  if (!duplicate) resp_.expected_psn.store((msg.psn + 1) & 0xffffff, std::memory_order_release);
  respond(msg, MsgOp::kReadResponse, std::move(m));
}

bool Qp::from_peer(const Message& msg) const {
  return msg.src_addr == resp_.peer_addr.load(std::memory_order_relaxed) &&
         msg.src_qpn == resp_.peer_qpn.load(std::memory_order_relaxed);
}

void Qp::receive_request(Message&& msg) {
  if ((msg.op == MsgOp::kWrite || msg.op == MsgOp::kReadRequest) && responder_unlocked(msg)) return;
  std::lock_guard lock(rq_mu_);
  if (!accepts_requests(state())) {
    recv_counters_.dropped_bad_state.bump();
    return;
  }
  // IBA 9.6.1.5 (header validation of a connected QP): a request from any
  // address or QPN but the peer's is silently dropped. Executing it would
  // let a third party write our memory and move our expected PSN.
  if (!from_peer(msg)) {
    recv_counters_.dropped_bad_source.bump();
    return;
  }
  recv_counters_.requests_received.bump();
  responder_execute(msg);
}

bool Qp::responder_unlocked(const Message& msg) {
  // Requests to a QP come from its one peer, whose requester sends them one
  // at a time (under its sq_mu_), so an in-sequence RDMA WRITE or READ
  // needs no lock of ours: neither touches the receive queue, and
  // everything that can go wrong (a duplicate, a gap, an access or key
  // error, a state that drops the request) is left to the locked path,
  // which checks again. Two senders aiming at one QP at once (a
  // misconfigured peer) can both pass the PSN check; each access was still
  // translated and checked, so nothing outside what their rkeys grant is
  // touched.
  if (!accepts_requests(state()) || !from_peer(msg)) return false;  // the locked path counts the drop
  const std::uint32_t expected = resp_.expected_psn.load(std::memory_order_acquire);
  if (msg.psn != expected) return false;
  const std::uint32_t access = msg.op == MsgOp::kWrite ? ACCESS_REMOTE_WRITE : ACCESS_REMOTE_READ;
  if (!(resp_.access.load(std::memory_order_relaxed) & access)) return false;
  if (msg.op == MsgOp::kReadRequest) {
    // A READ stores nothing here: its pieces are read once, right away.
    auto t = tables_.translate(msg.rkey, msg.va, msg.length, access, init_.pdn);
    if (!t) return false;
    recv_counters_.requests_received.bump();
    answer_read(msg, *t, /*duplicate=*/false);
    return true;
  }
  {
    // From the translation to the last store (see delivery_scope.h): an
    // invalidation of this rkey waits for it.
    TranslationWindow window(msg.rkey);
    auto t = tables_.translate(msg.rkey, msg.va, msg.length, access, init_.pdn);
    if (!t) return false;
    PieceList dst;
    t->for_each_piece([&](MemPiece p) { dst.push_back(p); });
    copy_pieces(dst, msg.payload);
  }
  recv_counters_.requests_received.bump();
  resp_.expected_psn.store((msg.psn + 1) & 0xffffff, std::memory_order_release);
  if (msg.ack_req) respond(msg, MsgOp::kAck, Message{});
  return true;
}

void Qp::respond(const Message& req, MsgOp op, Message&& resp) {
  resp.op = op;
  resp.src_addr = engine_.address();
  resp.dst_addr = req.src_addr;
  resp.src_qpn = qpn_;
  resp.dst_qpn = req.src_qpn;
  resp.psn = req.psn;
  recv_counters_.responses_sent.bump();
  engine_.link().send(std::move(resp));
}

void Qp::nak(const Message& req, NakCode code, std::uint8_t rnr_timer) {
  Message m;
  m.nak = code;
  m.rnr_timer = rnr_timer;
  if (code == NakCode::kRnr) recv_counters_.rnr_naks_sent.bump();
  if (code == NakCode::kPsnSequenceError) recv_counters_.seq_naks_sent.bump();
  respond(req, MsgOp::kNak, std::move(m));
  if (code == NakCode::kInvalidRequest || code == NakCode::kRemoteAccessError ||
      code == NakCode::kRemoteOperationalError) {
    state_.store(QpState::kErr, std::memory_order_release);
    flush_recv_queue();
    engine_.kick_later(shared_from_this());  // its send side flushes too
  }
}

void Qp::responder_execute(Message& msg) {
  // PSN check (IBA 9.7.5.1.1): a duplicate is acknowledged again without
  // being executed; reads (idempotent) run again and atomics replay their
  // saved result; a gap is a sequence error.
  bool duplicate = false;
  const std::uint32_t expected = resp_.expected_psn.load(std::memory_order_relaxed);
  if (msg.psn != expected) {
    std::uint32_t behind = (expected - msg.psn) & 0xffffff;
    if (behind >= 0x800000) {
      nak(msg, NakCode::kPsnSequenceError);
      return;
    }
    duplicate = true;
    recv_counters_.duplicate_requests.bump();
    if (msg.op == MsgOp::kCmpSwap || msg.op == MsgOp::kFetchAdd) {
      Message m;
      m.atomic_orig = resp_.last_atomic_orig;
      respond(msg, MsgOp::kAtomicAck, std::move(m));
      return;
    }
    if (msg.op != MsgOp::kReadRequest) {
      respond(msg, MsgOp::kAck, Message{});
      return;
    }
  }
  const std::uint32_t pdn = init_.pdn;

  switch (msg.op) {
    case MsgOp::kSend:
    case MsgOp::kSendWithImm:
    case MsgOp::kSendWithInv: {
      if (rq_empty()) {
        nak(msg, NakCode::kRnr, resp_.min_rnr_timer);  // IBA 9.7.5.2.8
        return;
      }
      const RecvWqe& r = take_recv();
      if (msg.length > r.length) {
        // The receive is too small: the receiver sees a local length error,
        // the sender an invalid request (IBA 9.7.5.2.4).
        complete_recv(r, WcStatus::kLocLenErr, WcOpcode::kRecv, 0, 0, 0, msg.src_qpn);
        nak(msg, NakCode::kInvalidRequest);
        return;
      }
      // Translate and place inside one translation window, and nothing
      // else in it (the NAK below may block on a peer's lock).
      const bool placed = [&] {
        TranslationWindow window(r.sges.size() == 1 ? r.sges[0].lkey : detail::kAnyKey);
        PieceList dst;
        for (const Sge& s : r.sges) {
          auto t = tables_.translate(s.lkey, s.addr, s.length, ACCESS_LOCAL_WRITE, pdn);
          if (!t) return false;
          t->for_each_piece([&](MemPiece p) { dst.push_back(p); });
        }
        copy_pieces(dst, msg.payload);
        return true;
      }();
      if (!placed) {
        complete_recv(r, WcStatus::kLocProtErr, WcOpcode::kRecv, 0, 0, 0, msg.src_qpn);
        nak(msg, NakCode::kRemoteOperationalError);
        return;
      }
      if (msg.op == MsgOp::kSendWithInv) {
        // IETH (IBA 9.4.1.3): after the message is placed, the responder
        // invalidates the R_Key it names, in this QP's PD, before the
        // receive completes; from the completion on the key fails. The key
        // must name a valid-or-free fast-registration MR of our PD, with
        // its current key. If not, we choose (and IBA's Class C handling
        // allows) NAK Invalid Request: the sender sees kRemInvReqErr, the
        // receive completes with kMemMgmtOpErr carrying the key, and both
        // QPs go to error.
        if (!tables_.local_invalidate(msg.imm, pdn)) {
          complete_recv(r, WcStatus::kMemMgmtOpErr, WcOpcode::kRecv, msg.length, msg.imm, WC_WITH_INVALIDATE,
                        msg.src_qpn);
          nak(msg, NakCode::kInvalidRequest);
          return;
        }
        complete_recv(r, WcStatus::kSuccess, WcOpcode::kRecv, msg.length, msg.imm, WC_WITH_INVALIDATE, msg.src_qpn,
                      msg.solicited);
        break;
      }
      std::uint32_t flags = msg.op == MsgOp::kSendWithImm ? std::uint32_t{WC_WITH_IMM} : 0u;
      complete_recv(r, WcStatus::kSuccess, WcOpcode::kRecv, msg.length,
                    msg.op == MsgOp::kSendWithImm ? msg.imm : 0, flags, msg.src_qpn, msg.solicited);
      break;
    }
    case MsgOp::kWrite:
    case MsgOp::kWriteWithImm: {
      if (!(resp_.access.load(std::memory_order_relaxed) & ACCESS_REMOTE_WRITE)) {
        nak(msg, NakCode::kRemoteAccessError);
        return;
      }
      if (msg.op == MsgOp::kWriteWithImm && rq_empty()) {
        nak(msg, NakCode::kRnr, resp_.min_rnr_timer);
        return;
      }
      const bool placed = [&] {
        TranslationWindow window(msg.rkey);
        auto t = tables_.translate(msg.rkey, msg.va, msg.length, ACCESS_REMOTE_WRITE, pdn);
        if (!t) return false;
        PieceList dst;
        t->for_each_piece([&](MemPiece p) { dst.push_back(p); });
        copy_pieces(dst, msg.payload);
        return true;
      }();
      if (!placed) {
        nak(msg, NakCode::kRemoteAccessError);
        return;
      }
      if (msg.op == MsgOp::kWriteWithImm) {
        complete_recv(take_recv(), WcStatus::kSuccess, WcOpcode::kRecvRdmaWithImm, msg.length, msg.imm, WC_WITH_IMM,
                      msg.src_qpn, msg.solicited);
      }
      break;
    }
    case MsgOp::kReadRequest: {
      if (!(resp_.access.load(std::memory_order_relaxed) & ACCESS_REMOTE_READ)) {
        nak(msg, NakCode::kRemoteAccessError);
        return;
      }
      auto t = tables_.translate(msg.rkey, msg.va, msg.length, ACCESS_REMOTE_READ, pdn);
      if (!t) {
        nak(msg, NakCode::kRemoteAccessError);
        return;
      }
      answer_read(msg, *t, duplicate);
      return;
    }
    case MsgOp::kCmpSwap:
    case MsgOp::kFetchAdd: {
      if (!(resp_.access.load(std::memory_order_relaxed) & ACCESS_REMOTE_ATOMIC)) {
        nak(msg, NakCode::kRemoteAccessError);
        return;
      }
      if (msg.va % 8 != 0) {
        nak(msg, NakCode::kInvalidRequest);
        return;
      }
      std::uint64_t orig = 0;
      const bool executed = [&] {
        TranslationWindow window(msg.rkey);
        auto t = tables_.translate(msg.rkey, msg.va, 8, ACCESS_REMOTE_ATOMIC, pdn);
        if (!t) return false;
        std::byte* target = t->pieces().front().addr;  // 8 aligned bytes never straddle a page
        auto word = atomic_at(target);
        if (msg.op == MsgOp::kCmpSwap) {
          orig = msg.compare_add;
          word.compare_exchange_strong(orig, msg.swap, std::memory_order_acq_rel);
        } else {
          orig = word.fetch_add(msg.compare_add, std::memory_order_acq_rel);
        }
        return true;
      }();
      if (!executed) {
        nak(msg, NakCode::kRemoteAccessError);
        return;
      }
      resp_.last_atomic_orig = orig;
      resp_.expected_psn.store((msg.psn + 1) & 0xffffff, std::memory_order_release);
      Message m;
      m.atomic_orig = orig;
      respond(msg, MsgOp::kAtomicAck, std::move(m));
      return;
    }
    case MsgOp::kAck:
    case MsgOp::kNak:
    case MsgOp::kReadResponse:
    case MsgOp::kAtomicAck:
      return;  // responses never reach the responder
  }
  resp_.expected_psn.store((msg.psn + 1) & 0xffffff, std::memory_order_release);
  // Coalesced: an ACK only when asked (IBA 9.7.5.1.2); it covers every
  // earlier PSN too.
  if (msg.ack_req) respond(msg, MsgOp::kAck, Message{});
}

void Qp::complete_recv(const RecvWqe& w, WcStatus status, WcOpcode op, std::uint32_t byte_len,
                       std::uint32_t imm, std::uint32_t flags, std::uint32_t src_qp, bool solicited) {
  Wc wc;
  wc.wr_id = w.wr_id;
  wc.status = status;
  wc.opcode = op;
  wc.byte_len = byte_len;
  if (flags & WC_WITH_INVALIDATE)
    wc.invalidated_rkey = imm;
  else
    wc.imm_data = imm;
  wc.wc_flags = flags;
  wc.qp_num = qpn_;
  wc.qp_context = init_.qp_context;
  wc.src_qp = src_qp;
  push_cqe(*init_.recv_cq, wc, solicited);
}

void Qp::flush_recv_queue() {
  while (!rq_empty()) {
    complete_recv(take_recv(), WcStatus::kWrFlushErr, WcOpcode::kRecv, 0, 0, 0, 0);
  }
}

}  // namespace srdma::hca
