// The RoCEv2 frame codec: every RC opcode there and back with its fields at
// their limits, bytes where IBA puts them (checked against hand-written
// frames), the ICRC against zlib over a hand-built input and against a
// vector computed outside this code, and every way parse_frame() refuses.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <initializer_list>
#include <vector>

#include "hca/roce_frame.h"

namespace srdma::hca {
namespace {

using Bytes = std::vector<std::byte>;

Bytes bytes(std::initializer_list<int> v) {
  Bytes b;
  for (int x : v) b.push_back(static_cast<std::byte>(x));
  return b;
}

Bytes pattern(std::size_t n, int seed = 1) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 7 + static_cast<std::size_t>(seed)) & 0xff);
  return b;
}

IpUdpFields test_ip() {
  IpUdpFields ip;
  ip.src_ip = 0xc0a80101;  // 192.168.1.1
  ip.dst_ip = 0xc0a80102;  // 192.168.1.2
  ip.src_port = 0xc123;
  return ip;
}

std::span<const std::byte> headers_of(const FrameHeaders& h) { return {h.bytes.data(), h.length}; }

void append_le32(Bytes& f, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) f.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}

// Headers, payload, pad and ICRC, the way a sender lays them out.
Bytes assemble(const Packet& p, const IpUdpFields& ip, std::uint16_t pkey = kDefaultPkey) {
  const FrameHeaders h = build_headers(p, pkey);
  Bytes f(h.bytes.begin(), h.bytes.begin() + h.length);
  std::uint64_t left = p.payload_length;
  for (const MemPiece& m : std::span<const MemPiece>(p.payload)) {
    const std::uint64_t n = std::min(left, m.length);
    f.insert(f.end(), m.addr, m.addr + n);
    left -= n;
  }
  f.resize(f.size() + h.pad);
  append_le32(f, compute_icrc(ip, headers_of(h), p.payload, p.payload_length, h.pad));
  return f;
}

// Recomputes the ICRC of an edited frame, so that what parse_frame() sees
// next is the field the edit made, not a corruption.
void reseal(Bytes& f, const IpUdpFields& ip) {
  const std::uint32_t icrc = compute_icrc(ip, std::span<const std::byte>(f).first(f.size() - kIcrcBytes));
  f.resize(f.size() - kIcrcBytes);
  append_le32(f, icrc);
}

void put_payload(Packet& p, Bytes& storage) {
  p.payload.clear();
  if (!storage.empty()) p.payload.push_back(MemPiece{storage.data(), storage.size()});
  p.payload_length = static_cast<std::uint32_t>(storage.size());
}

FrameError parse(std::span<const std::byte> f, ParsedFrame& out, bool check_icrc = true) {
  return parse_frame(f, test_ip(), check_icrc, out);
}

FrameError parse(std::span<const std::byte> f, bool check_icrc = true) {
  ParsedFrame out;
  return parse(f, out, check_icrc);
}

// The ICRC built independently of the codec: the masked pseudo-headers
// written out byte by byte, then zlib.
std::uint32_t reference_icrc(const IpUdpFields& ip, std::span<const std::byte> frame_without_icrc) {
  const std::size_t len = frame_without_icrc.size() + 4;
  const std::size_t ip_total = 28 + len, udp_len = 8 + len;
  std::vector<std::uint8_t> in(8, 0xff);
  const std::uint8_t df = ip.dont_fragment ? 0x40 : 0x00;
  const std::uint8_t ipv4[20] = {0x45, 0xff, std::uint8_t(ip_total >> 8), std::uint8_t(ip_total),
                                 std::uint8_t(ip.ip_id >> 8), std::uint8_t(ip.ip_id), df, 0x00, 0xff, 17,
                                 0xff, 0xff, std::uint8_t(ip.src_ip >> 24), std::uint8_t(ip.src_ip >> 16),
                                 std::uint8_t(ip.src_ip >> 8), std::uint8_t(ip.src_ip),
                                 std::uint8_t(ip.dst_ip >> 24), std::uint8_t(ip.dst_ip >> 16),
                                 std::uint8_t(ip.dst_ip >> 8), std::uint8_t(ip.dst_ip)};
  const std::uint8_t udp[8] = {std::uint8_t(ip.src_port >> 8), std::uint8_t(ip.src_port),
                               std::uint8_t(ip.dst_port >> 8), std::uint8_t(ip.dst_port),
                               std::uint8_t(udp_len >> 8),     std::uint8_t(udp_len),
                               0xff,                           0xff};
  in.insert(in.end(), ipv4, ipv4 + 20);
  in.insert(in.end(), udp, udp + 8);
  for (std::byte b : frame_without_icrc) in.push_back(std::to_integer<std::uint8_t>(b));
  in[36 + 4] = 0xff;  // BTH byte 4
  return static_cast<std::uint32_t>(crc32(0, in.data(), static_cast<uInt>(in.size())));
}

constexpr Opcode kAllRcOpcodes[] = {
    Opcode::kSendFirst,         Opcode::kSendMiddle,         Opcode::kSendLast,         Opcode::kSendLastImm,
    Opcode::kSendOnly,          Opcode::kSendOnlyImm,        Opcode::kWriteFirst,       Opcode::kWriteMiddle,
    Opcode::kWriteLast,         Opcode::kWriteLastImm,       Opcode::kWriteOnly,        Opcode::kWriteOnlyImm,
    Opcode::kReadRequest,       Opcode::kReadResponseFirst,  Opcode::kReadResponseMiddle,
    Opcode::kReadResponseLast,  Opcode::kReadResponseOnly,   Opcode::kAck,              Opcode::kAtomicAck,
    Opcode::kCmpSwap,           Opcode::kFetchAdd,           Opcode::kSendLastInv,      Opcode::kSendOnlyInv,
};

constexpr Syndrome kAllSyndromes[] = {
    Syndrome::kAck,          Syndrome::kRnrNak,           Syndrome::kPsnSequenceError,       Syndrome::kInvalidRequest,
    Syndrome::kRemoteAccessError, Syndrome::kRemoteOperationalError, Syndrome::kInvalidRdRequest,
};

