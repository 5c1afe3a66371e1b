// Service ID Resolution (IBA vol. 1 12.11): how a UD consumer learns the
// QPN and Q_Key behind a service ID, one SIDR_REQ answered by one SIDR_REP,
// as Linux's ib_cm does it for the RDMA CM's RDMA_PS_UDP IDs.
//
// Like CmEngine: no I/O and no clock of its own. MADs come in through
// receive() with the sender's address and the time, timers through tick(),
// and what it sends or reports goes out through a CmEngine::Port, so every
// retry and timeout is tested on a made-up time. The agent (cm_agent.h)
// hands it the SIDR MADs and CmEngine the rest.
//
//   active:  request() -> kSidrRepReceived (any status; the consumer reads
//            it) or kTimedOut after every resend;
//   passive: listen(service) -> kSidrReqReceived -> reply() (status 0 with
//            the QPN and Q_Key, or a refusal). No state follows a reply.
// An ID is done after its event or reply; destroy() frees it.
//
// Hostile input (docs/DESIGN.md, threat model): a SIDR_REQ commits at most
// one pending entry until the consumer answers, and at most
// SidrLimits::max_pending_per_source from one address (more are refused
// with SIDR_REP "no QP") and max_pending in all (past that the oldest is
// refused and forgotten). A REQ for a service nobody listens on waits
// kListenGrace (at most kMaxParkedReqs of them), then gets "service ID not
// supported". A reply is kept a while so that a duplicate REQ (our REP was
// lost) gets it again, within a budget of resends, never a second request
// to the consumer; at most max_answers are kept. A SIDR_REP must name an
// outstanding request and come from its peer; anything else is dropped and
// counted.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>

#include "cm/cm_engine.h"

namespace srdma::cm {

struct SidrLimits {
  std::size_t max_pending_per_source = 16;
  std::size_t max_pending = 256;
  std::size_t max_answers = 256;
  // How long a reply answers duplicates, and how many times.
  std::chrono::milliseconds answer_kept{4300};  // 4 x 1.07 s: CmLimits' bound on a REQ's resends
  int max_answer_resends = 3;
};

struct SidrCounters {
  std::uint64_t received = 0;
  std::uint64_t sent = 0;
  std::uint64_t resent = 0;
  std::uint64_t dropped_malformed = 0;   // did not decode
  std::uint64_t dropped_unknown_id = 0;  // a SIDR_REP for no outstanding request
  std::uint64_t dropped_wrong_peer = 0;  // a SIDR_REP from another address than the request's peer
  std::uint64_t duplicates = 0;          // a REQ or REP seen before (answered again or ignored)
  std::uint64_t duplicates_unanswered = 0;  // a duplicate REQ past its answer's resend budget
  std::uint64_t reqs_parked = 0;         // waited for a listener (kListenGrace)
  std::uint64_t refused_unsupported = 0;  // nobody listened: SIDR_REP "service ID not supported"
  std::uint64_t refused_per_source = 0;   // SidrLimits::max_pending_per_source
  std::uint64_t evicted = 0;              // the oldest pending, to make room (SidrLimits::max_pending)
  std::uint64_t timed_out = 0;            // requests with no answer after every resend
};

// What a consumer sets in a SIDR_REQ; the engine fills the request ID.
struct SidrParams {
  std::uint64_t peer = 0;
  std::uint64_t service_id = 0;
  std::uint16_t pkey = 0xffff;
  std::array<std::byte, kSidrReqPrivateDataBytes> private_data{};
  // Each try waits 4.096 us x 2^response_timeout; max_cm_retries resends.
  std::uint8_t response_timeout = 16;  // 268 ms
  std::uint8_t max_cm_retries = 8;
};

class SidrEngine {
 public:
  // `ids` gives request IDs (random in the agent: a stranger cannot name a
  // request in a forged SIDR_REP); `first_tid` seeds transaction IDs.
  SidrEngine(CmEngine::Port& port, CmEngine::IdSource ids, std::uint64_t first_tid, const SidrLimits& limits = {});

