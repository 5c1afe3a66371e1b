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
               // duplicate), a request behind a gap already NAKed, a duplicate no responder
               // resource remembers
  kUnknownQp,  // no QP with the destination QPN on the device (IBA 9.6.1.5)
  kBadOpcode,  // an opcode the QP's transport does not take (counted by the wire's parser), or
               // a response that does not answer the WQE its PSN names (a READ response for
               // a SEND, an atomic ACK for a READ)
  kBadLength,  // a packet whose length does not fit its opcode (or a UD receive WQE)
  kBadKey,     // a packet the key checks refuse (P_Key, a UD Q_Key, a UC WRITE's R_Key)
  kBadIcrc,    // corrupted on the way: its ICRC does not match
  kNoReceive,  // UD and UC: no receive WQE posted (they have no RNR)
  kRateLimited,  // RC: a duplicate READ beyond the QP's budget for executing them again, or an answer
                 // beyond what a QP keeps waiting behind a READ's responses (a storm)
};
inline constexpr std::size_t kNumDropReasons = 10;
std::string_view drop_reason_str(DropReason r);

// Why a responder refused a request with a NAK that ends both QPs (IBA
// 9.7.5.2: class C errors), one cause per NAK: the syndrome the requester
// sees, then what in the request earned it.
enum class NakCause : std::uint8_t {
  kInvalidOpcodeSequence,   // Invalid Request: a MIDDLE or LAST outside its message, a FIRST inside one (9.8.3)
  kInvalidLength,           // Invalid Request: a length its opcode, MTU or DMA length does not allow (9.7.5.1.4)
  kInvalidNoResources,      // Invalid Request: a READ or atomic to a QP with max_dest_rd_atomic 0
  kInvalidReceiveTooShort,  // Invalid Request: a SEND longer than its receive WQE (9.7.5.2.4)
  kInvalidInvalidate,       // Invalid Request: SEND with Invalidate naming a key this QP may not invalidate
  kInvalidAtomicAlignment,  // Invalid Request: an atomic's address not 8-byte aligned (9.4.5)
  kAccessNotEnabled,        // Remote Access Error: the QP's access flags refuse the operation
  kAccessKeyRefused,        // Remote Access Error: the R_Key (its validity, PD, rights or bounds) refuses it
  kOperationalPlacement,    // Remote Operational Error: the receive WQE's memory refused the data
  kXrcSrqRefused,           // Invalid RD Request: an XRCETH naming no XRC SRQ of the TGT QP's XRC domain
};
inline constexpr std::size_t kNumNakCauses = 10;
std::string_view nak_cause_str(NakCause c);

// The class C NAK codes a requester receives (IBA 9.7.5.2.5, AETH NAK codes 1..4).
enum class NakCode : std::uint8_t {
  kInvalidRequest,
  kRemoteAccessError,
  kRemoteOperationalError,
  kInvalidRdRequest,
};
inline constexpr std::size_t kNumNakCodes = 4;
std::string_view nak_code_str(NakCode c);

struct TransportCounters {
  std::uint64_t requests_sent = 0;       // request packets handed to the link, retransmissions included
  std::uint64_t requests_received = 0;   // request packets that reached a live responder
  std::uint64_t responses_sent = 0;      // ACKs, NAKs, read responses, atomic ACKs
  std::uint64_t responses_received = 0;  // responses that reached the completer from the peer
  std::uint64_t retransmissions = 0;     // request packets sent again (go-back-N after a timeout, NAK or RNR)
  std::uint64_t timeouts = 0;            // transport timer expiries with work outstanding
  // Early retransmissions: the round-trip estimate's timeout (RTO) expired
  // before the QP's IBA timeout did (no retry spent).
  std::uint64_t rto_expiries = 0;
  // Tail-loss probes: the last request sent again, asking for an ACK, when
  // nothing was answered for about two round trips (no retry spent).
  std::uint64_t tail_probes = 0;
  std::uint64_t rnr_naks_sent = 0;
  std::uint64_t rnr_naks_received = 0;
  std::uint64_t rnr_retries = 0;         // resends after an RNR NAK
  std::uint64_t seq_naks_sent = 0;       // NAK PSN sequence error
  std::uint64_t seq_naks_received = 0;
  std::uint64_t duplicate_requests = 0;  // requests with a PSN already executed (acknowledged again)
  // Congestion control (DCQCN, hca/dcqcn.h): CNPs sent as the notification
  // point (for requests that arrived marked CE) and received as the
  // reaction point; the rate's cuts (a CNP's or the delay signal's) and
  // climbs; sends that waited for the pacer.
  std::uint64_t cnps_sent = 0;
  std::uint64_t cnps_received = 0;
  std::uint64_t rate_decreases = 0;
  std::uint64_t rate_increases = 0;
  std::uint64_t paced_waits = 0;
  // A gauge, not a count: the lowest rate (Mb/s) a QP is held to now; 0
  // when none is. += keeps the lower, -= the later.
  std::uint64_t lowest_rate_mbps = 0;
  std::array<std::uint64_t, kNumDropReasons> dropped{};
  std::array<std::uint64_t, kNumNakCauses> naks_sent{};     // class C NAKs sent, by cause
  std::array<std::uint64_t, kNumNakCodes> naks_received{};  // class C NAKs received, by code

  std::uint64_t& naks_sent_for(NakCause c) { return naks_sent[static_cast<std::size_t>(c)]; }
  std::uint64_t naks_sent_for(NakCause c) const { return naks_sent[static_cast<std::size_t>(c)]; }
  std::uint64_t& naks_received_for(NakCode c) { return naks_received[static_cast<std::size_t>(c)]; }
  std::uint64_t naks_received_for(NakCode c) const { return naks_received[static_cast<std::size_t>(c)]; }

  std::uint64_t& dropped_for(DropReason r) { return dropped[static_cast<std::size_t>(r)]; }
  std::uint64_t dropped_for(DropReason r) const { return dropped[static_cast<std::size_t>(r)]; }
  std::uint64_t dropped_total() const;
  TransportCounters& operator+=(const TransportCounters& o);
  // What was counted since `earlier` (a snapshot of the same counters).
  TransportCounters& operator-=(const TransportCounters& earlier);
};

}  // namespace srdma
