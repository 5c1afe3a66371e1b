// libFuzzer target for the RoCEv2 frame parser: any byte string must give a
// packet or a FrameError -- no crash, no read outside the input (ASan), no
// undefined behaviour (UBSan) -- and what parse_frame() accepts must keep its
// promises (checked below; a broken promise traps):
//   - a verdict has its cause in the bytes (read here by hand): a refusal
//     one of its causes, an acceptance none;
//   - the payload is one piece inside the input, right after headers of the
//     opcode's length, and the frame is exactly headers + payload + pad + ICRC;
//   - fields the opcode does not carry are zero, carried ones in range;
//   - with check_icrc, the verdict agrees with an ICRC check done another
//     way (per frame length, each Identification's term by brute force), and
//     a frame that passes it parses exactly as without the check;
//   - the input with its ICRC recomputed passes for an Identification in the
//     window and fails for one outside; with a bit flipped, the verdict is
//     still the other check's, and a flip in BTH byte 4 (not covered, not
//     read) changes nothing;
//   - so too for every value of the opcode, of BTH byte 1 or of an AETH
//     syndrome (one of them per input), tried in turn on an accepted frame;
//   - headers rebuilt from the parsed packet (build_headers /
//     a UD packet too) equal the input's but for the bits a receiver
//     ignores, and the rebuilt frame (its ICRC from the payload-pieces
//     overload, which must agree with the contiguous one) parses to the same
//     fields, with and without the ICRC check.
//
// Built by scripts/fuzz.sh with clang++ -fsanitize=fuzzer,address,undefined;
// seeds from fuzz/make_roce_corpus.cc (fuzz/roce_corpus/).
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "hca/ring_train.h"
#include "hca/roce_frame.h"

