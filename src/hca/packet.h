// The unit the transport roles exchange: one RC packet, exactly as the wire
// carries it (IBA vol. 1 ch. 9): the BTH opcode, one PSN per packet, at most
// a path MTU of payload, and the fields of the extended headers its opcode
// carries (RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH). A link across
// processes only adds framing (and the ICRC) around it.
//
// The payload travels by reference, as a list of memory pieces the sender
// has already translated (and so checked). The in-process link hands the
// list over as it is; a link that keeps a packet past send() (one that
// delays or duplicates it) copies the bytes into `owned` first, and a link
// across processes or hosts copies them into its frames.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "hca/opcode_table.h"
#include "hca/piece_list.h"
#include "srdma/qp_attr.h"

namespace srdma::hca {

// Opcodes and what each one carries: opcode_table.h.

// PSNs are 24 bits and wrap (IBA 9.7.1).
constexpr std::uint32_t kPsnMask = 0xffffff;
constexpr std::uint32_t psn_add(std::uint32_t psn, std::uint32_t n) { return (psn + n) & kPsnMask; }
// Signed distance b - a in the 24-bit space: negative when b precedes a.
constexpr std::int32_t psn_diff(std::uint32_t b, std::uint32_t a) {
  return static_cast<std::int32_t>(((b - a) & kPsnMask) << 8) >> 8;
}
constexpr bool psn_before(std::uint32_t a, std::uint32_t b) { return psn_diff(b, a) > 0; }

// Packets a message of `bytes` takes at `mtu`: at least one (a zero-length
// message is one empty packet; a READ of it takes one PSN).
constexpr std::uint32_t packets_for(std::uint64_t bytes, std::uint32_t mtu) {
  return bytes == 0 ? 1 : static_cast<std::uint32_t>((bytes + mtu - 1) / mtu);
}

// AETH syndrome (IBA 9.7.5.2.5): an ACK, an RNR NAK or one of the NAK codes.
enum class Syndrome : std::uint8_t {
  kAck,
  kRnrNak,
  kPsnSequenceError,
  kInvalidRequest,
  kRemoteAccessError,
  kRemoteOperationalError,
  kInvalidRdRequest,
};

// An RC BTH does not carry the source QPN: a link across processes sets
// src_qpn to this, and the receiving engine fills in the QP's peer (the
// source check then rests on the address alone, IBA 9.6.1.5).
constexpr std::uint32_t kSrcQpnFromPath = 0xffffffff;

// The UDP source port of a QP's RoCEv2 packets: 0xC000 | 14 bits of a
// hash of its QPN, ECMP entropy as rxe chooses it (a multiplicative hash
// keeps neighbouring QPNs apart).
constexpr std::uint16_t entropy_port(std::uint32_t qpn) {
  return static_cast<std::uint16_t>(0xC000 | (((qpn * 0x61C88647u) >> 18) & 0x3fff));
}

// A UD receive buffer starts with this many bytes of GRH area (wc.h WC_GRH).
constexpr std::uint32_t kGrhBytes = 40;

struct Packet {
  // The transport (the BTH opcode's top three bits: RC 000, UC 001, UD
  // 011, XRC 101) and the operation (`op`, its low five bits, with RC's
  // values). For XRC, the type of QP the packet is for: kXrcTgt on a
  // request, kXrcIni on a response (transport_of_wire).
  QpType transport = QpType::kRc;
  Opcode op = Opcode::kAck;
  std::uint64_t src_addr = 0;  // sending device
  std::uint64_t dst_addr = 0;  // receiving device
  std::uint32_t src_qpn = 0;
  std::uint32_t dst_qpn = 0;
  std::uint32_t psn = 0;
  bool solicited = false;       // BTH SE
  bool ack_req = false;         // BTH A: the responder must acknowledge
  std::uint16_t udp_sport = 0;  // RoCEv2: the sending QP's UDP source port (entropy)
  // The bytes of this packet's ICRC would not match (the impairing link's
  // corruption; the UDP link sets it when the check fails): dropped on
  // arrival, before any field is read.
  bool corrupted = false;
  std::uint64_t va = 0;         // RETH / AtomicETH
  std::uint32_t rkey = 0;
  std::uint32_t dma_length = 0;  // RETH DMA length: the whole message's
  std::uint32_t imm = 0;        // ImmDt, or IETH's rkey
  std::uint64_t compare_add = 0;  // AtomicETH
  std::uint64_t swap = 0;
  std::uint64_t atomic_orig = 0;  // AtomicAckETH
  std::uint32_t qkey = 0;         // DETH (UD; src_qpn is its source QP)
  std::uint32_t xrc_srqn = 0;     // XRCETH (an XRC request): the XRC SRQ it is for (24 bits)
  // UD: the GRH's (on RoCEv2 the IPv4 header's) hop limit and traffic
  // class: the sender's AH on the in-process link, what arrived on UDP.
  std::uint8_t hop_limit = 64;
  std::uint8_t traffic_class = 0;
  Syndrome syndrome = Syndrome::kAck;  // AETH
  std::uint8_t rnr_timer = 0;          // AETH of an RNR NAK
  std::uint32_t msn = 0;               // AETH: messages completed by the responder (24 bits)
  std::uint32_t payload_length = 0;    // bytes in `payload`
  PieceList payload;                   // by reference, see above
  // The bytes `payload` points into when a link made the packet its own
  // (held back, duplicated, framed): shared by every copy of the packet, so
  // a receiver that keeps one (a completer's inbox) keeps them alive.
  std::shared_ptr<const std::vector<std::byte>> owned;
  // A train: `count` consecutive packets of one message handed over at once
  // by a link that carries trains (the in-process link; see unroll()).
  // `op` is the first packet's opcode, `last_op` the last one's; the
  // headers are those of the packets that carry them (RETH of the first,
  // ImmDt/IETH and SE of the last).
  std::uint32_t count = 1;
  Opcode last_op = Opcode::kAck;
};

inline Opcode last_opcode(const Packet& p) { return p.count > 1 ? p.last_op : p.op; }

// A plain RC ACK (AETH syndrome ACK, one PSN, no payload) by its fields:
// the responder's usual answer handed to a link without building a Packet
// (Link::send_ack), and what a QP keeps of one for its send side.
struct Ack {
  // The header fields the completer's states read, as a Packet names them
  // (the same states run for both: Completer::run).
  static constexpr QpType transport = QpType::kRc;
  static constexpr Opcode op = Opcode::kAck;
  static constexpr Syndrome syndrome = Syndrome::kAck;
  static constexpr std::uint32_t count = 1;
  std::uint64_t src_addr = 0;
  std::uint64_t dst_addr = 0;
  std::uint32_t src_qpn = 0;
  std::uint32_t dst_qpn = 0;
  std::uint32_t psn = 0;
  std::uint32_t msn = 0;
  std::uint16_t udp_sport = 0;

