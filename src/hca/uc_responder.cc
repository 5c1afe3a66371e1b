// The UC responder: RC's placement (responder.cc) without its promises.
// Nothing is acknowledged, NAKed or executed twice; a packet that cannot be
// used is dropped and counted, and so is the message it belonged to:
//
// - A PSN other than the expected one means packets were lost (UC never
//   resends): the message in progress is abandoned (kBadPsn) and the PSN
//   resyncs to the packet's.
// - A MIDDLE or LAST outside a message (its FIRST was lost or dropped) is
//   dropped (kBadOpcode); a FIRST or ONLY inside one abandons it
//   (kBadOpcode) and starts anew: the responder resyncs at the next FIRST or
//   ONLY (IBA 9.8.3.2).
// - A length that does not fit, no receive WQE for a SEND or WRITE with
//   immediate (kNoReceive: UC has no RNR), an R_Key that does not grant the
//   WRITE (kBadKey): the message is dropped.
// An abandoned SEND's receive WQE stays posted (the next message
// overwrites what was placed); a SEND too long for its WQE completes it
// with a local length error, as on RC, and the QP stays up.
#include <mutex>

#include "hca/qp.h"
#include "hca/responder.h"
#include "hca/qp_rules.h"
#include "hca/queue_engine.h"
#include "srdma/access.h"

namespace srdma::hca {

void Responder::receive_uc(Packet& pkt) {
  FastLock lock(qp_.rq_mu_);
  if (count_refusal(admit(pkt))) return;  // UC is connected, as RC
  qp_.recv_counters_.requests_received.bump(pkt.count);
  // A whole message's train in one go when it will land; one that will not
  // (no receive for its SEND) is unrolled, so it is dropped and counted
  // packet by packet as on the wire.
  if (pkt.count == 1 || (whole_message_in_sequence(pkt) && (!is_send(pkt.op) || qp_.rq_.ready())))
    return uc_execute(pkt);
  unroll(pkt, resp_.mtu.load(std::memory_order_relaxed), [&](Packet& p) {
    qp_.rq_mu_.assert_held();  // (unroll calls it here, inside the lock)
    uc_execute(p);
  });
}

namespace {
// What the RC execute steps return when the packet was placed: more of the
// message to come, or the message completed.
bool executed(Responder::State s) { return s == Responder::State::kAcknowledge || s == Responder::State::kDone; }
}  // namespace

void Responder::uc_abandon_message(Counter& reason) {
  resp_.in_message.store(ResponderState::InMessage::kNone, std::memory_order_relaxed);
  reason.bump();
}

void Responder::uc_execute(Packet& pkt) {
  using M = ResponderState::InMessage;
  const bool in_message = resp_.in_message.load(std::memory_order_relaxed) != M::kNone;
  if (pkt.psn != resp_.expected_psn.load(std::memory_order_relaxed) && in_message)
    uc_abandon_message(qp_.recv_counters_.dropped_bad_psn);
  // The next packet is expected after this one, whatever becomes of it.
  resp_.expected_psn.store(psn_add(last_psn_of(pkt), 1), std::memory_order_relaxed);
  const M cur = resp_.in_message.load(std::memory_order_relaxed);
  if (cur != M::kNone && !continues_sequence(cur, pkt.op))
    uc_abandon_message(qp_.recv_counters_.dropped_bad_opcode);
  if (resp_.in_message.load(std::memory_order_relaxed) == M::kNone && !starts_message(pkt.op))
    return qp_.recv_counters_.dropped_bad_opcode.bump(pkt.count);
  if (check_length(pkt) != State::kCheckResources) return uc_abandon_message(qp_.recv_counters_.dropped_bad_length);
  if (is_send(pkt.op)) {
    if (starts_message(pkt.op) && !qp_.rq_.ready()) return qp_.recv_counters_.dropped_no_receive.bump(pkt.count);
    // A refusal has completed the WQE in error (too short, a bad lkey).
    if (!executed(execute_send(pkt))) resp_.in_message.store(M::kNone, std::memory_order_relaxed);
    return;
  }
  if (has_imm(last_opcode(pkt)) && !qp_.rq_.ready()) return uc_abandon_message(qp_.recv_counters_.dropped_no_receive);
  if (!executed(execute_write(pkt))) uc_abandon_message(qp_.recv_counters_.dropped_bad_key);
}

}  // namespace srdma::hca
