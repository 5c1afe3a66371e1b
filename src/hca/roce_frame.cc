#include "hca/roce_frame.h"

#include <isa-l/crc.h>
#include <zlib.h>

#include <algorithm>
#include <bit>

namespace srdma::hca {
namespace {

// BTH byte 1: SE, M, PadCnt (2 bits), TVer (4 bits).
constexpr std::uint8_t kBthSolicited = 0x80;
constexpr unsigned kBthPadShift = 4;
constexpr std::uint8_t kBthPadMask = 0x3;
constexpr std::uint8_t kBthTverMask = 0x0f;
// BTH byte 8: A, Resv7.
constexpr std::uint8_t kBthAckReq = 0x80;
// F, B (FECN, BECN), Resv6: a switch on the way may set them, so the ICRC
// covers them as all ones.
constexpr std::size_t kBthVariantByte = 4;
constexpr std::uint8_t kBthBecn = 0x40;  // byte 4: F (FECN) 0x80, B (BECN) 0x40

// AETH syndrome (IBA 9.7.5.2.5): bit 7 reserved (0), bits 6:5 the class,
// bits 4:0 the credit count, RNR timer or NAK code.
constexpr std::uint8_t kAethClassAck = 0x00;
constexpr std::uint8_t kAethClassRnrNak = 0x20;
constexpr std::uint8_t kAethClassNak = 0x60;
constexpr std::uint8_t kAethLowMask = 0x1f;
constexpr std::uint8_t kAethNoCredits = 0x1f;  // "invalid credit count": no end-to-end credits

// The pseudo-LRH, the IPv4 header and the UDP header in front of the frame
// in the ICRC's input; the Identification is at byte 8 + 4 of it.
constexpr std::size_t kIcrcPrefixBytes = 8 + kIpv4HeaderBytes + kUdpHeaderBytes;
// The same over IPv6 (no Identification).
constexpr std::size_t kIcrcPrefix6Bytes = 8 + kIpv6HeaderBytes + kUdpHeaderBytes;
constexpr std::size_t kIcrcIpIdOffset = 8 + 4;
constexpr std::size_t kIpIdBytes = 2;

static_assert(opcode_row(QpType::kXrcTgt, Opcode::kCmpSwap).header_bytes == kMaxHeaderBytes);
static_assert(opcode_row(QpType::kUd, Opcode::kSendOnlyImm).header_bytes == kBthBytes + kDethBytes + kImmDtBytes);
static_assert(std::has_single_bit(unsigned{kIcrcIdWindow}), "the ICRC check walks the window in Gray code");

// Every header field is big-endian (IBA 9.2: most significant byte first).
// The caller sizes the buffer; the writer and the reader never check.
class FieldWriter {
 public:
  explicit FieldWriter(std::byte* at) : begin_(at), at_(at) {}
  void put(std::uint64_t v, unsigned bytes) {
    for (unsigned i = bytes; i-- > 0;) *at_++ = static_cast<std::byte>(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  std::size_t written() const { return static_cast<std::size_t>(at_ - begin_); }

 private:
  std::byte* begin_;
  std::byte* at_;
};

class FieldReader {
 public:
  explicit FieldReader(const std::byte* at) : at_(at) {}
  std::uint64_t get(unsigned bytes) {
    std::uint64_t v = 0;
    for (unsigned i = 0; i < bytes; ++i) v = (v << 8) | std::to_integer<std::uint64_t>(*at_++);
    return v;
  }
  std::uint8_t u8() { return static_cast<std::uint8_t>(get(1)); }
  std::uint16_t u16() { return static_cast<std::uint16_t>(get(2)); }
  std::uint32_t u24() { return static_cast<std::uint32_t>(get(3)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(get(4)); }
  std::uint64_t u64() { return get(8); }
  void skip(std::size_t bytes) { at_ += bytes; }

 private:
  const std::byte* at_;
};

std::uint8_t pad_of(std::uint32_t payload_length) { return static_cast<std::uint8_t>((-payload_length) & 3u); }

void put_bth(FieldWriter& w, std::uint8_t opcode, bool solicited, std::uint8_t pad, std::uint16_t pkey,
             std::uint32_t dst_qpn, bool ack_req, std::uint32_t psn) {
  w.put(opcode, 1);
  // M = 0 (no path migration), TVer = 0.
  w.put((solicited ? kBthSolicited : 0) | static_cast<std::uint8_t>((pad & kBthPadMask) << kBthPadShift), 1);
  w.put(pkey, 2);
  w.put(0, 1);  // F, B, Resv6
  w.put(dst_qpn & kPsnMask, 3);
  w.put(ack_req ? kBthAckReq : 0, 1);  // Resv7 = 0
  w.put(psn & kPsnMask, 3);
}

std::uint8_t encode_syndrome(Syndrome s, std::uint8_t rnr_timer) {
  switch (s) {
    case Syndrome::kAck: return kAethClassAck | kAethNoCredits;
    case Syndrome::kRnrNak: return kAethClassRnrNak | (rnr_timer & kAethLowMask);
    case Syndrome::kPsnSequenceError: return kAethClassNak | 0;
    case Syndrome::kInvalidRequest: return kAethClassNak | 1;
    case Syndrome::kRemoteAccessError: return kAethClassNak | 2;
    case Syndrome::kRemoteOperationalError: return kAethClassNak | 3;
    case Syndrome::kInvalidRdRequest: return kAethClassNak | 4;
  }
  return kAethClassNak | 3;  // not reached: every Syndrome is above
}

// False for a syndrome IBA reserves. An ACK's credit count is accepted
// whatever it is: we grant no end-to-end credits and read none.
bool decode_syndrome(std::uint8_t v, Syndrome& s, std::uint8_t& rnr_timer) {
  const std::uint8_t low = v & kAethLowMask;
  switch (v & ~kAethLowMask) {
    case kAethClassAck:
      s = Syndrome::kAck;
      return true;
    case kAethClassRnrNak:
      s = Syndrome::kRnrNak;
      rnr_timer = low;
      return true;
    case kAethClassNak:
      switch (low) {
        case 0: s = Syndrome::kPsnSequenceError; return true;
        case 1: s = Syndrome::kInvalidRequest; return true;
        case 2: s = Syndrome::kRemoteAccessError; return true;
        case 3: s = Syndrome::kRemoteOperationalError; return true;
        case 4: s = Syndrome::kInvalidRdRequest; return true;
        default: return false;
      }
    default: return false;  // class 010, or reserved bit 7 set
  }
}

// AtomicETH carries Swap (or Add) data, then Compare data. Our Packet keeps
// a FETCH ADD's addend in compare_add (as the verbs' WR does), a COMPARE
// SWAP's compare value in compare_add and its swap value in swap.
std::uint64_t swap_add_field(const Packet& p) { return p.op == Opcode::kFetchAdd ? p.compare_add : p.swap; }
std::uint64_t compare_field(const Packet& p) { return p.op == Opcode::kFetchAdd ? 0 : p.compare_add; }

// The IP and UDP headers as the ICRC sees them (IBA A17.3.3), behind the
// pseudo-LRH: the fields a router may change are all ones. IPv4: TOS, TTL,
// header checksum; IPv6: traffic class, flow label, hop limit. Returns the
// bytes used of `b`.
std::size_t icrc_prefix(const IpUdpFields& ip, std::size_t frame_length,
                        std::array<std::byte, kIcrcPrefix6Bytes>& b) {
  FieldWriter w(b.data());
  w.put(~std::uint64_t{0}, 8);  // the pseudo-LRH
  if (ip.ipv6) {
    w.put(0x6fffffff, 4);  // version 6, traffic class and flow label all ones
    w.put(kUdpHeaderBytes + frame_length, 2);  // payload length
    w.put(17, 1);                              // next header: UDP
    w.put(0xff, 1);                            // hop limit
    for (std::uint8_t v : ip.src_ip6) w.put(v, 1);
    for (std::uint8_t v : ip.dst_ip6) w.put(v, 1);
  } else {
    w.put(0x45, 1);  // version 4, IHL 5
    w.put(0xff, 1);  // TOS
    w.put(kIpv4HeaderBytes + kUdpHeaderBytes + frame_length, 2);
    w.put(ip.ip_id, 2);
    w.put(ip.dont_fragment ? 0x4000 : 0, 2);  // flags, fragment offset 0
    w.put(0xff, 1);                           // TTL
    w.put(17, 1);                             // UDP
    w.put(0xffff, 2);                         // header checksum
    w.put(ip.src_ip, 4);
    w.put(ip.dst_ip, 4);
  }
  w.put(ip.src_port, 2);
  w.put(ip.dst_port, 2);
  w.put(kUdpHeaderBytes + frame_length, 2);
  w.put(0xffff, 2);  // UDP checksum
  return w.written();
}

// zlib's crc32 (the same CRC: tests check it against zlib), by ISA-L.
uLong crc_of(uLong crc, const std::byte* data, std::size_t n) {
  return crc32_gzip_refl(static_cast<std::uint32_t>(crc), reinterpret_cast<const unsigned char*>(data), n);
}

// What setting bit b of the Identification adds to the CRC of a message
// that ends right after it. CRC-32 is affine: the CRCs of two messages of
// one length differ by the (linear) CRC of their difference.
const std::array<std::uint32_t, 16>& ip_id_bit_terms() {
  static const std::array<std::uint32_t, 16> terms = [] {
    std::array<std::uint32_t, 16> t{};
    const std::array<std::byte, kIpIdBytes> zero{};
    const uLong crc_zero = crc_of(0, zero.data(), zero.size());
    for (unsigned b = 0; b < t.size(); ++b) {
      std::array<std::byte, kIpIdBytes> id{};
      FieldWriter(id.data()).put(1u << b, kIpIdBytes);
      t[b] = static_cast<std::uint32_t>(crc_of(0, id.data(), id.size()) ^ crc_zero);
    }
    return t;
  }();
  return terms;
}

// Whether `received` is the ICRC of `body` sent with `ip` and some
// Identification in [0, kIcrcIdWindow): one CRC pass with Identification 0,
// then the difference is compared with each Identification's contribution
// (its bit terms carried over the rest of the message by zlib's shift).
bool icrc_matches(const IpUdpFields& ip, std::span<const std::byte> body, std::uint32_t received) {
  if (ip.ipv6) return compute_icrc(ip, body) == received;  // no Identification: exact
  IpUdpFields ip0 = ip;
  ip0.ip_id = 0;
  const std::uint32_t diff = compute_icrc(ip0, body) ^ received;
  if (diff == 0) return true;
  const std::size_t after_id = kIcrcPrefixBytes - kIcrcIpIdOffset - kIpIdBytes + body.size();
  const uLong shift = crc32_combine_gen(static_cast<z_off_t>(after_id));
  constexpr unsigned kBits = std::countr_zero(unsigned{kIcrcIdWindow});
  std::array<std::uint32_t, kBits> term{};
  for (unsigned b = 0; b < kBits; ++b)
    term[b] = static_cast<std::uint32_t>(crc32_combine_op(ip_id_bit_terms()[b], 0, shift));
  // Gray code: each step flips one bit, so visits every Identification once.
  std::uint32_t acc = 0;
  for (unsigned k = 1; k < kIcrcIdWindow; ++k) {
    acc ^= term[std::countr_zero(k)];
    if (acc == diff) return true;
  }
  return false;
}

std::uint32_t load_le32(const std::byte* at) {
  std::uint32_t v = 0;
  for (unsigned i = 4; i-- > 0;) v = (v << 8) | std::to_integer<std::uint32_t>(at[i]);
  return v;
}

}  // namespace

FrameHeaders build_headers(const Packet& p, std::uint16_t pkey) {
  const std::uint8_t wire = wire_opcode(p.transport, p.op);
  const OpcodeRow& row = opcode_row(wire);
  FrameHeaders h;
  h.pad = pad_of(p.payload_length);
  FieldWriter w(h.bytes.data());
  const bool ud = row.has(kOpDeth);
  put_bth(w, wire, p.solicited, h.pad, pkey, p.dst_qpn, p.ack_req && !ud, p.psn);
  // IBA order: DETH, XRCETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH.
  if (ud) {
    w.put(p.qkey, 4);
    w.put(0, 1);  // Resv8
    w.put(p.src_qpn & kPsnMask, 3);
  }
  if (row.has(kOpXrcEth)) {
    w.put(0, 1);  // reserved
    w.put(p.xrc_srqn & kPsnMask, 3);
  }
  if (row.has(kOpReth)) {
    w.put(p.va, 8);
    w.put(p.rkey, 4);
    w.put(p.dma_length, 4);
  }
  if (row.has(kOpAtomicEth)) {
    w.put(p.va, 8);
    w.put(p.rkey, 4);
    w.put(swap_add_field(p), 8);
    w.put(compare_field(p), 8);
  }
  if (row.has(kOpAeth)) {
    w.put(encode_syndrome(p.syndrome, p.rnr_timer), 1);
    w.put(p.msn & kPsnMask, 3);
  }
  if (row.has(kOpAtomicAckEth)) w.put(p.atomic_orig, 8);
  if (row.has(kOpImmDt) || row.has(kOpIeth)) w.put(p.imm, 4);
  if (row.has(kOpCnpReserved)) {
    h.bytes[kBthVariantByte] = std::byte{kBthBecn};  // a CNP says so in its BTH (A17.9.3)
    for (unsigned i = 0; i < kCnpReservedBytes; ++i) w.put(0, 1);
  }
  h.length = static_cast<std::uint8_t>(w.written());
  return h;
}

std::uint32_t compute_icrc(const IpUdpFields& ip, std::span<const std::byte> headers,
                           std::span<const MemPiece> payload, std::uint32_t payload_length, std::uint8_t pad) {
  std::array<std::byte, kIcrcPrefix6Bytes> prefix;
  const std::size_t used = icrc_prefix(ip, headers.size() + payload_length + pad + kIcrcBytes, prefix);
  uLong crc = crc_of(0, prefix.data(), used);
  if (headers.size() > kBthVariantByte) {
    const std::byte all_ones{0xff};
    crc = crc_of(crc, headers.data(), kBthVariantByte);
    crc = crc_of(crc, &all_ones, 1);
    crc = crc_of(crc, headers.data() + kBthVariantByte + 1, headers.size() - kBthVariantByte - 1);
  } else {
    crc = crc_of(crc, headers.data(), headers.size());
  }
  std::uint64_t left = payload_length;
  for (const MemPiece& piece : payload) {
    if (left == 0) break;
    const std::uint64_t n = std::min(left, piece.length);
    crc = crc_of(crc, piece.addr, n);
    left -= n;
  }
  const std::array<std::byte, 4> zeros{};
  for (std::uint8_t n = pad; n > 0;) {
    const std::uint8_t step = std::min<std::uint8_t>(n, zeros.size());
    crc = crc_of(crc, zeros.data(), step);
    n -= step;
  }
  return static_cast<std::uint32_t>(crc);
}

std::uint32_t compute_icrc(const IpUdpFields& ip, std::span<const std::byte> frame_without_icrc) {
  return compute_icrc(ip, frame_without_icrc, {}, 0, 0);
}

FrameError parse_frame(std::span<const std::byte> frame, const IpUdpFields& ip, bool check_icrc,
                       ParsedFrame& out) {
  out = ParsedFrame{};
  if (frame.size() < kBthBytes + kIcrcBytes) return FrameError::kTooShort;
  if (frame.size() > kMaxFrameBytes) return FrameError::kBadLength;
  const std::span<const std::byte> body = frame.first(frame.size() - kIcrcBytes);
  if (check_icrc && !icrc_matches(ip, body, load_le32(frame.last(kIcrcBytes).data())))
    return FrameError::kBadIcrc;

  FieldReader r(body.data());
  const std::uint8_t opcode = r.u8();
  const std::uint8_t flags = r.u8();
  const std::uint16_t pkey = r.u16();
  r.skip(1);  // F, B, Resv6: not ours to read
  const std::uint32_t dst_qpn = r.u24();
  const bool ack_req = (r.u8() & kBthAckReq) != 0;  // Resv7 ignored, as IBA asks of receivers
  const std::uint32_t psn = r.u24();
  if ((flags & kBthTverMask) != 0) return FrameError::kBadVersion;
  const OpcodeRow& row = opcode_row(opcode);
  if (!row.valid()) return FrameError::kBadOpcode;
  if (pkey != kDefaultPkey && pkey != kLimitedDefaultPkey) return FrameError::kBadPkey;
  const std::size_t headers = row.header_bytes;
  if (body.size() < headers) return FrameError::kTooShort;
  const std::size_t after_headers = body.size() - headers;  // payload and pad
  const std::uint8_t pad = (flags >> kBthPadShift) & kBthPadMask;
  if (pad > after_headers) return FrameError::kBadPad;
  const std::size_t payload_length = after_headers - pad;
  if (after_headers % 4 != 0 || payload_length > kMaxPayload || (payload_length != 0 && !row.has(kOpPayload)))
    return FrameError::kBadLength;

  Packet& p = out.pkt;
  const Opcode op = opcode_of_wire(opcode);
  p.transport = transport_of_wire(opcode);
  p.op = op;
  p.solicited = (flags & kBthSolicited) != 0;
  p.ack_req = ack_req;
  p.dst_qpn = dst_qpn;
  p.psn = psn;
  out.pkey = pkey;
  if (row.has(kOpDeth)) {
    out.qkey = r.u32();
    r.skip(1);  // Resv8
    out.deth_src_qpn = r.u24();
  }
  if (row.has(kOpXrcEth)) {
    r.skip(1);  // reserved: not ours to read
    p.xrc_srqn = r.u24();  // whether it names an SRQ of ours is the responder's check
  }
  if (row.has(kOpReth)) {
    p.va = r.u64();
    p.rkey = r.u32();
    p.dma_length = r.u32();
  }
  if (row.has(kOpAtomicEth)) {
    p.va = r.u64();
    p.rkey = r.u32();
    const std::uint64_t swap_add = r.u64();
    const std::uint64_t compare = r.u64();
    // A FETCH ADD's Compare data is unused (IBA 9.4.5): not read.
    p.compare_add = op == Opcode::kFetchAdd ? swap_add : compare;
    p.swap = op == Opcode::kFetchAdd ? 0 : swap_add;
  }
  if (row.has(kOpAeth)) {
    if (!decode_syndrome(r.u8(), p.syndrome, p.rnr_timer)) return FrameError::kBadOpcode;
    p.msn = r.u24();
  }
  if (row.has(kOpAtomicAckEth)) p.atomic_orig = r.u64();
  if (row.has(kOpImmDt) || row.has(kOpIeth)) p.imm = r.u32();
  p.payload_length = static_cast<std::uint32_t>(payload_length);
  // The piece must be mutable by type only; nothing writes through it.
  if (payload_length != 0) p.payload.push_back(MemPiece{const_cast<std::byte*>(body.data() + headers), payload_length});
  return FrameError::kNone;
}

std::string_view frame_error_str(FrameError e) {
  switch (e) {
    case FrameError::kNone: return "ok";
    case FrameError::kTooShort: return "frame shorter than its headers and ICRC";
    case FrameError::kBadVersion: return "BTH TVer is not 0";
    case FrameError::kBadOpcode: return "opcode no transport defines, or reserved AETH syndrome";
    case FrameError::kBadPad: return "PadCnt larger than the bytes after the headers";
    case FrameError::kBadLength: return "payload length does not fit the opcode";
    case FrameError::kBadPkey: return "P_Key not of the default partition";
    case FrameError::kBadIcrc: return "ICRC mismatch";
  }
  return "unknown frame error";
}

DropReason drop_reason_of(FrameError e) {
  switch (e) {
    case FrameError::kTooShort:
    case FrameError::kBadPad:
    case FrameError::kBadLength: return DropReason::kBadLength;
    case FrameError::kNone:  // not a drop; mapped only so that every value has an answer
    case FrameError::kBadOpcode:
    case FrameError::kBadVersion: return DropReason::kBadOpcode;
    case FrameError::kBadPkey: return DropReason::kBadKey;
    case FrameError::kBadIcrc: return DropReason::kBadIcrc;
  }
  return DropReason::kBadOpcode;
}

}  // namespace srdma::hca
