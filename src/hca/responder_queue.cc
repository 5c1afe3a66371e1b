// The responder's bounds (qp.h: kResponseBurst, kDupReadBudget): the
// queue of answers that wait behind a READ's responses, the turns that send
// them a burst at a time on the engine thread, and the duplicate-READ
// budget. Its own file: responder.cc's data path is inlined as it was
// (this code in its unit cost the 8-byte WRITE's path its inlined translate).
#include <algorithm>

#include "hca/delivery_scope.h"
#include "hca/link.h"
#include "hca/qp.h"
#include "hca/responder.h"
#include "hca/qp_rules.h"
#include "hca/queue_engine.h"
#include "hca/translation_tables.h"
#include "srdma/access.h"

namespace srdma::hca {

void Responder::acknowledge_queued(const Packet& req, std::uint32_t psn) {
  Packet ack = Ack{qp_.engine_.address(), req.src_addr, qp_.qpn_, req.src_qpn, psn,
                   resp_.msn.load(std::memory_order_relaxed), qp_.udp_sport_}
                   .packet();
  ack.transport = peer_transport(qp_.init_.type);
  queue_answer(std::move(ack));
}

bool Responder::start_read_train(const ReadTrain& train) {
  if (!qp_.tables_.translate(train.rkey, train.va, train.length, ACCESS_REMOTE_READ, train.pdn, qp_.qpn()))
    return false;
  if (resp_.answers_queued.load(std::memory_order_relaxed)) {  // behind what waits
    queue_train(train);
    return true;
  }
  if (!send_read_packets(train, 0, kResponseBurst)) return false;
  qp_.recv_counters_.responses_sent.bump(kResponseBurst);
  ReadTrain rest = train;
  rest.next = kResponseBurst;
  resp_.answers_queued.store(true, std::memory_order_relaxed);
  queue_train(rest);
  return true;
}

bool Responder::send_read_packets(const ReadTrain& t, std::uint32_t from, std::uint32_t to) {
  to = std::min(to, t.n);
  const std::uint64_t offset = std::uint64_t{from} * t.mtu;
  const std::uint32_t bytes =
      static_cast<std::uint32_t>(std::min<std::uint64_t>(std::uint64_t{to} * t.mtu, t.length) - offset);
  TranslationWindow window(t.rkey);
  SendBatch batch(qp_.engine_.link(), SendBatch::kOrdered);
  auto tr = qp_.tables_.translate(t.rkey, t.va + offset, bytes, ACCESS_REMOTE_READ, t.pdn, qp_.qpn());
  if (!tr) return false;
  PieceList all;
  tr->for_each_piece([&](MemPiece p) { all.push_back(p); });
  PieceCursor cursor(all);
  for (std::uint32_t i = from; i < to; ++i) {
    Packet r;
    r.transport = peer_transport(qp_.init_.type);
    r.payload_length =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(t.mtu, t.length - std::uint64_t{i} * t.mtu));
    cursor.take(r.payload_length, r.payload);
    r.op = t.n == 1 ? Opcode::kReadResponseOnly
           : i == 0 ? Opcode::kReadResponseFirst
           : i == t.n - 1 ? Opcode::kReadResponseLast
                          : Opcode::kReadResponseMiddle;
    r.src_addr = qp_.engine_.address();
    r.dst_addr = t.dst_addr;
    r.src_qpn = qp_.qpn_;
    r.dst_qpn = t.dst_qpn;
    r.udp_sport = qp_.udp_sport_;
    r.psn = psn_add(t.psn, i);
    if (has_aeth(r.op)) r.msn = t.msn;
    qp_.engine_.link().send(std::move(r));
  }
  return true;
}

void Responder::queue_answer(Packet&& p) {
  auto& q = respq_.queued;
  if (!q.empty() && !q.back().read && Ack::is(q.back().packet) && Ack::is(p)) {
    // An ACK covers every PSN before it: the later of the two does for both.
    if (psn_diff(p.psn, q.back().packet.psn) > 0) q.back().packet = std::move(p);
    return;
  }
  if (q.size() >= kMaxQueuedAnswers) {
    qp_.recv_counters_.dropped_rate_limited.bump();  // the requester's timer asks again
    return;
  }
  q.push_back(QueuedAnswer{false, ReadTrain{}, std::move(p)});
  schedule_turn();
}

