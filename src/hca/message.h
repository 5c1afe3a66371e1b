// The unit the transport roles exchange: an RC request or response, with the
// fields of the IBA headers that matter here (BTH, RETH, AtomicETH, AETH,
// ImmDt, IETH). One message per work request: the in-process link has no MTU.
//
// The payload travels by reference, as a list of memory pieces the sender
// has already translated (and so checked). The in-process link hands the
// list over as it is; a link across processes or hosts copies the bytes
// into its frames and presents them to the receiver as one piece.
#pragma once

#include <cstdint>
#include "hca/piece_list.h"

namespace srdma::hca {

enum class MsgOp : std::uint8_t {
  // Requests (requester -> responder)
  kSend,
  kSendWithImm,
  kSendWithInv,
  kWrite,
  kWriteWithImm,
  kReadRequest,
  kCmpSwap,
  kFetchAdd,
  // Responses (responder -> completer)
  kAck,
  kNak,
  kReadResponse,
  kAtomicAck,
};

constexpr bool is_request(MsgOp op) { return op <= MsgOp::kFetchAdd; }

// AETH NAK codes (IBA 9.7.5.2.5) and the RNR NAK.
enum class NakCode : std::uint8_t {
  kPsnSequenceError,
  kInvalidRequest,
  kRemoteAccessError,
  kRemoteOperationalError,
  kRnr,
};

struct Message {
  MsgOp op = MsgOp::kAck;
  std::uint64_t src_addr = 0;  // sending device
  std::uint64_t dst_addr = 0;  // receiving device
  std::uint32_t src_qpn = 0;
  std::uint32_t dst_qpn = 0;
  std::uint32_t psn = 0;
  bool solicited = false;
  bool ack_req = true;          // BTH A bit: the responder must acknowledge
  std::uint64_t va = 0;         // RETH / AtomicETH
  std::uint32_t rkey = 0;
  std::uint32_t length = 0;     // DMA length
  std::uint32_t imm = 0;        // ImmDt, or IETH's rkey for kSendWithInv
  std::uint64_t compare_add = 0;
  std::uint64_t swap = 0;
  std::uint64_t atomic_orig = 0;  // AtomicAckETH
  NakCode nak = NakCode::kPsnSequenceError;
  std::uint8_t rnr_timer = 0;     // with NakCode::kRnr
  PieceList payload;              // by reference, see above
};

}  // namespace srdma::hca
