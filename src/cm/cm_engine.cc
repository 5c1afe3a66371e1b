#include "cm/cm_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "common/secure_random.h"

namespace srdma::cm {

std::chrono::nanoseconds cm_timeout(std::uint8_t t) {
  return std::chrono::nanoseconds(std::int64_t{4096} << std::min<std::uint8_t>(t, 31));
}

std::string_view cm_state_name(CmState s) {
  switch (s) {
    case CmState::kIdle: return "idle";
    case CmState::kReqSent: return "REQ sent";
    case CmState::kMraReqRcvd: return "MRA received";
    case CmState::kRepRcvd: return "REP received";
    case CmState::kReqRcvd: return "REQ received";
    case CmState::kRepSent: return "REP sent";
    case CmState::kEstablished: return "established";
    case CmState::kDreqSent: return "DREQ sent";
    case CmState::kTimewait: return "time wait";
  }
  return "unknown";
}

std::string_view cm_event_name(CmEventType t) {
  switch (t) {
    case CmEventType::kReqReceived: return "REQ received";
    case CmEventType::kRepReceived: return "REP received";
    case CmEventType::kEstablished: return "established";
    case CmEventType::kRejected: return "rejected";
    case CmEventType::kTimedOut: return "timed out";
    case CmEventType::kDisconnected: return "disconnected";
    case CmEventType::kTimewaitExit: return "time wait exit";
    case CmEventType::kSidrReqReceived: return "SIDR_REQ received";
    case CmEventType::kSidrRepReceived: return "SIDR_REP received";
  }
  return "unknown";
}

namespace {

template <std::size_t N>
Result<std::array<std::byte, N>> private_data(std::span<const std::byte> pd, const char* what) {
  if (pd.size() > N) return make_error(EINVAL, fmt::format("{} private data of {} bytes: at most {}", what, pd.size(), N));
  std::array<std::byte, N> out{};
  std::copy(pd.begin(), pd.end(), out.begin());
  return out;
}

bool in_handshake(CmState s) {
  return s == CmState::kReqSent || s == CmState::kMraReqRcvd || s == CmState::kRepRcvd || s == CmState::kReqRcvd ||
         s == CmState::kRepSent;
}

}  // namespace

CmEngine::IdSource CmEngine::random_ids() { return [] { return secure_random_u32(); }; }

CmEngine::IdSource CmEngine::sequential_ids(std::uint32_t first) {
  return [next = first]() mutable { return next++; };
}

CmEngine::CmEngine(Port& port, std::uint64_t local_ca_guid, IdSource ids, const CmLimits& limits)
    : port_(port),
      guid_(local_ca_guid),
      ids_(std::move(ids)),
      limits_(limits),
      // Transaction IDs from the first comm ID: another incarnation of the
      // agent (a restarted process) does not repeat the last one's.
      next_tid_(std::uint64_t{ids_()} << 32 | 1) {}

void CmEngine::set_state(Conn& c, CmState s) {
  const bool was = half_open_state(c);
  c.state = s;
  const bool is = half_open_state(c);
  if (was == is) return;
  if (is) {
    ++half_open_;
    ++half_open_by_peer_[c.peer];
    c.half_open_seq = next_half_open_seq_++;
    half_open_order_.emplace(c.half_open_seq, c.local_id);
    return;
  }
  --half_open_;
  half_open_order_.erase(c.half_open_seq);
  auto it = half_open_by_peer_.find(c.peer);
  if (--it->second == 0) half_open_by_peer_.erase(it);
}

Result<void> CmEngine::listen(std::uint64_t service_id, void* context) {
  if (!listeners_.emplace(service_id, context).second)
    return make_error(EADDRINUSE, fmt::format("service ID {:#018x} already has a listener", service_id));
  // The REQs that came a moment early are the listener's first.
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (it->req.service_id != service_id) {
      ++it;
      continue;
    }
    const ParkedReq p = std::move(*it);
    it = parked_.erase(it);
    new_passive(p.from, p.header, p.req, context);
  }
  deliver();
  return {};
}

void CmEngine::stop_listening(std::uint64_t service_id) { listeners_.erase(service_id); }

