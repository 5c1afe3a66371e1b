// The NVMe-oF wire format: bytes where the specifications put them, every
// builder's capsule decoded back by the target's parser, and every status
// code through the 16-bit status field.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "nvmf/capsule.h"
#include "nvmf/capsule_parser.h"
#include "nvmf/status.h"
#include "nvmf/wire.h"

namespace srdma::nvmf {
namespace {

template <class T>
std::uint8_t byte_at(const T& s, std::size_t i) {
  return std::to_integer<std::uint8_t>(bytes_of(s)[i]);
}

QueueContext admin_ctx(bool connected = true) {
  return QueueContext{QueueType::kAdmin, connected, 8192, 128};
}
QueueContext io_ctx(bool connected = true) {
  return QueueContext{QueueType::kIo, connected, 8192, 1024};
}

Command parse_ok(std::span<const std::byte> capsule, const QueueContext& ctx) {
  ParseResult r = parse_command(capsule, ctx);
  if (auto* refusal = std::get_if<Refusal>(&r)) {
    ADD_FAILURE() << refusal->reason << ": " << refusal->status.to_string();
    return {};
  }
  return std::get<Command>(r);
}

TEST(NvmfWire, KeyedSglBytesAreWhereTheSpecPutsThem) {
  NvmeSgl s = keyed_sgl(0x1122334455667788, 0xABCDEF, 0xDEADBEEF, true).value();
  EXPECT_EQ(byte_at(s, 0), 0x88);  // address, little-endian
  EXPECT_EQ(byte_at(s, 7), 0x11);
  EXPECT_EQ(byte_at(s, 8), 0xEF);  // 24-bit length
  EXPECT_EQ(byte_at(s, 10), 0xAB);
  EXPECT_EQ(byte_at(s, 11), 0xEF);  // key
  EXPECT_EQ(byte_at(s, 14), 0xDE);
  EXPECT_EQ(byte_at(s, 15), 0x4F);  // type 4, subtype F (invalidate)
  EXPECT_EQ(s.keyed_length(), 0xABCDEFu);
  EXPECT_EQ(s.key(), 0xDEADBEEFu);
  EXPECT_EQ(keyed_sgl(0, 1u << 24, 1).error().code, EINVAL);
  EXPECT_EQ(byte_at(keyed_sgl(0, 1, 1).value(), 15), 0x40);

  NvmeSgl ic = in_capsule_sgl(16, 0x01020304);
  EXPECT_EQ(byte_at(ic, 0), 16);
  EXPECT_EQ(byte_at(ic, 8), 0x04);
  EXPECT_EQ(byte_at(ic, 11), 0x01);
  EXPECT_EQ(byte_at(ic, 15), 0x01);  // type 0, subtype 1 (offset)
  EXPECT_EQ(ic.unkeyed_length(), 0x01020304u);
}

TEST(NvmfWire, CommandFieldOffsets) {
  NvmeCommand c = build_read(0xBEEF, 7, 0x0000000100000002, 8,
                             keyed_sgl(0x1000, 4096, 0x42).value()).value();
  EXPECT_EQ(byte_at(c, 0), 0x02);  // Read
  EXPECT_EQ(byte_at(c, 1), 0x40);  // PSDT 01b
  EXPECT_EQ(byte_at(c, 2), 0xEF);
  EXPECT_EQ(byte_at(c, 3), 0xBE);
  EXPECT_EQ(byte_at(c, 4), 7);
  EXPECT_EQ(byte_at(c, 24 + 15), 0x40);  // SGL1 at 24
  EXPECT_EQ(byte_at(c, 40), 2);          // SLBA low (CDW10)
  EXPECT_EQ(byte_at(c, 44), 1);          // SLBA high (CDW11)
  EXPECT_EQ(byte_at(c, 48), 7);          // NLB 0's based (CDW12)

  NvmeCommand conn = build_connect(1, {.qid = 3, .queue_size = 128, .cattr = 0, .kato_ms = 0},
                                   null_sgl()).value();
  EXPECT_EQ(byte_at(conn, 0), 0x7F);
  EXPECT_EQ(byte_at(conn, 4), 0x01);  // fctype Connect
  EXPECT_EQ(byte_at(conn, 42), 3);    // QID
  EXPECT_EQ(byte_at(conn, 44), 127);  // SQSIZE 0's based

  NvmeCommand pg = build_property_get(2, Property::kCap);
  EXPECT_EQ(byte_at(pg, 4), 0x04);
  EXPECT_EQ(byte_at(pg, 40), 1);  // 8 bytes
  NvmeCommand ps = build_property_set(2, Property::kCc, 0x460001).value();
  EXPECT_EQ(byte_at(ps, 4), 0x00);
  EXPECT_EQ(byte_at(ps, 44), 0x14);
  EXPECT_EQ(byte_at(ps, 48), 0x01);
  EXPECT_EQ(build_property_set(2, Property::kCsts, 1).error().code, EINVAL);
}

TEST(NvmfWire, BuildersRefuseWhatTheWireCannotSay) {
  auto sgl = null_sgl();
  EXPECT_EQ(build_read(1, 1, 0, 0, sgl).error().code, EINVAL);
  EXPECT_EQ(build_write(1, 1, 0, 65537, sgl).error().code, EINVAL);
  EXPECT_TRUE(build_write(1, 1, 0, 65536, sgl).has_value());
  EXPECT_EQ(build_read(1, 0, 0, 1, sgl).error().code, EINVAL);
  EXPECT_EQ(build_flush(1, 0).error().code, EINVAL);
  EXPECT_EQ(build_connect(1, {.qid = 0, .queue_size = 1}, sgl).error().code, EINVAL);
  EXPECT_EQ(build_connect(1, {.qid = 0, .queue_size = 65537}, sgl).error().code, EINVAL);
  std::array<std::uint8_t, 16> id{};
  EXPECT_EQ(build_connect_data(id, 0, "", "nqn.x").error().code, EINVAL);
  EXPECT_EQ(build_connect_data(id, 0, std::string(256, 'a'), "nqn.x").error().code, EINVAL);
  EXPECT_TRUE(build_connect_data(id, 0, std::string(255, 'a'), "nqn.x").has_value());
  auto e = build_read(1, 1, 0, 0, sgl).error();
  EXPECT_NE(e.reason.find("nlb"), std::string::npos) << e.reason;
}

TEST(NvmfWire, ReadWriteRoundTrip) {
  auto sgl = keyed_sgl(0xFFFF000012345678, 4096, 0x1234).value();
  for (bool write : {false, true}) {
    auto c = (write ? build_write(9, 5, 0xFFFFFFFF0000, 65536, sgl, true)
                    : build_read(9, 5, 0xFFFFFFFF0000, 65536, sgl)).value();
    Command d = parse_ok(encode_capsule(c), io_ctx());
    EXPECT_EQ(d.kind, write ? CommandKind::kWrite : CommandKind::kRead);
    EXPECT_EQ(d.cid, 9);
    EXPECT_EQ(d.nsid, 5u);
    EXPECT_EQ(d.rw.slba, 0xFFFFFFFF0000u);
    EXPECT_EQ(d.rw.nlb, 65536u);
    EXPECT_EQ(d.rw.fua, write);
    EXPECT_EQ(d.data.kind, DataDescriptor::Kind::kKeyed);
    EXPECT_EQ(d.data.addr, 0xFFFF000012345678u);
    EXPECT_EQ(d.data.length, 4096u);
    EXPECT_EQ(d.data.key, 0x1234u);
    EXPECT_FALSE(d.data.invalidate);
  }
  // In-capsule write data.
  std::vector<std::byte> payload(1024);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = std::byte(i * 7);
  auto c = build_write(3, 1, 10, 2, in_capsule_sgl(0, 1024)).value();
  auto capsule = encode_capsule(c, payload);
  Command d = parse_ok(capsule, io_ctx());
  EXPECT_EQ(d.data.kind, DataDescriptor::Kind::kInCapsule);
  ASSERT_EQ(d.data.in_capsule.size(), 1024u);
  EXPECT_EQ(d.data.in_capsule.data(), capsule.data() + 64) << "a view, not a copy";
  EXPECT_EQ(std::memcmp(d.data.in_capsule.data(), payload.data(), 1024), 0);
  EXPECT_TRUE(check_transfer_length(d, 512).ok());
  EXPECT_EQ(check_transfer_length(d, 4096).code, StatusCode::kDataSglLengthInvalid);
}

TEST(NvmfWire, AdminAndFabricsRoundTrip) {
  auto buf = keyed_sgl(0x5000, 4096, 77, true).value();
  for (Cns cns : {Cns::kNamespace, Cns::kController, Cns::kActiveNamespaceList}) {
    Command d = parse_ok(encode_capsule(build_identify(4, cns, 1, buf, 0x21)), admin_ctx());
    EXPECT_EQ(d.kind, CommandKind::kIdentify);
    EXPECT_EQ(d.identify.cns, cns);
    EXPECT_EQ(d.identify.cntid, 0x21);
    EXPECT_EQ(d.nsid, 1u);
    EXPECT_TRUE(d.data.invalidate);
    EXPECT_EQ(d.data.key, 77u);
  }
  Command ka = parse_ok(encode_capsule(build_keep_alive(5)), admin_ctx());
  EXPECT_EQ(ka.kind, CommandKind::kKeepAlive);
  EXPECT_EQ(ka.cid, 5);

  Command fl = parse_ok(encode_capsule(build_flush(6, kNsidBroadcast).value()), io_ctx());
  EXPECT_EQ(fl.kind, CommandKind::kFlush);
  EXPECT_EQ(fl.nsid, kNsidBroadcast);

  Command pg = parse_ok(encode_capsule(build_property_get(7, Property::kCap)), admin_ctx());
  EXPECT_EQ(pg.kind, CommandKind::kPropertyGet);
  EXPECT_EQ(pg.property.property, Property::kCap);
  EXPECT_EQ(pg.property.size, 8);
  Command ps = parse_ok(encode_capsule(build_property_set(8, Property::kCc, 0x460001).value()),
                        admin_ctx());
  EXPECT_EQ(ps.kind, CommandKind::kPropertySet);
  EXPECT_EQ(ps.property.property, Property::kCc);
  EXPECT_EQ(ps.property.value, 0x460001u);

  // Connect with its data in the capsule (as an I/O queue's would be) and keyed.
  std::array<std::uint8_t, 16> hostid{1, 2, 3};
  ConnectData cd = build_connect_data(hostid, kDynamicCntlid, "nqn.2014-08.org.example:sub",
                                      "nqn.2014-08.org.example:host").value();
  auto conn = build_connect(9, {.qid = 2, .queue_size = 256, .cattr = 0, .kato_ms = 0},
                            in_capsule_sgl(0, 1024)).value();
  auto capsule = encode_capsule(conn, bytes_of(cd));
  Command d = parse_ok(capsule, io_ctx(false));
  EXPECT_EQ(d.kind, CommandKind::kConnect);
  EXPECT_EQ(d.connect.qid, 2);
  EXPECT_EQ(d.connect.queue_size, 256u);
  ConnectInfo info = std::get<ConnectInfo>(parse_connect_data(d.data.in_capsule));
  EXPECT_EQ(info.subnqn, "nqn.2014-08.org.example:sub");
  EXPECT_EQ(info.hostnqn, "nqn.2014-08.org.example:host");
  EXPECT_EQ(info.cntlid, kDynamicCntlid);
  EXPECT_EQ(info.hostid[2], 3);

  auto admin_conn = build_connect(1, {.qid = 0, .queue_size = 32, .cattr = 0, .kato_ms = 15000},
                                  keyed_sgl(0x9000, 1024, 5).value()).value();
  Command a = parse_ok(encode_capsule(admin_conn), admin_ctx(false));
  EXPECT_EQ(a.connect.kato_ms, 15000u);
  EXPECT_EQ(a.data.kind, DataDescriptor::Kind::kKeyed);
  EXPECT_EQ(a.data.length, 1024u);
}

TEST(NvmfWire, CompletionRoundTrip) {
  NvmeCompletion c = build_completion(0x1234, 3, 17, NvmeStatus::of(StatusCode::kLbaOutOfRange),
                                      0x1122334455667788, true);
  auto bytes = encode_completion(c);
  EXPECT_EQ(std::to_integer<int>(bytes[0]), 0x88);
  EXPECT_EQ(std::to_integer<int>(bytes[4]), 0x44);
  EXPECT_EQ(std::to_integer<int>(bytes[8]), 17);  // SQ head
  EXPECT_EQ(std::to_integer<int>(bytes[10]), 3);  // SQ id
  EXPECT_EQ(std::to_integer<int>(bytes[12]), 0x34);
  // status: phase 1, SC 0x80 in 8:1, SCT 0, DNR
  EXPECT_EQ(std::to_integer<int>(bytes[14]), 0x01);
  EXPECT_EQ(std::to_integer<int>(bytes[15]), 0x81);
  NvmeCompletion d = decode_completion(bytes).value();
  EXPECT_EQ(d.cid, 0x1234);
  EXPECT_EQ(d.dw0, 0x55667788u);
  EXPECT_EQ(d.dw1, 0x11223344u);
  EXPECT_TRUE(NvmeStatus::phase_of(d.status));
  EXPECT_EQ(NvmeStatus::decode(d.status), NvmeStatus::of(StatusCode::kLbaOutOfRange));
  EXPECT_EQ(decode_completion(std::span(bytes).first(15)).error().code, EINVAL);
}

TEST(NvmfStatus, EveryCodeEncodesAndDecodes) {
  std::set<std::string_view> names;
  for (const StatusCodeInfo& row : all_status_codes()) {
    const auto value = static_cast<std::uint16_t>(row.code);
    for (bool dnr : {false, true})
      for (bool more : {false, true})
        for (bool phase : {false, true}) {
          NvmeStatus s{row.code, dnr, more};
          const std::uint16_t field = s.encode(phase);
          EXPECT_EQ(field & 1, phase ? 1 : 0);
          EXPECT_EQ((field >> 1) & 0xFF, value & 0xFF) << row.name;
          EXPECT_EQ((field >> 9) & 0x7, value >> 8) << row.name;
          EXPECT_EQ((field >> 12) & 0x3, 0) << "CRD stays 0";
          EXPECT_EQ((field >> 14) & 1, more ? 1 : 0);
          EXPECT_EQ((field >> 15) & 1, dnr ? 1 : 0);
          EXPECT_EQ(NvmeStatus::decode(field), s) << row.name;
        }
    EXPECT_EQ(status_name(row.code), row.name);
    EXPECT_TRUE(names.insert(row.name).second) << "duplicate name " << row.name;
    EXPECT_EQ(NvmeStatus::of(row.code).dnr, row.default_dnr);
  }
  EXPECT_EQ(all_status_codes().size(), 36u);
}

TEST(NvmfStatus, SpecValuesAndTypes) {
  auto check = [](StatusCode c, StatusCodeType sct, std::uint8_t sc) {
    NvmeStatus s = NvmeStatus::of(c);
    EXPECT_EQ(s.sct(), sct) << status_name(c);
    EXPECT_EQ(s.sc(), sc) << status_name(c);
  };
  check(StatusCode::kSuccess, StatusCodeType::kGeneric, 0x00);
  check(StatusCode::kInvalidOpcode, StatusCodeType::kGeneric, 0x01);
  check(StatusCode::kInvalidField, StatusCodeType::kGeneric, 0x02);
  check(StatusCode::kCommandIdConflict, StatusCodeType::kGeneric, 0x03);
  check(StatusCode::kDataTransferError, StatusCodeType::kGeneric, 0x04);
  check(StatusCode::kInternalError, StatusCodeType::kGeneric, 0x06);
  check(StatusCode::kAbortRequested, StatusCodeType::kGeneric, 0x07);
  check(StatusCode::kInvalidNamespace, StatusCodeType::kGeneric, 0x0B);
  check(StatusCode::kCommandSequenceError, StatusCodeType::kGeneric, 0x0C);
  check(StatusCode::kDataSglLengthInvalid, StatusCodeType::kGeneric, 0x0F);
  check(StatusCode::kSglDescriptorTypeInvalid, StatusCodeType::kGeneric, 0x11);
  check(StatusCode::kSglOffsetInvalid, StatusCodeType::kGeneric, 0x16);
  check(StatusCode::kLbaOutOfRange, StatusCodeType::kGeneric, 0x80);
  check(StatusCode::kCapacityExceeded, StatusCodeType::kGeneric, 0x81);
  check(StatusCode::kNamespaceNotReady, StatusCodeType::kGeneric, 0x82);
  check(StatusCode::kConnectIncompatibleFormat, StatusCodeType::kCommandSpecific, 0x80);
  check(StatusCode::kConnectControllerBusy, StatusCodeType::kCommandSpecific, 0x81);
  check(StatusCode::kConnectInvalidParameters, StatusCodeType::kCommandSpecific, 0x82);
  check(StatusCode::kConnectRestartDiscovery, StatusCodeType::kCommandSpecific, 0x83);
  check(StatusCode::kConnectInvalidHost, StatusCodeType::kCommandSpecific, 0x84);
  check(StatusCode::kInvalidQueueType, StatusCodeType::kCommandSpecific, 0x85);
  check(StatusCode::kWriteFault, StatusCodeType::kMediaError, 0x80);
  check(StatusCode::kUnrecoveredReadError, StatusCodeType::kMediaError, 0x81);

  EXPECT_EQ(NvmeStatus::of(StatusCode::kInvalidField).encode(), 0x8004);
  EXPECT_EQ(NvmeStatus::of(StatusCode::kConnectInvalidHost).encode(), 0x8000 | (1 << 9) | (0x84 << 1));
  EXPECT_FALSE(NvmeStatus::of(StatusCode::kSuccess).dnr);
  EXPECT_FALSE(NvmeStatus::of(StatusCode::kNamespaceNotReady).dnr) << "may pass: retry";
  EXPECT_EQ(NvmeStatus::of(StatusCode::kInvalidField).to_string(),
            "Invalid Field in Command (sct 0x0 sc 0x02, DNR)");
  NvmeStatus unknown = NvmeStatus::decode(0x7 << 9 | 0x42 << 1);
  EXPECT_EQ(unknown.sct(), StatusCodeType::kVendorSpecific);
  EXPECT_EQ(status_name(unknown.code), "unknown");
}

}  // namespace
}  // namespace srdma::nvmf