  Result<void> listen(std::uint64_t service_id, void* context);
  void stop_listening(std::uint64_t service_id);

  // Sends the SIDR_REQ; returns the request's ID.
  Result<std::uint32_t> request(const SidrParams& p, CmTime now);
  // Passive, after kSidrReqReceived: the SIDR_REP. The engine fills the
  // request ID and the service ID; `rep` gives status, QPN, Q_Key and
  // private data. EINVAL when the ID has no request waiting.
  Result<void> reply(std::uint32_t id, const SidrRep& rep, CmTime now);
  // Forgets the ID (a request in flight is abandoned; a passive request
  // not yet answered is refused with status "rejected").
  void destroy(std::uint32_t id);
  bool contains(std::uint32_t id) const { return active_.contains(id) || passive_.contains(id); }

  void receive(std::uint64_t from, std::span<const std::byte> mad, CmTime now);
  void tick(CmTime now);
  std::optional<CmTime> next_deadline() const;

  // Passive requests waiting for the consumer's reply.
  std::size_t pending() const { return pending_; }
  // Replies kept for duplicates.
  std::size_t answers() const { return answers_.size(); }
  std::size_t parked() const { return parked_.size(); }
  const SidrCounters& counters() const { return counters_; }

 private:
  struct Active {
    std::uint64_t peer = 0;
    Mad resend{};
    int retries_left = 0;
    std::uint8_t response_timeout = 16;
    std::optional<CmTime> deadline;  // none once answered or timed out
  };
  struct Passive {
    std::uint64_t peer = 0;
    std::uint32_t remote_request_id = 0;
    std::uint64_t service_id = 0;
    std::uint64_t tid = 0;
    std::uint64_t seq = 0;  // its place in pending_order_
  };
  // A reply kept for duplicates of its request, by (peer, request ID).
  struct Answer {
    Mad mad{};
    CmTime until;
    int resends_left = 0;
  };
  struct Parked {
    std::uint64_t from = 0;
    std::uint64_t tid = 0;
    SidrReq req;
    CmTime deadline;
  };
  using RemoteKey = std::pair<std::uint64_t, std::uint32_t>;

  std::uint32_t new_id();
  void send(std::uint64_t peer, const SidrRep& rep, std::uint64_t tid, CmTime now, bool keep);
  void refuse(std::uint64_t from, std::uint64_t tid, const SidrReq& req, SidrStatus why, CmTime now);
  void on_req(std::uint64_t from, const MadHeader& h, const SidrReq& m, CmTime now);
  void on_rep(std::uint64_t from, const SidrRep& m);
  void new_passive(std::uint64_t from, std::uint64_t tid, const SidrReq& m, void* context);
  void forget_passive(std::uint32_t id);
  void evict_oldest(CmTime now);
  void emit(CmEventType t, std::uint32_t id, std::uint64_t peer, std::optional<Message> m, void* context = nullptr);
  void deliver();

  CmEngine::Port& port_;
  CmEngine::IdSource ids_;
  std::uint64_t next_tid_;
  const SidrLimits limits_;
  std::map<std::uint64_t, void*> listeners_;
  std::map<std::uint32_t, Active> active_;
  std::map<std::uint32_t, Passive> passive_;
  std::map<RemoteKey, std::uint32_t> passive_by_remote_;
  std::map<std::uint64_t, std::size_t> pending_by_peer_;
  std::map<std::uint64_t, std::uint32_t> pending_order_;  // oldest first: seq -> ID
  std::uint64_t next_seq_ = 1;
  std::size_t pending_ = 0;
  std::map<RemoteKey, Answer> answers_;
  std::deque<RemoteKey> answer_order_;  // oldest first (may name answers gone already)
  std::deque<Parked> parked_;
  SidrCounters counters_;
  CmEventOutbox events_;
};

}  // namespace srdma::cm