CmEngine::Conn* CmEngine::find(std::uint32_t id) {
  auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : &it->second;
}
const CmEngine::Conn* CmEngine::find(std::uint32_t id) const {
  auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : &it->second;
}

std::optional<CmState> CmEngine::state(std::uint32_t id) const {
  const Conn* c = find(id);
  if (!c) return std::nullopt;
  return c->state;
}

std::uint32_t CmEngine::new_comm_id() {
  for (;;) {
    const std::uint32_t id = ids_();
    if (id != 0 && !conns_.contains(id)) return id;
  }
}

void CmEngine::send_to(std::uint64_t peer, const Message& m, std::uint64_t tid) {
  Mad mad;
  if (!encode(m, tid, mad).ok()) return;  // the engine's own fields always fit; callers checked the consumer's
  ++counters_.sent;
  if (std::holds_alternative<Rej>(m)) ++counters_.rejects_sent;
  port_.send_mad(peer, mad);
}

void CmEngine::send(Conn& c, const Message& m, std::uint64_t tid, bool keep_for_resend) {
  Mad mad;
  if (!encode(m, tid, mad).ok()) return;
  ++counters_.sent;
  if (std::holds_alternative<Rej>(m)) ++counters_.rejects_sent;
  if (keep_for_resend)
    c.resend = mad;
  else
    c.last_answer = mad;
  port_.send_mad(c.peer, mad);
}

void CmEngine::arm(Conn& c, CmTime now, std::uint8_t timeout) {
  c.deadline = now + std::chrono::duration_cast<CmClock::duration>(cm_timeout(timeout));
}

void CmEngine::enter_timewait(Conn& c, CmTime now) {
  // As long as the peer may still resend its DREQ: every duplicate in that
  // time gets a DREP, and a stale REQ a REJ.
  set_state(c, CmState::kTimewait);
  c.retries_left = 0;
  c.deadline = now + std::chrono::duration_cast<CmClock::duration>(cm_timeout(c.response_timeout) * (c.max_retries + 1));
}

void CmEngine::finish(Conn& c) {
  set_state(c, CmState::kIdle);
  c.deadline.reset();
  c.retries_left = 0;
}

void CmEngine::emit(CmEventType t, const Conn& c, std::optional<Message> m, void* listen_context) {
  if (c.destroyed) return;  // nobody is listening for this ID any more
  CmEvent e;
  e.type = t;
  e.id = c.local_id;
  e.peer = c.peer;
  e.listen_context = listen_context;
  e.message = std::move(m);
  events_.push(std::move(e));
}

void CmEngine::deliver() { events_.deliver(port_); }

Rej CmEngine::make_rej(const Conn& c, MsgRejected what, RejectReason why, std::span<const std::byte> pd) const {
  Rej r;
  r.local_comm_id = c.local_id;
  r.remote_comm_id = c.remote_id;
  r.message_rejected = what;
  r.reason = why;
  std::copy_n(pd.begin(), std::min(pd.size(), r.private_data.size()), r.private_data.begin());
  return r;
}

Result<std::uint32_t> CmEngine::connect(const ConnectParams& p, CmTime now) {
  if (p.peer == 0) return make_error(EINVAL, "no peer address");
  if (p.response_timeout > 31) return make_error(EINVAL, fmt::format("response timeout {} above 31", p.response_timeout));
  if (p.max_cm_retries > 15) return make_error(EINVAL, fmt::format("max_cm_retries {} above 15", p.max_cm_retries));
  Req r = p.req;
  r.service_id = p.service_id;
  r.local_ca_guid = guid_;
  r.remote_cm_response_timeout = p.response_timeout;
  r.local_cm_response_timeout = p.response_timeout;
  r.max_cm_retries = p.max_cm_retries;
  const std::uint32_t id = new_comm_id();
  r.local_comm_id = id;
  const std::uint64_t tid = next_tid_++;
  Mad mad;
  if (MadStatus st = encode(r, tid, mad); !st.ok()) return make_error(EINVAL, describe(st));
  Conn& c = conns_[id];
  c.active = true;
  c.local_id = id;
  c.peer = p.peer;
  c.tid = tid;
  c.local_qpn = r.local_qpn;
  c.response_timeout = p.response_timeout;
  c.max_retries = p.max_cm_retries;
  set_state(c, CmState::kReqSent);
  c.retries_left = p.max_cm_retries;
  send(c, r, tid, true);
  arm(c, now, c.response_timeout);
  return id;
}