// A packet of `op` with every field its headers carry set to `fill` (a
// byte repeated) and the others left zero: what the parse must give back.
Packet packet_of(Opcode op, std::uint64_t fill, Bytes& payload_storage, std::size_t payload_bytes) {
  Packet p;
  p.op = op;
  p.solicited = (fill & 1) != 0;
  p.ack_req = (fill & 2) != 0;
  p.dst_qpn = static_cast<std::uint32_t>(fill) & kPsnMask;
  p.psn = static_cast<std::uint32_t>(fill >> 8) & kPsnMask;
  if (has_reth(op) || is_atomic(op)) {
    p.va = fill;
    p.rkey = static_cast<std::uint32_t>(fill >> 4);
  }
  if (has_reth(op)) p.dma_length = static_cast<std::uint32_t>(fill >> 12);
  if (op == Opcode::kCmpSwap) {
    p.compare_add = fill ^ 0x0102030405060708;
    p.swap = ~fill;
  }
  if (op == Opcode::kFetchAdd) p.compare_add = fill ^ 0x0807060504030201;  // the addend
  if (has_aeth(op)) p.msn = static_cast<std::uint32_t>(fill >> 16) & kPsnMask;
  if (op == Opcode::kAtomicAck) p.atomic_orig = fill * 3;
  if (has_imm(op) || has_ieth(op)) p.imm = static_cast<std::uint32_t>(fill >> 24);
  payload_storage = has_payload(op) ? pattern(payload_bytes, static_cast<int>(fill & 0xff)) : Bytes{};
  put_payload(p, payload_storage);
  return p;
}

void expect_same_fields(const Packet& got, const Packet& want) {
  EXPECT_EQ(got.op, want.op);
  EXPECT_EQ(got.solicited, want.solicited);
  EXPECT_EQ(got.ack_req, want.ack_req);
  EXPECT_EQ(got.dst_qpn, want.dst_qpn);
  EXPECT_EQ(got.psn, want.psn);
  EXPECT_EQ(got.va, want.va);
  EXPECT_EQ(got.rkey, want.rkey);
  EXPECT_EQ(got.dma_length, want.dma_length);
  EXPECT_EQ(got.imm, want.imm);
  EXPECT_EQ(got.compare_add, want.compare_add);
  EXPECT_EQ(got.swap, want.swap);
  EXPECT_EQ(got.atomic_orig, want.atomic_orig);
  EXPECT_EQ(got.syndrome, want.syndrome);
  EXPECT_EQ(got.rnr_timer, want.rnr_timer);
  EXPECT_EQ(got.msn, want.msn);
  EXPECT_EQ(got.payload_length, want.payload_length);
}

void expect_payload(const ParsedFrame& out, std::span<const std::byte> frame, std::span<const std::byte> want) {
  ASSERT_EQ(out.pkt.payload_length, want.size());
  if (want.empty()) {
    EXPECT_TRUE(out.pkt.payload.empty());
    return;
  }
  ASSERT_EQ(out.pkt.payload.size(), 1u);
  const MemPiece& m = out.pkt.payload.front();
  EXPECT_GE(m.addr, frame.data());
  EXPECT_LE(m.addr + m.length, frame.data() + frame.size());
  EXPECT_EQ(std::memcmp(m.addr, want.data(), want.size()), 0);
}

TEST(RoceFrame, EveryRcOpcodeRoundTripsWithItsFields) {
  constexpr std::uint64_t kFills[] = {0, ~std::uint64_t{0}, 0x0123456789abcdef, 0xfedcba9876543210};
  constexpr std::size_t kPayloads[] = {0, 1, 2, 3, 4, 5, 255, 1024, kMaxPayload - 1, kMaxPayload};
  for (Opcode op : kAllRcOpcodes) {
    for (std::uint64_t fill : kFills) {
      for (std::size_t n : kPayloads) {
        SCOPED_TRACE(testing::Message() << opcode_str(op) << " fill " << std::hex << fill << std::dec << " payload " << n);
        Bytes storage;
        const Packet p = packet_of(op, fill, storage, n);
        const Bytes f = assemble(p, test_ip());
        EXPECT_EQ(f.size(), frame_bytes(header_bytes(op), p.payload_length));
        EXPECT_EQ(build_headers(p).length, header_bytes(op));
        ParsedFrame out;
        ASSERT_EQ(parse(f, out), FrameError::kNone);
        expect_same_fields(out.pkt, p);
        expect_payload(out, f, storage);
        EXPECT_EQ(out.pkey, kDefaultPkey);
        if (!has_payload(op)) break;  // one payload length is enough
      }
    }
  }
}

TEST(RoceFrame, FieldsAtTheirLimitsRoundTrip) {
  Packet p;
  p.op = Opcode::kWriteOnlyImm;
  p.dst_qpn = 0xffffff;
  p.psn = 0xffffff;
  p.va = ~std::uint64_t{0};
  p.rkey = 0xffffffff;
  p.dma_length = 0xffffffff;
  p.imm = 0xffffffff;
  p.solicited = p.ack_req = true;
  const Bytes f = assemble(p, test_ip());
  ParsedFrame out;
  ASSERT_EQ(parse(f, out), FrameError::kNone);
  expect_same_fields(out.pkt, p);
  // Bits above 24 of a QPN, PSN or MSN are not the wire's: masked off.
  p.op = Opcode::kAck;
  p.dst_qpn = 0xff123456;
  p.psn = 0x01000002;
  p.msn = 0xab000003;
  ASSERT_EQ(parse(assemble(p, test_ip()), out), FrameError::kNone);
  EXPECT_EQ(out.pkt.dst_qpn, 0x123456u);
  EXPECT_EQ(out.pkt.psn, 2u);
  EXPECT_EQ(out.pkt.msn, 3u);
}

TEST(RoceFrame, EverySyndromeRoundTrips) {
  for (Opcode op : {Opcode::kAck, Opcode::kAtomicAck, Opcode::kReadResponseOnly}) {
    for (Syndrome s : kAllSyndromes) {
      for (std::uint8_t timer = 0; timer < (s == Syndrome::kRnrNak ? 32 : 1); ++timer) {
        Packet p;
        p.op = op;
        p.syndrome = s;
        p.rnr_timer = timer;
        p.msn = 0xffffff;
        ParsedFrame out;
        ASSERT_EQ(parse(assemble(p, test_ip()), out), FrameError::kNone);
        EXPECT_EQ(out.pkt.syndrome, s);
        EXPECT_EQ(out.pkt.rnr_timer, timer);
        EXPECT_EQ(out.pkt.msn, 0xffffffu);
      }
    }
  }
}