void Responder::queue_train(const ReadTrain& t) {
  auto& q = respq_.queued;
  // A duplicate asking again for a READ whose responses still wait:
  // answered in that train's place (it asks from where it lost them).
  for (QueuedAnswer& a : q) {
    if (a.read && a.train.rkey == t.rkey && a.train.dst_qpn == t.dst_qpn &&
        psn_add(a.train.psn, a.train.n) == psn_add(t.psn, t.n) && t.next == 0) {
      a.train = t;
      return;
    }
  }
  if (q.size() >= kMaxQueuedAnswers) {
    qp_.recv_counters_.dropped_rate_limited.bump();
    return;
  }
  q.push_back(QueuedAnswer{true, t, Packet{}});
  schedule_turn();
}

void Responder::schedule_turn() {
  if (respq_.turn_scheduled || respq_.turn_sending) return;  // that one schedules the next if needed
  respq_.turn_scheduled = true;
  qp_.engine_.schedule_response_turn(qp_.weak_from_this());
}

void Responder::respond_turn() {
  // Taken under qp_.rq_mu_, sent without it: the answers before a READ's
  // burst, then the burst. A request that arrives meanwhile queues its
  // answers behind (answers_queued stays set until everything is out).
  std::vector<Packet> out;
  ReadTrain burst;
  std::uint32_t from = 0, to = 0;
  {
    FastLock lock(qp_.rq_mu_);
    respq_.turn_scheduled = false;
    if (respq_.turn_sending) return;  // it schedules the next turn when it is done
    if (respq_.queued.empty()) {      // dropped meanwhile (destroy, RESET)
      resp_.answers_queued.store(false, std::memory_order_release);
      return;
    }
    // A QP that stopped answering (ERR, RESET) sends its waiting ACKs and
    // NAKs (the NAK that ended it among them), no more READ responses.
    const bool reading = accepts_requests(qp_.state());
    std::uint32_t budget = kResponseBurst;
    while (budget > 0 && !respq_.queued.empty()) {
      QueuedAnswer& a = respq_.queued.front();
      if (!a.read) {
        out.push_back(std::move(a.packet));
        respq_.queued.pop_front();
        --budget;
        continue;
      }
      if (!reading) {
        respq_.queued.pop_front();
        continue;
      }
      burst = a.train;
      from = a.train.next;
      to = std::min(a.train.n, from + budget);
      a.train.next = to;
      if (to == a.train.n) respq_.queued.pop_front();
      break;
    }
    respq_.turn_sending = true;
  }
  bool read_ok = true;
  {
    SendBatch batch(qp_.engine_.link(), SendBatch::kOrdered);
    for (Packet& p : out) qp_.engine_.link().send(std::move(p));
    if (to > from) read_ok = send_read_packets(burst, from, to);
  }
  FastLock lock(qp_.rq_mu_);
  respq_.turn_sending = false;
  qp_.recv_counters_.responses_sent.bump(out.size() + (read_ok ? to - from : 0));
  if (!read_ok) {
    // The key was invalidated under the READ: the rest of it is not sent
    // (the requester asks again, and that duplicate is refused).
    auto& q = respq_.queued;
    if (!q.empty() && q.front().read && q.front().train.psn == burst.psn && q.front().train.rkey == burst.rkey)
      q.pop_front();
  }
  if (respq_.queued.empty()) {
    resp_.answers_queued.store(false, std::memory_order_release);  // after the sends: the unlocked path may answer
    return;
  }
  schedule_turn();
}

void Responder::drop_queued_answers() {
  FastLock lock(qp_.rq_mu_);
  respq_.queued.clear();
  if (!respq_.turn_sending) resp_.answers_queued.store(false, std::memory_order_release);
}

bool Responder::take_dup_read_token() {
  const Clock::time_point now = qp_.engine_.clock().now();
  if (respq_.dup_read_tokens >= kDupReadBudget) {
    respq_.dup_read_refilled = now;  // full: the refill starts from here
  } else if (const auto ticks = (now - respq_.dup_read_refilled) / kDupReadRefill; ticks > 0) {
    respq_.dup_read_tokens = static_cast<std::uint32_t>(
        std::min<std::int64_t>(kDupReadBudget, respq_.dup_read_tokens + static_cast<std::int64_t>(ticks)));
    respq_.dup_read_refilled += ticks * kDupReadRefill;
  }
  if (respq_.dup_read_tokens == 0) return false;
  --respq_.dup_read_tokens;
  return true;
}

}  // namespace srdma::hca
