// A train as one record of a same-host ring (hca/ring_train.h), and the
// split of a train into parts (packet.h): what encode_train writes,
// decode_train gives back, and decode_train refuses every record whose
// parts do not add up, whatever the producer wrote.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <span>
#include <vector>

#include "hca/packet.h"
#include "hca/ring_train.h"

namespace srdma::hca {
namespace {

using Bytes = std::vector<std::byte>;

Packet write_train(std::uint32_t count, std::uint32_t mtu, std::uint32_t last_bytes, Bytes& payload) {
  Packet t;
  t.transport = QpType::kRc;
  t.op = Opcode::kWriteFirst;
  t.last_op = Opcode::kWriteLastImm;
  t.count = count;
  t.dst_qpn = 0x12'3456;
  t.psn = 0xfffffe;  // the train's PSNs wrap
  t.va = 0x1000'2000'3000;
  t.rkey = 0xabcd'ef01;
  t.payload_length = (count - 1) * mtu + last_bytes;
  t.dma_length = t.payload_length;
  t.imm = 0x5566'7788;
  t.solicited = true;
  t.ack_req = true;
  payload.resize(t.payload_length);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::byte>(i * 13 + 1);
  // In two pieces, cut off a packet boundary.
  t.payload.push_back(MemPiece{payload.data(), 1000});
  t.payload.push_back(MemPiece{payload.data() + 1000, payload.size() - 1000});
  return t;
}

Bytes record_of(const Packet& t, const Bytes& payload) {
  const TrainPrefix pre = encode_train(t);
  Bytes r(pre.bytes.begin(), pre.bytes.begin() + static_cast<std::ptrdiff_t>(pre.length));
  r.insert(r.end(), payload.begin(), payload.end());
  return r;
}

FrameError decode(const Bytes& r, ParsedFrame& f, std::uint32_t max_mtu = 4096) {
  std::array<std::byte, kMaxTrainPrefix> scratch{};
  return decode_train(r, scratch, max_mtu, f);
}

TEST(RingTrain, ARecordDecodesToTheTrainItWasMadeOf) {
  Bytes payload;
  const Packet t = write_train(5, 1024, 700, payload);
  const Bytes r = record_of(t, payload);
  ParsedFrame f;
  ASSERT_EQ(decode(r, f), FrameError::kNone);
  const Packet& p = f.pkt;
  EXPECT_EQ(p.op, Opcode::kWriteFirst);
  EXPECT_EQ(p.last_op, Opcode::kWriteLastImm);
  EXPECT_EQ(p.count, 5u);
  EXPECT_EQ(p.psn, t.psn);
  EXPECT_EQ(p.dst_qpn, t.dst_qpn);
  EXPECT_EQ(p.va, t.va);
  EXPECT_EQ(p.rkey, t.rkey);
  EXPECT_EQ(p.dma_length, t.dma_length);
  EXPECT_EQ(p.imm, t.imm);
  EXPECT_TRUE(p.solicited);
  EXPECT_TRUE(p.ack_req);
  EXPECT_EQ(train_mtu(p), 1024u);
  ASSERT_EQ(p.payload_length, payload.size());
  ASSERT_EQ(p.payload.size(), 1u);
  EXPECT_EQ(p.payload.front().addr, r.data() + (r.size() - payload.size()));  // in the record, not copied
  EXPECT_EQ(std::memcmp(p.payload.front().addr, payload.data(), payload.size()), 0);
}

TEST(RingTrain, ReadResponsesAndSendsOfEveryTransportButUdDecode) {
  for (QpType type : {QpType::kRc, QpType::kUc, QpType::kXrcTgt}) {
    Bytes payload;
    Packet t = write_train(3, 4096, 4096, payload);
    t.transport = type;
    t.op = Opcode::kSendMiddle;  // a part that starts inside its message
    t.last_op = Opcode::kSendMiddle;
    t.xrc_srqn = 77;
    ParsedFrame f;
    ASSERT_EQ(decode(record_of(t, payload), f), FrameError::kNone) << static_cast<int>(type);
    EXPECT_EQ(f.pkt.imm, 0u) << "a MIDDLE carries no ImmDt";
    EXPECT_EQ(f.pkt.xrc_srqn, type == QpType::kXrcTgt ? 77u : 0u);
  }
  Bytes payload;
  Packet t = write_train(2, 256, 1, payload);
  t.op = Opcode::kReadResponseFirst;
  t.last_op = Opcode::kReadResponseLast;
  t.msn = 99;
  ParsedFrame f;
  ASSERT_EQ(decode(record_of(t, payload), f), FrameError::kNone);
  EXPECT_EQ(f.pkt.msn, 99u);
  EXPECT_EQ(f.pkt.payload_length, 257u);
}

// A producer can write anything into its ring: each lie is refused.
TEST(RingTrain, RecordsWhosePartsDoNotAddUpAreRefused) {
  Bytes payload;
  const Packet t = write_train(4, 1024, 100, payload);
  const Bytes good = record_of(t, payload);
  auto put32 = [](Bytes& r, std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) r[at + i] = static_cast<std::byte>(v >> (8 * i));
  };
  struct Lie {
    const char* what;
    std::function<void(Bytes&)> edit;
    FrameError want;
  };
  const std::vector<Lie> lies = {
      {"count 0", [&](Bytes& r) { put32(r, 0, 0); }, FrameError::kBadLength},
      {"count 1", [&](Bytes& r) { put32(r, 0, 1); }, FrameError::kBadLength},
      {"a count beyond the bytes", [&](Bytes& r) { put32(r, 0, 0xffffffff); }, FrameError::kBadLength},
      {"a count that needs an MTU below 256", [&](Bytes& r) { put32(r, 0, 40); }, FrameError::kBadLength},
      {"a length past the record", [&](Bytes& r) { put32(r, 4, static_cast<std::uint32_t>(payload.size() + 4)); },
       FrameError::kBadLength},
      {"a length short of the record", [&](Bytes& r) { put32(r, 4, static_cast<std::uint32_t>(payload.size() - 4)); },
       FrameError::kBadLength},
      {"a header frame longer than any", [&](Bytes& r) { r[14] = std::byte{200}; }, FrameError::kBadLength},
      {"a header frame shorter than a BTH", [&](Bytes& r) { r[14] = std::byte{8}; r[15] = std::byte{0}; },
       FrameError::kBadLength},
      {"a last opcode of another message", [&](Bytes& r) { r[12] = std::byte{0x02}; }, FrameError::kBadOpcode},
      {"a last opcode of another transport", [&](Bytes& r) { r[12] = std::byte{0x28}; }, FrameError::kBadOpcode},
      {"a last opcode that starts a message", [&](Bytes& r) { r[12] = std::byte{0x0a}; }, FrameError::kBadOpcode},
      {"a last opcode no table has", [&](Bytes& r) { r[12] = std::byte{0x1f}; }, FrameError::kBadOpcode},
      {"a first opcode that ends its message", [&](Bytes& r) { r[16] = std::byte{0x0a}; }, FrameError::kBadOpcode},
      {"a first opcode without payload", [&](Bytes& r) { r[16] = std::byte{0x11}; }, FrameError::kBadLength},
      {"a UD first opcode", [&](Bytes& r) { r[16] = std::byte{0x64}; }, FrameError::kBadOpcode},
      {"a bad BTH version", [&](Bytes& r) { r[17] |= std::byte{0x01}; }, FrameError::kBadVersion},
  };
  for (const Lie& l : lies) {
    Bytes r = good;
    l.edit(r);
    ParsedFrame f;
    const FrameError e = decode(r, f);
    EXPECT_EQ(e, l.want) << l.what;
  }
  // An MTU above the device's is refused: the same train decodes at 4096,
  // not at 512.
  ParsedFrame f;
  EXPECT_EQ(decode(good, f, 512), FrameError::kBadLength);
  // Every truncation is refused, and nothing is read past the record (ASan).
  for (std::size_t n = 0; n < good.size(); ++n) {
    const Bytes cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_NE(decode(cut, f), FrameError::kNone) << n;
  }
}

// split_train: the parts, unrolled, are the train's packets; parts of one
// are unroll's.
TEST(RingTrain, SplitPartsUnrollToTheTrainsPackets) {
  Bytes payload;
  const Packet t = write_train(37, 1024, 3, payload);
  std::vector<Packet> want;
  unroll(t, 1024, [&](Packet& p) { want.push_back(p); });
  ASSERT_EQ(want.size(), 37u);
  for (std::uint32_t most : {1u, 2u, 5u, 16u, 36u, 37u, 100u}) {
    std::vector<Packet> got;
    std::uint32_t parts = 0;
    split_train(t, 1024, most, [&](Packet& part) {
      ++parts;
      EXPECT_LE(part.count, most);
      if (part.count > 1) EXPECT_EQ(train_mtu(part), 1024u);
      unroll(part, 1024, [&](Packet& p) { got.push_back(p); });
    });
    EXPECT_EQ(parts, (37 + most - 1) / most);
    ASSERT_EQ(got.size(), want.size()) << most;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const Packet &a = got[i], &b = want[i];
      EXPECT_EQ(a.op, b.op) << most << " " << i;
      EXPECT_EQ(a.psn, b.psn) << i;
      EXPECT_EQ(a.ack_req, b.ack_req) << most << " " << i;
      EXPECT_EQ(a.solicited, b.solicited) << i;
      EXPECT_EQ(a.imm, b.imm) << i;
      EXPECT_EQ(a.va, b.va) << i;
      EXPECT_EQ(a.rkey, b.rkey) << i;
      EXPECT_EQ(a.payload_length, b.payload_length) << i;
      const std::span<const MemPiece> pa = a.payload, pb = b.payload;
      ASSERT_EQ(pa.size(), pb.size()) << i;
      for (std::size_t k = 0; k < pa.size(); ++k) {
        EXPECT_EQ(pa[k].addr, pb[k].addr) << i;
        EXPECT_EQ(pa[k].length, pb[k].length) << i;
      }
    }
  }
}

}  // namespace
}  // namespace srdma::hca