Result<void> CmEngine::accept(std::uint32_t id, const Rep& rep, CmTime now) {
  Conn* c = find(id);
  if (!c || c->destroyed) return make_error(EINVAL, fmt::format("no connection {:#x}", id));
  if (c->state != CmState::kReqRcvd)
    return make_error(EINVAL, fmt::format("connection {:#x} is {}, not waiting for an accept", id, cm_state_name(c->state)));
  Rep r = rep;
  r.local_comm_id = c->local_id;
  r.remote_comm_id = c->remote_id;
  r.local_ca_guid = guid_;
  Mad mad;
  if (MadStatus st = encode(r, c->tid, mad); !st.ok()) return make_error(EINVAL, describe(st));
  c->local_qpn = r.local_qpn;
  set_state(*c, CmState::kRepSent);
  c->retries_left = c->max_retries;
  send(*c, r, c->tid, true);
  arm(*c, now, c->response_timeout);
  return {};
}

Result<void> CmEngine::ready(std::uint32_t id, std::span<const std::byte> pd) {
  Conn* c = find(id);
  if (!c || c->destroyed) return make_error(EINVAL, fmt::format("no connection {:#x}", id));
  if (c->state != CmState::kRepRcvd)
    return make_error(EINVAL, fmt::format("connection {:#x} is {}, not waiting for an RTU", id, cm_state_name(c->state)));
  auto data = private_data<kRtuPrivateDataBytes>(pd, "RTU");
  if (!data) return std::unexpected(data.error());
  Rtu r;
  r.local_comm_id = c->local_id;
  r.remote_comm_id = c->remote_id;
  r.private_data = *data;
  set_state(*c, CmState::kEstablished);
  c->deadline.reset();
  send(*c, r, c->tid, false);  // a duplicate REP gets it again
  return {};
}

Result<void> CmEngine::reject(std::uint32_t id, std::span<const std::byte> pd) {
  Conn* c = find(id);
  if (!c || c->destroyed) return make_error(EINVAL, fmt::format("no connection {:#x}", id));
  if (c->state != CmState::kReqRcvd && c->state != CmState::kRepRcvd)
    return make_error(EINVAL, fmt::format("connection {:#x} is {}: nothing to reject", id, cm_state_name(c->state)));
  if (pd.size() > kRejPrivateDataBytes)
    return make_error(EINVAL, fmt::format("REJ private data of {} bytes: at most {}", pd.size(), kRejPrivateDataBytes));
  const MsgRejected what = c->state == CmState::kReqRcvd ? MsgRejected::kReq : MsgRejected::kRep;
  finish(*c);
  // Kept as the answer: the REQ's or REP's duplicates get the same REJ.
  send(*c, make_rej(*c, what, RejectReason::kConsumerDefined, pd), c->tid, false);
  return {};
}

Result<void> CmEngine::disconnect(std::uint32_t id, CmTime now, std::span<const std::byte> pd) {
  Conn* c = find(id);
  if (!c || c->destroyed) return make_error(EINVAL, fmt::format("no connection {:#x}", id));
  if (c->state == CmState::kDreqSent || c->state == CmState::kTimewait) return {};  // under way already
  if (in_handshake(c->state)) {
    const MsgRejected what = c->active ? MsgRejected::kRep : MsgRejected::kReq;
    finish(*c);
    send(*c, make_rej(*c, what, RejectReason::kConsumerDefined, {}), c->tid, false);
    return {};
  }
  if (c->state != CmState::kEstablished)
    return make_error(EINVAL, fmt::format("connection {:#x} is {}: not connected", id, cm_state_name(c->state)));
  auto data = private_data<kDreqPrivateDataBytes>(pd, "DREQ");
  if (!data) return std::unexpected(data.error());
  Dreq d;
  d.local_comm_id = c->local_id;
  d.remote_comm_id = c->remote_id;
  d.remote_qpn_eecn = c->remote_qpn;
  d.private_data = *data;
  set_state(*c, CmState::kDreqSent);
  c->retries_left = c->max_retries;
  send(*c, d, next_tid_++, true);
  arm(*c, now, c->response_timeout);
  return {};
}

