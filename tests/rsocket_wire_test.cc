// rsockets' wire pieces (src/rdmacm/rsocket_wire.h) on their own: the
// private data's layout and checks, the immediate's operations, and the
// receiver's ledger against a peer that claims more than it was given.
#include "rdmacm/rsocket_wire.h"

#include <gtest/gtest.h>

#include <cstring>

namespace rs = srdma::rdmacm::rs;

namespace {

rs::ConnData good() {
  rs::ConnData c;
  c.flags = rs::kFlagIomap;
  c.credits = 384;
  c.target_iomap_size = 1;
  c.target_sgl = {0x1000, 0x11223344, 2};
  c.data_buf = {0x20000, 0x55667788, 65536};
  return c;
}

TEST(RsocketWire, ConnDataIsRdmaCoresLayoutBigEndian) {
  std::uint8_t b[rs::kConnDataBytes];
  rs::format_conn_data(good(), b);
  // version, flags, credits (be16), 3 reserved, iomap size.
  const std::uint8_t head[8] = {1, 2, 0x01, 0x80, 0, 0, 0, 1};
  EXPECT_EQ(0, std::memcmp(b, head, 8));
  // target_sgl {addr be64, key be32, length be32}, then data_buf.
  const std::uint8_t sgl[16] = {0, 0, 0, 0, 0, 0, 0x10, 0, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 2};
  EXPECT_EQ(0, std::memcmp(b + 8, sgl, 16));
  const std::uint8_t buf[16] = {0, 0, 0, 0, 0, 2, 0, 0, 0x55, 0x66, 0x77, 0x88, 0, 1, 0, 0};
  EXPECT_EQ(0, std::memcmp(b + 24, buf, 16));
  rs::ConnData back;
  const char* why = nullptr;
  ASSERT_TRUE(rs::parse_conn_data(b, sizeof b, back, &why)) << why;
  EXPECT_EQ(back.credits, 384);
  EXPECT_EQ(back.target_sgl.key, 0x11223344u);
  EXPECT_EQ(back.data_buf.length, 65536u);
}

TEST(RsocketWire, BadPrivateDataIsRefusedWithAReason) {
  std::uint8_t b[rs::kConnDataBytes];
  auto refused = [&](auto mutate) {
    rs::ConnData c = good();
    mutate(c);
    rs::format_conn_data(c, b);
    rs::ConnData out;
    const char* why = nullptr;
    const bool ok = rs::parse_conn_data(b, sizeof b, out, &why);
    return !ok && why != nullptr;
  };
  EXPECT_TRUE(refused([](rs::ConnData& c) { c.version = 2; }));
  EXPECT_TRUE(refused([](rs::ConnData& c) { c.credits = 0; }));
  EXPECT_TRUE(refused([](rs::ConnData& c) { c.target_sgl.length = 0; }));
  EXPECT_TRUE(refused([](rs::ConnData& c) { c.target_sgl.length = rs::kMaxPeerSglEntries + 1; }));
  EXPECT_TRUE(refused([](rs::ConnData& c) { c.target_sgl.addr = ~0ull - 8; }));
  EXPECT_TRUE(refused([](rs::ConnData& c) { c.data_buf.length = 0; }));
  EXPECT_TRUE(refused([](rs::ConnData& c) { c.data_buf.length = 1u << 30; }));
  EXPECT_TRUE(refused([](rs::ConnData& c) { c.data_buf.addr = ~0ull - 100; }));
  EXPECT_FALSE(refused([](rs::ConnData&) {}));
  rs::ConnData out;
  const char* why = nullptr;
  rs::format_conn_data(good(), b);
  EXPECT_FALSE(rs::parse_conn_data(b, 39, out, &why));
  EXPECT_FALSE(rs::parse_conn_data(nullptr, 40, out, &why));
}

TEST(RsocketWire, ImmediatesDecodeAsRdmaCoreEncodes) {
  EXPECT_EQ(rs::make_imm(rs::kOpData, 65536), 65536u);
  EXPECT_EQ(rs::make_imm(rs::kOpSgl, 5), 0x80000005u);
  EXPECT_EQ(rs::make_imm(rs::kOpCtrl, rs::kCtrlDisconnect), 0xE0000000u);
  auto d = rs::decode_imm(rs::make_imm(rs::kOpData, 1234), 0);
  EXPECT_EQ(d.action, rs::Action::kData);
  EXPECT_EQ(d.value, 1234u);
  d = rs::decode_imm(rs::make_imm(rs::kOpSgl, 0x1FFFFFFF), 0);
  EXPECT_EQ(d.action, rs::Action::kCredits);
  EXPECT_EQ(rs::decode_imm(rs::make_imm(rs::kOpCtrl, rs::kCtrlShutdown), 0).action, rs::Action::kShutdown);
  EXPECT_EQ(rs::decode_imm(rs::make_imm(rs::kOpCtrl, rs::kCtrlKeepalive), 0).action, rs::Action::kKeepalive);
  EXPECT_EQ(rs::decode_imm(rs::make_imm(rs::kOpIomapSgl, 3), 4).action, rs::Action::kIomapUpdated);
}

TEST(RsocketWire, ReservedAndUnknownImmediatesAreErrors) {
  for (std::uint32_t op : {rs::kOpRsvdDataMore, rs::kOpWrite, rs::kOpRsvdDraMore, rs::kOpRsvd}) {
    const auto d = rs::decode_imm(rs::make_imm(op, 1), 8);
    EXPECT_EQ(d.action, rs::Action::kError) << op;
    EXPECT_NE(d.why, nullptr);
  }
  EXPECT_EQ(rs::decode_imm(rs::make_imm(rs::kOpCtrl, 3), 0).action, rs::Action::kError);
  EXPECT_EQ(rs::decode_imm(rs::make_imm(rs::kOpIomapSgl, 4), 4).action, rs::Action::kError);  // index == size
  EXPECT_EQ(rs::decode_imm(rs::make_imm(rs::kOpIomapSgl, 0), 0).action, rs::Action::kError);  // no iomap offered
}

TEST(RsocketWire, LedgerRefusesDataBeyondWhatWasAdvertised) {
  rs::RecvLedger l;
  l.reset(65536, 4);
  const char* why = nullptr;
  EXPECT_TRUE(l.accept_data(60000, &why));
  EXPECT_FALSE(l.accept_data(6000, &why));  // 60000 + 6000 > 65536
  EXPECT_NE(why, nullptr);
  EXPECT_TRUE(l.accept_data(5536, &why));   // exactly the rest
  EXPECT_EQ(l.outstanding(), 0u);
  l.grant(65536);  // the other half advertised
  EXPECT_TRUE(l.accept_data(1, &why));
  EXPECT_EQ(l.outstanding(), 65535u);
}

TEST(RsocketWire, LedgerRefusesMoreMessagesThanCredits) {
  rs::RecvLedger l;
  l.reset(1 << 20, 2);
  const char* why = nullptr;
  EXPECT_TRUE(l.accept_data(10, &why));
  EXPECT_TRUE(l.accept_data(10, &why));
  EXPECT_FALSE(l.accept_data(10, &why));  // a third message with two credits
  l.consumed();
  EXPECT_TRUE(l.accept_data(10, &why));
  EXPECT_EQ(l.queued(), 2u);
}

TEST(RsocketWire, IomapSizesScaleAsRdmaCore) {
  EXPECT_EQ(rs::value_to_scale(1, 8), 1);
  EXPECT_EQ(rs::value_to_scale(128, 8), 128);
  EXPECT_EQ(rs::scale_to_value(rs::value_to_scale(512, 8), 8), 512);
  EXPECT_EQ(rs::scale_to_value(rs::value_to_scale(1000, 8), 8), 768);  // rounded down to 256s
}

}  // namespace
