// What the transport did: per QP and per device (the sum of its QPs, past
// and present, plus what no QP could count), like the hw counters of an
// RDMA device (rdma statistic show).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace srdma {

// Why a packet was dropped without an answer. Every drop is counted under
// exactly one reason.
enum class DropReason : std::uint8_t {
  kBadSource,  // a connected QP hears only its peer (IBA 9.6: source address and QPN)
  kBadState,   // the QP does not accept requests now (only RTR, RTS and SQD do)
  kBadPsn,     // outside the PSN window: a response for nothing outstanding (stray, late or
               // duplicate), a request behind a gap already NAKed
  kUnknownQp,  // no QP with the destination QPN on the device (IBA 9.6.1.5)
  kBadOpcode,  // an opcode the QP's transport does not take (counted by the wire's parser)
  kBadLength,  // a packet whose length does not fit its opcode (or a UD receive WQE)
  kBadKey,     // a packet the key checks refuse (P_Key, a UD Q_Key, a UC WRITE's R_Key)
  kBadIcrc,    // corrupted on the way: its ICRC does not match
  kNoReceive,  // UD and UC: no receive WQE posted (they have no RNR)
  kRateLimited,  // RC: a duplicate READ beyond the QP's budget for executing them again, or an answer
                 // beyond what a QP keeps waiting behind a READ's responses (a storm)
};
inline constexpr std::size_t kNumDropReasons = 10;
std::string_view drop_reason_str(DropReason r);

struct TransportCounters {
  std::uint64_t requests_sent = 0;       // request packets handed to the link, retransmissions included
  std::uint64_t requests_received = 0;   // request packets that reached a live responder
  std::uint64_t responses_sent = 0;      // ACKs, NAKs, read responses, atomic ACKs
  std::uint64_t responses_received = 0;  // responses that reached the completer from the peer
  std::uint64_t retransmissions = 0;     // request packets sent again (go-back-N after a timeout, NAK or RNR)
  std::uint64_t timeouts = 0;            // transport timer expiries with work outstanding
  std::uint64_t rnr_naks_sent = 0;
  std::uint64_t rnr_naks_received = 0;
  std::uint64_t rnr_retries = 0;         // resends after an RNR NAK
  std::uint64_t seq_naks_sent = 0;       // NAK PSN sequence error
  std::uint64_t seq_naks_received = 0;
  std::uint64_t duplicate_requests = 0;  // requests with a PSN already executed (acknowledged again)
  std::array<std::uint64_t, kNumDropReasons> dropped{};

  std::uint64_t& dropped_for(DropReason r) { return dropped[static_cast<std::size_t>(r)]; }
  std::uint64_t dropped_for(DropReason r) const { return dropped[static_cast<std::size_t>(r)]; }
  std::uint64_t dropped_total() const;
  TransportCounters& operator+=(const TransportCounters& o);
  // What was counted since `earlier` (a snapshot of the same counters).
  TransportCounters& operator-=(const TransportCounters& earlier);
};

}  // namespace srdma