void CmEngine::destroy(std::uint32_t id, CmTime now) {
  Conn* c = find(id);
  if (!c || c->destroyed) return;
  if (c->state == CmState::kEstablished) {
    // One DREQ, no retries: the ID is gone, time wait keeps it known.
    Dreq d;
    d.local_comm_id = c->local_id;
    d.remote_comm_id = c->remote_id;
    d.remote_qpn_eecn = c->remote_qpn;
    send(*c, d, next_tid_++, true);
    enter_timewait(*c, now);
  } else if (in_handshake(c->state)) {
    const MsgRejected what = c->active ? MsgRejected::kRep : MsgRejected::kReq;
    send(*c, make_rej(*c, what, RejectReason::kConsumerDefined, {}), c->tid, false);
    finish(*c);
  }
  c->destroyed = true;
  if (c->state == CmState::kIdle) erase(id);
}

void CmEngine::erase(std::uint32_t id) {
  Conn* c = find(id);
  if (!c) return;
  set_state(*c, CmState::kIdle);  // (already so: erase follows finish or time wait)
  if (!c->active) by_remote_.erase({c->peer, c->remote_id});
  conns_.erase(id);
}

CmEngine::Conn* CmEngine::addressed(std::uint64_t from, std::uint32_t our_id) {
  Conn* c = find(our_id);
  if (!c) {
    ++counters_.dropped_unknown_id;
    return nullptr;
  }
  if (c->peer != from) {
    ++counters_.dropped_wrong_peer;
    return nullptr;
  }
  return c;
}

void CmEngine::receive(std::uint64_t from, std::span<const std::byte> bytes, CmTime now) {
  ++counters_.received;
  CmMad m;
  if (!decode(bytes, m).ok()) {
    ++counters_.dropped_malformed;
    return;
  }
  const MadHeader& h = m.header;
  std::visit(
      [&](const auto& msg) {
        using T = std::decay_t<decltype(msg)>;
        if constexpr (std::is_same_v<T, Req>) on_req(from, h, msg, now);
        else if constexpr (std::is_same_v<T, Mra>) on_mra(from, msg, now);
        else if constexpr (std::is_same_v<T, Rej>) on_rej(from, msg, now);
        else if constexpr (std::is_same_v<T, Rep>) on_rep(from, h, msg);
        else if constexpr (std::is_same_v<T, Rtu>) on_rtu(from, msg);
        else if constexpr (std::is_same_v<T, Dreq>) on_dreq(from, h, msg, now);
        else if constexpr (std::is_same_v<T, Drep>) on_drep(from, msg, now);
        else ++counters_.dropped_unexpected;  // SIDR: sidr.h's, which the agent hands them
      },
      m.message);
  deliver();
}

void CmEngine::on_req(std::uint64_t from, const MadHeader& h, const Req& m, CmTime now) {
  if (auto it = by_remote_.find({from, m.local_comm_id}); it != by_remote_.end()) {
    Conn& c = conns_.at(it->second);
    ++counters_.duplicates;
    if (c.state == CmState::kRepSent) {
      // Our REP was lost: the REQ came again. It takes one of the REP's
      // resends (CmLimits): a REQ replayed from a spoofed address makes
      // no more REPs than one REQ does.
      if (c.retries_left <= 0) {
        ++counters_.duplicates_unanswered;
        return;
      }
      --c.retries_left;
      ++counters_.resent;
      port_.send_mad(c.peer, c.resend);
    } else if (c.state == CmState::kIdle && c.last_answer) {
      port_.send_mad(c.peer, *c.last_answer);  // the REJ again
    } else if (c.state == CmState::kTimewait) {
      send_to(from, make_rej(c, MsgRejected::kReq, RejectReason::kStaleConnection, {}), h.transaction_id);
    }
    return;  // kReqRcvd: the consumer has it; kEstablished: the RTU will do
  }
  auto l = listeners_.find(m.service_id);
  if (l != listeners_.end()) return new_passive(from, h, m, l->second);
  for (const ParkedReq& p : parked_) {
    if (p.from == from && p.req.local_comm_id == m.local_comm_id) {
      ++counters_.duplicates;  // its REQ again while it waits
      return;
    }
  }
  if (parked_.size() < kMaxParkedReqs) {
    ++counters_.reqs_parked;
    parked_.push_back({from, h, m, now + kListenGrace});
    return;
  }
  refuse_req(from, h, m, RejectReason::kInvalidServiceId);
}