TEST(RoceFrame, AethSyndromeBytes) {
  const std::pair<Syndrome, std::uint8_t> kWire[] = {
      {Syndrome::kAck, 0x1f},
      {Syndrome::kPsnSequenceError, 0x60},
      {Syndrome::kInvalidRequest, 0x61},
      {Syndrome::kRemoteAccessError, 0x62},
      {Syndrome::kRemoteOperationalError, 0x63},
      {Syndrome::kInvalidRdRequest, 0x64},
  };
  Packet p;
  p.op = Opcode::kAck;
  for (auto [s, wire] : kWire) {
    p.syndrome = s;
    EXPECT_EQ(std::to_integer<int>(build_headers(p).bytes[12]), wire);
  }
  p.syndrome = Syndrome::kRnrNak;
  p.rnr_timer = 14;
  EXPECT_EQ(std::to_integer<int>(build_headers(p).bytes[12]), 0x2e);
  p.rnr_timer = 0xff;  // only five bits go out
  EXPECT_EQ(std::to_integer<int>(build_headers(p).bytes[12]), 0x3f);
  // An ACK with a credit count parses as an ACK.
  for (int credits = 0; credits < 32; ++credits) {
    Bytes f = assemble(Packet{}, test_ip());
    f[12] = static_cast<std::byte>(credits);
    reseal(f, test_ip());
    ParsedFrame out;
    ASSERT_EQ(parse(f, out), FrameError::kNone);
    EXPECT_EQ(out.pkt.syndrome, Syndrome::kAck);
  }
}

TEST(RoceFrame, AtomicEthCarriesSwapOrAddThenCompare) {
  Packet p;
  p.op = Opcode::kCmpSwap;
  p.ack_req = true;
  p.dst_qpn = 0x000102;
  p.psn = 0xfffffe;
  p.va = 0x1122334455667788;
  p.rkey = 0x99aabbcc;
  p.compare_add = 0x0102030405060708;  // compare
  p.swap = 0xf1f2f3f4f5f6f7f8;
  FrameHeaders h = build_headers(p);
  EXPECT_EQ(Bytes(h.bytes.begin(), h.bytes.begin() + h.length),
            bytes({0x13, 0x00, 0xff, 0xff, 0x00, 0x00, 0x01, 0x02, 0x80, 0xff, 0xff, 0xfe,  // BTH
                   0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc,  // VA, R_Key
                   0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8,                          // Swap
                   0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}));                       // Compare
  p.op = Opcode::kFetchAdd;
  p.compare_add = 5;  // the addend
  h = build_headers(p);
  EXPECT_EQ(Bytes(h.bytes.begin() + 24, h.bytes.begin() + h.length),
            bytes({0, 0, 0, 0, 0, 0, 0, 5, /* Compare, unused */ 0, 0, 0, 0, 0, 0, 0, 0}));
  ParsedFrame out;
  ASSERT_EQ(parse(assemble(p, test_ip()), out), FrameError::kNone);
  EXPECT_EQ(out.pkt.compare_add, 5u);
  EXPECT_EQ(out.pkt.swap, 0u);
}

TEST(RoceFrame, HeaderBytesAreWhereIbaPutsThem) {
  Packet p;
  p.op = Opcode::kAck;
  p.dst_qpn = 0xabcdef;
  p.psn = 5;
  p.syndrome = Syndrome::kPsnSequenceError;
  p.msn = 0x010203;
  FrameHeaders h = build_headers(p);
  EXPECT_EQ(Bytes(h.bytes.begin(), h.bytes.begin() + h.length),
            bytes({0x11, 0x00, 0xff, 0xff, 0x00, 0xab, 0xcd, 0xef, 0x00, 0x00, 0x00, 0x05, 0x60, 0x01, 0x02, 0x03}));
  EXPECT_EQ(h.pad, 0);

  p = Packet{};
  p.op = Opcode::kAtomicAck;
  p.dst_qpn = 7;
  p.psn = 0x123456;
  p.msn = 9;
  p.atomic_orig = 0xa1a2a3a4a5a6a7a8;
  h = build_headers(p);
  EXPECT_EQ(Bytes(h.bytes.begin(), h.bytes.begin() + h.length),
            bytes({0x12, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x07, 0x00, 0x12, 0x34, 0x56, 0x1f, 0x00, 0x00, 0x09,
                   0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8}));

  p = Packet{};
  p.op = Opcode::kSendOnlyImm;
  p.solicited = true;
  p.ack_req = true;
  p.dst_qpn = 0x11;
  p.psn = 0x22;
  p.imm = 0xdeadbeef;
  p.payload_length = 2;  // PadCnt 2
  h = build_headers(p, kLimitedDefaultPkey);
  EXPECT_EQ(Bytes(h.bytes.begin(), h.bytes.begin() + h.length),
            bytes({0x05, 0xa0, 0x7f, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x22, 0xde, 0xad, 0xbe, 0xef}));
  EXPECT_EQ(h.pad, 2);

  p.op = Opcode::kSendOnlyInv;  // IETH: the rkey to invalidate
  p.solicited = false;
  p.imm = 0x00c0ffee;
  p.payload_length = 7;  // PadCnt 1
  h = build_headers(p);
  EXPECT_EQ(Bytes(h.bytes.begin(), h.bytes.begin() + h.length),
            bytes({0x17, 0x10, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x22, 0x00, 0xc0, 0xff, 0xee}));

  p = Packet{};
  p.op = Opcode::kReadRequest;
  p.ack_req = true;
  p.dst_qpn = 0x000300;
  p.psn = 0x000400;
  p.va = 0x00007f0012345000;
  p.rkey = 0x1234;
  p.dma_length = 0x10000;
  h = build_headers(p);
  EXPECT_EQ(Bytes(h.bytes.begin(), h.bytes.begin() + h.length),
            bytes({0x0c, 0x00, 0xff, 0xff, 0x00, 0x00, 0x03, 0x00, 0x80, 0x00, 0x04, 0x00, 0x00, 0x00, 0x7f, 0x00,
                   0x12, 0x34, 0x50, 0x00, 0x00, 0x00, 0x12, 0x34, 0x00, 0x01, 0x00, 0x00}));

  p.op = Opcode::kWriteOnlyImm;  // RETH, then ImmDt
  p.imm = 0x01020304;
  h = build_headers(p);
  ASSERT_EQ(h.length, 32);
  EXPECT_EQ(Bytes(h.bytes.begin() + 28, h.bytes.begin() + 32), bytes({1, 2, 3, 4}));
}

