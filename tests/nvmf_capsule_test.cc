// The target's capsule parser: each refusal answers with the status the
// specification names (and the command id it can read), and a refusal does
// not stop the next well-formed command from decoding.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <random>

#include "nvmf/capsule.h"
#include "nvmf/capsule_parser.h"

namespace srdma::nvmf {
namespace {

QueueContext admin_ctx(bool connected = true) {
  return QueueContext{QueueType::kAdmin, connected, 0, 32};
}
QueueContext io_ctx(bool connected = true, std::uint32_t icd = 4096) {
  return QueueContext{QueueType::kIo, connected, icd, 128};
}

NvmeSgl keyed(std::uint32_t len) { return keyed_sgl(0x10000, len, 0xABCD).value(); }

// Parses and expects a refusal with `code`; returns it.
Refusal refused(std::span<const std::byte> capsule, const QueueContext& ctx, StatusCode code) {
  ParseResult r = parse_command(capsule, ctx);
  if (!std::holds_alternative<Refusal>(r)) {
    ADD_FAILURE() << "accepted; expected " << status_name(code);
    return {};
  }
  Refusal f = std::get<Refusal>(r);
  EXPECT_EQ(f.status.code, code) << f.reason << " -> " << f.status.to_string();
  EXPECT_FALSE(std::string_view(f.reason).empty());
  return f;
}
Refusal refused(const NvmeCommand& c, const QueueContext& ctx, StatusCode code) {
  return refused(encode_capsule(c), ctx, code);
}

NvmeCommand a_read() { return build_read(0x77, 1, 0, 8, keyed(4096)).value(); }

TEST(NvmfCapsule, ShortCapsules) {
  auto full = encode_capsule(a_read());
  for (std::size_t n = 0; n < 4; ++n) {
    Refusal f = refused(std::span(full).first(n), io_ctx(), StatusCode::kInvalidField);
    EXPECT_FALSE(f.cid_valid) << n;
  }
  for (std::size_t n : {4u, 40u, 63u}) {
    Refusal f = refused(std::span(full).first(n), io_ctx(), StatusCode::kInvalidField);
    EXPECT_TRUE(f.cid_valid);
    EXPECT_EQ(f.cid, 0x77) << "answered with the command id it carried";
  }
}

TEST(NvmfCapsule, FlagsFuseAndPsdt) {
  for (std::uint8_t flags : {0x00, 0x80, 0xC0, 0x41, 0x42}) {
    NvmeCommand c = a_read();
    c.flags = flags;
    Refusal f = refused(c, io_ctx(), StatusCode::kInvalidField);
    EXPECT_TRUE(f.status.dnr);
  }
}

TEST(NvmfCapsule, UnknownOpcodes) {
  NvmeCommand c = a_read();
  c.opcode = 0x06;  // Identify is an admin command: not an I/O opcode
  refused(c, io_ctx(), StatusCode::kInvalidOpcode);
  c.opcode = 0x18;  // Keep Alive
  refused(c, io_ctx(), StatusCode::kInvalidOpcode);
  c.opcode = 0x05;  // Compare: not supported
  refused(c, io_ctx(), StatusCode::kInvalidOpcode);
  // I/O commands on the admin queue: 02h there is Get Log Page (whose
  // offset, a Read's NLB in CDW12, is not dword aligned here).
  refused(a_read(), admin_ctx(), StatusCode::kInvalidField);
  refused(build_flush(1, 1).value(), admin_ctx(), StatusCode::kInvalidOpcode);
  // Fabrics command types we do not implement.
  NvmeCommand fab = build_keep_alive(3);
  fab.opcode = kFabricsOpcode;
  fab.nsid = static_cast<std::uint32_t>(FabricsType::kDisconnect);
  refused(fab, io_ctx(), StatusCode::kInvalidOpcode);
  fab.nsid = 0x55;
  refused(fab, admin_ctx(), StatusCode::kInvalidOpcode);
}

TEST(NvmfCapsule, SequenceConnectFirstAndOnce) {
  refused(a_read(), io_ctx(false), StatusCode::kCommandSequenceError);
  refused(build_keep_alive(1), admin_ctx(false), StatusCode::kCommandSequenceError);
  refused(build_property_get(1, Property::kCap), admin_ctx(false), StatusCode::kCommandSequenceError);
  auto conn = build_connect(1, {.qid = 0, .queue_size = 32}, keyed(1024)).value();
  refused(conn, admin_ctx(true), StatusCode::kCommandSequenceError);
  EXPECT_TRUE(std::holds_alternative<Command>(parse_command(encode_capsule(conn), admin_ctx(false))));
}

TEST(NvmfCapsule, ConnectRefusals) {
  auto conn = [](std::uint16_t qid, std::uint32_t size, const NvmeSgl& sgl) {
    return build_connect(1, {.qid = qid, .queue_size = size}, sgl).value();
  };
  Refusal f = refused(conn(1, 32, keyed(1024)), admin_ctx(false), StatusCode::kConnectInvalidParameters);
  EXPECT_EQ(f.dw0, 42u) << "IPO = QID's offset, IATTR 0";
  f = refused(conn(0, 32, keyed(1024)), io_ctx(false), StatusCode::kConnectInvalidParameters);
  EXPECT_EQ(f.dw0, 42u);
  f = refused(conn(0, 33, keyed(1024)), admin_ctx(false), StatusCode::kConnectInvalidParameters);
  EXPECT_EQ(f.dw0, 44u) << "IPO = SQSIZE's offset";
  NvmeCommand zero = conn(0, 2, keyed(1024));
  zero.cdw11 &= 0xFFFF0000;  // SQSIZE 0: a one-entry queue does not exist
  refused(zero, admin_ctx(false), StatusCode::kConnectInvalidParameters);
  NvmeCommand fmt = conn(0, 32, keyed(1024));
  fmt.cdw10 |= 1;  // RECFMT 1
  refused(fmt, admin_ctx(false), StatusCode::kConnectIncompatibleFormat);
  refused(conn(0, 32, keyed(512)), admin_ctx(false), StatusCode::kDataSglLengthInvalid);

  // Connect data checks.
  std::array<std::byte, 1024> data{};
  Refusal d = std::get<Refusal>(parse_connect_data(data));
  EXPECT_EQ(d.status.code, StatusCode::kConnectInvalidParameters);
  EXPECT_EQ(d.dw0, (1u << 16) | 256) << "IATTR 1, IPO SUBNQN";
  std::memset(data.data() + 256, 'a', 256);  // no NUL
  d = std::get<Refusal>(parse_connect_data(data));
  EXPECT_EQ(d.dw0, (1u << 16) | 256);
  data[300] = std::byte{0};
  d = std::get<Refusal>(parse_connect_data(data));
  EXPECT_EQ(d.dw0, (1u << 16) | 512) << "HOSTNQN empty";
  EXPECT_EQ(std::get<Refusal>(parse_connect_data(std::span(data).first(1000))).status.code,
            StatusCode::kDataSglLengthInvalid);
}

TEST(NvmfCapsule, PropertyRefusals) {
  refused(build_property_get(1, Property::kCc), io_ctx(), StatusCode::kInvalidQueueType);
  auto raw = [](std::uint8_t fctype, std::uint8_t attrib, std::uint32_t offset) {
    NvmeCommand c = build_property_get(1, Property::kVs);
    auto p = std::bit_cast<PropertyCommand>(c);
    p.fctype = fctype;
    p.attrib = attrib;
    p.offset = offset;
    return std::bit_cast<NvmeCommand>(p);
  };
  refused(raw(0x04, 2, 0x08), admin_ctx(), StatusCode::kInvalidField);  // size 2: reserved
  refused(raw(0x04, 0, 0x10), admin_ctx(), StatusCode::kInvalidField);  // no property at 10h
  refused(raw(0x04, 0, 0x00), admin_ctx(), StatusCode::kInvalidField);  // CAP is 8 bytes
  refused(raw(0x04, 1, 0x14), admin_ctx(), StatusCode::kInvalidField);  // CC is 4 bytes
  refused(raw(0x00, 0, 0x1C), admin_ctx(), StatusCode::kInvalidField);  // CSTS is read-only
  EXPECT_TRUE(std::holds_alternative<Command>(parse_command(encode_capsule(raw(0x04, 0, 0x1C)), admin_ctx())));
}

TEST(NvmfCapsule, IdentifyRefusals) {
  auto id = [](std::uint8_t cns, std::uint32_t nsid, const NvmeSgl& sgl) {
    return build_identify(1, static_cast<Cns>(cns), nsid, sgl);
  };
  refused(id(0x03, 1, keyed(4096)), admin_ctx(), StatusCode::kInvalidField);   // unsupported CNS
  refused(id(0x10, 1, keyed(4096)), admin_ctx(), StatusCode::kInvalidField);
  refused(id(0x00, 0, keyed(4096)), admin_ctx(), StatusCode::kInvalidNamespace);
  refused(id(0x00, kNsidBroadcast, keyed(4096)), admin_ctx(), StatusCode::kInvalidNamespace);
  refused(id(0x02, 0xFFFFFFFE, keyed(4096)), admin_ctx(), StatusCode::kInvalidNamespace);
  refused(id(0x01, 0, keyed(4095)), admin_ctx(), StatusCode::kDataSglLengthInvalid);
  // Data to the host cannot travel in the capsule.
  QueueContext ctx = admin_ctx();
  ctx.in_capsule_data_size = 8192;
  refused(encode_capsule(id(0x01, 0, in_capsule_sgl(0, 4096)), std::vector<std::byte>(4096)), ctx,
          StatusCode::kInvalidField);
}

TEST(NvmfCapsule, GetLogPageFieldsAndRefusals) {
  auto glp = build_get_log_page(5, kLogPageDiscovery, 4096, 3072, keyed(4096));
  ASSERT_TRUE(glp);
  auto r = parse_command(encode_capsule(*glp), admin_ctx());
  ASSERT_TRUE(std::holds_alternative<Command>(r));
  const Command& c = std::get<Command>(r);
  EXPECT_EQ(c.kind, CommandKind::kGetLogPage);
  EXPECT_EQ(c.log.lid, kLogPageDiscovery);
  EXPECT_EQ(c.log.offset, 4096u);
  EXPECT_EQ(c.log.length, 3072u);
  // A length above 256 KiB needs NUMDU: 1 MiB is the most one read takes.
  auto big = build_get_log_page(5, kLogPageDiscovery, 0, 1u << 20, keyed(1u << 20));
  ASSERT_TRUE(big);
  EXPECT_EQ(std::get<Command>(parse_command(encode_capsule(*big), admin_ctx())).log.length, 1u << 20);
  NvmeCommand over = *big;
  over.cdw11 = 0x10;  // NUMD past 1 MiB
  refused(over, admin_ctx(), StatusCode::kInvalidField);
  NvmeCommand odd = *glp;
  odd.cdw12 = 2;  // offset not dword aligned
  refused(odd, admin_ctx(), StatusCode::kInvalidField);
  refused(*build_get_log_page(5, kLogPageDiscovery, 0, 8192, keyed(4096)), admin_ctx(),
          StatusCode::kDataSglLengthInvalid);
  EXPECT_FALSE(build_get_log_page(5, kLogPageDiscovery, 0, 6, keyed(4096))) << "dwords only";
}

TEST(NvmfCapsule, NamespaceAndRangeRefusals) {
  for (std::uint32_t nsid : {0u, kNsidBroadcast}) {
    NvmeCommand c = a_read();
    c.nsid = nsid;
    refused(c, io_ctx(), StatusCode::kInvalidNamespace);
    c.opcode = static_cast<std::uint8_t>(IoOpcode::kWrite);
    refused(c, io_ctx(), StatusCode::kInvalidNamespace);
  }
  NvmeCommand flush0 = build_flush(1, 1).value();
  flush0.nsid = 0;
  refused(flush0, io_ctx(), StatusCode::kInvalidNamespace);
  // SLBA + NLB past 2^64 is out of range for every namespace.
  refused(build_read(1, 1, ~0ull, 1, keyed(512)).value(), io_ctx(), StatusCode::kLbaOutOfRange);
  refused(build_write(1, 1, ~0ull - 6, 8, keyed(4096)).value(), io_ctx(), StatusCode::kLbaOutOfRange);
  EXPECT_TRUE(std::holds_alternative<Command>(
      parse_command(encode_capsule(build_read(1, 1, ~0ull - 8, 8, keyed(4096)).value()), io_ctx())));
  // Transfer length against the namespace's block size (the target's check).
  Command c = std::get<Command>(parse_command(encode_capsule(a_read()), io_ctx()));
  EXPECT_TRUE(check_transfer_length(c, 512).ok());
  EXPECT_EQ(check_transfer_length(c, 4096).code, StatusCode::kDataSglLengthInvalid);
  EXPECT_EQ(check_transfer_length(c, 256).code, StatusCode::kDataSglLengthInvalid);
}

TEST(NvmfCapsule, SglRefusals) {
  auto with_sgl_byte15 = [](std::uint8_t type_subtype) {
    NvmeCommand c = a_read();
    c.dptr.type_subtype = type_subtype;
    return c;
  };
  for (std::uint8_t t : {0x41, 0x4E, 0x00, 0x02, 0x10, 0x20, 0x30, 0x50, 0xF0})
    refused(with_sgl_byte15(t), io_ctx(), StatusCode::kSglDescriptorTypeInvalid);

  std::vector<std::byte> data(1024);
  auto write_ic = [&](std::uint32_t off, std::uint32_t len) {
    return build_write(2, 1, 0, 2, in_capsule_sgl(off, len)).value();
  };
  // Offset beyond the in-capsule data this queue accepts, or that arrived.
  refused(encode_capsule(write_ic(4097, 0), data), io_ctx(), StatusCode::kSglOffsetInvalid);
  refused(encode_capsule(write_ic(1025, 0), data), io_ctx(), StatusCode::kSglOffsetInvalid);
  refused(encode_capsule(write_ic(0xFFFFFFFFFFull & 0xFFFFFFFF, 16), data), io_ctx(),
          StatusCode::kSglOffsetInvalid);
  // Length running past the end.
  refused(encode_capsule(write_ic(512, 1024), data), io_ctx(), StatusCode::kDataSglLengthInvalid);
  refused(encode_capsule(write_ic(0, 0xFFFFFFFF), data), io_ctx(), StatusCode::kDataSglLengthInvalid);
  refused(encode_capsule(write_ic(0, 1024), data), io_ctx(true, 512), StatusCode::kDataSglLengthInvalid);
  // A 64-bit offset that would wrap a naive sum.
  NvmeCommand wrap = write_ic(0, 16);
  wrap.dptr.addr = ~0ull - 8;
  refused(encode_capsule(wrap, data), io_ctx(), StatusCode::kSglOffsetInvalid);
  // A queue without in-capsule data.
  refused(encode_capsule(write_ic(0, 1024), data), io_ctx(true, 0), StatusCode::kSglDescriptorTypeInvalid);
  // Reads cannot use in-capsule data.
  refused(encode_capsule(build_read(2, 1, 0, 2, in_capsule_sgl(0, 1024)).value(), data), io_ctx(),
          StatusCode::kInvalidField);
  // The boundary itself is fine.
  auto ok = parse_command(encode_capsule(write_ic(512, 512), data), io_ctx());
  ASSERT_TRUE(std::holds_alternative<Command>(ok));
  EXPECT_EQ(std::get<Command>(ok).data.in_capsule.size(), 512u);
}

TEST(NvmfCapsule, RefusalsDoNotPoisonTheQueue) {
  // The parser is stateless, so "the queue keeps serving" means: after any
  // garbage, a well-formed command on the same context still decodes.
  std::mt19937 rng(7);
  QueueContext ctx = io_ctx();
  auto good = encode_capsule(a_read());
  for (int i = 0; i < 2000; ++i) {
    std::vector<std::byte> junk(rng() % 200);
    for (auto& b : junk) b = std::byte(rng());
    if (junk.size() >= 2 && i % 2) junk[1] = std::byte{0x40};  // get past PSDT more often
    (void)parse_command(junk, ctx);
    auto r = parse_command(good, ctx);
    ASSERT_TRUE(std::holds_alternative<Command>(r));
    EXPECT_EQ(std::get<Command>(r).cid, 0x77);
  }
}

}  // namespace
}  // namespace srdma::nvmf