void CmEngine::refuse_req(std::uint64_t from, const MadHeader& h, const Req& m, RejectReason why) {
  Conn probe;  // no connection is kept for a refused REQ
  probe.remote_id = m.local_comm_id;
  send_to(from, make_rej(probe, MsgRejected::kReq, why, {}), h.transaction_id);
}

void CmEngine::refuse_parked(CmTime now) {
  while (!parked_.empty() && parked_.front().deadline <= now) {
    const ParkedReq& p = parked_.front();
    refuse_req(p.from, p.header, p.req, RejectReason::kInvalidServiceId);
    parked_.pop_front();
  }
}

void CmEngine::new_passive(std::uint64_t from, const MadHeader& h, const Req& m, void* listen_context) {
  if (m.transport_service_type != TransportServiceType::kRc && m.transport_service_type != TransportServiceType::kUc)
    return refuse_req(from, h, m, RejectReason::kInvalidTransportType);
  // Admission: the half-open connections a stranger can hold are bounded,
  // per source and in total; past either bound the REQ gets one REJ.
  if (auto it = half_open_by_peer_.find(from);
      it != half_open_by_peer_.end() && it->second >= limits_.max_half_open_per_source) {
    ++counters_.refused_half_open_per_source;
    return refuse_req(from, h, m, RejectReason::kConsumerDefined);
  }
  if (half_open_ >= limits_.max_half_open) evict_oldest_half_open();
  const std::uint32_t id = new_comm_id();
  Conn& c = conns_[id];
  c.local_id = id;
  c.remote_id = m.local_comm_id;
  c.peer = from;
  c.tid = h.transaction_id;
  c.remote_qpn = m.local_qpn;
  // The REP waits for the RTU as long as the active side said it takes,
  // within CmLimits: a REQ's own fields must not keep us resending for
  // hours (timeout 31, 15 retries: 16 x 2.4 h).
  c.response_timeout =
      std::clamp(m.local_cm_response_timeout, limits_.min_remote_timeout, limits_.max_remote_timeout);
  c.max_retries = std::min(m.max_cm_retries, limits_.max_remote_retries);
  if (c.response_timeout != m.local_cm_response_timeout || c.max_retries != m.max_cm_retries)
    ++counters_.clamped_timeouts;
  set_state(c, CmState::kReqRcvd);
  by_remote_[{from, m.local_comm_id}] = id;
  emit(CmEventType::kReqReceived, c, m, listen_context);
}

void CmEngine::evict_oldest_half_open() {
  if (half_open_order_.empty()) return;
  Conn& c = conns_.at(half_open_order_.begin()->second);
  ++counters_.evicted_half_open;
  const MsgRejected what = c.state == CmState::kReqRcvd ? MsgRejected::kReq : MsgRejected::kRep;
  finish(c);
  send(c, make_rej(c, what, RejectReason::kTimeout, {}), c.tid, false);
  emit(CmEventType::kTimedOut, c, std::nullopt);
  if (c.destroyed) erase(c.local_id);
}

void CmEngine::on_mra(std::uint64_t from, const Mra& m, CmTime now) {
  Conn* c = addressed(from, m.remote_comm_id);
  if (!c) return;
  if (c->state == CmState::kReqSent && m.message_mraed == MsgMraed::kReq) {
    // The peer needs longer than our timeout: wait its service timeout
    // (on top of ours) once, without resending.
    set_state(*c, CmState::kMraReqRcvd);
    c->remote_id = m.local_comm_id;
    const std::uint8_t service_timeout = std::min(m.service_timeout, limits_.max_remote_timeout);
    if (service_timeout != m.service_timeout) ++counters_.clamped_timeouts;
    c->deadline = now + std::chrono::duration_cast<CmClock::duration>(cm_timeout(service_timeout) +
                                                                       cm_timeout(c->response_timeout));
    return;
  }
  if (c->state == CmState::kMraReqRcvd) {
    ++counters_.duplicates;
    return;
  }
  ++counters_.dropped_unexpected;
}

