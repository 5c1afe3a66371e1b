// The two tables checked against IBA as written out here, apart from them:
// table 38's opcodes, each one's extended headers (9.3) and place in its
// message, and which work requests each transport sends.
#include <gtest/gtest.h>

#include "hca/opcode_table.h"
#include "hca/roce_frame.h"
#include "hca/wr_opcode_table.h"

namespace srdma::hca {
namespace {

struct Expect {
  std::uint8_t wire;
  std::uint8_t headers;  // BTH + extended headers, bytes
  bool request, starts, ends, payload;
};

// IBA vol. 1 table 38 (RC 000, UC 001, UD 011) with 9.3's header sizes:
// RETH 16, AtomicETH 28, AETH 4, AtomicAckETH 8, ImmDt 4, IETH 4, DETH 8.
constexpr Expect kIba[] = {
    {0x00, 12, true, true, false, true},       {0x01, 12, true, false, false, true},
    {0x02, 12, true, false, true, true},       {0x03, 16, true, false, true, true},
    {0x04, 12, true, true, true, true},        {0x05, 16, true, true, true, true},
    {0x06, 28, true, true, false, true},       {0x07, 12, true, false, false, true},
    {0x08, 12, true, false, true, true},       {0x09, 16, true, false, true, true},
    {0x0a, 28, true, true, true, true},        {0x0b, 32, true, true, true, true},
    {0x0c, 28, true, true, true, false},       {0x0d, 16, false, true, false, true},
    {0x0e, 12, false, false, false, true},     {0x0f, 16, false, false, true, true},
    {0x10, 16, false, true, true, true},       {0x11, 16, false, true, true, false},
    {0x12, 24, false, true, true, false},      {0x13, 40, true, true, true, false},
    {0x14, 40, true, true, true, false},       {0x16, 16, true, false, true, true},
    {0x17, 16, true, true, true, true},
    // IBA 1.5's ATOMIC WRITE: RETH and its 8 bytes of payload.
    {0x1d, 28, true, true, true, true},
    // UC: RC's SENDs and WRITEs.
    {0x20, 12, true, true, false, true},       {0x21, 12, true, false, false, true},
    {0x22, 12, true, false, true, true},       {0x23, 16, true, false, true, true},
    {0x24, 12, true, true, true, true},        {0x25, 16, true, true, true, true},
    {0x26, 28, true, true, false, true},       {0x27, 12, true, false, false, true},
    {0x28, 12, true, false, true, true},       {0x29, 16, true, false, true, true},
    {0x2a, 28, true, true, true, true},        {0x2b, 32, true, true, true, true},
    // UD: SEND ONLY (with Immediate), DETH after the BTH.
    {0x64, 20, true, true, true, true},        {0x65, 24, true, true, true, true},
    // RoCEv2's CNP (annex A17.9.3): BTH and 16 reserved bytes.
    {0x81, 28, false, true, true, false},
    // XRC (annex A14): RC's opcodes, every request with an XRCETH (4) after the BTH.
    {0xa0, 16, true, true, false, true},       {0xa1, 16, true, false, false, true},
    {0xa2, 16, true, false, true, true},       {0xa3, 20, true, false, true, true},
    {0xa4, 16, true, true, true, true},        {0xa5, 20, true, true, true, true},
    {0xa6, 32, true, true, false, true},       {0xa7, 16, true, false, false, true},
    {0xa8, 16, true, false, true, true},       {0xa9, 20, true, false, true, true},
    {0xaa, 32, true, true, true, true},        {0xab, 36, true, true, true, true},
    {0xac, 32, true, true, true, false},       {0xad, 16, false, true, false, true},
    {0xae, 12, false, false, false, true},     {0xaf, 16, false, false, true, true},
    {0xb0, 16, false, true, true, true},       {0xb1, 16, false, true, true, false},
    {0xb2, 24, false, true, true, false},      {0xb3, 44, true, true, true, false},
    {0xb4, 44, true, true, true, false},       {0xb6, 20, true, false, true, true},
    {0xb7, 20, true, true, true, true},        {0xbd, 32, true, true, true, true},
};

TEST(OpcodeTable, EveryRowIsIbasAndNothingElseIsValid) {
  std::array<bool, 256> listed{};
  for (const Expect& e : kIba) {
    SCOPED_TRACE(testing::Message() << "opcode 0x" << std::hex << int{e.wire});
    listed[e.wire] = true;
    const OpcodeRow& r = opcode_row(e.wire);
    ASSERT_TRUE(r.valid());
    EXPECT_EQ(r.header_bytes, e.headers);
    EXPECT_EQ(r.has(kOpRequest), e.request);
    EXPECT_EQ(r.has(kOpStarts), e.starts);
    EXPECT_EQ(r.has(kOpEnds), e.ends);
    EXPECT_EQ(r.has(kOpPayload), e.payload);
    EXPECT_FALSE(r.name.empty());
  }
  for (int v = 0; v < 256; ++v) {
    if (!listed[v]) {
      EXPECT_FALSE(opcode_row(static_cast<std::uint8_t>(v)).valid()) << v;
    }
  }
}

TEST(OpcodeTable, TransportBitsRoundTrip) {
  EXPECT_EQ(wire_opcode(QpType::kUc, Opcode::kWriteLastImm), 0x29);
  EXPECT_EQ(wire_opcode(QpType::kUd, Opcode::kSendOnlyImm), 0x65);
  EXPECT_EQ(transport_of_wire(0x29), QpType::kUc);
  EXPECT_EQ(transport_of_wire(0x64), QpType::kUd);
  EXPECT_EQ(transport_of_wire(0x11), QpType::kRc);
  // XRC's requests are for a TGT QP, its responses for an INI QP.
  EXPECT_EQ(wire_opcode(QpType::kXrcIni, Opcode::kSendOnly), 0xa4);
  EXPECT_EQ(wire_opcode(QpType::kXrcTgt, Opcode::kAck), 0xb1);
  EXPECT_EQ(transport_of_wire(0xa4), QpType::kXrcTgt);
  EXPECT_EQ(transport_of_wire(0xb3), QpType::kXrcTgt);
  EXPECT_EQ(transport_of_wire(0xb1), QpType::kXrcIni);
  EXPECT_EQ(transport_of_wire(0xb0), QpType::kXrcIni);
  EXPECT_EQ(peer_transport(QpType::kXrcIni), QpType::kXrcTgt);
  EXPECT_EQ(peer_transport(QpType::kXrcTgt), QpType::kXrcIni);
  EXPECT_EQ(peer_transport(QpType::kRc), QpType::kRc);
  EXPECT_TRUE(opcode_row(0xa6).has(kOpXrcEth));
  EXPECT_FALSE(opcode_row(0xad).has(kOpXrcEth));
  // What UC and UD lack: UC has no READ, atomic, ACK or SEND with Invalidate;
  // UD sends only SEND ONLY.
  for (Opcode op : {Opcode::kReadRequest, Opcode::kAck, Opcode::kCmpSwap, Opcode::kSendOnlyInv, Opcode::kAtomicWrite})
    EXPECT_FALSE(opcode_row(QpType::kUc, op).valid()) << opcode_str(op);
  for (Opcode op : {Opcode::kSendFirst, Opcode::kWriteOnly, Opcode::kSendLast})
    EXPECT_FALSE(opcode_row(QpType::kUd, op).valid()) << opcode_str(op);
}

TEST(OpcodeTable, SequenceRuleIsIba983) {
  // Between messages: only a request that starts one.
  EXPECT_TRUE(continues_sequence(MsgKind::kNone, Opcode::kSendFirst));
  EXPECT_TRUE(continues_sequence(MsgKind::kNone, Opcode::kWriteOnlyImm));
  EXPECT_TRUE(continues_sequence(MsgKind::kNone, Opcode::kReadRequest));
  EXPECT_TRUE(continues_sequence(MsgKind::kNone, Opcode::kFetchAdd));
  EXPECT_FALSE(continues_sequence(MsgKind::kNone, Opcode::kSendMiddle));
  EXPECT_FALSE(continues_sequence(MsgKind::kNone, Opcode::kWriteLast));
  EXPECT_FALSE(continues_sequence(MsgKind::kNone, Opcode::kAck));  // a response
  // Inside a SEND: its MIDDLE and LASTs only.
  EXPECT_TRUE(continues_sequence(MsgKind::kSend, Opcode::kSendMiddle));
  EXPECT_TRUE(continues_sequence(MsgKind::kSend, Opcode::kSendLastInv));
  EXPECT_FALSE(continues_sequence(MsgKind::kSend, Opcode::kSendOnly));
  EXPECT_FALSE(continues_sequence(MsgKind::kSend, Opcode::kWriteMiddle));
  EXPECT_FALSE(continues_sequence(MsgKind::kSend, Opcode::kReadRequest));
  // Inside a WRITE.
  EXPECT_TRUE(continues_sequence(MsgKind::kWrite, Opcode::kWriteLastImm));
  EXPECT_FALSE(continues_sequence(MsgKind::kWrite, Opcode::kSendLast));
  EXPECT_FALSE(continues_sequence(MsgKind::kWrite, Opcode::kWriteFirst));
  // A train's inner packets.
  EXPECT_EQ(opcode_row(Opcode::kWriteFirst).middle, Opcode::kWriteMiddle);
  EXPECT_EQ(opcode_row(Opcode::kReadResponseFirst).middle, Opcode::kReadResponseMiddle);
  EXPECT_EQ(opcode_row(Opcode::kSendFirst).middle, Opcode::kSendMiddle);
}

TEST(OpcodeTable, NamesAreIbas) {
  EXPECT_EQ(opcode_str(Opcode::kWriteOnly), "RDMA WRITE ONLY");
  EXPECT_EQ(opcode_str(Opcode::kAck), "Acknowledge");
  EXPECT_EQ(opcode_str(static_cast<Opcode>(0x15)), "UNKNOWN");
}

TEST(WrOpcodeTable, ValidityPerTransportIsIbas) {
  struct Row {
    WrOpcode op;
    bool rc, uc, ud;
  };
  // IBA 9.8.4 (UD: SEND only), 9.8.3 (UC: SEND and RDMA WRITE); SEND with
  // Invalidate needs RC (IBA 10.6.6 as Linux allows it).
  constexpr Row kRows[] = {
      {WrOpcode::kSend, true, true, true},
      {WrOpcode::kSendWithImm, true, true, true},
      {WrOpcode::kSendWithInv, true, false, false},
      {WrOpcode::kRdmaWrite, true, true, false},
      {WrOpcode::kRdmaWriteWithImm, true, true, false},
      {WrOpcode::kRdmaRead, true, false, false},
      {WrOpcode::kAtomicCmpAndSwp, true, false, false},
      {WrOpcode::kAtomicFetchAndAdd, true, false, false},
      {WrOpcode::kRegMr, true, true, false},
      {WrOpcode::kLocalInv, true, true, false},
      {WrOpcode::kBindMw, true, true, false},  // IBA 10.6.7.2.4: a connected QP binds a window
      {WrOpcode::kAtomicWrite, true, false, false},  // IBA 1.5: RC only
  };
  for (const Row& r : kRows) {
    SCOPED_TRACE(wr_row(r.op).name);
    // XRC INI sends what RC sends; a TGT QP has no send queue.
    EXPECT_EQ(wr_row(r.op).valid_on(QpType::kXrcIni), r.rc);
    EXPECT_FALSE(wr_row(r.op).valid_on(QpType::kXrcTgt));
    EXPECT_EQ(wr_row(r.op).valid_on(QpType::kRc), r.rc);
    EXPECT_EQ(wr_row(r.op).valid_on(QpType::kUc), r.uc);
    EXPECT_EQ(wr_row(r.op).valid_on(QpType::kUd), r.ud);
  }
  EXPECT_FALSE(is_wr_opcode(static_cast<WrOpcode>(12)));
}

TEST(WrOpcodeTable, PacketsCarryTheRightOpcodes) {
  const WrOpcodeRow& imm = wr_row(WrOpcode::kSendWithImm);
  EXPECT_EQ(imm.packet(true, true), Opcode::kSendOnlyImm);
  EXPECT_EQ(imm.packet(true, false), Opcode::kSendFirst);  // the immediate rides on the last
  EXPECT_EQ(imm.packet(false, false), Opcode::kSendMiddle);
  EXPECT_EQ(imm.packet(false, true), Opcode::kSendLastImm);
  EXPECT_EQ(wr_row(WrOpcode::kSendWithInv).packet(false, true), Opcode::kSendLastInv);
  EXPECT_EQ(wr_row(WrOpcode::kRdmaWrite).packet(true, false), Opcode::kWriteFirst);
  EXPECT_EQ(wr_row(WrOpcode::kRdmaRead).only, Opcode::kReadRequest);
  EXPECT_EQ(wr_row(WrOpcode::kAtomicFetchAndAdd).only, Opcode::kFetchAdd);
  EXPECT_EQ(wr_row(WrOpcode::kAtomicWrite).only, Opcode::kAtomicWrite);
  EXPECT_EQ(wr_row(WrOpcode::kAtomicWrite).wc, WcOpcode::kAtomicWrite);
  EXPECT_TRUE(is_atomic_write(Opcode::kAtomicWrite) && is_write(Opcode::kAtomicWrite));
  // Every message opcode's packets are rows of the opcode table that start
  // and end where they should.
  for (std::size_t i = 0; i < kWrOpcodeTable.size(); ++i) {
    const WrOpcodeRow& r = kWrOpcodeTable[i];
    if (r.cls == WrClass::kLocal) continue;
    SCOPED_TRACE(r.name);
    EXPECT_TRUE(starts_message(r.only) && ends_message(r.only));
    EXPECT_TRUE(is_request(r.only));
    // (ATOMIC WRITE's 8 bytes are always one packet: ONLY.)
    if (r.cls != WrClass::kMessage || is_atomic_write(r.only)) continue;
    EXPECT_TRUE(starts_message(r.first) && !ends_message(r.first));
    EXPECT_TRUE(!starts_message(r.middle) && !ends_message(r.middle));
    EXPECT_TRUE(!starts_message(r.last) && ends_message(r.last));
  }
  EXPECT_EQ(wr_row(WrOpcode::kAtomicCmpAndSwp).wc_byte_len, 8u);
  EXPECT_TRUE(is_rd_atomic(WrOpcode::kRdmaRead));
  EXPECT_FALSE(is_rd_atomic(WrOpcode::kRdmaWriteWithImm));
  EXPECT_TRUE(is_local_op(WrOpcode::kLocalInv));
}

}  // namespace
}  // namespace srdma::hca
