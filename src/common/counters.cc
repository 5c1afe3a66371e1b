#include "srdma/counters.h"

namespace srdma {

std::string_view drop_reason_str(DropReason r) {
  switch (r) {
    case DropReason::kBadSource: return "bad_source";
    case DropReason::kBadState: return "bad_state";
    case DropReason::kBadPsn: return "bad_psn";
    case DropReason::kUnknownQp: return "unknown_qp";
    case DropReason::kBadOpcode: return "bad_opcode";
    case DropReason::kBadLength: return "bad_length";
    case DropReason::kBadKey: return "bad_key";
    case DropReason::kBadIcrc: return "bad_icrc";
    case DropReason::kNoReceive: return "no_receive";
  }
  return "?";
}

std::uint64_t TransportCounters::dropped_total() const {
  std::uint64_t n = 0;
  for (std::uint64_t d : dropped) n += d;
  return n;
}

TransportCounters& TransportCounters::operator+=(const TransportCounters& o) {
  requests_sent += o.requests_sent;
  requests_received += o.requests_received;
  responses_sent += o.responses_sent;
  responses_received += o.responses_received;
  retransmissions += o.retransmissions;
  timeouts += o.timeouts;
  rnr_naks_sent += o.rnr_naks_sent;
  rnr_naks_received += o.rnr_naks_received;
  rnr_retries += o.rnr_retries;
  seq_naks_sent += o.seq_naks_sent;
  seq_naks_received += o.seq_naks_received;
  duplicate_requests += o.duplicate_requests;
  for (std::size_t i = 0; i < kNumDropReasons; ++i) dropped[i] += o.dropped[i];
  return *this;
}

TransportCounters& TransportCounters::operator-=(const TransportCounters& o) {
  requests_sent -= o.requests_sent;
  requests_received -= o.requests_received;
  responses_sent -= o.responses_sent;
  responses_received -= o.responses_received;
  retransmissions -= o.retransmissions;
  timeouts -= o.timeouts;
  rnr_naks_sent -= o.rnr_naks_sent;
  rnr_naks_received -= o.rnr_naks_received;
  rnr_retries -= o.rnr_retries;
  seq_naks_sent -= o.seq_naks_sent;
  seq_naks_received -= o.seq_naks_received;
  duplicate_requests -= o.duplicate_requests;
  for (std::size_t i = 0; i < kNumDropReasons; ++i) dropped[i] -= o.dropped[i];
  return *this;
}

}  // namespace srdma