void CmEngine::on_rej(std::uint64_t from, const Rej& m, CmTime now) {
  Conn* c = addressed(from, m.remote_comm_id);
  if (!c) return;
  // Once the peer's comm ID is known, a REJ must carry it exactly (a REJ
  // to a REQ may not: a listener-less device has no ID for us, and our own
  // random comm ID is what a stranger would have to guess then).
  if (c->remote_id != 0 && m.local_comm_id != c->remote_id) {
    ++counters_.dropped_unexpected;
    return;
  }
  if (c->state == CmState::kEstablished && c->active) {
    // Our RTU had not reached the passive side when it gave up (it timed
    // out, or its consumer destroyed the ID): the connection is over, as a
    // DREQ would have said (the IB CM enters time wait here too).
    enter_timewait(*c, now);
    emit(CmEventType::kDisconnected, *c, m);
    return;
  }
  if (!in_handshake(c->state)) {
    ++counters_.dropped_unexpected;
    return;
  }
  finish(*c);
  emit(CmEventType::kRejected, *c, m);
  if (c->destroyed) erase(c->local_id);
}

void CmEngine::on_rep(std::uint64_t from, const MadHeader& h, const Rep& m) {
  Conn* c = find(m.remote_comm_id);
  if (!c) {
    // IBA 12.9.6: a REP for a connection we do not have is refused.
    ++counters_.dropped_unknown_id;
    Conn probe;
    probe.remote_id = m.local_comm_id;
    send_to(from, make_rej(probe, MsgRejected::kRep, RejectReason::kInvalidCommId, {}), h.transaction_id);
    return;
  }
  if (c->peer != from) {
    ++counters_.dropped_wrong_peer;
    return;
  }
  if (!c->active) {
    ++counters_.dropped_unexpected;
    return;
  }
  switch (c->state) {
    case CmState::kReqSent:
    case CmState::kMraReqRcvd:
      c->remote_id = m.local_comm_id;
      c->remote_qpn = m.local_qpn;
      set_state(*c, CmState::kRepRcvd);
      c->deadline.reset();
      emit(CmEventType::kRepReceived, *c, m);
      return;
    case CmState::kEstablished:
      // Our RTU was lost: the REP came again. Send it again.
      ++counters_.duplicates;
      if (m.local_comm_id == c->remote_id && c->last_answer) {
        ++counters_.resent;
        port_.send_mad(c->peer, *c->last_answer);
      }
      return;
    case CmState::kRepRcvd:
      ++counters_.duplicates;  // the consumer has not answered yet
      return;
    case CmState::kIdle:
    case CmState::kReqRcvd:
    case CmState::kRepSent:
    case CmState::kDreqSent:
    case CmState::kTimewait:
      ++counters_.dropped_unexpected;
  }
}

void CmEngine::on_rtu(std::uint64_t from, const Rtu& m) {
  Conn* c = addressed(from, m.remote_comm_id);
  if (!c) return;
  if (m.local_comm_id != c->remote_id || c->active) {
    ++counters_.dropped_unexpected;
    return;
  }
  if (c->state == CmState::kRepSent) {
    set_state(*c, CmState::kEstablished);
    c->deadline.reset();
    emit(CmEventType::kEstablished, *c, m);
    return;
  }
  if (c->state == CmState::kEstablished) {
    ++counters_.duplicates;
    return;
  }
  ++counters_.dropped_unexpected;
}

