#include "hca/ring_train.h"

#include <algorithm>
#include <cstring>

namespace srdma::hca {

namespace {

constexpr std::uint8_t kTrainSolicited = 1;
constexpr std::uint8_t kTrainAckReq = 2;

void put32(std::byte* at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<std::byte>(v >> (8 * i));
}
std::uint32_t get32(const std::byte* at) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | std::to_integer<std::uint32_t>(at[i]);
  return v;
}

// A train is the packets of one message after its first: a FIRST or MIDDLE
// with payload, then MIDDLEs, then that message's MIDDLE or one of its
// LASTs, all of one transport.
bool one_message(std::uint8_t first_wire, std::uint8_t last_wire) {
  if ((first_wire & 0xe0) != (last_wire & 0xe0)) return false;
  const OpcodeRow& a = opcode_row(first_wire);
  const OpcodeRow& b = opcode_row(last_wire);
  if (!a.valid() || !b.valid() || !a.has(kOpPayload) || a.has(kOpEnds)) return false;
  if (b.kind != a.kind || !b.has(kOpPayload) || b.has(kOpStarts)) return false;
  return opcode_of_wire(last_wire) == a.middle || b.has(kOpEnds);
}

}  // namespace

TrainPrefix encode_train(const Packet& train, std::uint16_t pkey) {
  // The first packet's headers, without its payload.
  Packet h;
  h.transport = train.transport;
  h.op = train.op;
  h.dst_qpn = train.dst_qpn;
  h.psn = train.psn;
  h.va = train.va;
  h.rkey = train.rkey;
  h.dma_length = train.dma_length;
  h.xrc_srqn = train.xrc_srqn;
  h.syndrome = train.syndrome;
  h.msn = train.msn;
  const FrameHeaders fh = build_headers(h, pkey);
  TrainPrefix out;
  std::byte* b = out.bytes.data();
  const std::uint16_t frame_len = static_cast<std::uint16_t>(fh.length + kIcrcBytes);
  put32(b, train.count);
  put32(b + 4, train.payload_length);
  put32(b + 8, train.imm);
  b[12] = static_cast<std::byte>(wire_opcode(train.transport, train.last_op));
  b[13] = static_cast<std::byte>((train.solicited ? kTrainSolicited : 0) | (train.ack_req ? kTrainAckReq : 0));
  b[14] = static_cast<std::byte>(frame_len & 0xff);
  b[15] = static_cast<std::byte>(frame_len >> 8);
  std::memcpy(b + kTrainHeaderBytes, fh.bytes.data(), fh.length);  // the ICRC after it stays zero
  out.length = kTrainHeaderBytes + frame_len;
  return out;
}

FrameError decode_train(std::span<const std::byte> record, std::span<std::byte, kMaxTrainPrefix> scratch,
                        std::uint32_t max_mtu, ParsedFrame& out) {
  out = ParsedFrame{};
  if (record.size() < kTrainHeaderBytes + kBthBytes + kIcrcBytes) return FrameError::kTooShort;
  const std::size_t prefix = std::min(record.size(), kMaxTrainPrefix);
  std::memcpy(scratch.data(), record.data(), prefix);  // read once, here
  const std::byte* b = scratch.data();
  const std::uint32_t count = get32(b);
  const std::uint32_t length = get32(b + 4);
  const std::uint32_t imm = get32(b + 8);
  const std::uint8_t last_wire = std::to_integer<std::uint8_t>(b[12]);
  const std::uint8_t flags = std::to_integer<std::uint8_t>(b[13]);
  const std::size_t frame_len = std::to_integer<std::size_t>(b[14]) | std::to_integer<std::size_t>(b[15]) << 8;
  if (frame_len < kBthBytes + kIcrcBytes || frame_len > kMaxHeaderBytes + kIcrcBytes ||
      record.size() != kTrainHeaderBytes + frame_len + std::uint64_t{length})
    return FrameError::kBadLength;
  // At least two packets, every one but the last a path MTU (a power of two
  // in [256, max_mtu]) of payload: the count is bounded by the bytes.
  if (count < 2 || length == 0) return FrameError::kBadLength;
  const std::uint64_t mtu = train_mtu_of(length, count);
  if (mtu < kMinPathMtu || mtu > max_mtu || (count - 1) * mtu >= length || count * mtu < length)
    return FrameError::kBadLength;
  const FrameError e = parse_frame(std::span<const std::byte>(b + kTrainHeaderBytes, frame_len), IpUdpFields{},
                                   false, out);
  if (e != FrameError::kNone) return e;
  const std::uint8_t first_wire = std::to_integer<std::uint8_t>(b[kTrainHeaderBytes]);
  Packet& p = out.pkt;
  if (p.payload_length != 0 || p.transport == QpType::kUd || !one_message(first_wire, last_wire))
    return FrameError::kBadOpcode;
  p.count = count;
  p.last_op = opcode_of_wire(last_wire);
  if (has_imm(p.last_op) || has_ieth(p.last_op)) p.imm = imm;
  p.solicited = (flags & kTrainSolicited) != 0;
  p.ack_req = (flags & kTrainAckReq) != 0;
  p.payload_length = length;
  p.payload.push_back(MemPiece{const_cast<std::byte*>(record.data() + kTrainHeaderBytes + frame_len), length});
  return FrameError::kNone;
}

}  // namespace srdma::hca