namespace {

using namespace srdma::hca;
using srdma::MemPiece;
using Bytes = std::vector<std::byte>;

void check(bool promise) {
  if (!promise) __builtin_trap();
}

// The path every seed was sent on (must match fuzz/make_roce_corpus.cc).
IpUdpFields fuzz_ip() {
  IpUdpFields ip;
  ip.src_ip = 0x0a000001;  // 10.0.0.1
  ip.dst_ip = 0x0a000002;  // 10.0.0.2
  ip.src_port = entropy_port(0x11);
  ip.dst_port = kRoceV2Port;
  ip.ip_id = 0;
  ip.dont_fragment = true;
  return ip;
}

std::uint32_t load_le32(const std::byte* at) {
  std::uint32_t v = 0;
  for (unsigned i = 4; i-- > 0;) v = (v << 8) | std::to_integer<std::uint32_t>(at[i]);
  return v;
}

void store_le32(std::byte* at, std::uint32_t v) {
  for (unsigned i = 0; i < 4; ++i) at[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

// BTH byte 4 (F, B, Resv6): outside the ICRC (as all ones) and unread.
constexpr std::size_t kBthVariantByteForFuzz = 4;

bool size_parseable(std::size_t n) { return n >= kBthBytes + kIcrcBytes && n <= kMaxFrameBytes; }

// The ICRC check done another way than parse_frame()'s: CRC-32 is affine,
// so what Identification k adds, compute_icrc(ip with k, body) ^
// compute_icrc(ip with 0, body), is the same for every body of one length.
// It is found once per length by one full CRC pass per k over a zero body;
// then a frame takes one pass, and its ICRC is compared with each k's.
const std::array<std::uint32_t, kIcrcIdWindow>& id_terms(std::size_t body_length) {
  static std::vector<std::array<std::uint32_t, kIcrcIdWindow>> terms(kMaxFrameBytes);
  static std::vector<bool> known(kMaxFrameBytes);
  if (!known[body_length]) {
    const Bytes zero(body_length);
    IpUdpFields ip = fuzz_ip();
    const std::uint32_t base = compute_icrc(ip, zero);
    for (unsigned id = 0; id < kIcrcIdWindow; ++id) {
      ip.ip_id = static_cast<std::uint16_t>(id);
      terms[body_length][id] = compute_icrc(ip, zero) ^ base;
    }
    known[body_length] = true;
  }
  return terms[body_length];
}

bool icrc_matches_reference(std::span<const std::byte> frame) {
  const std::span<const std::byte> body = frame.first(frame.size() - kIcrcBytes);
  const std::uint32_t diff = compute_icrc(fuzz_ip(), body) ^ load_le32(frame.data() + body.size());
  for (std::uint32_t t : id_terms(body.size()))
    if (t == diff) return true;
  return false;
}

// IBA table 38, spelled out apart from the opcode table the parser reads:
// RC 0x00..0x14, 0x16, 0x17 and IBA 1.5's ATOMIC WRITE 0x1d; UC's SENDs and
// WRITEs 0x20..0x2b; XRC (transport bits 101) RC's rows, its requests with
// a 4-byte XRCETH after the BTH; UD SEND ONLY 0x64 (with Immediate 0x65);
// RoCEv2's CNP 0x81 (annex A17.9.3): 16 reserved bytes, no payload.
constexpr std::uint8_t kUdSendOnlyWire = 0x64, kUdSendOnlyImmWire = 0x65, kCnpWire = 0x81;
constexpr std::size_t kXrcEthSize = 4, kCnpReservedSize = 16;
constexpr bool rc_defined(std::uint8_t v) { return (v <= 0x17 && v != 0x15) || v == 0x1d; }
constexpr bool uc_defined(std::uint8_t v) { return v >= 0x20 && v <= 0x2b; }
constexpr bool xrc_defined(std::uint8_t v) { return (v & 0xe0) == 0xa0 && rc_defined(v & 0x1f); }
// RC's responses: READ responses 0x0d..0x10, ACK 0x11, ATOMIC ACK 0x12.
constexpr bool rc_request(std::uint8_t v) { return !(v >= 0x0d && v <= 0x12); }

bool is_ud(const ParsedFrame& f) { return f.pkt.transport == srdma::QpType::kUd; }
bool is_xrc(const ParsedFrame& f) {
  return f.pkt.transport == srdma::QpType::kXrcIni || f.pkt.transport == srdma::QpType::kXrcTgt;
}
bool is_xrc_request(const ParsedFrame& f) { return is_xrc(f) && rc_request(static_cast<std::uint8_t>(f.pkt.op)); }
bool accepted(FrameError e) { return e == FrameError::kNone; }

std::size_t parsed_header_bytes(const ParsedFrame& f, FrameError) {
  if (!is_ud(f)) return header_bytes(f.pkt.op) + (is_xrc_request(f) ? kXrcEthSize : 0);
  return kBthBytes + kDethBytes + (f.pkt.op == Opcode::kSendOnlyImm ? kImmDtBytes : 0);
}

// The promises of one accepted frame.
void check_accepted(std::span<const std::byte> frame, FrameError e, const ParsedFrame& f, bool touch_payload = true) {
  const Packet& p = f.pkt;
  const auto opv = static_cast<std::uint8_t>(p.op);
  if (is_ud(f)) {
    check(p.op == Opcode::kSendOnly || p.op == Opcode::kSendOnlyImm);
    check(f.deth_src_qpn <= kPsnMask);
  } else if (p.op == Opcode::kCnp) {
    check(std::to_integer<std::uint8_t>(frame[0]) == kCnpWire && p.payload_length == 0);
    check(f.qkey == 0 && f.deth_src_qpn == 0);
  } else {
    check(rc_defined(opv) && (p.transport == srdma::QpType::kRc || uc_defined(opv | 0x20) || is_xrc(f)));
    // An XRC request goes to a TGT QP, a response to an INI QP.
    if (is_xrc(f)) check((p.transport == srdma::QpType::kXrcTgt) == rc_request(opv));
    check(f.qkey == 0 && f.deth_src_qpn == 0);
  }
  check(f.pkey == kDefaultPkey || f.pkey == kLimitedDefaultPkey);
  check(p.dst_qpn <= kPsnMask && p.psn <= kPsnMask && p.msn <= kPsnMask);
  check(p.rnr_timer <= 0x1f);

  // Lengths: headers of the opcode's size, payload, pad (exactly what
  // rounds the payload to 4), ICRC, and nothing else.
  const std::size_t hdr = parsed_header_bytes(f, e);
  check(hdr <= kMaxHeaderBytes);
  check(p.payload_length <= kMaxPayload);
  check(p.payload_length == 0 || has_payload(p.op));
  check(frame.size() == frame_bytes(hdr, p.payload_length));
  check(frame.size() <= kMaxFrameBytes);
  const std::uint8_t pad = (std::to_integer<std::uint8_t>(frame[1]) >> 4) & 3;
  check(pad == ((-p.payload_length) & 3u));

  // The payload: one piece (none when empty) right after the headers.
  check(p.payload.size() == (p.payload_length != 0 ? 1u : 0u));
  if (p.payload_length != 0) {
    const MemPiece& m = p.payload.front();
    check(m.addr == frame.data() + hdr);
    check(m.length == p.payload_length);
    check(m.addr + m.length + pad + kIcrcBytes == frame.data() + frame.size());
    volatile std::byte sink{};
    if (!touch_payload) return;
    for (std::uint64_t i = 0; i < m.length; ++i) sink = m.addr[i];  // ASan: every byte is readable
    (void)sink;
  }

  // What the opcode does not carry stays at its default.
  if (!has_reth(p.op) && !is_atomic(p.op)) check(p.va == 0 && p.rkey == 0);
  if (!has_reth(p.op)) check(p.dma_length == 0);
  if (!is_atomic(p.op)) check(p.compare_add == 0 && p.swap == 0);
  if (p.op == Opcode::kFetchAdd) check(p.swap == 0);
  if (!has_aeth(p.op)) check(p.syndrome == Syndrome::kAck && p.rnr_timer == 0 && p.msn == 0);
  if (p.syndrome != Syndrome::kRnrNak) check(p.rnr_timer == 0);
  if (p.op != Opcode::kAtomicAck) check(p.atomic_orig == 0);
  if (!has_imm(p.op) && !has_ieth(p.op)) check(p.imm == 0);
  if (!is_xrc_request(f)) check(p.xrc_srqn == 0);
  check(p.xrc_srqn <= kPsnMask);
  // The caller's fields: parse_frame() leaves them alone.
  check(p.src_addr == 0 && p.dst_addr == 0 && p.src_qpn == 0 && p.udp_sport == 0);
  check(!p.corrupted && p.owned == nullptr && p.count == 1);
}

// The verdict has its cause in the bytes, read here by hand from the
// layout: a refusal one of its causes (the parser reports the first it
// meets), an acceptance none.
void check_verdict(std::span<const std::byte> frame, FrameError e) {
  const std::size_t n = frame.size();
  auto u8 = [&](std::size_t i) { return std::to_integer<std::uint8_t>(frame[i]); };
  if (n < kBthBytes + kIcrcBytes) {
    check(e == FrameError::kTooShort);
    return;
  }
  const std::uint8_t opcode = u8(0), tver = u8(1) & 0x0f, pad = (u8(1) >> 4) & 3;
  const std::uint16_t pkey = static_cast<std::uint16_t>(u8(2) << 8 | u8(3));
  const bool ud = opcode == kUdSendOnlyWire || opcode == kUdSendOnlyImmWire;
  const bool uc = uc_defined(opcode);
  const bool xrc = xrc_defined(opcode);
  const bool cnp = opcode == kCnpWire;
  const bool known = ud || uc || xrc || cnp || rc_defined(opcode);
  const Opcode op = cnp                     ? Opcode::kCnp
                    : uc || xrc             ? static_cast<Opcode>(opcode & 0x1f)
                    : !ud                   ? static_cast<Opcode>(opcode)
                    : opcode == kUdSendOnlyWire ? Opcode::kSendOnly
                                            : Opcode::kSendOnlyImm;
  const std::size_t hdr = !known ? 0
                          : ud   ? kBthBytes + kDethBytes + (opcode == kUdSendOnlyImmWire ? kImmDtBytes : 0)
                          : cnp  ? kBthBytes + kCnpReservedSize
                                 : header_bytes(op) + (xrc && rc_request(opcode & 0x1f) ? kXrcEthSize : 0);
  const bool headers_fit = known && n - kIcrcBytes >= hdr;
  const std::size_t after = headers_fit ? n - kIcrcBytes - hdr : 0;  // payload and pad
  const std::uint8_t syndrome = headers_fit && !ud && has_aeth(op) ? u8(kBthBytes) : 0;
  const std::uint8_t cls = syndrome & 0xe0, code = syndrome & 0x1f;
  // Each cause of refusal.
  const bool too_short = known && !headers_fit;
  const bool bad_version = tver != 0;
  const bool bad_pkey = pkey != kDefaultPkey && pkey != kLimitedDefaultPkey;
  const bool bad_pad = headers_fit && pad > after;
  const bool carries_payload = !cnp && has_payload(op);
  const bool bad_length =
      n > kMaxFrameBytes || (headers_fit && pad <= after &&
                             (after % 4 != 0 || after - pad > kMaxPayload || (after - pad != 0 && !carries_payload)));
  const bool bad_opcode = !known || cls == 0x40 || (syndrome & 0x80) != 0 || (cls == 0x60 && code > 4);
  switch (e) {
    case FrameError::kTooShort: check(too_short); break;
    case FrameError::kBadVersion: check(bad_version); break;
    case FrameError::kBadPkey: check(bad_pkey); break;
    case FrameError::kBadPad: check(bad_pad); break;
    case FrameError::kBadLength: check(bad_length); break;
    case FrameError::kBadOpcode: check(bad_opcode); break;
    case FrameError::kNone:
      check(!too_short && !bad_version && !bad_pkey && !bad_pad && !bad_length && !bad_opcode);
      break;
    case FrameError::kBadIcrc: check(false); break;  // not without the check
  }
}

bool same_payload(const Packet& a, const Packet& b) {
  if (a.payload_length != b.payload_length || a.payload.size() != b.payload.size()) return false;
  if (a.payload_length == 0) return true;
  return std::memcmp(a.payload.front().addr, b.payload.front().addr, a.payload_length) == 0;
}

// Two parses of frames that must mean the same packet (UD frames rebuilt
// lose the A bit, which a UD sender never sets).
void check_same(FrameError ea, const ParsedFrame& a, FrameError eb, const ParsedFrame& b, bool ignore_ack_req) {
  check(ea == eb);
  if (!accepted(ea)) return;
  const Packet &p = a.pkt, &q = b.pkt;
  check(p.op == q.op && p.solicited == q.solicited && p.dst_qpn == q.dst_qpn && p.psn == q.psn);
  check(ignore_ack_req || p.ack_req == q.ack_req);
  check(p.va == q.va && p.rkey == q.rkey && p.dma_length == q.dma_length && p.imm == q.imm);
  check(p.compare_add == q.compare_add && p.swap == q.swap && p.atomic_orig == q.atomic_orig);
  check(p.syndrome == q.syndrome && p.rnr_timer == q.rnr_timer && p.msn == q.msn);
  check(a.pkey == b.pkey && a.qkey == b.qkey && a.deth_src_qpn == b.deth_src_qpn);
  check(same_payload(p, q));
}

// A frame checked with the ICRC: the verdict is the reference check's, and past
// it the parse is the unchecked one's.
FrameError parse_checked(std::span<const std::byte> frame, FrameError unchecked, const ParsedFrame& unchecked_out) {
  ParsedFrame out;
  const FrameError e = parse_frame(frame, fuzz_ip(), true, out);
  check(!frame_error_str(e).empty());
  (void)drop_reason_of(e);
  if (!size_parseable(frame.size())) {
    check(e == unchecked);
    return e;
  }
  const bool good = icrc_matches_reference(frame);
  check((e == FrameError::kBadIcrc) == !good);
  if (good) check_same(e, out, unchecked, unchecked_out, false);
  return e;
}

// The headers rebuilt from the parse equal the frame's, but for what a
// receiver ignores or cannot see: BTH M, byte 4 (F, B, Resv6), Resv7, an
// ACK's credit count, a FETCH ADD's Compare data, a CNP's reserved bytes; for UD also A and Resv8;
// for an XRC request the XRCETH's reserved byte.
void check_header_bytes(std::span<const std::byte> frame, const FrameHeaders& h, FrameError e, const ParsedFrame& f) {
  const std::size_t hdr = parsed_header_bytes(f, e);
  check(h.length == hdr);
  check(h.pad == ((-f.pkt.payload_length) & 3u));
  std::array<std::uint8_t, kMaxHeaderBytes> mask;
  mask.fill(0xff);
  mask[1] = 0xbf;  // M
  mask[4] = 0;     // F, B, Resv6
  mask[8] = is_ud(f) ? 0 : 0x80;  // A (UD: never sent), Resv7
  if (is_ud(f)) mask[kBthBytes + 4] = 0;  // Resv8
  const std::size_t xrceth = is_xrc_request(f) ? kXrcEthSize : 0;
  if (xrceth) mask[kBthBytes] = 0;  // the XRCETH's reserved byte
  if (has_aeth(f.pkt.op) && f.pkt.syndrome == Syndrome::kAck) mask[kBthBytes] = 0xe0;
  if (f.pkt.op == Opcode::kCnp)  // reserved: a receiver ignores them
    for (std::size_t i = kBthBytes; i < kBthBytes + kCnpReservedSize; ++i) mask[i] = 0;
  if (f.pkt.op == Opcode::kFetchAdd)
    for (std::size_t i = kBthBytes + xrceth + 20; i < kBthBytes + xrceth + kAtomicEthBytes; ++i) mask[i] = 0;
  for (std::size_t i = 0; i < hdr; ++i)
    check(((std::to_integer<std::uint8_t>(frame[i]) ^ std::to_integer<std::uint8_t>(h.bytes[i])) & mask[i]) == 0);
}

// Rebuilds the frame from the parsed packet, the way a sender does (the
// payload in two pieces, split where `split` says), and parses it again.
void check_round_trip(std::span<const std::byte> frame, FrameError e, const ParsedFrame& f, std::uint32_t split) {
  Packet p = f.pkt;
  if (is_ud(f)) {
    p.src_qpn = f.deth_src_qpn;
    p.qkey = f.qkey;
  }
  const FrameHeaders h = build_headers(p, f.pkey);
  check_header_bytes(frame, h, e, f);

  const std::span<const std::byte> headers(h.bytes.data(), h.length);
  std::vector<MemPiece> pieces;
  Bytes payload;
  if (p.payload_length != 0) {
    const MemPiece& m = p.payload.front();
    payload.assign(m.addr, m.addr + m.length);
    const std::uint32_t cut = split % (p.payload_length + 1);
    if (cut != 0) pieces.push_back(MemPiece{payload.data(), cut});
    if (cut != p.payload_length) pieces.push_back(MemPiece{payload.data() + cut, p.payload_length - cut});
  }
  Bytes rebuilt(headers.begin(), headers.end());
  rebuilt.insert(rebuilt.end(), payload.begin(), payload.end());
  rebuilt.resize(rebuilt.size() + h.pad);
  const std::uint32_t icrc = compute_icrc(fuzz_ip(), headers, pieces, p.payload_length, h.pad);
  // The two overloads agree: pieces and pad, or one contiguous frame.
  check(icrc == compute_icrc(fuzz_ip(), rebuilt));
  rebuilt.resize(rebuilt.size() + kIcrcBytes);
  store_le32(rebuilt.data() + rebuilt.size() - kIcrcBytes, icrc);
  check(rebuilt.size() == frame.size());

  for (bool check_icrc : {false, true}) {
    ParsedFrame again;
    const FrameError e2 = parse_frame(rebuilt, fuzz_ip(), check_icrc, again);
    check_same(e2, again, e, f, is_ud(f));
    if (is_ud(f)) check(!again.pkt.ack_req);
  }
}

// Every value of one of the small fields that decide the verdict -- the
// opcode, BTH byte 1 (SE, M, PadCnt, TVer), an AETH syndrome; `which`
// picks -- on a copy of an accepted frame: the fuzzer need not find each
// value by mutation.
void sweep_field(std::span<const std::byte> frame, const ParsedFrame& f, unsigned which) {
  const unsigned k = which % (has_aeth(f.pkt.op) ? 3 : 2);
  const std::size_t at = k == 2 ? kBthBytes : k;
  Bytes copy(frame.begin(), frame.end());
  for (unsigned v = 0; v < 256; ++v) {
    copy[at] = static_cast<std::byte>(v);
    ParsedFrame out;
    const FrameError e = parse_frame(copy, fuzz_ip(), false, out);
    check_verdict(copy, e);
    if (accepted(e)) check_accepted(copy, e, out, false);
  }
}

// The same bytes as a same-host ring's train record (hca/ring_train.h):
// decode_train refuses them or gives a train whose parts add up, which
// the responder then unrolls (exactly count packets, every byte of the
// payload once, each inside the record), and which encodes back to the
// record's own prefix.
void check_train_record(std::span<const std::byte> record) {
  std::array<std::byte, kMaxTrainPrefix> scratch{};
  ParsedFrame f;
  const FrameError e = decode_train(record, scratch, 4096, f);
  check(!frame_error_str(e).empty());
  if (e != FrameError::kNone) return;
  const Packet& t = f.pkt;
  check(t.count >= 2 && t.payload_length != 0);
  const std::uint32_t mtu = train_mtu(t);
  check(mtu >= kMinPathMtu && mtu <= 4096 && (mtu & (mtu - 1)) == 0);
  check(std::uint64_t{t.count - 1} * mtu < t.payload_length && std::uint64_t{t.count} * mtu >= t.payload_length);
  check(t.payload.size() == 1);
  const MemPiece& m = t.payload.front();
  check(m.addr + m.length == record.data() + record.size() && m.length == t.payload_length);
  check(t.transport != srdma::QpType::kUd && has_payload(t.op) && !ends_message(t.op) &&
        opcode_row(last_opcode(t)).kind == opcode_row(t.op).kind);
  std::uint32_t packets = 0;
  std::uint64_t bytes = 0;
  const std::byte* at = m.addr;
  unroll(t, mtu, [&](Packet& p) {
    ++packets;
    bytes += p.payload_length;
    for (const MemPiece& piece : std::span<const MemPiece>(p.payload)) {
      check(piece.addr == at);
      at += piece.length;
    }
  });
  check(packets == t.count && bytes == t.payload_length && at == m.addr + m.length);
  const TrainPrefix again = encode_train(t, f.pkey);
  check(again.length == record.size() - t.payload_length);
  ParsedFrame g;
  Bytes rebuilt(again.bytes.begin(), again.bytes.begin() + static_cast<std::ptrdiff_t>(again.length));
  rebuilt.insert(rebuilt.end(), m.addr, m.addr + m.length);
  check(decode_train(rebuilt, scratch, 4096, g) == FrameError::kNone);
  check(g.pkt.count == t.count && g.pkt.op == t.op && g.pkt.last_op == t.last_op && g.pkt.psn == t.psn &&
        g.pkt.imm == t.imm && g.pkt.va == t.va && g.pkt.rkey == t.rkey && g.pkt.solicited == t.solicited &&
        g.pkt.ack_req == t.ack_req && g.pkt.payload_length == t.payload_length);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> frame(reinterpret_cast<const std::byte*>(data), size);
  const IpUdpFields ip = fuzz_ip();
  check_train_record(frame);

  ParsedFrame raw;
  const FrameError e = parse_frame(frame, ip, false, raw);
  check(!frame_error_str(e).empty());
  (void)drop_reason_of(e);
  check(e != FrameError::kBadIcrc);
  if (size > kMaxFrameBytes) check(e == FrameError::kBadLength);
  check_verdict(frame, e);
  if (accepted(e)) check_accepted(frame, e, raw);

  parse_checked(frame, e, raw);
  if (size <= kBthVariantByteForFuzz) (void)compute_icrc(ip, frame);  // shorter than the byte it masks
  if (!size_parseable(size)) return 0;

  // The ICRC bytes do not change what the frame says: use them to pick an
  // Identification, a bit to flip and where to split the payload.
  const std::byte* tail = frame.data() + size - kIcrcBytes;
  const std::uint32_t ctl = load_le32(tail);
  const std::span<const std::byte> body = frame.first(size - kIcrcBytes);
  Bytes fixed(frame.begin(), frame.end());
  IpUdpFields sent = ip;

  // Recomputed for an Identification in the window: passes.
  sent.ip_id = static_cast<std::uint16_t>(ctl % kIcrcIdWindow);
  store_le32(fixed.data() + body.size(), compute_icrc(sent, body));
  check(parse_checked(fixed, e, raw) != FrameError::kBadIcrc);

  // Outside it: fails (ids that differ in 16 bits never share a CRC).
  sent.ip_id = static_cast<std::uint16_t>(kIcrcIdWindow + (ctl >> 6) % (0x10000 - kIcrcIdWindow));
  store_le32(fixed.data() + body.size(), compute_icrc(sent, body));
  check(parse_checked(fixed, e, raw) == FrameError::kBadIcrc);

  // One bit flipped: the verdict is the reference check's (a covered bit
  // fails, barring a CRC collision with another Identification's); BTH
  // byte 4 is neither covered nor read, so flipping it changes nothing.
  sent.ip_id = static_cast<std::uint16_t>(ctl % kIcrcIdWindow);
  store_le32(fixed.data() + body.size(), compute_icrc(sent, body));
  const std::size_t bit = (ctl >> 8) % (body.size() * 8);
  fixed[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
  ParsedFrame flipped_out;
  const FrameError flipped = parse_frame(fixed, ip, false, flipped_out);
  const FrameError flipped_checked = parse_checked(fixed, flipped, flipped_out);
  if (bit / 8 == kBthVariantByteForFuzz) {
    check_same(flipped, flipped_out, e, raw, false);
    check(flipped_checked != FrameError::kBadIcrc);
  }

  if (accepted(e)) {
    check_round_trip(frame, e, raw, ctl >> 16);
    sweep_field(frame, raw, ctl >> 24);
  }
  return 0;
}
