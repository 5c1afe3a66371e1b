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
// with BTH byte 4 (F, B, Resv6) set to all ones.
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
constexpr std::size_t kBthBytes = 12;
constexpr std::size_t kIcrcBytes = 4;
constexpr std::size_t kIpv4HeaderBytes = 20;
constexpr std::size_t kUdpHeaderBytes = 8;
// BTH + the largest set of extended headers (AtomicETH, 28 bytes).
constexpr std::size_t kMaxHeaderBytes = kBthBytes + 28;
constexpr std::uint16_t kDefaultPkey = 0xffff;
// The default partition with limited membership, also accepted on receive.
constexpr std::uint16_t kLimitedDefaultPkey = 0x7fff;

// Extended headers (IBA 9.3).
constexpr std::size_t kRethBytes = 16;
constexpr std::size_t kAtomicEthBytes = 28;
constexpr std::size_t kAethBytes = 4;
constexpr std::size_t kAtomicAckEthBytes = 8;
constexpr std::size_t kImmDtBytes = 4;
constexpr std::size_t kIethBytes = 4;
constexpr std::size_t kDethBytes = 8;

// BTH and the extended headers of an RC packet of opcode `op`.
constexpr std::size_t header_bytes(Opcode op) {
  return kBthBytes + (has_reth(op) ? kRethBytes : 0) + (is_atomic(op) ? kAtomicEthBytes : 0) +
         (has_aeth(op) ? kAethBytes : 0) + (op == Opcode::kAtomicAck ? kAtomicAckEthBytes : 0) +
         (has_imm(op) ? kImmDtBytes : 0) + (has_ieth(op) ? kIethBytes : 0);
}

// UC's opcodes are RC's SEND and RDMA WRITE ones (0x00..0x0b) with the
// transport bits 001; UD SEND (BTH + DETH) is 0x64, with Imm 0x65.
constexpr std::uint8_t kUcOpcodePrefix = 0x20;
constexpr bool is_uc_opcode(std::uint8_t v) { return v >= kUcOpcodePrefix && v <= kUcOpcodePrefix + 0x0b; }
constexpr std::uint8_t kUdSendOnly = 0x64;
constexpr std::uint8_t kUdSendOnlyImm = 0x65;

// The IPv4 and UDP fields the ICRC covers, as they are (or will be) on the
// wire. Addresses and ports in host order. A sender on an unconnected
// socket with IP_PMTUDISC_DO sends DF and Identification 0; a UDP GSO
// segment i of a send carries Identification i.
struct IpUdpFields {
  std::uint32_t src_ip = 0;
  std::uint32_t dst_ip = 0;
  std::uint16_t src_port = 0;
  std::uint16_t dst_port = kRoceV2Port;
  std::uint16_t ip_id = 0;
  bool dont_fragment = true;
};

// BTH and extended headers of one packet, ready to go in front of its
// payload.
struct FrameHeaders {
  std::array<std::byte, kMaxHeaderBytes> bytes{};
  std::uint8_t length = 0;  // bytes used
  std::uint8_t pad = 0;     // PadCnt: zero bytes after the payload (-payload_length & 3)
};

// The headers of `p` (`count` must be 1). Reads transport, op, solicited,
// ack_req, dst_qpn, psn and the fields of the extended headers `p.op` has
// (a UD packet: build_ud_send_headers with p.qkey); BTH M is 0 (no path
// migration), TVer is 0.
FrameHeaders build_headers(const Packet& p, std::uint16_t pkey = kDefaultPkey);
// The headers of a UD SEND ONLY (with ImmDt when `with_imm`): BTH and DETH
// (`qkey`, p.src_qpn). Reads solicited, dst_qpn, psn, imm and
// payload_length as build_headers() does; A is 0 (UD is never acknowledged).
FrameHeaders build_ud_send_headers(const Packet& p, std::uint32_t qkey, bool with_imm,
                                   std::uint16_t pkey = kDefaultPkey);

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
  kBadOpcode,     // not an RC or UC opcode (a UD SEND is reported as kUdSend), or an AETH
                  // whose syndrome IBA reserves (NAK codes 5..31, class 010, bit 7)
  kUdSend,        // a well-formed UD SEND: accepted, with its DETH (not an error)
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
  // DETH of a UD SEND.
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
// a std::byte*). On kUdSend, `out` is filled the same way, with transport
// UD, op SEND ONLY (with Imm), and qkey / deth_src_qpn from the DETH. After any other error
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