// A WRITE ONLY frame written out by hand; its ICRC was computed outside this
// code, with python3's zlib over the same bytes behind the masked pseudo-
// headers (src 192.168.1.1:0xc123, dst 192.168.1.2:4791, ID 0, DF):
//   zlib.crc32(b'\xff'*8 + ipv4 + udp + frame_with_byte4_ff) == 0xf95b07c4
// (IDs 1, 63, 64 give 0x90170235, 0xa6d3fba7, 0x708e0690).
const Bytes kWriteOnlyFrame = bytes({
    0x0a, 0x30, 0xff, 0xff, 0x00, 0x12, 0x34, 0x56, 0x80, 0x00, 0x01, 0x02,  // BTH, PadCnt 3, A
    0x00, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x10, 0x00,                          // RETH VA
    0x00, 0xab, 0xcd, 0xef, 0x00, 0x00, 0x00, 0x05,                          // R_Key, DMA length
    0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x00, 0x00, 0x00,                          // "hello", pad
    0xc4, 0x07, 0x5b, 0xf9,                                                  // ICRC, little-endian
});
constexpr std::uint32_t kWriteOnlyIcrc = 0xf95b07c4;

TEST(RoceFrame, WriteOnlyMatchesAVectorComputedElsewhere) {
  Packet p;
  p.op = Opcode::kWriteOnly;
  p.ack_req = true;
  p.dst_qpn = 0x123456;
  p.psn = 0x000102;
  p.va = 0x00007f0000001000;
  p.rkey = 0x00abcdef;
  p.dma_length = 5;
  Bytes hello = bytes({'h', 'e', 'l', 'l', 'o'});
  put_payload(p, hello);
  EXPECT_EQ(assemble(p, test_ip()), kWriteOnlyFrame);
  const auto body = std::span<const std::byte>(kWriteOnlyFrame).first(kWriteOnlyFrame.size() - 4);
  EXPECT_EQ(compute_icrc(test_ip(), body), kWriteOnlyIcrc);
  EXPECT_EQ(reference_icrc(test_ip(), body), kWriteOnlyIcrc);
  IpUdpFields ip = test_ip();
  ip.ip_id = 1;
  EXPECT_EQ(compute_icrc(ip, body), 0x90170235u);
  ip.ip_id = 63;
  EXPECT_EQ(compute_icrc(ip, body), 0xa6d3fba7u);
  ip.ip_id = 64;
  EXPECT_EQ(compute_icrc(ip, body), 0x708e0690u);

  ParsedFrame out;
  ASSERT_EQ(parse(kWriteOnlyFrame, out), FrameError::kNone);
  expect_same_fields(out.pkt, p);
  expect_payload(out, kWriteOnlyFrame, hello);
}

TEST(RoceFrame, IcrcAgreesWithAHandBuiltInputWhateverTheFields) {
  Bytes storage;
  for (Opcode op : kAllRcOpcodes) {
    const Packet p = packet_of(op, 0x5a5a5a5a5a5a5a5a, storage, 37);
    for (bool df : {true, false}) {
      IpUdpFields ip = test_ip();
      ip.dont_fragment = df;
      ip.ip_id = df ? 0 : 0x1234;
      ip.src_port = 0xffff;
      ip.dst_ip = 0x0a000001;
      const Bytes f = assemble(p, ip);
      const auto body = std::span<const std::byte>(f).first(f.size() - 4);
      EXPECT_EQ(compute_icrc(ip, body), reference_icrc(ip, body)) << opcode_str(op);
    }
  }
}

TEST(RoceFrame, IcrcOverPiecesEqualsIcrcOverTheContiguousFrame) {
  Bytes data = pattern(1000);
  Packet p;
  p.op = Opcode::kSendOnly;
  p.payload.push_back(MemPiece{data.data(), 1});
  p.payload.push_back(MemPiece{data.data() + 1, 500});
  p.payload.push_back(MemPiece{data.data() + 501, 98});
  p.payload.push_back(MemPiece{data.data() + 599, 400});
  p.payload.push_back(MemPiece{data.data() + 999, 1});  // spills past the inline slots
  p.payload_length = 1000;
  const Bytes f = assemble(p, test_ip());
  const auto body = std::span<const std::byte>(f).first(f.size() - 4);
  const FrameHeaders h = build_headers(p);
  EXPECT_EQ(compute_icrc(test_ip(), headers_of(h), p.payload, 1000, h.pad), compute_icrc(test_ip(), body));
  EXPECT_EQ(compute_icrc(test_ip(), body), reference_icrc(test_ip(), body));
  ParsedFrame out;
  ASSERT_EQ(parse(f, out), FrameError::kNone);
  expect_payload(out, f, data);
}

TEST(RoceFrame, IcrcAcceptsIdentificationsInsideTheWindowOnly) {
  Bytes storage;
  for (std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{1000}, std::size_t{kMaxPayload}}) {
    const Packet p = packet_of(Opcode::kWriteOnly, 0x77, storage, n);
    for (std::uint32_t id : {0u, 1u, 2u, 31u, 32u, 33u, 62u, 63u, 64u, 65u, 127u, 128u, 0x1000u, 0xffffu}) {
      IpUdpFields sent = test_ip();
      sent.ip_id = static_cast<std::uint16_t>(id);
      const Bytes f = assemble(p, sent);
      IpUdpFields expected = test_ip();
      expected.ip_id = 999;  // ignored by the check
      ParsedFrame out;
      EXPECT_EQ(parse_frame(f, expected, true, out), id < kIcrcIdWindow ? FrameError::kNone : FrameError::kBadIcrc)
          << "payload " << n << " id " << id;
    }
  }
  // Every ID of the window, and a flipped bit under each of them.
  const Packet p = packet_of(Opcode::kSendOnly, 0x99, storage, 64);
  for (std::uint16_t id = 0; id < kIcrcIdWindow + 4; ++id) {
    IpUdpFields sent = test_ip();
    sent.ip_id = id;
    Bytes f = assemble(p, sent);
    EXPECT_EQ(parse(f), id < kIcrcIdWindow ? FrameError::kNone : FrameError::kBadIcrc) << id;
    f[20] ^= std::byte{0x10};
    EXPECT_EQ(parse(f), FrameError::kBadIcrc) << id;
  }
}

