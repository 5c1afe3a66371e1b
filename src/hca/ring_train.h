// A train (packet.h) as one record of a same-host ring (hca/same_host.h):
// a message crosses the ring whole, as it crosses the in-process link,
// instead of one path MTU at a time through the transport and the ring.
// Only rings carry this form; a train for a peer without one is unrolled
// into frames for the wire.
//
// The record's frame (ShmRecord::frame, flagged kShmTrain):
//   a 16-byte train header: count (u32 LE), payload length (u32), ImmDt or
//     IETH (u32), the last packet's opcode (u8, its wire byte), flags (u8:
//     SE, AckReq), the length of the frame that follows (u16);
//   the first packet's frame without its payload: BTH and extended headers
//     exactly as on the wire, PadCnt 0, a zero ICRC;
//   the train's payload.
//
// The receiver trusts none of it (decode_train): the header frame is
// parsed as a datagram's, the count is bounded by the payload (every packet
// but the last carries a path MTU of at least 256 bytes), the opcodes must
// be one message's, and the lengths must add up to the record exactly.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "hca/packet.h"
#include "hca/roce_frame.h"

namespace srdma::hca {

constexpr std::size_t kTrainHeaderBytes = 16;
constexpr std::size_t kMaxTrainPrefix = kTrainHeaderBytes + kMaxHeaderBytes + kIcrcBytes;
constexpr std::uint32_t kMinPathMtu = 256;

// What goes in front of a train's payload in its record.
struct TrainPrefix {
  std::array<std::byte, kMaxTrainPrefix> bytes{};
  std::size_t length = 0;
};
// `train.count` >= 2, a train the roles built.
TrainPrefix encode_train(const Packet& train, std::uint16_t pkey = kDefaultPkey);

// Parses a record's frame. `record` may still change under the reader (the
// producer's memory): its prefix is copied into `scratch` and read there
// once; on kNone `out.pkt` is the train (count, last_op, ImmDt, SE and
// AckReq set) and its payload one piece pointing into `record`, read-only.
// kBadLength, kBadOpcode or the header frame's own error otherwise; a
// path MTU above `max_mtu` is kBadLength.
FrameError decode_train(std::span<const std::byte> record, std::span<std::byte, kMaxTrainPrefix> scratch,
                        std::uint32_t max_mtu, ParsedFrame& out);

}  // namespace srdma::hca