  static bool is(const Packet& p) {
    return p.transport == QpType::kRc && p.op == Opcode::kAck && p.syndrome == Syndrome::kAck && p.count == 1 &&
           p.payload_length == 0 && p.payload.empty() && !p.owned && !p.corrupted;
  }
  static Ack of(const Packet& p) { return Ack{p.src_addr, p.dst_addr, p.src_qpn, p.dst_qpn, p.psn, p.msn, p.udp_sport}; }
  Packet packet() const {
    Packet p;
    p.op = Opcode::kAck;
    p.syndrome = Syndrome::kAck;
    p.src_addr = src_addr;
    p.dst_addr = dst_addr;
    p.src_qpn = src_qpn;
    p.dst_qpn = dst_qpn;
    p.psn = psn;
    p.msn = msn;
    p.udp_sport = udp_sport;
    return p;
  }
};
inline std::uint32_t last_psn_of(const Packet& p) { return psn_add(p.psn, p.count - 1); }
inline std::uint32_t last_psn_of(const Ack& a) { return a.psn; }

// The AckReq bit of a train's packets: the last one's is the train's
// `ack_req`; one before it asks when its PSN is the last of a group of
// kAckEveryPsns (the requester's policy, see requester.cc).
constexpr std::uint32_t kAckEveryPsns = 16;
constexpr bool asks_ack_inside(std::uint32_t psn, std::uint32_t count) {
  return count >= 2 && (psn | (kAckEveryPsns - 1)) - psn <= count - 2;
}

// The path MTU a train was cut at: every packet but the last carries it, a
// power of two, the only one with (count - 1) * mtu < payload <= count * mtu
// (a caller that did not build the train checks that it is).
constexpr std::uint64_t train_mtu_of(std::uint64_t payload_length, std::uint32_t count) {
  return std::bit_ceil((payload_length + count - 1) / count);
}
inline std::uint32_t train_mtu(const Packet& train) {
  if (train.count <= 1) return 0;
  return static_cast<std::uint32_t>(train_mtu_of(train.payload_length, train.count));
}

// Calls f(Packet&) for each piece of a train, in order: runs of at most
// `max_count` packets, each a train of its own (a single packet when one),
// exactly as those packets would be sent one by one: every packet but the
// last carries `mtu` bytes, the first run the RETH, the last one the
// ImmDt/IETH, SE and the train's AckReq. A run that does not end the train
// asks for an ACK when its last PSN ends a group of kAckEveryPsns.
template <class F>
void split_train(const Packet& train, std::uint32_t mtu, std::uint32_t max_count, F&& f) {
  if (train.count <= 1) {
    Packet p = train;
    f(p);
    return;
  }
  const Opcode middle = opcode_row(train.op).middle;
  PieceCursor cursor(train.payload);
  for (std::uint32_t i = 0; i < train.count;) {
    const std::uint32_t k = std::min(max_count, train.count - i);
    const bool first = i == 0, last = i + k == train.count;
    Packet p;
    p.transport = train.transport;
    p.owned = train.owned;
    p.src_addr = train.src_addr;
    p.dst_addr = train.dst_addr;
    p.src_qpn = train.src_qpn;
    p.dst_qpn = train.dst_qpn;
    p.udp_sport = train.udp_sport;
    p.xrc_srqn = train.xrc_srqn;  // every XRC request packet carries it
    p.hop_limit = train.hop_limit;  // the IP header's, as every packet's
    p.traffic_class = train.traffic_class;
    p.psn = psn_add(train.psn, i);
    p.op = first ? train.op : (last && k == 1) ? train.last_op : middle;
    if (k > 1) {
      p.count = k;
      p.last_op = last ? train.last_op : middle;
    }
    if (first) {
      p.va = train.va;
      p.rkey = train.rkey;
      p.dma_length = train.dma_length;
    }
    if (last) {
      p.imm = train.imm;
      p.solicited = train.solicited;
      p.ack_req = train.ack_req;
    } else {
      p.ack_req = (psn_add(p.psn, k - 1) & (kAckEveryPsns - 1)) == kAckEveryPsns - 1;
    }
    if (has_aeth(p.op)) {
      p.syndrome = train.syndrome;
      p.msn = train.msn;
    }
    const std::uint64_t done = std::uint64_t{i} * mtu;
    const std::uint32_t left = train.payload_length > done ? static_cast<std::uint32_t>(train.payload_length - done) : 0;
    p.payload_length = last ? left : static_cast<std::uint32_t>(std::min<std::uint64_t>(std::uint64_t{k} * mtu, left));
    cursor.take(p.payload_length, p.payload);
    f(p);
    i += k;
  }
}

// Calls f(Packet&) for each packet of a train, in order, exactly as the
// wire carries them.
template <class F>
void unroll(const Packet& train, std::uint32_t mtu, F&& f) {
  split_train(train, mtu, 1, std::forward<F>(f));
}

}  // namespace srdma::hca