TEST(RoceFrame, IcrcCoversTheAddressesPortsAndFlags) {
  const Bytes& f = kWriteOnlyFrame;
  auto with = [](auto edit) {
    IpUdpFields ip = test_ip();
    edit(ip);
    return ip;
  };
  ParsedFrame out;
  EXPECT_EQ(parse_frame(f, with([](IpUdpFields& ip) { ip.src_ip ^= 1; }), true, out), FrameError::kBadIcrc);
  EXPECT_EQ(parse_frame(f, with([](IpUdpFields& ip) { ip.dst_ip ^= 0x80000000; }), true, out), FrameError::kBadIcrc);
  EXPECT_EQ(parse_frame(f, with([](IpUdpFields& ip) { ip.src_port ^= 2; }), true, out), FrameError::kBadIcrc);
  EXPECT_EQ(parse_frame(f, with([](IpUdpFields& ip) { ip.dst_port = 4792; }), true, out), FrameError::kBadIcrc);
  EXPECT_EQ(parse_frame(f, with([](IpUdpFields& ip) { ip.dont_fragment = false; }), true, out),
            FrameError::kBadIcrc);
  // Unchecked, the same frame parses whatever `ip` says.
  EXPECT_EQ(parse_frame(f, with([](IpUdpFields& ip) { ip.src_ip = 0; }), false, out), FrameError::kNone);
}

TEST(RoceFrame, AFlippedBitAnywhereIsABadIcrc) {
  Bytes storage;
  for (Opcode op : {Opcode::kWriteOnly, Opcode::kAck, Opcode::kCmpSwap, Opcode::kSendOnlyImm}) {
    const Bytes good = assemble(packet_of(op, 0x3c3c3c3c3c3c3c3c, storage, 21), test_ip());
    for (std::size_t i = 0; i < good.size(); ++i) {
      for (int bit = 0; bit < 8; ++bit) {
        Bytes f = good;
        f[i] ^= static_cast<std::byte>(1 << bit);
        // BTH byte 4 (F, B, Resv6) is the one the ICRC leaves out.
        EXPECT_EQ(parse(f), i == 4 ? FrameError::kNone : FrameError::kBadIcrc)
            << opcode_str(op) << " byte " << i << " bit " << bit;
      }
    }
  }
}

// RoCEv2 over IPv6 (IBA A17.3.3): the IPv6 header in the ICRC's input, with
// traffic class, flow label and hop limit all ones.
IpUdpFields test_ip6() {
  IpUdpFields ip;
  ip.ipv6 = true;
  ip.src_ip6 = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};  // 2001:db8::1
  ip.dst_ip6 = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};  // 2001:db8::2
  ip.src_port = 0xc123;
  return ip;
}

// The IPv6 ICRC built independently of the codec: the masked IPv6 and UDP
// headers written out byte by byte (with the traffic class, flow label and
// hop limit a packet really had, then masked here), then zlib.
std::uint32_t reference_icrc6(const IpUdpFields& ip, std::span<const std::byte> frame_without_icrc,
                              std::uint8_t tclass = 0, std::uint32_t flow = 0, std::uint8_t hops = 64) {
  const std::size_t udp_len = 8 + frame_without_icrc.size() + 4;
  std::vector<std::uint8_t> in;
  in.reserve(8 + 40 + 8 + frame_without_icrc.size());
  in.assign(8, 0xff);
  std::uint8_t ip6[40] = {std::uint8_t(0x60 | tclass >> 4), std::uint8_t(tclass << 4 | (flow >> 16 & 0xf)),
                          std::uint8_t(flow >> 8), std::uint8_t(flow), std::uint8_t(udp_len >> 8),
                          std::uint8_t(udp_len), 17, hops};
  std::memcpy(ip6 + 8, ip.src_ip6.data(), 16);
  std::memcpy(ip6 + 24, ip.dst_ip6.data(), 16);
  // The mask: version kept, the rest of the first word and the hop limit ones.
  ip6[0] |= 0x0f;
  ip6[1] = ip6[2] = ip6[3] = 0xff;
  ip6[7] = 0xff;
  const std::uint8_t udp[8] = {std::uint8_t(ip.src_port >> 8), std::uint8_t(ip.src_port),
                               std::uint8_t(ip.dst_port >> 8), std::uint8_t(ip.dst_port),
                               std::uint8_t(udp_len >> 8),     std::uint8_t(udp_len),
                               0xff,                           0xff};
  in.insert(in.end(), ip6, ip6 + 40);
  in.insert(in.end(), udp, udp + 8);
  const std::size_t bth = in.size();
  for (std::byte b : frame_without_icrc) in.push_back(std::to_integer<std::uint8_t>(b));
  in[bth + 4] = 0xff;  // BTH byte 4
  return static_cast<std::uint32_t>(crc32(0, in.data(), static_cast<uInt>(in.size())));
}

// kWriteOnlyFrame's body between 2001:db8::1:0xc123 and 2001:db8::2:4791;
// the ICRC computed outside this code with python3:
//   zlib.crc32(b'\xff'*8 + bytes([0x6f,0xff,0xff,0xff]) + pack('!H', 8+40) +
//              bytes([17, 0xff]) + src + dst + pack('!HHHH', 0xc123, 4791, 48, 0xffff) +
//              frame_with_byte4_ff) == 0x42331413
constexpr std::uint32_t kWriteOnlyIcrc6 = 0x42331413;

TEST(RoceFrameIpv6, WriteOnlyMatchesAVectorComputedElsewhere) {
  const auto body = std::span<const std::byte>(kWriteOnlyFrame).first(kWriteOnlyFrame.size() - 4);
  EXPECT_EQ(compute_icrc(test_ip6(), body), kWriteOnlyIcrc6);
  EXPECT_EQ(reference_icrc6(test_ip6(), body), kWriteOnlyIcrc6);
  Bytes f(body.begin(), body.end());
  append_le32(f, kWriteOnlyIcrc6);
  ParsedFrame out;
  ASSERT_EQ(parse_frame(f, test_ip6(), true, out), FrameError::kNone);
  EXPECT_EQ(out.pkt.dma_length, 5u);
  // The IPv4 ICRC of the same frame is another value: the families differ.
  EXPECT_NE(compute_icrc(test_ip(), body), kWriteOnlyIcrc6);
  EXPECT_EQ(parse_frame(f, test_ip(), true, out), FrameError::kBadIcrc);
}

