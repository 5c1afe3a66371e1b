// A QP's transport counters as the roles bump them: one relaxed word each,
// kept beside the state of the side that writes them (the QP places them),
// so that counting costs the data path no locked instruction and no cache
// line it does not touch already.
//
// Each counter has one writer at a time: the send side's under sq_mu_, the
// responder's under rq_mu_ or on its unlocked path (which a QP's one peer
// feeds one request at a time). A racing second sender (only a
// misconfigured or hostile one) can lose an increment, never corrupt one.
// Readers (snapshot) may run on any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "srdma/counters.h"

namespace srdma::hca {

class Counter {
 public:
  void bump(std::uint64_t n = 1) { v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  void set(std::uint64_t n) { v_.store(n, std::memory_order_relaxed); }
  std::uint64_t get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> v_{0};
};

struct QpCounters {
  // Send side (requester and completer).
  struct SendSide {
    Counter requests_sent, responses_received, retransmissions, timeouts, rto_expiries, tail_probes;
    Counter rnr_naks_received, rnr_retries, seq_naks_received;
    Counter dropped_bad_source, dropped_bad_state, dropped_bad_psn, dropped_bad_length, dropped_bad_opcode;
    // The reaction point's (dcqcn.h), copied from it as it changes; the
    // rate is 0 while the QP is not limited.
    Counter cnps_received, rate_decreases, rate_increases, paced_waits, rate_mbps;
    std::array<Counter, kNumNakCodes> naks_received;  // class C, by code
  };
  // Receive side (responder).
  struct RecvSide {
    Counter requests_received, responses_sent, rnr_naks_sent, seq_naks_sent, duplicate_requests;
    Counter dropped_bad_source, dropped_bad_state, dropped_bad_psn;
    // UD and UC: what RC would answer with a NAK or an RNR NAK.
    Counter dropped_bad_key, dropped_no_receive, dropped_bad_length, dropped_bad_opcode;
    // RC: duplicate READs beyond the budget, answers beyond the queue (responder.cc).
    Counter dropped_rate_limited;
    Counter cnps_sent;  // as the notification point (written by whoever won the gate)
    std::array<Counter, kNumNakCauses> naks_sent;  // class C, by cause
  };

  static TransportCounters snapshot(const SendSide& send, const RecvSide& recv);
};

inline TransportCounters QpCounters::snapshot(const SendSide& send, const RecvSide& recv) {
  TransportCounters c;
  c.requests_sent = send.requests_sent.get();
  c.responses_received = send.responses_received.get();
  c.retransmissions = send.retransmissions.get();
  c.timeouts = send.timeouts.get();
  c.rto_expiries = send.rto_expiries.get();
  c.tail_probes = send.tail_probes.get();
  c.rnr_naks_received = send.rnr_naks_received.get();
  c.rnr_retries = send.rnr_retries.get();
  c.seq_naks_received = send.seq_naks_received.get();
  c.requests_received = recv.requests_received.get();
  c.responses_sent = recv.responses_sent.get();
  c.rnr_naks_sent = recv.rnr_naks_sent.get();
  c.seq_naks_sent = recv.seq_naks_sent.get();
  c.duplicate_requests = recv.duplicate_requests.get();
  c.cnps_sent = recv.cnps_sent.get();
  c.cnps_received = send.cnps_received.get();
  c.rate_decreases = send.rate_decreases.get();
  c.rate_increases = send.rate_increases.get();
  c.paced_waits = send.paced_waits.get();
  c.lowest_rate_mbps = send.rate_mbps.get();
  c.dropped_for(DropReason::kBadSource) = send.dropped_bad_source.get() + recv.dropped_bad_source.get();
  c.dropped_for(DropReason::kBadState) = send.dropped_bad_state.get() + recv.dropped_bad_state.get();
  c.dropped_for(DropReason::kBadPsn) = send.dropped_bad_psn.get() + recv.dropped_bad_psn.get();
  c.dropped_for(DropReason::kBadLength) = send.dropped_bad_length.get() + recv.dropped_bad_length.get();
  c.dropped_for(DropReason::kBadKey) = recv.dropped_bad_key.get();
  c.dropped_for(DropReason::kNoReceive) = recv.dropped_no_receive.get();
  c.dropped_for(DropReason::kBadOpcode) = send.dropped_bad_opcode.get() + recv.dropped_bad_opcode.get();
  c.dropped_for(DropReason::kRateLimited) = recv.dropped_rate_limited.get();
  for (std::size_t i = 0; i < kNumNakCauses; ++i) c.naks_sent[i] = recv.naks_sent[i].get();
  for (std::size_t i = 0; i < kNumNakCodes; ++i) c.naks_received[i] = send.naks_received[i].get();
  return c;
}

}  // namespace srdma::hca
