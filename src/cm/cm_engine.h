// The InfiniBand CM's connection state machine (IBA vol. 1 12.9), one per
// device, as Linux's ib_cm keeps it: connections by local communication ID,
// the REQ/REP/RTU handshake with retries and timeouts, REJ, DREQ/DREP and
// time wait, and the answers the spec gives stale and duplicate MADs.
//
// No I/O and no clock of its own: MADs come in through receive() with the
// sender's address and the time, timers through tick(), and what the
// engine sends or reports goes out through CmEngine::Port. The agent that
// owns the GSI QP (cm_agent.h) drives it from one thread; tests drive it
// with a fake port and a made-up time, so every timeout is deterministic.
//
// Consumers see IB CM's events and answer them, as ib_cm's users do:
//   active:  connect() -> kRepReceived -> ready() (its QP is RTR/RTS now;
//            the RTU goes out) or reject();  kRejected / kTimedOut instead;
//   passive: listen(service) -> kReqReceived -> accept() or reject();
//            -> kEstablished (the RTU came) or kTimedOut;
//   either:  disconnect() -> kDisconnected once the DREP came (or the
//            DREQ timed out); the peer's DREQ -> kDisconnected (so is
//            a REJ after our RTU: the passive side gave up first); then
//            kTimewaitExit when time wait ends (an ID not destroyed).
// After kRejected, kTimedOut or kDisconnected the ID is done; destroy()
// frees it (a connection in time wait stays known until that ends, so
// that a late duplicate is answered, not taken for a new one).
//
// Hostile input: every MAD is decoded and checked before use; one that is
// malformed, for a comm ID we do not have, from another address than the
// connection's peer, or unexpected in the connection's state is dropped
// and counted by reason (or answered as IBA says: a REP for an unknown
// connection gets REJ invalid comm ID, a DREQ for one gets a DREP).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "cm/cm_mad.h"
#include "srdma/status.h"

namespace srdma::cm {

using CmClock = std::chrono::steady_clock;
using CmTime = CmClock::time_point;

// IBA's CM timeout encoding: 4.096 us * 2^t (t at most 31).
std::chrono::nanoseconds cm_timeout(std::uint8_t t);

enum class CmState : std::uint8_t {
  kIdle,
  kReqSent,
  kMraReqRcvd,  // the passive side asked for time: no more REQ resends
  kRepRcvd,     // waiting for the consumer's ready() or reject()
  kReqRcvd,     // waiting for the consumer's accept() or reject()
  kRepSent,
  kEstablished,
  kDreqSent,
  kTimewait,  // disconnected; duplicates are still answered
};
std::string_view cm_state_name(CmState s);

enum class CmEventType : std::uint8_t {
  kReqReceived,   // passive: a new connection request on a listened service
  kRepReceived,   // active: the reply
  kEstablished,   // passive: the RTU
  kRejected,      // the peer refused (reason, private data)
  kTimedOut,      // no answer after every retry
  kDisconnected,  // the DREP came, the DREQ timed out, or the peer's DREQ
  kTimewaitExit,  // after kDisconnected: time wait is over, nothing of the connection is answered any more
  // SIDR (sidr.h), for UD:
  kSidrReqReceived,  // passive: a SIDR_REQ on a listened service; reply() next
  kSidrRepReceived,  // active: the SIDR_REP, whatever its status (kTimedOut when none came)
};
std::string_view cm_event_name(CmEventType t);

struct CmEvent {
  CmEventType type = CmEventType::kReqReceived;
  std::uint32_t id = 0;  // the connection's local comm ID
  std::uint64_t peer = 0;  // the peer device's address
  void* listen_context = nullptr;  // kReqReceived: the listener's
  // The message behind the event: Req for kReqReceived, Rep for
  // kRepReceived, Rej for kRejected, Rtu for kEstablished, Dreq or Drep
  // for kDisconnected (none when it timed out), SidrReq for
  // kSidrReqReceived, SidrRep for kSidrRepReceived.
  std::optional<Message> message;
};

// The events an engine (CmEngine, SidrEngine) made and has not handed to
// its port yet: handed over in order, after the work on a MAD or a tick,
// and never re-entered (a handler's call back into the engine queues more,
// which the outer loop hands over).
class CmEventOutbox {
 public:
  void push(CmEvent e) { events_.push_back(std::move(e)); }
  template <class Port>
  void deliver(Port& port) {
    if (delivering_) return;  // a handler's call: the outer loop delivers
    delivering_ = true;
    while (!events_.empty()) {
      CmEvent e = std::move(events_.front());
      events_.pop_front();
      port.on_event(e);
    }
    delivering_ = false;
  }