TEST(RoceFrameIpv6, IcrcIgnoresTrafficClassFlowLabelAndHopLimit) {
  Bytes storage;
  for (Opcode op : kAllRcOpcodes) {
    const Packet p = packet_of(op, 0x1122334455667788, storage, 29);
    const Bytes f = assemble(p, test_ip6());
    const auto body = std::span<const std::byte>(f).first(f.size() - 4);
    const std::uint32_t icrc = compute_icrc(test_ip6(), body);
    // Whatever the routers on the way did to the variant fields.
    for (std::uint8_t tclass : {0x00, 0x2e, 0xff})
      for (std::uint32_t flow : {0u, 0x12345u, 0xfffffu})
        for (std::uint8_t hops : {1, 64, 255})
          EXPECT_EQ(reference_icrc6(test_ip6(), body, tclass, flow, hops), icrc) << opcode_str(op);
    ParsedFrame out;
    EXPECT_EQ(parse_frame(f, test_ip6(), true, out), FrameError::kNone) << opcode_str(op);
  }
}

TEST(RoceFrameIpv6, IcrcCoversTheAddressesAndPortsExactly) {
  Bytes storage;
  const Bytes f = assemble(packet_of(Opcode::kSendOnly, 0x0f0f0f0f0f0f0f0f, storage, 64), test_ip6());
  auto with = [](auto edit) {
    IpUdpFields ip = test_ip6();
    edit(ip);
    return ip;
  };
  ParsedFrame out;
  EXPECT_EQ(parse_frame(f, with([](IpUdpFields& ip) { ip.src_ip6[15] ^= 1; }), true, out), FrameError::kBadIcrc);
  EXPECT_EQ(parse_frame(f, with([](IpUdpFields& ip) { ip.dst_ip6[0] ^= 0x80; }), true, out), FrameError::kBadIcrc);
  EXPECT_EQ(parse_frame(f, with([](IpUdpFields& ip) { ip.src_port ^= 2; }), true, out), FrameError::kBadIcrc);
  // IPv6 has no Identification: the IPv4 check's window does not apply (a
  // field the IPv6 check never reads changes nothing).
  EXPECT_EQ(parse_frame(f, with([](IpUdpFields& ip) { ip.ip_id = 7; }), true, out), FrameError::kNone);
  // Every flipped bit but BTH byte 4's is a bad ICRC.
  for (std::size_t i = 0; i < f.size(); ++i) {
    Bytes g = f;
    g[i] ^= std::byte{0x10};
    EXPECT_EQ(parse_frame(g, test_ip6(), true, out), i == 4 ? FrameError::kNone : FrameError::kBadIcrc) << i;
  }
}

TEST(RoceFrame, TruncatedAtEveryLengthIsRefused) {
  Bytes storage;
  for (Opcode op : kAllRcOpcodes) {
    const Bytes good = assemble(packet_of(op, 0x4242424242424242, storage, 9), test_ip());
    for (std::size_t len = 0; len < good.size(); ++len) {
      const std::span<const std::byte> f(good.data(), len);
      SCOPED_TRACE(testing::Message() << opcode_str(op) << " length " << len);
      EXPECT_EQ(parse(f), len < kBthBytes + kIcrcBytes ? FrameError::kTooShort : FrameError::kBadIcrc);
      ParsedFrame out;
      const FrameError unchecked = parse(f, out, false);
      if (len < header_bytes(op) + kIcrcBytes) {
        EXPECT_EQ(unchecked, FrameError::kTooShort);
      } else if (unchecked == FrameError::kNone) {
        // Cut at a 4-byte boundary inside the payload: a shorter packet,
        // which only the ICRC can tell.
        EXPECT_EQ(len % 4, 0u);
        EXPECT_LT(out.pkt.payload_length, 9u);
      } else {
        EXPECT_TRUE(unchecked == FrameError::kBadPad || unchecked == FrameError::kBadLength)
            << frame_error_str(unchecked);
      }
    }
  }
}

TEST(RoceFrame, RefusesAnyTransportVersionButZero) {
  for (int tver = 1; tver < 16; ++tver) {
    Bytes f = kWriteOnlyFrame;
    f[1] = static_cast<std::byte>(0x30 | tver);
    reseal(f, test_ip());
    EXPECT_EQ(parse(f), FrameError::kBadVersion) << tver;
  }
}

TEST(RoceFrame, RefusesOpcodesThatAreNotRcUcOrUdSend) {
  for (int opcode = 0; opcode < 256; ++opcode) {
    Bytes f = assemble(Packet{}, test_ip());  // an ACK: BTH + AETH
    f[0] = static_cast<std::byte>(opcode);
    reseal(f, test_ip());
    const FrameError e = parse(f, false);
    // IBA table 38, spelled out here apart from the opcode table: RC
    // 0x00..0x14, 0x16, 0x17 and IBA 1.5's ATOMIC WRITE 0x1d; UC's SENDs and
    // WRITEs 0x20..0x2b; UD SEND ONLY 0x64, 0x65; XRC (annex A14) RC's
    // again at 0xa0..0xb4, 0xb6, 0xb7, 0xbd; RoCEv2's CNP 0x81 (annex A17).
    const bool defined = (opcode <= 0x17 && opcode != 0x15) || opcode == 0x1d || (opcode >= 0x20 && opcode <= 0x2b) ||
                         opcode == 0x64 || opcode == 0x65 || (opcode >= 0xa0 && opcode <= 0xb7 && opcode != 0xb5) ||
                         opcode == 0xbd || opcode == 0x81;
    EXPECT_EQ(opcode_row(static_cast<std::uint8_t>(opcode)).valid(), defined) << opcode;
    if (defined) {
      EXPECT_NE(e, FrameError::kBadOpcode) << opcode;
    } else {
      EXPECT_EQ(e, FrameError::kBadOpcode) << opcode;
      EXPECT_EQ(parse(f), FrameError::kBadOpcode) << opcode;
    }
  }
}

