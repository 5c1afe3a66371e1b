#include "cm/sidr.h"

#include <fmt/format.h>

#include <algorithm>
#include <type_traits>

namespace srdma::cm {

SidrEngine::SidrEngine(CmEngine::Port& port, CmEngine::IdSource ids, std::uint64_t first_tid, const SidrLimits& limits)
    : port_(port), ids_(std::move(ids)), next_tid_(first_tid), limits_(limits) {}

Result<void> SidrEngine::listen(std::uint64_t service_id, void* context) {
  if (!listeners_.emplace(service_id, context).second)
    return make_error(EADDRINUSE, fmt::format("service ID {:#018x} already has a SIDR listener", service_id));
  // The requests that came a moment early are the listener's first.
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (it->req.service_id != service_id) {
      ++it;
      continue;
    }
    const Parked p = *it;
    it = parked_.erase(it);
    new_passive(p.from, p.tid, p.req, context);
  }
  deliver();
  return {};
}

void SidrEngine::stop_listening(std::uint64_t service_id) { listeners_.erase(service_id); }

std::uint32_t SidrEngine::new_id() {
  for (;;) {
    const std::uint32_t id = ids_();
    if (id != 0 && !contains(id)) return id;
  }
}

void SidrEngine::emit(CmEventType t, std::uint32_t id, std::uint64_t peer, std::optional<Message> m, void* context) {
  CmEvent e;
  e.type = t;
  e.id = id;
  e.peer = peer;
  e.listen_context = context;
  e.message = std::move(m);
  events_.push(std::move(e));
}

void SidrEngine::deliver() { events_.deliver(port_); }

Result<std::uint32_t> SidrEngine::request(const SidrParams& p, CmTime now) {
  if (p.peer == 0) return make_error(EINVAL, "no peer address");
  if (p.response_timeout > 31) return make_error(EINVAL, fmt::format("response timeout {} above 31", p.response_timeout));
  if (p.max_cm_retries > 15) return make_error(EINVAL, fmt::format("max_cm_retries {} above 15", p.max_cm_retries));
  SidrReq r;
  r.request_id = new_id();
  r.pkey = p.pkey;
  r.service_id = p.service_id;
  r.private_data = p.private_data;
  Mad mad;
  if (MadStatus st = encode(r, next_tid_++, mad); !st.ok()) return make_error(EINVAL, describe(st));
  Active& a = active_[r.request_id];
  a.peer = p.peer;
  a.resend = mad;
  a.retries_left = p.max_cm_retries;
  a.response_timeout = p.response_timeout;
  a.deadline = now + std::chrono::duration_cast<CmClock::duration>(cm_timeout(p.response_timeout));
  ++counters_.sent;
  port_.send_mad(p.peer, mad);
  return r.request_id;
}

void SidrEngine::send(std::uint64_t peer, const SidrRep& rep, std::uint64_t tid, CmTime now, bool keep) {
  Mad mad;
  if (!encode(rep, tid, mad).ok()) return;  // callers checked what the consumer gave
  ++counters_.sent;
  port_.send_mad(peer, mad);
  if (!keep) return;
  // Kept for the request's duplicates, the oldest dropped past the bound.
  const RemoteKey key{peer, rep.request_id};
  answers_[key] = Answer{mad, now + limits_.answer_kept, limits_.max_answer_resends};
  answer_order_.push_back(key);
  while (answers_.size() > limits_.max_answers && !answer_order_.empty()) {
    answers_.erase(answer_order_.front());
    answer_order_.pop_front();
  }
}

void SidrEngine::refuse(std::uint64_t from, std::uint64_t tid, const SidrReq& req, SidrStatus why, CmTime now) {
  SidrRep rep;
  rep.request_id = req.request_id;
  rep.status = why;
  rep.service_id = req.service_id;
  send(from, rep, tid, now, false);
}

Result<void> SidrEngine::reply(std::uint32_t id, const SidrRep& rep, CmTime now) {
  auto it = passive_.find(id);
  if (it == passive_.end()) return make_error(EINVAL, fmt::format("no SIDR request {:#x} waiting for a reply", id));
  const Passive p = it->second;
  SidrRep r = rep;
  r.request_id = p.remote_request_id;
  r.service_id = p.service_id;
  Mad probe;
  if (MadStatus st = encode(r, p.tid, probe); !st.ok()) return make_error(EINVAL, describe(st));
  forget_passive(id);
  send(p.peer, r, p.tid, now, true);
  return {};
}

void SidrEngine::forget_passive(std::uint32_t id) {
  auto it = passive_.find(id);
  if (it == passive_.end()) return;
  const Passive& p = it->second;
  passive_by_remote_.erase({p.peer, p.remote_request_id});
  pending_order_.erase(p.seq);
  if (auto n = pending_by_peer_.find(p.peer); n != pending_by_peer_.end() && --n->second == 0) pending_by_peer_.erase(n);
  --pending_;
  passive_.erase(it);
}

void SidrEngine::destroy(std::uint32_t id) {
  active_.erase(id);
  auto it = passive_.find(id);
  if (it == passive_.end()) return;
  // Nobody will answer it now: the requester hears so at once.
  const Passive p = it->second;
  forget_passive(id);
  SidrRep rep;
  rep.request_id = p.remote_request_id;
  rep.status = SidrStatus::kReject;
  rep.service_id = p.service_id;
  Mad mad;
  if (encode(rep, p.tid, mad).ok()) {
    ++counters_.sent;
    port_.send_mad(p.peer, mad);
  }
}