 private:
  std::deque<CmEvent> events_;
  bool delivering_ = false;
};

// What a consumer sets in a REQ; the engine fills comm IDs, the CA GUID and
// the timeouts it keeps.
struct ConnectParams {
  std::uint64_t peer = 0;
  std::uint64_t service_id = 0;
  Req req;  // local_qpn, starting_psn, path, private data, ...
  // How long the peer may take to answer (REQ Remote CM Response Timeout)
  // and how often a REQ or REP goes out before the connection times out.
  std::uint8_t response_timeout = 16;  // 268 ms
  std::uint8_t max_cm_retries = 8;
};

struct CmCounters {
  std::uint64_t sent = 0;
  std::uint64_t received = 0;
  std::uint64_t resent = 0;
  std::uint64_t dropped_malformed = 0;    // did not decode (cm_mad.h's checks)
  std::uint64_t dropped_unknown_id = 0;   // no connection with that comm ID
  std::uint64_t dropped_wrong_peer = 0;   // from another address than the connection's peer
  std::uint64_t dropped_unexpected = 0;   // not expected in the connection's state
  std::uint64_t dropped_bad_grh = 0;      // (the agent's) a GRH that is no datagram's IPv6 header,
                                          // or from an IPv6 address this process never named
  std::uint64_t duplicates = 0;           // a message seen before, answered again or ignored
  std::uint64_t rejects_sent = 0;
  std::uint64_t reqs_parked = 0;          // REQs that waited for a listener (kListenGrace)
  // Admission (CmLimits): REQs refused with REJ (consumer defined) because
  // too many passive connections sit between REQ and RTU, and REQs whose
  // timeout or retry fields were clamped.
  std::uint64_t refused_half_open_per_source = 0;
  std::uint64_t evicted_half_open = 0;  // the oldest, to make room (CmLimits::max_half_open)
  std::uint64_t clamped_timeouts = 0;
  std::uint64_t duplicates_unanswered = 0;  // a duplicate REQ past the REP's resend budget
};

// What a stranger's REQ can make the passive side commit (docs/DESIGN.md,
// threat model). The REQ's Local CM Response Timeout (how long our REP
// waits for the RTU, 4.096 us x 2^t) and Max CM Retries are the peer's to
// choose: clamped here. One REQ is then answered with at most
// 1 + max_remote_retries REPs (resends and duplicate REQs share the one
// budget) and one REJ, within (max_remote_retries + 1) x 4.096 us x
// 2^max_remote_timeout: 4 x 1.07 s. (A real peer's RTU follows our REP
// within a round trip; the timeout only bounds how long we wait for one
// that never comes.)
//
// Passive connections between REQ and RTU are "half open". Past
// max_half_open_per_source from one address a REQ gets a REJ; past
// max_half_open in total the oldest half-open connection is dropped (a REJ,
// kTimedOut to its consumer) to make room, as a SYN queue drops its oldest:
// spoofed sources cannot lock out a real host, whose RTU comes long before
// max_half_open more REQs do.
struct CmLimits {
  std::uint8_t min_remote_timeout = 14;  // 67 ms
  std::uint8_t max_remote_timeout = 18;  // 1.07 s
  std::uint8_t max_remote_retries = 3;
  std::size_t max_half_open = 1024;
  std::size_t max_half_open_per_source = 128;  // cmtime opens 100 at once
};

// A REQ for a service nobody listens on waits this long for a listener
// before it is refused (REJ invalid service ID). Linux refuses at once; a
// peer that re-listens between two steps of its own protocol (perftest -R
// listens for its data connection only after the handshake that tells the
// client to connect) then loses to scheduling. At most kMaxParkedReqs wait.
inline constexpr std::chrono::milliseconds kListenGrace{50};
inline constexpr std::size_t kMaxParkedReqs = 64;

class CmEngine {
 public:
  class Port {
   public:
    virtual ~Port() = default;
    virtual void send_mad(std::uint64_t peer, const Mad& mad) = 0;
    virtual void on_event(const CmEvent& e) = 0;
  };

  // Where local comm IDs come from: random (secure_random_u32) in the
  // agent, so that a stranger cannot name a connection in a forged REJ,
  // DREQ or RTU; a fixed sequence in tests (sequential_ids).
  using IdSource = std::function<std::uint32_t()>;
  static IdSource random_ids();
  static IdSource sequential_ids(std::uint32_t first);

  // `local_ca_guid` goes into REQs and REPs.
  CmEngine(Port& port, std::uint64_t local_ca_guid, IdSource ids, const CmLimits& limits = {});

  Result<void> listen(std::uint64_t service_id, void* context);
  void stop_listening(std::uint64_t service_id);

  // Sends the REQ; returns the connection's local comm ID.
  Result<std::uint32_t> connect(const ConnectParams& p, CmTime now);
  // Passive, in kReqRcvd: the REP (its local_qpn, starting_psn, private
  // data...; the engine fills the comm IDs and the GUID).
  Result<void> accept(std::uint32_t id, const Rep& rep, CmTime now);
  // Active in kRepRcvd: the RTU. The connection is established.
  Result<void> ready(std::uint32_t id, std::span<const std::byte> private_data = {});
  // kReqRcvd or kRepRcvd: a REJ with reason kConsumerDefined.
  Result<void> reject(std::uint32_t id, std::span<const std::byte> private_data = {});
  // kEstablished (or a handshake in flight: then a REJ): the DREQ.
  Result<void> disconnect(std::uint32_t id, CmTime now, std::span<const std::byte> private_data = {});
  // Forgets the ID (a connection in flight is rejected or disconnected
  // first, without an event; one in time wait stays until it ends).
  void destroy(std::uint32_t id, CmTime now);

