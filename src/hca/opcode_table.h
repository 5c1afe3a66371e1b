// The transport's one opcode table (IBA vol. 1 9.2, table 38): a row per
// 8-bit BTH opcode, transport bits included (RC 000, UC 001, UD 011, XRC
// 101), with
// the headers the packet carries, its header length, its place in a message
// and the kind of message it belongs to. Every predicate the roles ask of an
// opcode, every header length, every trace name and every step of building
// and parsing a frame (roce_frame.cc) is read from here: a new opcode is one
// row plus its handler.
//
// The roles keep an opcode as `Opcode` (its low five bits, RC's values) with
// the transport beside it (Packet::transport): the operation means the same
// on every transport, and the RC row answers for it. wire_opcode() joins the
// two; opcode_row() of the result is the row the wire's byte names.
//
// Header-only and constexpr: the libFuzzer build compiles roce_frame.cc with
// nothing else.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "srdma/qp_attr.h"

namespace srdma::hca {

// BTH OpCode, low five bits (IBA 9.2, table 38; RC's values).
enum class Opcode : std::uint8_t {
  kSendFirst = 0x00,
  kSendMiddle = 0x01,
  kSendLast = 0x02,
  kSendLastImm = 0x03,
  kSendOnly = 0x04,
  kSendOnlyImm = 0x05,
  kWriteFirst = 0x06,
  kWriteMiddle = 0x07,
  kWriteLast = 0x08,
  kWriteLastImm = 0x09,
  kWriteOnly = 0x0a,
  kWriteOnlyImm = 0x0b,
  kReadRequest = 0x0c,
  kReadResponseFirst = 0x0d,
  kReadResponseMiddle = 0x0e,
  kReadResponseLast = 0x0f,
  kReadResponseOnly = 0x10,
  kAck = 0x11,
  kAtomicAck = 0x12,
  kCmpSwap = 0x13,
  kFetchAdd = 0x14,
  kSendLastInv = 0x16,
  kSendOnlyInv = 0x17,
  kAtomicWrite = 0x1d,  // IBA 1.5: RETH and 8 bytes, stored as one
  // RoCEv2's Congestion Notification Packet (IBA A17.9.3): the one value
  // that is a whole wire byte, transport bits (100) included. It belongs
  // to no QP transport: BTH, 16 reserved bytes, the ICRC.
  kCnp = 0x81,
};

// The message an opcode belongs to. A multi-packet message continues only
// with packets of its own kind (IBA 9.8.3).
enum class MsgKind : std::uint8_t {
  kNone,  // not a valid opcode
  kSend,
  kWrite,
  kReadRequest,
  kReadResponse,
  kAck,
  kAtomicAck,
  kAtomic,  // COMPARE SWAP, FETCH ADD
  kCnp,     // a congestion notification (dcqcn.h)
};

// Row flags.
enum OpFlag : std::uint16_t {
  kOpRequest = 1u << 0,   // requester to responder (else a response)
  kOpStarts = 1u << 1,    // FIRST or ONLY
  kOpEnds = 1u << 2,      // LAST or ONLY
  kOpPayload = 1u << 3,   // may carry payload
  kOpReth = 1u << 4,      // extended headers, in the order IBA puts them:
  kOpAtomicEth = 1u << 5, //   [DETH], RETH, AtomicETH, AETH, AtomicAckETH,
  kOpAeth = 1u << 6,      //   ImmDt, IETH
  kOpAtomicAckEth = 1u << 7,
  kOpImmDt = 1u << 8,
  kOpIeth = 1u << 9,
  kOpDeth = 1u << 10,
  kOpAtomicWrite = 1u << 11,  // an RDMA WRITE of 8 aligned bytes the responder stores at once (RC, XRC)
  kOpXrcEth = 1u << 12,       // XRCETH (XRC requests): right after the BTH, before RETH/AtomicETH
  kOpCnpReserved = 1u << 13,  // a CNP's 16 reserved bytes after the BTH
};

// Header sizes (IBA 9.3).
constexpr std::uint8_t kBthBytes = 12;
constexpr std::uint8_t kRethBytes = 16;
constexpr std::uint8_t kAtomicEthBytes = 28;
constexpr std::uint8_t kAethBytes = 4;
constexpr std::uint8_t kAtomicAckEthBytes = 8;
constexpr std::uint8_t kImmDtBytes = 4;
constexpr std::uint8_t kIethBytes = 4;
constexpr std::uint8_t kDethBytes = 8;
constexpr std::uint8_t kXrcEthBytes = 4;  // reserved byte, 24-bit XRC SRQ number (IBA A14.4.1)
constexpr std::uint8_t kCnpReservedBytes = 16;

// The transport bits of the BTH opcode (its top three).
constexpr std::uint8_t kRcOpcodeBits = 0x00;
constexpr std::uint8_t kUcOpcodeBits = 0x20;
constexpr std::uint8_t kUdOpcodeBits = 0x60;
constexpr std::uint8_t kXrcOpcodeBits = 0xa0;
constexpr std::uint8_t transport_bits(QpType t) {
  return t == QpType::kUd ? kUdOpcodeBits
         : t == QpType::kUc ? kUcOpcodeBits
         : is_xrc(t)        ? kXrcOpcodeBits
                            : kRcOpcodeBits;
}
constexpr std::uint8_t kCnpOpcodeBits = 0x80;
constexpr std::uint8_t wire_opcode(QpType t, Opcode op) {
  if (op == Opcode::kCnp) return static_cast<std::uint8_t>(op);  // its own transport bits
  return static_cast<std::uint8_t>(transport_bits(t) | static_cast<std::uint8_t>(op));
}
// The operation a wire byte names: its low five bits, or the CNP.
constexpr Opcode opcode_of_wire(std::uint8_t wire) {
  return (wire & 0xe0) == kCnpOpcodeBits ? static_cast<Opcode>(wire) : static_cast<Opcode>(wire & 0x1f);
}

struct OpcodeRow {
  std::string_view name;  // IBA's, as Wireshark shows it ("" for a value no transport defines)
  MsgKind kind = MsgKind::kNone;
  std::uint16_t flags = 0;
  std::uint8_t header_bytes = 0;  // BTH and the extended headers
  // The MIDDLE opcode of this message (for FIRST and MIDDLE rows): what a
  // train's inner packets carry.
  Opcode middle = Opcode::kSendMiddle;
  constexpr bool valid() const { return kind != MsgKind::kNone; }
  constexpr bool has(OpFlag f) const { return (flags & f) != 0; }
};

namespace opcode_table_detail {

constexpr std::uint8_t headers_of(std::uint16_t f) {
  return static_cast<std::uint8_t>(kBthBytes + ((f & kOpDeth) ? kDethBytes : 0) + ((f & kOpXrcEth) ? kXrcEthBytes : 0) +
                                   ((f & kOpReth) ? kRethBytes : 0) +
                                   ((f & kOpAtomicEth) ? kAtomicEthBytes : 0) + ((f & kOpAeth) ? kAethBytes : 0) +
                                   ((f & kOpAtomicAckEth) ? kAtomicAckEthBytes : 0) +
                                   ((f & kOpImmDt) ? kImmDtBytes : 0) + ((f & kOpIeth) ? kIethBytes : 0) +
                                   ((f & kOpCnpReserved) ? kCnpReservedBytes : 0));
}

struct Def {
  Opcode op;
  std::string_view name;  // without the transport
  MsgKind kind;
  std::uint16_t flags;
  Opcode middle = Opcode::kSendMiddle;
};

constexpr std::uint16_t kFirst = kOpStarts, kMiddle = 0, kLast = kOpEnds, kOnly = kOpStarts | kOpEnds;
constexpr std::uint16_t kReq = kOpRequest, kData = kOpPayload;

// RC's rows (IBA table 38, 000xxxxx). UC takes the SEND and WRITE rows
// (001xxxxx), UD the SEND ONLY rows with a DETH (011xxxxx), XRC every row
// (101xxxxx), its requests with an XRCETH.
constexpr Def kRcDefs[] = {
    {Opcode::kSendFirst, "SEND FIRST", MsgKind::kSend, kReq | kFirst | kData, Opcode::kSendMiddle},
    {Opcode::kSendMiddle, "SEND MIDDLE", MsgKind::kSend, kReq | kMiddle | kData, Opcode::kSendMiddle},
    {Opcode::kSendLast, "SEND LAST", MsgKind::kSend, kReq | kLast | kData},
    {Opcode::kSendLastImm, "SEND LAST with Immediate", MsgKind::kSend, kReq | kLast | kData | kOpImmDt},
    {Opcode::kSendOnly, "SEND ONLY", MsgKind::kSend, kReq | kOnly | kData},
    {Opcode::kSendOnlyImm, "SEND ONLY with Immediate", MsgKind::kSend, kReq | kOnly | kData | kOpImmDt},
    {Opcode::kWriteFirst, "RDMA WRITE FIRST", MsgKind::kWrite, kReq | kFirst | kData | kOpReth, Opcode::kWriteMiddle},
    {Opcode::kWriteMiddle, "RDMA WRITE MIDDLE", MsgKind::kWrite, kReq | kMiddle | kData, Opcode::kWriteMiddle},
    {Opcode::kWriteLast, "RDMA WRITE LAST", MsgKind::kWrite, kReq | kLast | kData},
    {Opcode::kWriteLastImm, "RDMA WRITE LAST with Immediate", MsgKind::kWrite, kReq | kLast | kData | kOpImmDt},
    {Opcode::kWriteOnly, "RDMA WRITE ONLY", MsgKind::kWrite, kReq | kOnly | kData | kOpReth},
    {Opcode::kWriteOnlyImm, "RDMA WRITE ONLY with Immediate", MsgKind::kWrite,
     kReq | kOnly | kData | kOpReth | kOpImmDt},
    {Opcode::kReadRequest, "RDMA READ Request", MsgKind::kReadRequest, kReq | kOnly | kOpReth},
    {Opcode::kReadResponseFirst, "RDMA READ response FIRST", MsgKind::kReadResponse, kFirst | kData | kOpAeth,
     Opcode::kReadResponseMiddle},
    {Opcode::kReadResponseMiddle, "RDMA READ response MIDDLE", MsgKind::kReadResponse, kMiddle | kData,
     Opcode::kReadResponseMiddle},
    {Opcode::kReadResponseLast, "RDMA READ response LAST", MsgKind::kReadResponse, kLast | kData | kOpAeth},
    {Opcode::kReadResponseOnly, "RDMA READ response ONLY", MsgKind::kReadResponse, kOnly | kData | kOpAeth},
    {Opcode::kAck, "Acknowledge", MsgKind::kAck, kOnly | kOpAeth},
    {Opcode::kAtomicAck, "ATOMIC Acknowledge", MsgKind::kAtomicAck, kOnly | kOpAeth | kOpAtomicAckEth},
    {Opcode::kCmpSwap, "CmpSwap", MsgKind::kAtomic, kReq | kOnly | kOpAtomicEth},
    {Opcode::kFetchAdd, "FetchAdd", MsgKind::kAtomic, kReq | kOnly | kOpAtomicEth},
    {Opcode::kSendLastInv, "SEND LAST with Invalidate", MsgKind::kSend, kReq | kLast | kData | kOpIeth},
    {Opcode::kSendOnlyInv, "SEND ONLY with Invalidate", MsgKind::kSend, kReq | kOnly | kData | kOpIeth},
    {Opcode::kAtomicWrite, "ATOMIC WRITE", MsgKind::kWrite, kReq | kOnly | kData | kOpReth | kOpAtomicWrite},
};

constexpr std::array<OpcodeRow, 256> make_table() {
  std::array<OpcodeRow, 256> t{};
  for (const Def& d : kRcDefs) {
    const std::uint8_t v = static_cast<std::uint8_t>(d.op);
    t[kRcOpcodeBits | v] = {d.name, d.kind, d.flags, headers_of(d.flags), d.middle};
    if (d.kind == MsgKind::kSend || d.kind == MsgKind::kWrite) {
      if (!(d.flags & (kOpIeth | kOpAtomicWrite)))  // UC has no SEND with Invalidate, no ATOMIC WRITE
        t[kUcOpcodeBits | v] = {d.name, d.kind, d.flags, headers_of(d.flags), d.middle};
      if (d.op == Opcode::kSendOnly || d.op == Opcode::kSendOnlyImm)
        t[kUdOpcodeBits | v] = {d.name, d.kind, static_cast<std::uint16_t>(d.flags | kOpDeth),
                                headers_of(d.flags | kOpDeth), d.middle};
    }
    const std::uint16_t xrc = static_cast<std::uint16_t>(d.flags | ((d.flags & kOpRequest) ? kOpXrcEth : 0));
    t[kXrcOpcodeBits | v] = {d.name, d.kind, xrc, headers_of(xrc), d.middle};
  }
  constexpr std::uint16_t cnp = kOnly | kOpCnpReserved;
  t[static_cast<std::uint8_t>(Opcode::kCnp)] = {"CNP", MsgKind::kCnp, cnp, headers_of(cnp)};
  return t;
}

}  // namespace opcode_table_detail

inline constexpr std::array<OpcodeRow, 256> kOpcodeTable = opcode_table_detail::make_table();

// The row of a wire byte (transport bits included).
constexpr const OpcodeRow& opcode_row(std::uint8_t wire) { return kOpcodeTable[wire]; }
// The row of an operation on a transport.
constexpr const OpcodeRow& opcode_row(QpType t, Opcode op) { return kOpcodeTable[wire_opcode(t, op)]; }
// The row of an operation: RC's, which every transport's agrees with.
constexpr const OpcodeRow& opcode_row(Opcode op) { return kOpcodeTable[static_cast<std::uint8_t>(op)]; }

// The transport a valid wire byte belongs to: the type of QP it is for.
// XRC's two halves share the transport bits: a request goes to a TGT QP, a
// response to an INI QP.
constexpr QpType transport_of_wire(std::uint8_t wire) {
  switch (wire & 0xe0) {
    case kUdOpcodeBits: return QpType::kUd;
    case kUcOpcodeBits: return QpType::kUc;
    case kXrcOpcodeBits: return (kOpcodeTable[wire].flags & kOpRequest) ? QpType::kXrcTgt : QpType::kXrcIni;
    default: return QpType::kRc;
  }
}
// The transport a QP of type `t` puts on what it sends: the type of QP it
// goes to (an INI's requests are for a TGT, a TGT's answers for an INI).
constexpr QpType peer_transport(QpType t) {
  return t == QpType::kXrcIni ? QpType::kXrcTgt : t == QpType::kXrcTgt ? QpType::kXrcIni : t;
}

// The trace name, IBA's ("RDMA WRITE ONLY").
constexpr std::string_view opcode_str(Opcode op) {
  const OpcodeRow& r = opcode_row(op);
  return r.valid() ? r.name : std::string_view("UNKNOWN");
}

// The predicates the roles ask, all read from the table.
constexpr bool is_response(Opcode op) { return opcode_row(op).valid() && !opcode_row(op).has(kOpRequest); }
constexpr bool is_request(Opcode op) { return opcode_row(op).has(kOpRequest); }
constexpr bool is_send(Opcode op) { return opcode_row(op).kind == MsgKind::kSend; }
constexpr bool is_write(Opcode op) { return opcode_row(op).kind == MsgKind::kWrite; }
constexpr bool is_atomic(Opcode op) { return opcode_row(op).kind == MsgKind::kAtomic; }
constexpr bool is_read_response(Opcode op) { return opcode_row(op).kind == MsgKind::kReadResponse; }
// Place in its message (IBA 9.2: FIRST, MIDDLE, LAST, ONLY); a READ
// request, an ACK and an atomic are one-packet messages (ONLY).
constexpr bool starts_message(Opcode op) { return opcode_row(op).has(kOpStarts); }
constexpr bool ends_message(Opcode op) { return opcode_row(op).has(kOpEnds); }
constexpr bool has_reth(Opcode op) { return opcode_row(op).has(kOpReth); }
constexpr bool has_imm(Opcode op) { return opcode_row(op).has(kOpImmDt); }
constexpr bool is_atomic_write(Opcode op) { return opcode_row(op).has(kOpAtomicWrite); }
constexpr bool has_ieth(Opcode op) { return opcode_row(op).has(kOpIeth); }
constexpr bool has_aeth(Opcode op) { return opcode_row(op).has(kOpAeth); }
static_assert(opcode_row(QpType::kXrcIni, Opcode::kCmpSwap).header_bytes == kBthBytes + kXrcEthBytes + kAtomicEthBytes);
static_assert(!opcode_row(QpType::kXrcTgt, Opcode::kAck).has(kOpXrcEth));
constexpr bool has_payload(Opcode op) { return opcode_row(op).has(kOpPayload); }
// IBA 9.8.3: the packet that may come next. Inside a multi-packet message of
// kind `in_message`, only its MIDDLE or LAST; outside one (kNone), only a
// request that starts a message.
constexpr bool continues_sequence(MsgKind in_message, Opcode op) {
  const OpcodeRow& r = opcode_row(op);
  if (in_message == MsgKind::kNone) return r.has(kOpStarts) && r.has(kOpRequest);
  return r.kind == in_message && !r.has(kOpStarts);
}

// The longest set of headers: BTH, XRCETH and AtomicETH.
constexpr std::uint8_t max_header_bytes() {
  std::uint8_t m = 0;
  for (const OpcodeRow& r : kOpcodeTable) m = r.header_bytes > m ? r.header_bytes : m;
  return m;
}

}  // namespace srdma::hca