TEST(RoceFrame, RefusesReservedAethSyndromes) {
  for (int syndrome = 0; syndrome < 256; ++syndrome) {
    Bytes f = assemble(Packet{}, test_ip());
    f[12] = static_cast<std::byte>(syndrome);
    reseal(f, test_ip());
    const bool defined = syndrome < 0x40 || (syndrome >= 0x60 && syndrome <= 0x64);
    EXPECT_EQ(parse(f), defined ? FrameError::kNone : FrameError::kBadOpcode) << syndrome;
  }
}

TEST(RoceFrame, AcceptsOnlyTheDefaultPartition) {
  for (std::uint32_t pkey : {0x0000u, 0x0001u, 0x8000u, 0x8001u, 0xfffeu, 0x7ffeu, 0x1234u}) {
    Packet p;
    EXPECT_EQ(parse(assemble(p, test_ip(), static_cast<std::uint16_t>(pkey))), FrameError::kBadPkey) << pkey;
  }
  for (std::uint16_t pkey : {kDefaultPkey, kLimitedDefaultPkey}) {
    ParsedFrame out;
    ASSERT_EQ(parse(assemble(Packet{}, test_ip(), pkey), out), FrameError::kNone);
    EXPECT_EQ(out.pkey, pkey);
  }
}

TEST(RoceFrame, RefusesAPadLongerThanWhatFollowsTheHeaders) {
  for (int pad = 1; pad < 4; ++pad) {
    Bytes f = assemble(Packet{}, test_ip());  // an ACK: nothing after the AETH
    f[1] = static_cast<std::byte>(pad << 4);
    reseal(f, test_ip());
    EXPECT_EQ(parse(f), FrameError::kBadPad) << pad;
  }
  Packet p;
  p.op = Opcode::kSendOnly;
  Bytes one = bytes({0x41});
  put_payload(p, one);
  Bytes f = assemble(p, test_ip());  // 1 byte, PadCnt 3
  f.erase(f.begin() + kBthBytes + 1, f.begin() + kBthBytes + 4);  // drop the pad bytes
  reseal(f, test_ip());
  EXPECT_EQ(parse(f), FrameError::kBadPad);
}

TEST(RoceFrame, RefusesLengthsTheOpcodeCannotHave) {
  // Payload on opcodes that carry none.
  Bytes four = pattern(4);
  for (Opcode op : {Opcode::kAck, Opcode::kAtomicAck, Opcode::kReadRequest, Opcode::kCmpSwap, Opcode::kFetchAdd}) {
    Packet p;
    p.op = op;
    put_payload(p, four);
    EXPECT_EQ(parse(assemble(p, test_ip())), FrameError::kBadLength) << opcode_str(op);
  }
  // More than a path MTU.
  Bytes big = pattern(kMaxPayload + 4);
  Packet p;
  p.op = Opcode::kSendOnly;
  put_payload(p, big);
  EXPECT_EQ(parse(assemble(p, test_ip())), FrameError::kBadLength);
  Bytes huge(kMaxFrameBytes + 1);
  std::copy(kWriteOnlyFrame.begin(), kWriteOnlyFrame.begin() + 12, huge.begin());
  EXPECT_EQ(parse(huge), FrameError::kBadLength);
  EXPECT_EQ(parse(huge, false), FrameError::kBadLength);
  // Payload and pad not a multiple of 4: PadCnt 3 says one byte of
  // payload, but two bytes follow the headers.
  Bytes f = kWriteOnlyFrame;
  f.erase(f.begin() + 30, f.begin() + 32);
  reseal(f, test_ip());
  EXPECT_EQ(parse(f), FrameError::kBadLength);
}

TEST(RoceFrame, UdSendParsesWithItsDeth) {
  Packet p;
  p.solicited = true;
  p.dst_qpn = 0x000010;
  p.src_qpn = 0xabcdef;
  p.psn = 0x123456;
  p.imm = 0x01020304;
  Bytes data = pattern(6);
  put_payload(p, data);
  p.transport = QpType::kUd;
  p.op = Opcode::kSendOnlyImm;
  p.qkey = 0x11111111;
  p.ack_req = true;  // never on the wire: UD is not acknowledged
  const FrameHeaders h = build_headers(p);
  EXPECT_EQ(Bytes(h.bytes.begin(), h.bytes.begin() + h.length),
            bytes({0x65, 0xa0, 0xff, 0xff, 0x00, 0x00, 0x00, 0x10, 0x00, 0x12, 0x34, 0x56,  // BTH, A = 0
                   0x11, 0x11, 0x11, 0x11, 0x00, 0xab, 0xcd, 0xef,                          // DETH
                   0x01, 0x02, 0x03, 0x04}));                                               // ImmDt
  for (bool with_imm : {false, true}) {
    p.op = with_imm ? Opcode::kSendOnlyImm : Opcode::kSendOnly;
    p.qkey = 0x80010002;
    const FrameHeaders ud = build_headers(p);
    Bytes f(ud.bytes.begin(), ud.bytes.begin() + ud.length);
    f.insert(f.end(), data.begin(), data.end());
    f.resize(f.size() + ud.pad);
    append_le32(f, compute_icrc(test_ip(), headers_of(ud), p.payload, p.payload_length, ud.pad));
    ParsedFrame out;
    ASSERT_EQ(parse(f, out), FrameError::kNone);
    EXPECT_EQ(out.pkt.transport, QpType::kUd);
    EXPECT_EQ(out.pkt.op, with_imm ? Opcode::kSendOnlyImm : Opcode::kSendOnly);
    EXPECT_EQ(out.qkey, 0x80010002u);
    EXPECT_EQ(out.deth_src_qpn, 0xabcdefu);
    EXPECT_EQ(out.pkt.dst_qpn, 0x10u);
    EXPECT_EQ(out.pkt.psn, 0x123456u);
    EXPECT_TRUE(out.pkt.solicited);
    EXPECT_FALSE(out.pkt.ack_req);
    EXPECT_EQ(out.pkt.imm, with_imm ? 0x01020304u : 0u);
    expect_payload(out, f, data);
    // Its DETH counts as a header: cut into it, the frame is too short.
    EXPECT_EQ(parse(std::span<const std::byte>(f).first(kBthBytes + kDethBytes - 1 + kIcrcBytes), false),
              FrameError::kTooShort);
  }
}

