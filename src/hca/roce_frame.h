// The RoCEv2 frame (IBTA vol. 1 Annex A17): the UDP payload that carries one
// InfiniBand transport packet. BTH, the extended headers its opcode needs,
// the payload, 0..3 pad bytes and the 4-byte ICRC; every header field is
// big-endian, the ICRC is stored little-endian.
//
// build_headers() turns a Packet (packet.h) into its BTH and extended
// headers; parse_frame() turns received bytes back into a Packet, checking
// every field before it is used: a frame from the wire is anyone's. The ICRC
// is CRC-32 (zlib's crc32, the IEEE polynomial) over 8 bytes of 0xff (the
// pseudo-LRH), the IPv4 and UDP headers with the fields routers change
// (TOS, TTL, header checksum, UDP checksum) set to all ones, and the frame
// with BTH byte 4 (F, B, Resv6) set to all ones. Over IPv6 the IP header in
// it is the IPv6 header with traffic class, flow label and hop limit all
// ones (IBA A17.3.3).
//
// This file must compile without <expected> (the libFuzzer build uses
// clang 14): no srdma/status.h here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "hca/packet.h"
#include "srdma/counters.h"

namespace srdma::hca {

constexpr std::uint16_t kRoceV2Port = 4791;
constexpr std::size_t kIcrcBytes = 4;
constexpr std::size_t kIpv4HeaderBytes = 20;
constexpr std::size_t kIpv6HeaderBytes = 40;
constexpr std::size_t kUdpHeaderBytes = 8;
// BTH + the largest set of extended headers (an XRC atomic: XRCETH and
// AtomicETH, 32 bytes).
constexpr std::size_t kMaxHeaderBytes = max_header_bytes();
static_assert(kMaxHeaderBytes == kBthBytes + kXrcEthBytes + kAtomicEthBytes);
constexpr std::uint16_t kDefaultPkey = 0xffff;
// The default partition with limited membership, also accepted on receive.
constexpr std::uint16_t kLimitedDefaultPkey = 0x7fff;

// BTH and the extended headers of an RC packet of opcode `op` (the table's).
constexpr std::size_t header_bytes(Opcode op) { return opcode_row(op).header_bytes; }

// The IPv4 and UDP fields the ICRC covers, as they are (or will be) on the
// wire. Addresses and ports in host order. A sender on an unconnected
// socket with IP_PMTUDISC_DO sends DF and Identification 0; a UDP GSO
// segment i of a send carries Identification i.
// Over IPv6 (`ipv6`), src_ip6/dst_ip6 are the addresses (network order, as
// the header carries them), src_ip/dst_ip/ip_id/dont_fragment unused: IPv6
// has no Identification, so the ICRC check is exact.
struct IpUdpFields {
  std::uint32_t src_ip = 0;
  std::uint32_t dst_ip = 0;
  std::uint16_t src_port = 0;
  std::uint16_t dst_port = kRoceV2Port;
  std::uint16_t ip_id = 0;
  bool dont_fragment = true;
  bool ipv6 = false;
  std::array<std::uint8_t, 16> src_ip6{};
  std::array<std::uint8_t, 16> dst_ip6{};
};

// BTH and extended headers of one packet, ready to go in front of its
// payload.
struct FrameHeaders {
  std::array<std::byte, kMaxHeaderBytes> bytes{};
  std::uint8_t length = 0;  // bytes used
  std::uint8_t pad = 0;     // PadCnt: zero bytes after the payload (-payload_length & 3)
};

// The headers of `p` (`count` must be 1): the BTH and the extended headers
// the opcode table gives its transport and operation. Reads transport, op,
// solicited, ack_req, dst_qpn, psn and the fields of those headers (a UD
// packet's DETH: p.qkey and p.src_qpn; its A bit is 0, UD is never
// acknowledged); BTH M is 0 (no path migration), TVer is 0. `p` must be a
// row of the table.
FrameHeaders build_headers(const Packet& p, std::uint16_t pkey = kDefaultPkey);

// The ICRC of the frame made of `headers`, `payload` (p.payload_length bytes
// of pieces) and `pad` zero bytes, as sent with `ip`. The value to store
// little-endian after the pad.
std::uint32_t compute_icrc(const IpUdpFields& ip, std::span<const std::byte> headers,
                           std::span<const MemPiece> payload, std::uint32_t payload_length, std::uint8_t pad);
// The same over a contiguous frame that ends just before its ICRC.
// A frame must fit in one IPv4 datagram: the lengths the ICRC covers are
// 16 bits.
std::uint32_t compute_icrc(const IpUdpFields& ip, std::span<const std::byte> frame_without_icrc);

// Why a frame was refused; maps onto the transport's DropReason.
enum class FrameError : std::uint8_t {
  kNone,
  kTooShort,      // shorter than BTH + its extended headers + ICRC
  kBadVersion,    // TVer other than 0
  kBadOpcode,     // not a row of the opcode table, or an AETH whose syndrome IBA
                  // reserves (NAK codes 5..31, class 010, bit 7)
  kBadPad,        // PadCnt larger than the bytes between the headers and the ICRC
  kBadLength,     // payload larger than kMaxPayload, present where the opcode has none,
                  // or payload + pad not a multiple of 4 (IBA pads every packet to 4 bytes)
  kBadPkey,       // P_Key not the default partition's
  kBadIcrc,
};
std::string_view frame_error_str(FrameError e);
DropReason drop_reason_of(FrameError e);

// Payload larger than any path MTU (4096) is refused.
constexpr std::uint32_t kMaxPayload = 4096;

struct ParsedFrame {
  // The packet: op, solicited, ack_req, dst_qpn, psn and the extended
  // headers' fields; payload (one piece, pointing into the frame) and
  // payload_length. src_addr/dst_addr/src_qpn are the caller's to fill
  // (an RC BTH does not carry the source QPN).
  Packet pkt;
  std::uint16_t pkey = 0;
  // DETH of a UD SEND (pkt.transport UD).
  std::uint32_t qkey = 0;
  std::uint32_t deth_src_qpn = 0;
};

// How many Identification values the ICRC check accepts: a UDP GSO send's
// segments carry 0, 1, 2 ... and a receiver cannot see which one it got,
// so a frame passes when its ICRC matches `ip` with any Identification in
// [0, kIcrcIdWindow) (the CRC is linear in it: one CRC pass, then a few
// XORs).
constexpr std::uint16_t kIcrcIdWindow = 64;

// Parses one frame (the whole UDP payload). When `check_icrc`, the ICRC is
// checked against `ip` (see kIcrcIdWindow; ip.ip_id is ignored) before any
// other field is believed, so a corrupted frame is kBadIcrc whichever bit
// changed (but for BTH byte 4, which the ICRC does not cover). On kNone,
// `out` is filled and its payload (one piece, none when empty) points into
// `frame`: the receiver must treat those bytes as read-only (MemPiece holds
// a std::byte*); pkt.transport is the opcode's, and a UD SEND's qkey and
// deth_src_qpn are its DETH's. After an error
// `out` holds nothing meaningful. Never reads outside `frame`, whatever it
// holds.
FrameError parse_frame(std::span<const std::byte> frame, const IpUdpFields& ip, bool check_icrc,
                       ParsedFrame& out);

// The frame's length on the wire for a packet of `header_bytes` headers and
// `payload_length` bytes: headers + payload + pad + ICRC.
constexpr std::size_t frame_bytes(std::size_t header_bytes, std::uint32_t payload_length) {
  return header_bytes + payload_length + ((-payload_length) & 3u) + kIcrcBytes;
}
// The longest frame parse_frame() can accept: a receive buffer of this many
// bytes holds any good frame.
constexpr std::size_t kMaxFrameBytes = frame_bytes(kMaxHeaderBytes, kMaxPayload);

}  // namespace srdma::hca
