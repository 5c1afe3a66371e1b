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
    case DropReason::kRateLimited: return "rate_limited";
  }
  return "?";
}

std::string_view nak_cause_str(NakCause c) {
  switch (c) {
    case NakCause::kInvalidOpcodeSequence: return "invalid_request_opcode_sequence";
    case NakCause::kInvalidLength: return "invalid_request_length";
    case NakCause::kInvalidNoResources: return "invalid_request_no_rd_atomic_resources";
    case NakCause::kInvalidReceiveTooShort: return "invalid_request_receive_too_short";
    case NakCause::kInvalidInvalidate: return "invalid_request_invalidate_refused";
    case NakCause::kInvalidAtomicAlignment: return "invalid_request_atomic_unaligned";
    case NakCause::kAccessNotEnabled: return "remote_access_error_not_enabled";
    case NakCause::kAccessKeyRefused: return "remote_access_error_rkey";
    case NakCause::kOperationalPlacement: return "remote_operational_error_placement";
    case NakCause::kXrcSrqRefused: return "invalid_rd_request_xrc_srq";
  }
  return "?";
}

std::string_view nak_code_str(NakCode c) {
  switch (c) {
    case NakCode::kInvalidRequest: return "invalid_request";
    case NakCode::kRemoteAccessError: return "remote_access_error";
    case NakCode::kRemoteOperationalError: return "remote_operational_error";
    case NakCode::kInvalidRdRequest: return "invalid_rd_request";
  }
  return "?";
}

std::uint64_t TransportCounters::dropped_total() const {
  std::uint64_t n = 0;
  for (std::uint64_t d : dropped) n += d;
  return n;
}

namespace {
// Every count of TransportCounters, once: what += and -= walk.
template <class Op>
void each_count(TransportCounters& a, const TransportCounters& b, Op op) {
  op(a.requests_sent, b.requests_sent);
  op(a.requests_received, b.requests_received);
  op(a.responses_sent, b.responses_sent);
  op(a.responses_received, b.responses_received);
  op(a.retransmissions, b.retransmissions);
  op(a.timeouts, b.timeouts);
  op(a.rto_expiries, b.rto_expiries);
  op(a.tail_probes, b.tail_probes);
  op(a.rnr_naks_sent, b.rnr_naks_sent);
  op(a.rnr_naks_received, b.rnr_naks_received);
  op(a.rnr_retries, b.rnr_retries);
  op(a.seq_naks_sent, b.seq_naks_sent);
  op(a.seq_naks_received, b.seq_naks_received);
  op(a.duplicate_requests, b.duplicate_requests);
  op(a.cnps_sent, b.cnps_sent);
  op(a.cnps_received, b.cnps_received);
  op(a.rate_decreases, b.rate_decreases);
  op(a.rate_increases, b.rate_increases);
  op(a.paced_waits, b.paced_waits);
  for (std::size_t i = 0; i < kNumDropReasons; ++i) op(a.dropped[i], b.dropped[i]);
  for (std::size_t i = 0; i < kNumNakCauses; ++i) op(a.naks_sent[i], b.naks_sent[i]);
  for (std::size_t i = 0; i < kNumNakCodes; ++i) op(a.naks_received[i], b.naks_received[i]);
}
}  // namespace

TransportCounters& TransportCounters::operator+=(const TransportCounters& o) {
  each_count(*this, o, [](std::uint64_t& x, std::uint64_t y) { x += y; });
  if (o.lowest_rate_mbps != 0 && (lowest_rate_mbps == 0 || o.lowest_rate_mbps < lowest_rate_mbps))
    lowest_rate_mbps = o.lowest_rate_mbps;
  return *this;
}

TransportCounters& TransportCounters::operator-=(const TransportCounters& o) {
  each_count(*this, o, [](std::uint64_t& x, std::uint64_t y) { x -= y; });
  return *this;
}

}  // namespace srdma