// RoCEv2's CNP (annex A17.9.3): opcode 0x81 whatever the QP's transport,
// the BECN bit, the destination QP, PSN 0, then 16 reserved bytes.
TEST(RoceFrame, CnpIsItsOpcodeBecnAndSixteenReservedBytes) {
  for (QpType t : {QpType::kRc, QpType::kUc}) {
    Packet p;
    p.transport = t;
    p.op = Opcode::kCnp;
    p.dst_qpn = 0x00abcd;
    const FrameHeaders h = build_headers(p);
    Bytes want = bytes({0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0xab, 0xcd, 0x00, 0x00, 0x00, 0x00});
    want.resize(kBthBytes + kCnpReservedBytes, std::byte{0});
    EXPECT_EQ(Bytes(h.bytes.begin(), h.bytes.begin() + h.length), want);
    const Bytes f = assemble(p, test_ip());
    EXPECT_EQ(f.size(), kBthBytes + kCnpReservedBytes + kIcrcBytes);
    ParsedFrame out;
    ASSERT_EQ(parse(f, out), FrameError::kNone);
    EXPECT_EQ(out.pkt.op, Opcode::kCnp);
    EXPECT_EQ(out.pkt.dst_qpn, 0x00abcdu);
    EXPECT_EQ(out.pkt.payload_length, 0u);
    // Cut into the reserved bytes: too short. A payload after them: refused.
    EXPECT_EQ(parse(std::span<const std::byte>(f).first(kBthBytes + 8 + kIcrcBytes), false), FrameError::kTooShort);
    Bytes longer(f.begin(), f.end() - kIcrcBytes);
    longer.resize(longer.size() + 4 + kIcrcBytes, std::byte{0});
    reseal(longer, test_ip());
    EXPECT_EQ(parse(longer), FrameError::kBadLength);
  }
}

TEST(RoceFrame, XrcRequestCarriesItsXrcEthAfterTheBth) {
  Packet p;
  p.transport = QpType::kXrcTgt;  // an INI's request: for a TGT QP
  p.op = Opcode::kWriteOnly;
  p.dst_qpn = 0x000010;
  p.psn = 0x123456;
  p.xrc_srqn = 0xfabcde;
  p.va = 0x1122334455667788;
  p.rkey = 0xa1b2c3d4;
  p.dma_length = 4;
  p.ack_req = true;
  Bytes data = pattern(4);
  put_payload(p, data);
  const FrameHeaders h = build_headers(p);
  EXPECT_EQ(Bytes(h.bytes.begin(), h.bytes.begin() + h.length),
            bytes({0xaa, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x10, 0x80, 0x12, 0x34, 0x56,  // BTH
                   0x00, 0xfa, 0xbc, 0xde,                                                  // XRCETH
                   0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0xa1, 0xb2, 0xc3, 0xd4,  // RETH
                   0x00, 0x00, 0x00, 0x04}));
  ParsedFrame out;
  const Bytes f = assemble(p, test_ip());
  ASSERT_EQ(parse(f, out), FrameError::kNone);
  EXPECT_EQ(out.pkt.transport, QpType::kXrcTgt);
  EXPECT_EQ(out.pkt.xrc_srqn, 0xfabcdeu);
  expect_same_fields(out.pkt, p);
  expect_payload(out, f, data);
  // The reserved byte is not read; bits above 24 of the SRQN are not the wire's.
  Bytes g = f;
  g[kBthBytes] = std::byte{0xff};
  reseal(g, test_ip());
  ASSERT_EQ(parse(g, out), FrameError::kNone);
  EXPECT_EQ(out.pkt.xrc_srqn, 0xfabcdeu);
  p.xrc_srqn = 0xff000001;
  ASSERT_EQ(parse(assemble(p, test_ip()), out), FrameError::kNone);
  EXPECT_EQ(out.pkt.xrc_srqn, 1u);
  // Cut into the XRCETH: too short, whatever the rest says.
  EXPECT_EQ(parse(std::span<const std::byte>(f).first(kBthBytes + kXrcEthBytes - 1 + kIcrcBytes), false),
            FrameError::kTooShort);
}

TEST(RoceFrame, EveryXrcOpcodeRoundTripsWithItsFields) {
  for (Opcode op : kAllRcOpcodes) {
    const bool request = is_request(op);
    Bytes storage;
    Packet p = packet_of(op, 0x0123456789abcdef, storage, has_payload(op) ? 5 : 0);
    p.transport = request ? QpType::kXrcTgt : QpType::kXrcIni;
    p.xrc_srqn = request ? 0x345678 : 0;  // a response has no XRCETH
    SCOPED_TRACE(opcode_str(op));
    const Bytes f = assemble(p, test_ip());
    EXPECT_EQ(f.size(), frame_bytes(header_bytes(op) + (request ? kXrcEthBytes : 0), p.payload_length));
    ParsedFrame out;
    ASSERT_EQ(parse(f, out), FrameError::kNone);
    EXPECT_EQ(out.pkt.transport, p.transport);
    EXPECT_EQ(out.pkt.xrc_srqn, p.xrc_srqn);
    expect_same_fields(out.pkt, p);
    expect_payload(out, f, storage);
  }
}

TEST(RoceFrame, ErrorsHaveNamesAndDropReasons) {
  const std::pair<FrameError, DropReason> kMap[] = {
      {FrameError::kTooShort, DropReason::kBadLength},  {FrameError::kBadPad, DropReason::kBadLength},
      {FrameError::kBadLength, DropReason::kBadLength}, {FrameError::kBadOpcode, DropReason::kBadOpcode},
      {FrameError::kBadVersion, DropReason::kBadOpcode},
      {FrameError::kBadPkey, DropReason::kBadKey},      {FrameError::kBadIcrc, DropReason::kBadIcrc},
  };
  for (auto [e, reason] : kMap) {
    EXPECT_EQ(drop_reason_of(e), reason) << frame_error_str(e);
    EXPECT_FALSE(frame_error_str(e).empty());
    EXPECT_NE(frame_error_str(e), frame_error_str(FrameError::kNone));
  }
}

}  // namespace
}  // namespace srdma::hca