void SidrEngine::receive(std::uint64_t from, std::span<const std::byte> bytes, CmTime now) {
  ++counters_.received;
  CmMad m;
  if (!decode(bytes, m).ok()) {
    ++counters_.dropped_malformed;
    return;
  }
  if (const auto* req = std::get_if<SidrReq>(&m.message)) {
    on_req(from, m.header, *req, now);
  } else if (const auto* rep = std::get_if<SidrRep>(&m.message)) {
    on_rep(from, *rep);
  } else {
    ++counters_.dropped_malformed;  // not SIDR: the agent sends those to CmEngine
  }
  deliver();
}

void SidrEngine::on_req(std::uint64_t from, const MadHeader& h, const SidrReq& m, CmTime now) {
  const RemoteKey key{from, m.request_id};
  if (passive_by_remote_.contains(key)) {
    ++counters_.duplicates;  // the consumer has it and has not answered yet
    return;
  }
  if (auto a = answers_.find(key); a != answers_.end() && a->second.until <= now) answers_.erase(a);  // tick's late
  if (auto a = answers_.find(key); a != answers_.end()) {
    // Our SIDR_REP was lost: the same again, within its budget, so that a
    // replayed REQ makes no more SIDR_REPs than one REQ does.
    ++counters_.duplicates;
    if (a->second.resends_left <= 0) {
      ++counters_.duplicates_unanswered;
      return;
    }
    --a->second.resends_left;
    ++counters_.resent;
    port_.send_mad(from, a->second.mad);
    return;
  }
  if (auto l = listeners_.find(m.service_id); l != listeners_.end()) return new_passive(from, h.transaction_id, m, l->second);
  for (const Parked& p : parked_) {
    if (p.from == from && p.req.request_id == m.request_id) {
      ++counters_.duplicates;
      return;
    }
  }
  if (parked_.size() < kMaxParkedReqs) {
    ++counters_.reqs_parked;
    parked_.push_back({from, h.transaction_id, m, now + kListenGrace});
    return;
  }
  ++counters_.refused_unsupported;
  refuse(from, h.transaction_id, m, SidrStatus::kUnsupported, now);
}

void SidrEngine::new_passive(std::uint64_t from, std::uint64_t tid, const SidrReq& m, void* context) {
  if (auto it = pending_by_peer_.find(from); it != pending_by_peer_.end() && it->second >= limits_.max_pending_per_source) {
    ++counters_.refused_per_source;
    return refuse(from, tid, m, SidrStatus::kNoQp, CmTime{});
  }
  if (pending_ >= limits_.max_pending) evict_oldest(CmTime{});
  const std::uint32_t id = new_id();
  Passive& p = passive_[id];
  p.peer = from;
  p.remote_request_id = m.request_id;
  p.service_id = m.service_id;
  p.tid = tid;
  p.seq = next_seq_++;
  pending_order_.emplace(p.seq, id);
  ++pending_by_peer_[from];
  ++pending_;
  passive_by_remote_[{from, m.request_id}] = id;
  emit(CmEventType::kSidrReqReceived, id, from, m, context);
}

void SidrEngine::evict_oldest(CmTime now) {
  if (pending_order_.empty()) return;
  ++counters_.evicted;
  const std::uint32_t id = pending_order_.begin()->second;
  const Passive p = passive_.at(id);
  forget_passive(id);
  SidrReq req;
  req.request_id = p.remote_request_id;
  req.service_id = p.service_id;
  refuse(p.peer, p.tid, req, SidrStatus::kReject, now);
}

void SidrEngine::on_rep(std::uint64_t from, const SidrRep& m) {
  auto it = active_.find(m.request_id);
  if (it == active_.end()) {
    ++counters_.dropped_unknown_id;  // IBA gives no answer to a stray SIDR_REP
    return;
  }
  Active& a = it->second;
  if (a.peer != from) {
    ++counters_.dropped_wrong_peer;
    return;
  }
  if (!a.deadline) {
    ++counters_.duplicates;  // answered (or timed out) already
    return;
  }
  a.deadline.reset();
  a.retries_left = 0;
  emit(CmEventType::kSidrRepReceived, it->first, from, m);
}

void SidrEngine::tick(CmTime now) {
  while (!parked_.empty() && parked_.front().deadline <= now) {
    const Parked p = parked_.front();
    parked_.pop_front();
    ++counters_.refused_unsupported;
    refuse(p.from, p.tid, p.req, SidrStatus::kUnsupported, now);
  }
  for (auto& [id, a] : active_) {
    if (!a.deadline || *a.deadline > now) continue;
    if (a.retries_left > 0) {
      --a.retries_left;
      ++counters_.resent;
      port_.send_mad(a.peer, a.resend);
      a.deadline = now + std::chrono::duration_cast<CmClock::duration>(cm_timeout(a.response_timeout));
      continue;
    }
    a.deadline.reset();
    ++counters_.timed_out;
    emit(CmEventType::kTimedOut, id, a.peer, std::nullopt);
  }
  std::erase_if(answers_, [&](const auto& kv) { return kv.second.until <= now; });
  while (!answer_order_.empty() && !answers_.contains(answer_order_.front())) answer_order_.pop_front();
  deliver();
}

std::optional<CmTime> SidrEngine::next_deadline() const {
  std::optional<CmTime> first;
  auto consider = [&](CmTime t) {
    if (!first || t < *first) first = t;
  };
  if (!parked_.empty()) consider(parked_.front().deadline);
  for (const auto& [id, a] : active_)
    if (a.deadline) consider(*a.deadline);
  for (const auto& [key, a] : answers_) consider(a.until);
  return first;
}

}  // namespace srdma::cm