void CmEngine::on_dreq(std::uint64_t from, const MadHeader& h, const Dreq& m, CmTime now) {
  Conn* c = find(m.remote_comm_id);
  if (!c) {
    // IBA 12.9.8.6: a DREQ for a connection we do not have gets a DREP
    // (ours is gone, the peer may stop asking).
    ++counters_.dropped_unknown_id;
    Drep d;
    d.remote_comm_id = m.local_comm_id;
    send_to(from, d, h.transaction_id);
    return;
  }
  if (c->peer != from) {
    ++counters_.dropped_wrong_peer;
    return;
  }
  if (m.local_comm_id != c->remote_id || m.remote_qpn_eecn != c->local_qpn) {
    ++counters_.dropped_unexpected;  // for another incarnation, or another QP
    return;
  }
  Drep d;
  d.local_comm_id = c->local_id;
  d.remote_comm_id = c->remote_id;
  switch (c->state) {
    case CmState::kRepSent:      // the RTU was lost, and the peer is done already
    case CmState::kEstablished:
    case CmState::kDreqSent:     // both disconnect at once
      send(*c, d, h.transaction_id, false);
      enter_timewait(*c, now);
      emit(CmEventType::kDisconnected, *c, m);
      return;
    case CmState::kTimewait:
      ++counters_.duplicates;  // our DREP was lost
      send(*c, d, h.transaction_id, false);
      return;
    case CmState::kIdle:
    case CmState::kReqSent:
    case CmState::kMraReqRcvd:
    case CmState::kRepRcvd:
    case CmState::kReqRcvd:
      ++counters_.dropped_unexpected;
  }
}

void CmEngine::on_drep(std::uint64_t from, const Drep& m, CmTime now) {
  Conn* c = addressed(from, m.remote_comm_id);
  if (!c) return;
  if (m.local_comm_id != c->remote_id) {
    ++counters_.dropped_unexpected;
    return;
  }
  if (c->state == CmState::kDreqSent) {
    enter_timewait(*c, now);
    emit(CmEventType::kDisconnected, *c, m);
    return;
  }
  if (c->state == CmState::kTimewait) {
    ++counters_.duplicates;
    return;
  }
  ++counters_.dropped_unexpected;
}

void CmEngine::tick(CmTime now) {
  refuse_parked(now);
  std::vector<std::uint32_t> due;
  for (auto& [id, c] : conns_)
    if (c.deadline && *c.deadline <= now) due.push_back(id);
  for (std::uint32_t id : due) {
    Conn* c = find(id);
    if (!c || !c->deadline || *c->deadline > now) continue;  // an event handler changed it
    c->deadline.reset();
    const bool resend = c->state == CmState::kReqSent || c->state == CmState::kRepSent || c->state == CmState::kDreqSent;
    if (resend && c->retries_left > 0) {
      --c->retries_left;
      ++counters_.resent;
      port_.send_mad(c->peer, c->resend);
      arm(*c, now, c->response_timeout);
      continue;
    }
    switch (c->state) {
      case CmState::kReqSent:
      case CmState::kMraReqRcvd:
        finish(*c);
        emit(CmEventType::kTimedOut, *c, std::nullopt);
        break;
      case CmState::kRepSent:
        finish(*c);
        send(*c, make_rej(*c, MsgRejected::kRep, RejectReason::kTimeout, {}), c->tid, false);
        emit(CmEventType::kTimedOut, *c, std::nullopt);
        break;
      case CmState::kDreqSent:
        enter_timewait(*c, now);
        emit(CmEventType::kDisconnected, *c, std::nullopt);
        break;
      case CmState::kTimewait:
        finish(*c);
        c->last_answer.reset();  // done: nothing of it is answered again
        emit(CmEventType::kTimewaitExit, *c, std::nullopt);  // ib_cm's IB_CM_TIMEWAIT_EXIT
        break;
      case CmState::kIdle:
      case CmState::kRepRcvd:
      case CmState::kReqRcvd:
      case CmState::kEstablished:
        break;  // nothing times out there
    }
    if (c->destroyed && c->state == CmState::kIdle) erase(id);
  }
  deliver();
}

std::optional<CmTime> CmEngine::next_deadline() const {
  std::optional<CmTime> first;
  if (!parked_.empty()) first = parked_.front().deadline;
  for (const auto& [id, c] : conns_)
    if (c.deadline && (!first || *c.deadline < *first)) first = c.deadline;
  return first;
}

}  // namespace srdma::cm