  void receive(std::uint64_t from, std::span<const std::byte> mad, CmTime now);
  void tick(CmTime now);
  // When tick() next has something to do; nullopt when nothing waits.
  std::optional<CmTime> next_deadline() const;

  std::optional<CmState> state(std::uint32_t id) const;
  std::size_t connections() const { return conns_.size(); }
  // Passive connections between REQ and RTU (CmLimits::max_half_open).
  std::size_t half_open() const { return half_open_; }
  const CmCounters& counters() const { return counters_; }

 private:
  struct Conn {
    CmState state = CmState::kIdle;
    bool active = false;
    bool destroyed = false;  // destroy() called: freed when time wait ends
    std::uint32_t local_id = 0;
    std::uint32_t remote_id = 0;
    std::uint64_t peer = 0;
    std::uint64_t tid = 0;
    std::uint32_t local_qpn = 0;  // a DREQ must name it
    std::uint32_t remote_qpn = 0;
    std::uint8_t response_timeout = 16;
    std::uint8_t max_retries = 8;
    // The MAD the timer resends (REQ, REP, DREQ) and the last answer a
    // duplicate gets again (RTU, DREP, MRA).
    Mad resend{};
    int retries_left = 0;
    std::optional<CmTime> deadline;
    std::optional<Mad> last_answer;
    std::uint64_t half_open_seq = 0;  // its place in half_open_order_ while half open
  };

  // Every state change goes through here: it keeps the half-open counts.
  void set_state(Conn& c, CmState s);
  static bool half_open_state(const Conn& c) {
    return !c.active && (c.state == CmState::kReqRcvd || c.state == CmState::kRepSent);
  }
  Conn* find(std::uint32_t id);
  void erase(std::uint32_t id);
  const Conn* find(std::uint32_t id) const;
  std::uint32_t new_comm_id();
  void send(Conn& c, const Message& m, std::uint64_t tid, bool keep_for_resend);
  void send_to(std::uint64_t peer, const Message& m, std::uint64_t tid);
  void arm(Conn& c, CmTime now, std::uint8_t timeout);
  void enter_timewait(Conn& c, CmTime now);
  void finish(Conn& c);  // no longer anything to send or wait for
  // Events are queued and handed to the port when the engine is done with
  // the MAD or the tick (deliver()): a handler may call back into the engine.
  void emit(CmEventType t, const Conn& c, std::optional<Message> m, void* listen_context = nullptr);
  void deliver();
  Rej make_rej(const Conn& c, MsgRejected what, RejectReason why, std::span<const std::byte> pd) const;

  void on_req(std::uint64_t from, const MadHeader& h, const Req& m, CmTime now);
  // A REQ for a listened service: the passive connection and kReqReceived.
  void new_passive(std::uint64_t from, const MadHeader& h, const Req& m, void* listen_context);
  void refuse_parked(CmTime now);
  // A REJ for a REQ no connection was made for.
  void refuse_req(std::uint64_t from, const MadHeader& h, const Req& m, RejectReason why);
  void on_mra(std::uint64_t from, const Mra& m, CmTime now);
  void on_rej(std::uint64_t from, const Rej& m, CmTime now);
  void on_rep(std::uint64_t from, const MadHeader& h, const Rep& m);
  void on_rtu(std::uint64_t from, const Rtu& m);
  void on_dreq(std::uint64_t from, const MadHeader& h, const Dreq& m, CmTime now);
  void on_drep(std::uint64_t from, const Drep& m, CmTime now);
  // The connection a reply names (its remote_comm_id is our local ID),
  // checked against its sender; null (and counted) when it is not ours.
  Conn* addressed(std::uint64_t from, std::uint32_t our_id);

  Port& port_;
  const std::uint64_t guid_;
  IdSource ids_;
  const CmLimits limits_;
  std::size_t half_open_ = 0;
  std::map<std::uint64_t, std::size_t> half_open_by_peer_;
  std::map<std::uint64_t, std::uint32_t> half_open_order_;  // oldest first: seq -> comm ID
  std::uint64_t next_half_open_seq_ = 1;
  // Drops the oldest half-open connection (CmLimits::max_half_open).
  void evict_oldest_half_open();
  std::uint64_t next_tid_;
  std::map<std::uint32_t, Conn> conns_;
  // REQs waiting for a listener, oldest first (their deadlines in order).
  struct ParkedReq {
    std::uint64_t from = 0;
    MadHeader header;
    Req req;
    CmTime deadline;
  };
  std::deque<ParkedReq> parked_;
  // Passive connections by (peer, the peer's comm ID): a REQ seen again is
  // a duplicate of one of these, not a new connection.
  std::map<std::pair<std::uint64_t, std::uint32_t>, std::uint32_t> by_remote_;
  std::map<std::uint64_t, void*> listeners_;
  CmCounters counters_;
  CmEventOutbox events_;
};

}  // namespace srdma::cm
