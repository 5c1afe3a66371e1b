// The CM MAD codec: bytes where IBA vol. 1 ch. 12 puts them (hand-built
// MADs from the offsets in Linux's include/rdma/ibta_vol1_c12.h), every
// message there and back with its fields at their limits and neighbours set,
// every defined bit read and every reserved bit ignored, every refusal with
// its errno, the RDMA CM's header and service IDs, and arbitrary bytes.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cm/cm_mad.h"
#include "cm/cma_header.h"
#include "cm/mad_result.h"

namespace srdma::cm {
namespace {

// ------------------------------------------------------------- helpers --

// A MAD written byte by byte from the spec's offsets, independently of the
// codec's field tables.
struct HandMad {
  Mad m{};
  void be(std::size_t at, std::uint64_t v, unsigned n) {
    for (unsigned i = 0; i < n; ++i) m[at + i] = static_cast<std::byte>((v >> (8 * (n - 1 - i))) & 0xff);
  }
  // CM data offsets count from the end of the 24-byte header.
  void cm(std::size_t at, std::uint64_t v, unsigned n) { be(kMadHeaderBytes + at, v, n); }
  void cm_bytes(std::size_t at, std::span<const std::byte> b) {
    std::copy(b.begin(), b.end(), m.begin() + static_cast<std::ptrdiff_t>(kMadHeaderBytes + at));
  }
  void header(AttributeId attr, std::uint64_t tid) {
    be(0, 0x01070203, 4);  // base version 1, class CM, class version 2, method Send
    be(8, tid, 8);
    be(16, static_cast<std::uint16_t>(attr), 2);
  }
};

template <std::size_t N>
std::array<std::byte, N> pattern_bytes(unsigned seed) {
  std::array<std::byte, N> a{};
  for (std::size_t i = 0; i < N; ++i) a[i] = static_cast<std::byte>((i * 13 + seed * 7 + 1) & 0xff);
  return a;
}

Gid gid_v4_mapped(std::uint32_t ip) {  // RoCEv2 GID of an IPv4 address: ::ffff:a.b.c.d
  Gid g{};
  g[10] = g[11] = std::byte{0xff};
  for (unsigned i = 0; i < 4; ++i) g[12 + i] = static_cast<std::byte>(ip >> (24 - 8 * i));
  return g;
}

Mad encoded(const Message& m, std::uint64_t tid = 0x0102030405060708ULL) {
  Mad out{};
  const MadStatus s = encode(m, tid, out);
  EXPECT_TRUE(s.ok()) << describe(s);
  return out;
}

CmMad decoded(std::span<const std::byte> mad) {
  CmMad out;
  const MadStatus s = decode(mad, out);
  EXPECT_TRUE(s.ok()) << describe(s);
  return out;
}

MadStatus decode_status(std::span<const std::byte> mad) {
  CmMad out;
  return decode(mad, out);
}

std::string first_difference(const Mad& a, const Mad& b) {
  for (std::size_t i = 0; i < kMadBytes; ++i)
    if (a[i] != b[i])
      return "byte " + std::to_string(i) + " (CM " + std::to_string(static_cast<long>(i) - 24) + "): " +
             std::to_string(std::to_integer<int>(a[i])) + " vs " + std::to_string(std::to_integer<int>(b[i]));
  return "none";
}

// The reserved bits of each message, by hand from IBA's tables (as Linux's
// cm_msgs.h comments and ibta_vol1_c12.h have them): CM offset and mask.
struct ReservedBits {
  std::size_t cm_byte;
  std::uint8_t mask;
};
std::vector<ReservedBits> reserved_bits(AttributeId a) {
  switch (a) {
    case AttributeId::kReq:
      return {{4, 0xff},    {24, 0xff},   {25, 0xff},  {26, 0xff},  {27, 0xff},   {90, 0x0f}, {91, 0xc0},
              {94, 0x07},   {95, 0x07},   {134, 0x0f}, {135, 0xc0}, {138, 0x07},  {139, 0x03}};
    case AttributeId::kMra: return {{8, 0x3f}, {9, 0x07}};
    case AttributeId::kRej: return {{8, 0x3f}, {9, 0x01}};
    case AttributeId::kRep: return {{27, 0x0f}};
    case AttributeId::kDreq: return {{11, 0xff}};
    case AttributeId::kSidrReq: return {{6, 0xff}, {7, 0xff}};
    case AttributeId::kRtu:
    case AttributeId::kDrep:
    case AttributeId::kSidrRep:
    case AttributeId::kClassPortInfo:
    case AttributeId::kLap:
    case AttributeId::kApr: return {};
  }
  return {};
}
// The whole MAD's reserved mask: the message's bits and header bytes 18..19.
Mad reserved_mask(AttributeId a) {
  Mad mask{};
  mask[18] = mask[19] = std::byte{0xff};
  for (const ReservedBits& r : reserved_bits(a)) mask[kMadHeaderBytes + r.cm_byte] = std::byte{r.mask};
  return mask;
}

// Field values from a 64-bit pattern: each field takes the pattern rotated
// on from the previous one's, cut to its width, so all-ones gives every field
// its maximum and 0x55.. / 0xaa.. give neighbours opposite bits.
class Pattern {
 public:
  explicit Pattern(std::uint64_t p) : p_(p) {}
  std::uint64_t next(unsigned width) {
    const std::uint64_t v = std::rotl(p_, static_cast<int>(k_++ * 7 % 64));
    return width >= 64 ? v : v & ((std::uint64_t{1} << width) - 1);
  }
  template <class T>
  T as(unsigned width) {
    return static_cast<T>(next(width));
  }
  bool flag() { return next(1) != 0; }
  // A field some of whose values are reserved: the pattern's value clamped
  // into [lo, hi], so all-ones gives the largest valid value.
  std::uint8_t clamped(unsigned width, unsigned lo, unsigned hi) {
    const auto v = static_cast<unsigned>(next(width));
    return static_cast<std::uint8_t>(v < lo ? lo : v > hi ? hi : v);
  }
  template <std::size_t N>
  std::array<std::byte, N> bytes() {
    std::array<std::byte, N> a{};
    for (std::size_t i = 0; i < N; ++i) a[i] = static_cast<std::byte>(next(8));
    return a;
  }

 private:
  std::uint64_t p_;
  unsigned k_ = 0;
};

CmPath make_path(Pattern& g) {
  CmPath p;
  p.local_lid = g.as<std::uint16_t>(16);
  p.remote_lid = g.as<std::uint16_t>(16);
  p.local_gid = g.bytes<16>();
  p.remote_gid = g.bytes<16>();
  p.flow_label = g.as<std::uint32_t>(20);
  p.packet_rate = g.as<std::uint8_t>(6);
  p.traffic_class = g.as<std::uint8_t>(8);
  p.hop_limit = g.as<std::uint8_t>(8);
  p.sl = g.as<std::uint8_t>(4);
  p.subnet_local = g.flag();
  p.local_ack_timeout = g.as<std::uint8_t>(5);
  return p;
}

Req make_req(std::uint64_t pattern) {
  Pattern g(pattern);
  Req m;
  m.local_comm_id = g.as<std::uint32_t>(32);
  m.vendor_id = g.as<std::uint32_t>(24);
  m.service_id = g.next(64);
  m.local_ca_guid = g.next(64);
  m.local_qkey = g.as<std::uint32_t>(32);
  m.local_qpn = g.as<std::uint32_t>(24);
  m.responder_resources = g.as<std::uint8_t>(8);
  m.local_eecn = g.as<std::uint32_t>(24);
  m.initiator_depth = g.as<std::uint8_t>(8);
  m.remote_eecn = g.as<std::uint32_t>(24);
  m.remote_cm_response_timeout = g.as<std::uint8_t>(5);
  m.transport_service_type = g.as<TransportServiceType>(2);
  m.end_to_end_flow_control = g.flag();
  m.starting_psn = g.as<std::uint32_t>(24);
  m.local_cm_response_timeout = g.as<std::uint8_t>(5);
  m.retry_count = g.as<std::uint8_t>(3);
  m.pkey = g.as<std::uint16_t>(16);
  m.path_mtu = static_cast<PathMtu>(g.clamped(4, 1, 5));
  m.rdc_exists = g.flag();
  m.rnr_retry_count = g.as<std::uint8_t>(3);
  m.max_cm_retries = g.as<std::uint8_t>(4);
  m.srq = g.flag();
  m.extended_transport_type = g.as<std::uint8_t>(3);
  if (m.transport_service_type == TransportServiceType::kExtended) m.extended_transport_type = kExtendedTransportXrc;
  m.primary_path = make_path(g);
  m.alternate_path = make_path(g);
  m.sap_supported = g.flag();
  m.private_data = g.bytes<kReqPrivateDataBytes>();
  return m;
}

Mra make_mra(std::uint64_t pattern) {
  Pattern g(pattern);
  Mra m;
  m.local_comm_id = g.as<std::uint32_t>(32);
  m.remote_comm_id = g.as<std::uint32_t>(32);
  m.message_mraed = static_cast<MsgMraed>(g.clamped(2, 0, 2));
  m.service_timeout = g.as<std::uint8_t>(5);
  m.private_data = g.bytes<kMraPrivateDataBytes>();
  return m;
}

Rej make_rej(std::uint64_t pattern) {
  Pattern g(pattern);
  Rej m;
  m.local_comm_id = g.as<std::uint32_t>(32);
  m.remote_comm_id = g.as<std::uint32_t>(32);
  m.message_rejected = static_cast<MsgRejected>(g.clamped(2, 0, 2));
  m.ari_length = g.clamped(7, 0, kRejAriBytes);
  m.reason = g.as<RejectReason>(16);
  m.ari = g.bytes<kRejAriBytes>();
  m.private_data = g.bytes<kRejPrivateDataBytes>();
  return m;
}

Rep make_rep(std::uint64_t pattern) {
  Pattern g(pattern);
  Rep m;
  m.local_comm_id = g.as<std::uint32_t>(32);
  m.remote_comm_id = g.as<std::uint32_t>(32);
  m.local_qkey = g.as<std::uint32_t>(32);
  m.local_qpn = g.as<std::uint32_t>(24);
  m.local_eecn = g.as<std::uint32_t>(24);
  m.starting_psn = g.as<std::uint32_t>(24);
  m.vendor_id = g.as<std::uint32_t>(24);
  m.responder_resources = g.as<std::uint8_t>(8);
  m.initiator_depth = g.as<std::uint8_t>(8);
  m.target_ack_delay = g.as<std::uint8_t>(5);
  m.failover_accepted = static_cast<FailoverAccepted>(g.clamped(2, 0, 2));
  m.end_to_end_flow_control = g.flag();
  m.rnr_retry_count = g.as<std::uint8_t>(3);
  m.srq = g.flag();
  m.local_ca_guid = g.next(64);
  m.private_data = g.bytes<kRepPrivateDataBytes>();
  return m;
}

Rtu make_rtu(std::uint64_t pattern) {
  Pattern g(pattern);
  Rtu m;
  m.local_comm_id = g.as<std::uint32_t>(32);
  m.remote_comm_id = g.as<std::uint32_t>(32);
  m.private_data = g.bytes<kRtuPrivateDataBytes>();
  return m;
}

Dreq make_dreq(std::uint64_t pattern) {
  Pattern g(pattern);
  Dreq m;
  m.local_comm_id = g.as<std::uint32_t>(32);
  m.remote_comm_id = g.as<std::uint32_t>(32);
  m.remote_qpn_eecn = g.as<std::uint32_t>(24);
  m.private_data = g.bytes<kDreqPrivateDataBytes>();
  return m;
}

Drep make_drep(std::uint64_t pattern) {
  Pattern g(pattern);
  Drep m;
  m.local_comm_id = g.as<std::uint32_t>(32);
  m.remote_comm_id = g.as<std::uint32_t>(32);
  m.private_data = g.bytes<kDrepPrivateDataBytes>();
  return m;
}

SidrReq make_sidr_req(std::uint64_t pattern) {
  Pattern g(pattern);
  SidrReq m;
  m.request_id = g.as<std::uint32_t>(32);
  m.pkey = g.as<std::uint16_t>(16);
  m.service_id = g.next(64);
  m.private_data = g.bytes<kSidrReqPrivateDataBytes>();
  return m;
}

SidrRep make_sidr_rep(std::uint64_t pattern) {
  Pattern g(pattern);
  SidrRep m;
  m.request_id = g.as<std::uint32_t>(32);
  m.status = g.as<SidrStatus>(8);
  m.info_length = g.clamped(8, 0, kSidrRepInfoBytes);
  m.vendor_id = g.as<std::uint32_t>(24);
  m.qpn = g.as<std::uint32_t>(24);
  m.service_id = g.next(64);
  m.qkey = g.as<std::uint32_t>(32);
  m.info = g.bytes<kSidrRepInfoBytes>();
  m.private_data = g.bytes<kSidrRepPrivateDataBytes>();
  return m;
}

std::vector<Message> samples(std::uint64_t pattern) {
  return {make_req(pattern),  make_mra(pattern),  make_rej(pattern),      make_rep(pattern),     make_rtu(pattern),
          make_dreq(pattern), make_drep(pattern), make_sidr_req(pattern), make_sidr_rep(pattern)};
}

// All zeros, every field at its maximum, alternating bits both ways, and two
// irregular ones.
constexpr std::uint64_t kPatterns[] = {0,
                                       ~std::uint64_t{0},
                                       0x5555555555555555ULL,
                                       0xAAAAAAAAAAAAAAAAULL,
                                       0x0123456789ABCDEFULL,
                                       0xFEDCBA9876543210ULL};

// ------------------------------------------------------------ the MAD ---

TEST(CmMad, ConstantsAreIbas) {
  EXPECT_EQ(kMadBytes, 256u);
  EXPECT_EQ(kMadHeaderBytes, 24u);
  EXPECT_EQ(kCmDataBytes, 232u);
  EXPECT_EQ(kMgmtBaseVersion, 1);
  EXPECT_EQ(kMgmtClassCm, 0x07);
  EXPECT_EQ(kCmClassVersion, 2);
  EXPECT_EQ(kMethodSend, 0x03);
  const std::pair<AttributeId, std::uint16_t> ids[] = {
      {AttributeId::kClassPortInfo, 0x0001}, {AttributeId::kReq, 0x0010},     {AttributeId::kMra, 0x0011},
      {AttributeId::kRej, 0x0012},           {AttributeId::kRep, 0x0013},     {AttributeId::kRtu, 0x0014},
      {AttributeId::kDreq, 0x0015},          {AttributeId::kDrep, 0x0016},    {AttributeId::kSidrReq, 0x0017},
      {AttributeId::kSidrRep, 0x0018},       {AttributeId::kLap, 0x0019},     {AttributeId::kApr, 0x001A}};
  for (auto [id, value] : ids) {
    EXPECT_EQ(static_cast<std::uint16_t>(id), value) << attribute_name(id);
    EXPECT_TRUE(is_cm_attribute(id));
  }
  EXPECT_EQ(attribute_name(AttributeId::kSidrRep), "SIDR_REP");
  EXPECT_EQ(attribute_name(static_cast<AttributeId>(0x0020)), "unknown");
  EXPECT_FALSE(is_cm_attribute(static_cast<AttributeId>(0x0000)));

  // Private data: what each message's fields leave of the 232 bytes.
  EXPECT_EQ(kReqPrivateDataBytes, 92u);
  EXPECT_EQ(kMraPrivateDataBytes, 222u);
  EXPECT_EQ(kRejPrivateDataBytes, 148u);
  EXPECT_EQ(kRejAriBytes, 72u);
  EXPECT_EQ(kRepPrivateDataBytes, 196u);
  EXPECT_EQ(kRtuPrivateDataBytes, 224u);
  EXPECT_EQ(kDreqPrivateDataBytes, 220u);
  EXPECT_EQ(kDrepPrivateDataBytes, 224u);
  EXPECT_EQ(kSidrReqPrivateDataBytes, 216u);
  EXPECT_EQ(kSidrRepPrivateDataBytes, 136u);
}

TEST(CmMad, RejectReasonsHaveIbasNumbersAndNames) {
  EXPECT_EQ(static_cast<int>(RejectReason::kNoQp), 1);
  EXPECT_EQ(static_cast<int>(RejectReason::kTimeout), 4);
  EXPECT_EQ(static_cast<int>(RejectReason::kInvalidServiceId), 8);
  EXPECT_EQ(static_cast<int>(RejectReason::kStaleConnection), 10);
  EXPECT_EQ(static_cast<int>(RejectReason::kInvalidAltPacketRate), 23);
  EXPECT_EQ(static_cast<int>(RejectReason::kPortCmRedirect), 24);
  EXPECT_EQ(static_cast<int>(RejectReason::kInvalidMtu), 26);
  EXPECT_EQ(static_cast<int>(RejectReason::kConsumerDefined), 28);
  EXPECT_EQ(static_cast<int>(RejectReason::kInvalidClassVersion), 31);
  EXPECT_EQ(static_cast<int>(RejectReason::kInvalidAltFlowLabel), 33);
  EXPECT_EQ(static_cast<int>(RejectReason::kVendorOptionNotSupported), 35);
  EXPECT_EQ(reject_reason_name(RejectReason::kConsumerDefined), "consumer defined");
  EXPECT_EQ(reject_reason_name(RejectReason::kInvalidClassVersion), "invalid class version");
  for (int r = 1; r <= 35; ++r)
    EXPECT_EQ(reject_reason_name(static_cast<RejectReason>(r)) == "reserved", r == 34) << r;
  EXPECT_EQ(reject_reason_name(static_cast<RejectReason>(0)), "reserved");
  EXPECT_EQ(static_cast<int>(MsgRejected::kReq), 0);
  EXPECT_EQ(static_cast<int>(MsgRejected::kRep), 1);
  EXPECT_EQ(static_cast<int>(MsgRejected::kOther), 2);
  EXPECT_EQ(static_cast<int>(MsgMraed::kLap), 2);
}

// --------------------------------------------------------- golden bytes --

// What an RDMA CM rdma_connect() over RoCEv2 looks like: an RC REQ from
// 192.168.1.1:50000 to port 20000 (service ID 0x1064e20), its private data a
// cma_hdr and then the user's. Every byte placed by hand from the offsets.
TEST(CmMadGolden, ReqBytesAreWhereIbaPutsThem) {
  const std::array<std::byte, 5> user{std::byte{'h'}, std::byte{'e'}, std::byte{'l'}, std::byte{'l'}, std::byte{'o'}};
  Req m;
  m.local_comm_id = 0x1a2b3c4d;
  m.vendor_id = 0x0002c9;
  m.service_id = rdma_service_id(kRdmaPsTcp, 20000);
  m.local_ca_guid = 0x0002c90300a1b2c3ULL;
  m.local_qkey = 0x11223344;
  m.local_qpn = 0x000123;
  m.responder_resources = 0x10;
  m.local_eecn = 0xe0e1e2;
  m.initiator_depth = 0x0f;
  m.remote_eecn = 0xd0d1d2;
  m.remote_cm_response_timeout = 20;
  m.transport_service_type = TransportServiceType::kRc;
  m.end_to_end_flow_control = true;
  m.starting_psn = 0xabcdef;
  m.local_cm_response_timeout = 19;
  m.retry_count = 7;
  m.pkey = 0xffff;
  m.path_mtu = PathMtu::k1024;
  m.rdc_exists = false;
  m.rnr_retry_count = 7;
  m.max_cm_retries = 15;
  m.srq = true;
  m.extended_transport_type = 0;
  m.primary_path.local_lid = 0x1234;
  m.primary_path.remote_lid = 0x5678;
  m.primary_path.local_gid = gid_v4_mapped(0xc0a80101);
  m.primary_path.remote_gid = gid_v4_mapped(0xc0a80102);
  m.primary_path.flow_label = 0xabcde;
  m.primary_path.packet_rate = 0x2a;
  m.primary_path.traffic_class = 0x68;
  m.primary_path.hop_limit = 64;
  m.primary_path.sl = 5;
  m.primary_path.subnet_local = true;
  m.primary_path.local_ack_timeout = 18;
  m.alternate_path.local_lid = 0x9abc;
  m.alternate_path.remote_lid = 0xdef0;
  m.alternate_path.local_gid = pattern_bytes<16>(3);
  m.alternate_path.remote_gid = pattern_bytes<16>(4);
  m.alternate_path.flow_label = 0x12345;
  m.alternate_path.packet_rate = 0x3f;
  m.alternate_path.traffic_class = 0x11;
  m.alternate_path.hop_limit = 0x22;
  m.alternate_path.sl = 15;
  m.alternate_path.subnet_local = false;
  m.alternate_path.local_ack_timeout = 31;
  m.sap_supported = true;
  ASSERT_TRUE(encode_cma_header(cma_header_v4(0xc0a80101, 0xc0a80102, 50000), m.private_data).ok());
  std::copy(user.begin(), user.end(), m.private_data.begin() + kCmaHeaderBytes);

  HandMad h;
  h.header(AttributeId::kReq, 0x00000a2b00000001ULL);
  h.cm(0, 0x1a2b3c4d, 4);           // Local Communication ID
  h.cm(5, 0x0002c9, 3);             // VendorID (byte 4 reserved)
  h.cm(8, 0x0000000001064e20, 8);   // ServiceID: RDMA_PS_TCP, port 20000
  h.cm(16, 0x0002c90300a1b2c3, 8);  // Local CA GUID (24..27 reserved)
  h.cm(28, 0x11223344, 4);          // Local Q_Key
  h.cm(32, 0x00012310, 4);          // Local QPN 0x123, Responder Resources 0x10
  h.cm(36, 0xe0e1e20f, 4);          // Local EECN, Initiator Depth 0x0f
  h.cm(40, 0xd0d1d2, 3);            // Remote EECN
  h.cm(43, 0xa1, 1);                // Remote CM Response Timeout 10100, TST 00 (RC), E2E 1
  h.cm(44, 0xabcdef, 3);            // Starting PSN
  h.cm(47, 0x9f, 1);                // Local CM Response Timeout 10011, Retry Count 111
  h.cm(48, 0xffff, 2);              // Partition Key
  h.cm(50, 0x37, 1);                // MTU 0011 (1024), RDC 0, RNR Retry 111
  h.cm(51, 0xf8, 1);                // Max CM Retries 1111, SRQ 1, Extended Transport Type 000
  h.cm(52, 0x1234, 2);              // primary path: Local Port LID
  h.cm(54, 0x5678, 2);              //   Remote Port LID
  h.cm_bytes(56, gid_v4_mapped(0xc0a80101));
  h.cm_bytes(72, gid_v4_mapped(0xc0a80102));
  h.cm(88, 0xabcde02a, 4);  //   Flow Label 0xabcde, 6 reserved bits, Packet Rate 101010
  h.cm(92, 0x68, 1);        //   Traffic Class
  h.cm(93, 0x40, 1);        //   Hop Limit
  h.cm(94, 0x58, 1);        //   SL 0101, Subnet Local 1
  h.cm(95, 0x90, 1);        //   Local ACK Timeout 10010
  h.cm(96, 0x9abc, 2);      // alternate path
  h.cm(98, 0xdef0, 2);
  h.cm_bytes(100, pattern_bytes<16>(3));
  h.cm_bytes(116, pattern_bytes<16>(4));
  h.cm(132, 0x1234503f, 4);  //   Flow Label 0x12345, Packet Rate 111111
  h.cm(136, 0x11, 1);
  h.cm(137, 0x22, 1);
  h.cm(138, 0xf0, 1);  //   SL 1111, Subnet Local 0
  h.cm(139, 0xfc, 1);  //   Local ACK Timeout 11111, SAP Supported 1
  // Private data: cma_hdr (version 0, IPv4, source port 50000, source and
  // destination as 12 zeros and the address), then the user's bytes.
  h.cm(140, 0x0040c350, 4);
  h.cm(140 + 4 + 12, 0xc0a80101, 4);
  h.cm(140 + 20 + 12, 0xc0a80102, 4);
  h.cm_bytes(140 + 36, user);

  const Mad got = encoded(m, 0x00000a2b00000001ULL);
  EXPECT_TRUE(got == h.m) << first_difference(got, h.m);
  const CmMad back = decoded(h.m);
  EXPECT_EQ(back.header, cm_header(AttributeId::kReq, 0x00000a2b00000001ULL));
  ASSERT_TRUE(std::holds_alternative<Req>(back.message));
  EXPECT_TRUE(std::get<Req>(back.message) == m);

  CmaHeader cma;
  ASSERT_TRUE(decode_cma_header(std::get<Req>(back.message).private_data, cma).ok());
  EXPECT_EQ(cma, cma_header_v4(0xc0a80101, 0xc0a80102, 50000));
  EXPECT_EQ(rdma_service_port(std::get<Req>(back.message).service_id), 20000);
}

// The passive side's answer, rdma_accept(): a REP with ECE's vendor ID spread
// over the low bytes of the QPN, EECN and PSN words.
TEST(CmMadGolden, RepBytesAreWhereIbaPutsThem) {
  Rep m;
  m.local_comm_id = 0x55667788;
  m.remote_comm_id = 0x1a2b3c4d;
  m.local_qkey = 0x01234567;
  m.local_qpn = 0x000456;
  m.local_eecn = 0x0a0b0c;
  m.starting_psn = 0x123456;
  m.vendor_id = 0x1502c9;
  m.responder_resources = 0x0f;
  m.initiator_depth = 0x10;
  m.target_ack_delay = 15;
  m.failover_accepted = FailoverAccepted::kNotSupported;
  m.end_to_end_flow_control = true;
  m.rnr_retry_count = 7;
  m.srq = true;
  m.local_ca_guid = 0x0002c90300d4e5f6ULL;
  m.private_data = pattern_bytes<kRepPrivateDataBytes>(9);

  HandMad h;
  h.header(AttributeId::kRep, 0xfeedface00000007ULL);
  h.cm(0, 0x55667788, 4);
  h.cm(4, 0x1a2b3c4d, 4);
  h.cm(8, 0x01234567, 4);   // Local Q_Key
  h.cm(12, 0x00045615, 4);  // Local QPN, VendorID[23:16]
  h.cm(16, 0x0a0b0c02, 4);  // Local EECN, VendorID[15:8]
  h.cm(20, 0x123456c9, 4);  // Starting PSN, VendorID[7:0]
  h.cm(24, 0x0f, 1);        // Responder Resources
  h.cm(25, 0x10, 1);        // Initiator Depth
  h.cm(26, 0x7b, 1);        // Target ACK Delay 01111, Failover Accepted 01, E2E 1
  h.cm(27, 0xf0, 1);        // RNR Retry Count 111, SRQ 1, 4 reserved bits
  h.cm(28, 0x0002c90300d4e5f6, 8);
  h.cm_bytes(36, pattern_bytes<kRepPrivateDataBytes>(9));

  const Mad got = encoded(m, 0xfeedface00000007ULL);
  EXPECT_TRUE(got == h.m) << first_difference(got, h.m);
  const CmMad back = decoded(h.m);
  ASSERT_TRUE(std::holds_alternative<Rep>(back.message));
  EXPECT_TRUE(std::get<Rep>(back.message) == m);
}

TEST(CmMadGolden, RejMraRtuDreqDrepBytes) {
  {
    Rej m;
    m.local_comm_id = 0x01020304;
    m.remote_comm_id = 0x05060708;
    m.message_rejected = MsgRejected::kRep;
    m.ari_length = 72;
    m.reason = RejectReason::kConsumerDefined;
    m.ari = pattern_bytes<kRejAriBytes>(1);
    m.private_data = pattern_bytes<kRejPrivateDataBytes>(2);
    HandMad h;
    h.header(AttributeId::kRej, 1);
    h.cm(0, 0x0102030405060708, 8);
    h.cm(8, 0x40, 1);    // Message REJected 01, 6 reserved
    h.cm(9, 0x90, 1);    // Reject Info Length 1001000 (72), 1 reserved
    h.cm(10, 28, 2);     // Reason
    h.cm_bytes(12, m.ari);
    h.cm_bytes(84, m.private_data);
    const Mad got = encoded(m, 1);
    EXPECT_TRUE(got == h.m) << first_difference(got, h.m);
    EXPECT_TRUE(std::get<Rej>(decoded(h.m).message) == m);
  }
  {
    Mra m;
    m.local_comm_id = 0x11111111;
    m.remote_comm_id = 0x22222222;
    m.message_mraed = MsgMraed::kLap;
    m.service_timeout = 24;  // what the RDMA CM sends (CMA_CM_MRA_SETTING less its flag)
    m.private_data = pattern_bytes<kMraPrivateDataBytes>(3);
    HandMad h;
    h.header(AttributeId::kMra, 2);
    h.cm(0, 0x1111111122222222, 8);
    h.cm(8, 0x80, 1);  // Message MRAed 10
    h.cm(9, 0xc0, 1);  // Service Timeout 11000
    h.cm_bytes(10, m.private_data);
    const Mad got = encoded(m, 2);
    EXPECT_TRUE(got == h.m) << first_difference(got, h.m);
    EXPECT_TRUE(std::get<Mra>(decoded(h.m).message) == m);
  }
  {
    Rtu m;
    m.local_comm_id = 0xa0a0a0a0;
    m.remote_comm_id = 0x0b0b0b0b;
    m.private_data = pattern_bytes<kRtuPrivateDataBytes>(4);
    HandMad h;
    h.header(AttributeId::kRtu, 3);
    h.cm(0, 0xa0a0a0a00b0b0b0b, 8);
    h.cm_bytes(8, m.private_data);
    const Mad got = encoded(m, 3);
    EXPECT_TRUE(got == h.m) << first_difference(got, h.m);
    EXPECT_TRUE(std::get<Rtu>(decoded(h.m).message) == m);
  }
  {
    Dreq m;
    m.local_comm_id = 0x12345678;
    m.remote_comm_id = 0x9abcdef0;
    m.remote_qpn_eecn = 0x000789;
    m.private_data = pattern_bytes<kDreqPrivateDataBytes>(5);
    HandMad h;
    h.header(AttributeId::kDreq, 4);
    h.cm(0, 0x123456789abcdef0, 8);
    h.cm(8, 0x00078900, 4);  // Remote QPN/EECN, 1 reserved byte
    h.cm_bytes(12, m.private_data);
    const Mad got = encoded(m, 4);
    EXPECT_TRUE(got == h.m) << first_difference(got, h.m);
    EXPECT_TRUE(std::get<Dreq>(decoded(h.m).message) == m);
  }
  {
    Drep m;
    m.local_comm_id = 0x9abcdef0;
    m.remote_comm_id = 0x12345678;
    m.private_data = pattern_bytes<kDrepPrivateDataBytes>(6);
    HandMad h;
    h.header(AttributeId::kDrep, 5);
    h.cm(0, 0x9abcdef012345678, 8);
    h.cm_bytes(8, m.private_data);
    const Mad got = encoded(m, 5);
    EXPECT_TRUE(got == h.m) << first_difference(got, h.m);
    EXPECT_TRUE(std::get<Drep>(decoded(h.m).message) == m);
  }
}

TEST(CmMadGolden, SidrBytes) {
  {
    SidrReq m;
    m.request_id = 0xcafebabe;
    m.pkey = 0x7fff;
    m.service_id = rdma_service_id(kRdmaPsUdp, 7174);
    m.private_data = pattern_bytes<kSidrReqPrivateDataBytes>(7);
    HandMad h;
    h.header(AttributeId::kSidrReq, 6);
    h.cm(0, 0xcafebabe, 4);
    h.cm(4, 0x7fff, 2);  // 6..7 reserved
    h.cm(8, 0x0000000001111c06, 8);
    h.cm_bytes(16, m.private_data);
    const Mad got = encoded(m, 6);
    EXPECT_TRUE(got == h.m) << first_difference(got, h.m);
    EXPECT_TRUE(std::get<SidrReq>(decoded(h.m).message) == m);
  }
  {
    SidrRep m;
    m.request_id = 0xcafebabe;
    m.status = SidrStatus::kNoQp;
    m.info_length = 16;
    m.vendor_id = 0xabcdef;
    m.qpn = 0x00face;
    m.service_id = 0x0000000001111c06;
    m.qkey = 0x01234567;  // RDMA_UDP_QKEY
    m.info = pattern_bytes<kSidrRepInfoBytes>(8);
    m.private_data = pattern_bytes<kSidrRepPrivateDataBytes>(9);
    HandMad h;
    h.header(AttributeId::kSidrRep, 7);
    h.cm(0, 0xcafebabe, 4);
    h.cm(4, 0x0310abcd, 4);  // Status 3, Additional Information Length 16, VendorID[23:8]
    h.cm(8, 0x00faceef, 4);  // QPN, VendorID[7:0]
    h.cm(12, 0x0000000001111c06, 8);
    h.cm(20, 0x01234567, 4);
    h.cm_bytes(24, m.info);
    h.cm_bytes(96, m.private_data);
    const Mad got = encoded(m, 7);
    EXPECT_TRUE(got == h.m) << first_difference(got, h.m);
    EXPECT_TRUE(std::get<SidrRep>(decoded(h.m).message) == m);
  }
}

TEST(CmMadGolden, HeaderFieldsAndReservedBytes) {
  MadHeader hdr = cm_header(AttributeId::kRtu, 0x8877665544332211ULL, 0xdeadbeef);
  hdr.status = 0x1234;
  hdr.class_specific = 0x5678;
  Mad got{};
  ASSERT_TRUE(encode(hdr, Rtu{}, got).ok());
  HandMad h;
  h.be(0, 0x01070203, 4);
  h.be(4, 0x12345678, 4);  // Status, ClassSpecific
  h.be(8, 0x8877665544332211, 8);
  h.be(16, 0x00140000, 4);  // AttributeID, 2 reserved bytes
  h.be(20, 0xdeadbeef, 4);  // AttributeModifier (ECE)
  EXPECT_TRUE(got == h.m) << first_difference(got, h.m);
  EXPECT_EQ(decoded(h.m).header, hdr);
  MadHeader only;
  ASSERT_TRUE(decode_header(std::span(h.m).first(kMadHeaderBytes), only).ok());
  EXPECT_EQ(only, hdr);
}

// ------------------------------------------------------------ round trip --

TEST(CmMad, EveryMessageRoundTripsAtItsLimits) {
  for (std::uint64_t p : kPatterns) {
    for (const Message& m : samples(p)) {
      SCOPED_TRACE(std::string(attribute_name(attribute_of(m))) + " pattern " + std::to_string(p));
      const Mad bytes = encoded(m, p);
      const CmMad back = decoded(bytes);
      EXPECT_TRUE(back.message == m);
      EXPECT_EQ(back.header, cm_header(attribute_of(m), p));
      EXPECT_TRUE(encoded(back.message, p) == bytes);
      // Into a buffer that held something else: every byte is written.
      Mad dirty;
      dirty.fill(std::byte{0xff});
      ASSERT_TRUE(encode(m, p, dirty).ok());
      EXPECT_TRUE(dirty == bytes) << first_difference(dirty, bytes);
    }
  }
}

// A field at its maximum beside a neighbour at zero and the other way round:
// a mask one bit too wide or a shift one off changes the neighbour.
TEST(CmMad, MaximalFieldsDoNotTouchTheirNeighbours) {
  Req a;
  a.remote_cm_response_timeout = 31;
  a.end_to_end_flow_control = true;  // TST 00 between them
  Req b;
  b.transport_service_type = TransportServiceType::kRd;
  Req c;
  c.local_cm_response_timeout = 31;
  Req d;
  d.retry_count = 7;
  Req e;
  e.path_mtu = PathMtu::k4096;
  e.rnr_retry_count = 7;  // RDC 0 between them
  Req f;
  f.max_cm_retries = 15;
  f.extended_transport_type = 7;  // SRQ 0 between; TST 0, so not reserved
  Req g;
  g.primary_path.flow_label = 0xfffff;
  g.alternate_path.packet_rate = 0x3f;
  g.alternate_path.local_ack_timeout = 31;  // SAP 0 beside it
  Req k;
  k.local_qpn = 0xffffff;  // responder resources 0 beside it
  k.initiator_depth = 0xff;
  k.starting_psn = 0xffffff;
  for (const Req& r : {a, b, c, d, e, f, g, k}) {
    const Mad bytes = encoded(r);
    EXPECT_TRUE(std::get<Req>(decoded(bytes).message) == r) << first_difference(bytes, encoded(Req{}));
  }
  const Mad ab = encoded(a);
  EXPECT_EQ(std::to_integer<int>(ab[24 + 43]), 0xf9);
  const Mad bb = encoded(b);
  EXPECT_EQ(std::to_integer<int>(bb[24 + 43]), 0x04);
  EXPECT_EQ(std::to_integer<int>(encoded(d)[24 + 47]), 0x07);
  EXPECT_EQ(std::to_integer<int>(encoded(e)[24 + 50]), 0x57);
  EXPECT_EQ(std::to_integer<int>(encoded(f)[24 + 51]), 0xf7);
  const Mad gb = encoded(g);
  EXPECT_EQ(std::to_integer<int>(gb[24 + 90]), 0xf0);
  EXPECT_EQ(std::to_integer<int>(gb[24 + 91]), 0x00);
  EXPECT_EQ(std::to_integer<int>(gb[24 + 135]), 0x3f);
  EXPECT_EQ(std::to_integer<int>(gb[24 + 139]), 0xf8);
  const Mad kb = encoded(k);
  EXPECT_EQ(std::to_integer<int>(kb[24 + 35]), 0x00);
  EXPECT_EQ(std::to_integer<int>(kb[24 + 39]), 0xff);
  EXPECT_EQ(std::to_integer<int>(kb[24 + 47]), 0x00);

  Rep r;
  r.target_ack_delay = 31;
  r.end_to_end_flow_control = true;  // failover 00 between
  r.rnr_retry_count = 7;             // SRQ 0 beside it
  const Mad rb = encoded(r);
  EXPECT_EQ(std::to_integer<int>(rb[24 + 26]), 0xf9);
  EXPECT_EQ(std::to_integer<int>(rb[24 + 27]), 0xe0);
  EXPECT_TRUE(std::get<Rep>(decoded(rb).message) == r);
  Rej j;
  j.message_rejected = MsgRejected::kOther;
  j.ari_length = 72;
  j.reason = static_cast<RejectReason>(0xffff);
  const Mad jb = encoded(j);
  EXPECT_EQ(std::to_integer<int>(jb[24 + 8]), 0x80);
  EXPECT_EQ(std::to_integer<int>(jb[24 + 9]), 0x90);
  EXPECT_TRUE(std::get<Rej>(decoded(jb).message) == j);
}

// Flip each of the 2048 bits of an encoded MAD: a defined bit changes what
// decodes (or makes it refused), a reserved bit changes nothing. Encode
// leaves the reserved bits zero.
TEST(CmMad, EveryDefinedBitIsReadAndEveryReservedBitIgnored) {
  for (std::uint64_t p : kPatterns) {
    for (const Message& m : samples(p)) {
      const AttributeId attr = attribute_of(m);
      SCOPED_TRACE(std::string(attribute_name(attr)) + " pattern " + std::to_string(p));
      const Mad base = encoded(m, p);
      const CmMad original = decoded(base);
      const Mad reserved = reserved_mask(attr);
      for (std::size_t i = 0; i < kMadBytes; ++i) ASSERT_EQ(base[i] & reserved[i], std::byte{0}) << "byte " << i;
      for (std::size_t bit = 0; bit < kMadBytes * 8; ++bit) {
        Mad flipped = base;
        const auto one = static_cast<std::byte>(0x80 >> (bit % 8));
        flipped[bit / 8] ^= one;
        CmMad out;
        const MadStatus s = decode(flipped, out);
        if ((reserved[bit / 8] & one) != std::byte{0}) {
          ASSERT_TRUE(s.ok() && out == original) << "reserved bit " << bit << " was read: " << describe(s);
        } else {
          ASSERT_TRUE(!s.ok() || !(out == original)) << "bit " << bit << " (byte " << bit / 8 << ") is not read";
        }
      }
    }
  }
}

TEST(CmMad, XrcAndTheExtendedTransportType) {
  Req r;
  r.transport_service_type = TransportServiceType::kExtended;
  r.extended_transport_type = kExtendedTransportXrc;
  EXPECT_EQ(std::to_integer<int>(encoded(r)[24 + 43]), 0x06);
  EXPECT_EQ(std::to_integer<int>(encoded(r)[24 + 51]), 0x01);
  EXPECT_TRUE(std::get<Req>(decoded(encoded(r)).message) == r);
  r.transport_service_type = TransportServiceType::kUc;
  r.extended_transport_type = 5;  // not type 3: the field is not looked at, and kept
  EXPECT_TRUE(std::get<Req>(decoded(encoded(r)).message) == r);
}

// ------------------------------------------------------------- refusals --

Mad good_req_mad() { return encoded(make_req(0x0123456789ABCDEFULL)); }

void expect_refused(std::span<const std::byte> mad, MadError e, int errno_value, std::string_view field) {
  CmMad out;
  const MadStatus s = decode(mad, out);
  EXPECT_EQ(s.error, e) << describe(s);
  if (!field.empty()) {
    EXPECT_EQ(s.field, field);
  }
  const Error err = to_error(s);
  EXPECT_EQ(err.code, errno_value);
  EXPECT_NE(err.reason.find("CM MAD: "), std::string::npos);
  const auto r = decode_mad(mad);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, errno_value);
}

TEST(CmMadNegative, WrongSizesAreEinval) {
  const Mad good = good_req_mad();
  std::vector<std::byte> big(good.begin(), good.end());
  big.resize(512);
  for (std::size_t n : {0u, 1u, 23u, 24u, 100u, 255u}) {
    SCOPED_TRACE(n);
    expect_refused(std::span(good).first(n), MadError::kWrongSize, EINVAL, "MAD length");
  }
  for (std::size_t n : {257u, 300u, 512u}) expect_refused(std::span(big).first(n), MadError::kWrongSize, EINVAL, "");
  // The header alone needs its 24 bytes, not more.
  MadHeader h;
  EXPECT_EQ(decode_header(std::span(good).first(23), h).error, MadError::kTooShort);
  EXPECT_EQ(decode_header(std::span(good).first(0), h).error, MadError::kTooShort);
  EXPECT_TRUE(decode_header(std::span(good).first(24), h).ok());
  EXPECT_EQ(h.attribute_id, AttributeId::kReq);
  EXPECT_EQ(to_error(MadStatus{MadError::kTooShort, "MAD length", 3}).reason,
            "CM MAD: MAD length is 3: shorter than the 24-byte common MAD header");
}

TEST(CmMadNegative, BadVersionsAndClassAreEproto) {
  for (int v : {0, 2, 0x80}) {  // 0x80: OPA's base version
    Mad m = good_req_mad();
    m[0] = static_cast<std::byte>(v);
    expect_refused(m, MadError::kBadBaseVersion, EPROTO, "MAD BaseVersion");
    MadHeader h;
    EXPECT_EQ(decode_header(m, h).error, MadError::kBadBaseVersion);
  }
  for (int c : {0x00, 0x01, 0x03, 0x04, 0x81}) {  // SM, SA, PerfMgt, directed-route SM
    Mad m = good_req_mad();
    m[1] = static_cast<std::byte>(c);
    expect_refused(m, MadError::kBadClass, EPROTO, "MAD MgmtClass");
  }
  for (int v : {0, 1, 3, 0xff}) {
    Mad m = good_req_mad();
    m[2] = static_cast<std::byte>(v);
    expect_refused(m, MadError::kBadClassVersion, EPROTO, "MAD ClassVersion");
  }
  Mad m = good_req_mad();
  m[2] = std::byte{1};
  EXPECT_EQ(to_error(decode_status(m)).reason, "CM MAD: MAD ClassVersion is 1: not CM class version 2");
}

TEST(CmMadNegative, MethodsOtherThanSendAreEproto) {
  for (int method : {0x01, 0x02, 0x81, 0x83, 0x05, 0x00}) {
    Mad m = good_req_mad();
    m[3] = static_cast<std::byte>(method);
    expect_refused(m, MadError::kBadMethod, EPROTO, "MAD Method");
  }
}

TEST(CmMadNegative, UnknownAndUnsupportedAttributes) {
  for (std::uint16_t a : {0x0000, 0x0002, 0x000f, 0x001b, 0x0020, 0x1010, 0xffff}) {
    Mad m = good_req_mad();
    m[16] = static_cast<std::byte>(a >> 8);
    m[17] = static_cast<std::byte>(a & 0xff);
    expect_refused(m, MadError::kUnknownAttribute, EPROTO, "MAD AttributeID");
  }
  // Known CM attributes this codec does not decode; ClassPortInfo comes as a
  // Get, and is still "unsupported", not "bad method".
  for (auto [a, method] : {std::pair{AttributeId::kClassPortInfo, kMethodGet}, std::pair{AttributeId::kLap, kMethodSend},
                           std::pair{AttributeId::kApr, kMethodSend}}) {
    Mad m = good_req_mad();
    m[3] = static_cast<std::byte>(method);
    m[17] = static_cast<std::byte>(static_cast<std::uint16_t>(a));
    expect_refused(m, MadError::kUnsupportedAttribute, EPROTO, "MAD AttributeID");
  }
}

// A field's reserved values, each at its place.
TEST(CmMadNegative, ReservedValuesAreEproto) {
  auto with = [](Mad m, std::size_t cm_byte, std::uint8_t mask, std::uint8_t bits) {
    auto& b = m[kMadHeaderBytes + cm_byte];
    b = (b & ~std::byte{mask}) | std::byte{bits};
    return m;
  };
  const Mad req = encoded(Req{});
  for (std::uint8_t mtu : {0, 6, 7, 15})
    expect_refused(with(req, 50, 0xf0, static_cast<std::uint8_t>(mtu << 4)), MadError::kReservedValue, EPROTO,
                   "REQ Path Packet Payload MTU");
  for (std::uint8_t mtu = 1; mtu <= 5; ++mtu) EXPECT_TRUE(decode_status(with(req, 50, 0xf0, mtu << 4)).ok());
  // Transport type 3 with an extended type other than XRC.
  for (std::uint8_t ext : {0, 2, 7})
    expect_refused(with(with(req, 43, 0x06, 0x06), 51, 0x07, ext), MadError::kReservedValue, EPROTO,
                   "REQ Extended Transport Type");
  EXPECT_TRUE(decode_status(with(with(req, 43, 0x06, 0x06), 51, 0x07, 1)).ok());

  const Mad rej = encoded(Rej{});
  expect_refused(with(rej, 8, 0xc0, 0xc0), MadError::kReservedValue, EPROTO, "REJ Message REJected");
  for (std::uint8_t len : {73, 100, 127})
    expect_refused(with(rej, 9, 0xfe, static_cast<std::uint8_t>(len << 1)), MadError::kReservedValue, EPROTO,
                   "REJ Reject Info Length");
  EXPECT_TRUE(decode_status(with(rej, 9, 0xfe, 72 << 1)).ok());

  expect_refused(with(encoded(Mra{}), 8, 0xc0, 0xc0), MadError::kReservedValue, EPROTO, "MRA Message MRAed");
  expect_refused(with(encoded(Rep{}), 26, 0x06, 0x06), MadError::kReservedValue, EPROTO, "REP Failover Accepted");
  expect_refused(with(encoded(SidrRep{}), 5, 0xff, 73), MadError::kReservedValue, EPROTO,
                 "SIDR_REP Additional Information Length");

  EXPECT_EQ(to_error(decode_status(with(req, 50, 0xf0, 0))).reason,
            "CM MAD: REQ Path Packet Payload MTU is 0: a value IBA reserves");
}

// A reason or status this side does not know still decodes: it still says no.
TEST(CmMadNegative, UnknownRejectReasonsAndSidrStatusesDecode) {
  for (std::uint16_t reason : {0, 34, 36, 200, 0xffff}) {
    Rej j;
    j.reason = static_cast<RejectReason>(reason);
    const CmMad back = decoded(encoded(j));
    EXPECT_EQ(static_cast<std::uint16_t>(std::get<Rej>(back.message).reason), reason);
    EXPECT_EQ(reject_reason_name(std::get<Rej>(back.message).reason), "reserved");
  }
  SidrRep s;
  s.status = static_cast<SidrStatus>(0xee);
  EXPECT_TRUE(std::get<SidrRep>(decoded(encoded(s)).message) == s);
}

TEST(CmMadNegative, EncodeRefusesWhatDecodeWouldAndValuesThatDoNotFit) {
  auto refused = [](const Message& m, std::string_view field) {
    Mad out{};
    const MadStatus s = encode(m, 1, out);
    EXPECT_EQ(s.error, MadError::kInvalidField) << describe(s);
    EXPECT_EQ(s.field, field);
    EXPECT_EQ(to_error(s).code, EINVAL);
    const auto r = encode_mad(m, 1);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, EINVAL);
  };
  Req r;
  r.local_qpn = 1u << 24;
  refused(r, "REQ Local QPN");
  r = Req{};
  r.starting_psn = 0x1000000;
  refused(r, "REQ Starting PSN");
  r = Req{};
  r.vendor_id = 0x1000000;
  refused(r, "REQ VendorID");
  r = Req{};
  r.remote_cm_response_timeout = 32;
  refused(r, "REQ Remote CM Response Timeout");
  r = Req{};
  r.retry_count = 8;
  refused(r, "REQ Retry Count");
  r = Req{};
  r.max_cm_retries = 16;
  refused(r, "REQ Max CM Retries");
  r = Req{};
  r.extended_transport_type = 8;
  refused(r, "REQ Extended Transport Type");
  r = Req{};
  r.primary_path.flow_label = 1u << 20;
  refused(r, "REQ Primary Flow Label");
  r = Req{};
  r.alternate_path.packet_rate = 64;
  refused(r, "REQ Alternate Packet Rate");
  r = Req{};
  r.alternate_path.sl = 16;
  refused(r, "REQ Alternate SL");
  r = Req{};
  r.primary_path.local_ack_timeout = 32;
  refused(r, "REQ Primary Local ACK Timeout");
  r = Req{};
  r.path_mtu = static_cast<PathMtu>(0);
  refused(r, "REQ Path Packet Payload MTU");
  r = Req{};
  r.path_mtu = static_cast<PathMtu>(6);
  refused(r, "REQ Path Packet Payload MTU");
  r = Req{};
  r.transport_service_type = TransportServiceType::kExtended;
  refused(r, "REQ Extended Transport Type");
  r = Req{};
  r.transport_service_type = static_cast<TransportServiceType>(4);
  refused(r, "REQ Transport Service Type");

  Rej j;
  j.ari_length = 73;
  refused(j, "REJ Reject Info Length");
  j = Rej{};
  j.message_rejected = static_cast<MsgRejected>(3);
  refused(j, "REJ Message REJected");
  Mra a;
  a.service_timeout = 32;
  refused(a, "MRA Service Timeout");
  a = Mra{};
  a.message_mraed = static_cast<MsgMraed>(3);
  refused(a, "MRA Message MRAed");
  Rep p;
  p.vendor_id = 1u << 24;
  refused(p, "REP VendorID");
  p = Rep{};
  p.failover_accepted = static_cast<FailoverAccepted>(3);
  refused(p, "REP Failover Accepted");
  p = Rep{};
  p.target_ack_delay = 32;
  refused(p, "REP Target ACK Delay");
  Dreq d;
  d.remote_qpn_eecn = 1u << 24;
  refused(d, "DREQ Remote QPN/EECN");
  SidrRep s;
  s.qpn = 1u << 24;
  refused(s, "SIDR_REP QPN");
  s = SidrRep{};
  s.vendor_id = 1u << 24;
  refused(s, "SIDR_REP VendorID");
  s = SidrRep{};
  s.info_length = 73;
  refused(s, "SIDR_REP Additional Information Length");
}

TEST(CmMadNegative, EncodeRefusesHeadersDecodeWouldRefuse) {
  Mad out{};
  MadHeader h = cm_header(AttributeId::kReq, 1);
  h.base_version = 2;
  EXPECT_EQ(encode(h, Req{}, out).error, MadError::kInvalidField);
  h = cm_header(AttributeId::kReq, 1);
  h.mgmt_class = 0x03;
  EXPECT_EQ(encode(h, Req{}, out).field, "MAD MgmtClass");
  h = cm_header(AttributeId::kReq, 1);
  h.class_version = 1;
  EXPECT_EQ(encode(h, Req{}, out).field, "MAD ClassVersion");
  h = cm_header(AttributeId::kReq, 1);
  h.method = kMethodGetResp;
  EXPECT_EQ(encode(h, Req{}, out).field, "MAD Method");
  h = cm_header(AttributeId::kRep, 1);
  const MadStatus s = encode(h, Req{}, out);
  EXPECT_EQ(s.error, MadError::kAttributeMismatch);
  EXPECT_EQ(to_error(s).code, EINVAL);
  EXPECT_EQ(encode_mad(h, Req{}).error().code, EINVAL);
  EXPECT_TRUE(encode_mad(cm_header(AttributeId::kReq, 1), Req{}).has_value());
}

// ------------------------------------------------------------ the RDMA CM --

TEST(CmMadCma, ServiceIdsOfThePortSpaces) {
  EXPECT_EQ(kRdmaPsTcp, 0x0106);
  EXPECT_EQ(kRdmaPsUdp, 0x0111);
  EXPECT_EQ(kRdmaPsIb, 0x013f);
  EXPECT_EQ(kRdmaPsIpoib, 0x0002);
  EXPECT_EQ(rdma_service_id(kRdmaPsTcp, 4420), 0x0000000001061144ULL);  // NVMe-oF
  EXPECT_EQ(rdma_service_id(kRdmaPsTcp, 0xffff), 0x000000000106ffffULL);
  EXPECT_EQ(rdma_service_port(0x0000000001061144ULL), 4420);
  EXPECT_TRUE(is_rdma_ip_service(0x0000000001061144ULL, kRdmaPsTcp));
  EXPECT_FALSE(is_rdma_ip_service(0x0000000001061144ULL, kRdmaPsUdp));
  EXPECT_FALSE(is_rdma_ip_service(0x0100000001061144ULL, kRdmaPsTcp));
}

TEST(CmMadCma, UserPrivateDataLimitsOnRoce) {
  EXPECT_EQ(kCmaHeaderBytes, 36u);
  EXPECT_EQ(kRdmaCmReqUserData, 56u);
  EXPECT_EQ(kRdmaCmRepUserData, 196u);
  EXPECT_EQ(kRdmaCmRejUserData, 148u);
  EXPECT_EQ(kRdmaCmSidrReqUserData, 180u);
  EXPECT_EQ(kRdmaCmSidrRepUserData, 136u);
}

TEST(CmMadCma, Ipv4HeaderIsZerosThenTheAddress) {
  std::array<std::byte, kReqPrivateDataBytes> pd{};
  pd.fill(std::byte{0xee});
  ASSERT_TRUE(encode_cma_header(cma_header_v4(0x0a000001, 0x0a000002, 0x1234), pd).ok());
  HandMad expect;  // only its first 36 bytes are used
  expect.be(0, 0x00401234, 4);
  expect.be(16, 0x0a000001, 4);
  expect.be(32, 0x0a000002, 4);
  for (std::size_t i = 0; i < kCmaHeaderBytes; ++i) EXPECT_EQ(pd[i], expect.m[i]) << i;
  EXPECT_EQ(pd[kCmaHeaderBytes], std::byte{0xee});  // the user's bytes are not touched

  CmaHeader h;
  ASSERT_TRUE(decode_cma_header(pd, h).ok());
  EXPECT_EQ(h.ip_version, 4);
  EXPECT_EQ(h.src_port, 0x1234);
  EXPECT_EQ(cma_ipv4_of(h.src_addr), 0x0a000001u);
  EXPECT_EQ(cma_ipv4_of(h.dst_addr), 0x0a000002u);

  // The pad before an IPv4 address and the low nibble of byte 1 are not read.
  pd[1] = std::byte{0x4f};
  pd[4] = pd[15] = pd[20] = std::byte{0x77};
  CmaHeader again;
  ASSERT_TRUE(decode_cma_header(pd, again).ok());
  EXPECT_EQ(again, h);
  // And are written as zero whatever the struct holds.
  CmaHeader dirty = h;
  dirty.src_addr[0] = std::byte{0x99};
  ASSERT_TRUE(encode_cma_header(dirty, pd).ok());
  EXPECT_EQ(pd[1], std::byte{0x40});
  EXPECT_EQ(pd[4], std::byte{0});
}

TEST(CmMadCma, Ipv6RoundTripsAndRefusals) {
  CmaHeader h;
  h.ip_version = 6;
  h.src_port = 0xc350;
  h.src_addr = pattern_bytes<16>(1);
  h.dst_addr = pattern_bytes<16>(2);
  std::array<std::byte, kCmaHeaderBytes> pd{};
  ASSERT_TRUE(encode_cma_header(h, pd).ok());
  EXPECT_EQ(pd[1], std::byte{0x60});
  EXPECT_TRUE(std::equal(h.src_addr.begin(), h.src_addr.end(), pd.begin() + 4));
  EXPECT_TRUE(std::equal(h.dst_addr.begin(), h.dst_addr.end(), pd.begin() + 20));
  CmaHeader back;
  ASSERT_TRUE(decode_cma_header(pd, back).ok());
  EXPECT_EQ(back, h);

  auto status = [](std::span<const std::byte> b) {
    CmaHeader out;
    return decode_cma_header(b, out);
  };
  EXPECT_EQ(status(std::span(pd).first(35)).error, MadError::kShortPrivateData);
  EXPECT_EQ(to_error(status(std::span(pd).first(35))).code, EINVAL);
  auto bad = pd;
  bad[0] = std::byte{1};
  EXPECT_EQ(status(bad).error, MadError::kReservedValue);
  EXPECT_EQ(status(bad).field, "RDMA CM header version");
  EXPECT_EQ(to_error(status(bad)).code, EPROTO);
  for (int v : {0x00, 0x50, 0xf0}) {
    bad = pd;
    bad[1] = static_cast<std::byte>(v);
    EXPECT_EQ(status(bad).error, MadError::kReservedValue);
  }
  h.ip_version = 5;
  EXPECT_EQ(encode_cma_header(h, pd).error, MadError::kInvalidField);
  EXPECT_EQ(encode_cma_header(cma_header_v4(1, 2, 3), std::span(pd).first(35)).error, MadError::kInvalidField);
}

// A whole rdma_connect REQ through the Result API, 56 bytes of user data.
TEST(CmMadCma, ConnectRequestThroughTheResultApi) {
  Req r = make_req(0x0123456789ABCDEFULL);
  r.transport_service_type = TransportServiceType::kRc;
  r.service_id = rdma_service_id(kRdmaPsTcp, 4420);
  ASSERT_TRUE(encode_cma_header(cma_header_v4(0xc0a80a01, 0xc0a80a02, 40000), r.private_data).ok());
  const auto mad = encode_mad(r, 42);
  ASSERT_TRUE(mad.has_value()) << mad.error().to_string();
  const auto back = decode_mad(*mad);
  ASSERT_TRUE(back.has_value()) << back.error().to_string();
  const Req& got = std::get<Req>(back->message);
  EXPECT_TRUE(got == r);
  CmaHeader h;
  ASSERT_TRUE(decode_cma_header(got.private_data, h).ok());
  EXPECT_EQ(h.src_port, 40000);
  EXPECT_EQ(cma_ipv4_of(h.dst_addr), 0xc0a80a02u);
  EXPECT_TRUE(std::equal(got.private_data.begin() + kCmaHeaderBytes, got.private_data.end(),
                         r.private_data.begin() + kCmaHeaderBytes));
  EXPECT_EQ(got.private_data.size() - kCmaHeaderBytes, kRdmaCmReqUserData);
}

// ------------------------------------------------------- arbitrary bytes --

// Random bytes of random lengths, most of them MAD-sized behind a good header
// so that the message decoders see them. Whatever decodes must encode back
// to the input less its reserved bits, and decode again to the same.
TEST(CmMadFuzz, ArbitraryBytesNeverCrashAndWhatDecodesIsCanonical) {
  std::mt19937_64 rng(0x5eed'c0de);
  const AttributeId attrs[] = {AttributeId::kReq,     AttributeId::kMra,     AttributeId::kRej,
                               AttributeId::kRep,     AttributeId::kRtu,     AttributeId::kDreq,
                               AttributeId::kDrep,    AttributeId::kSidrReq, AttributeId::kSidrRep,
                               AttributeId::kClassPortInfo, AttributeId::kLap, AttributeId::kApr};
  int decoded_ok = 0;
  std::vector<std::byte> buf;
  for (int iter = 0; iter < 40000; ++iter) {
    const std::uint64_t ctl = rng();
    const std::size_t len = (ctl & 7) == 0 ? ctl >> 8 & 0x1ff : kMadBytes;
    buf.resize(len);
    for (std::size_t i = 0; i < len; i += 8) {
      const std::uint64_t r = rng();
      for (std::size_t j = 0; j < 8 && i + j < len; ++j) buf[i + j] = static_cast<std::byte>(r >> (8 * j));
    }
    if (len >= kMadHeaderBytes && (ctl >> 3 & 3) != 0) {  // three in four: a good header
      buf[0] = std::byte{1};
      buf[1] = std::byte{0x07};
      buf[2] = std::byte{2};
      buf[3] = std::byte{kMethodSend};
      const auto a = static_cast<std::uint16_t>(attrs[(ctl >> 20) % std::size(attrs)]);
      buf[16] = static_cast<std::byte>(a >> 8);
      buf[17] = static_cast<std::byte>(a & 0xff);
      // Often a message with its reserved values avoided: the fields that
      // have some get a small value.
      if ((ctl >> 30 & 1) != 0) {
        buf[24 + 8] &= std::byte{0x3f};                     // REJ/MRA message 0
        buf[24 + 9] &= std::byte{0x7f};                     // REJ info length < 64
        buf[24 + 5] &= std::byte{0x3f};                     // SIDR_REP info length < 64
        buf[24 + 26] &= std::byte{0xfb};                    // REP failover < 2
        buf[24 + 50] = (buf[24 + 50] & std::byte{0x0f}) | std::byte{0x30};  // REQ MTU 1024
        buf[24 + 43] &= std::byte{0xfb};                    // REQ TST < 2
      }
    }
    MadHeader h;
    (void)decode_header(buf, h);
    CmMad out;
    const MadStatus s = decode(buf, out);
    EXPECT_FALSE(describe(s).empty());
    if (len >= kCmaHeaderBytes) {
      CmaHeader cma;
      (void)decode_cma_header(buf, cma);
    }
    if (!s.ok()) {
      EXPECT_NE(to_error(s).code, 0);
      continue;
    }
    ++decoded_ok;
    ASSERT_EQ(len, kMadBytes);
    Mad canonical{};
    ASSERT_TRUE(encode(out.header, out.message, canonical).ok());
    const Mad reserved = reserved_mask(out.header.attribute_id);
    for (std::size_t i = 0; i < kMadBytes; ++i) ASSERT_EQ(canonical[i], buf[i] & ~reserved[i]) << "byte " << i;
    CmMad again;
    ASSERT_TRUE(decode(canonical, again).ok());
    ASSERT_TRUE(again == out);
  }
  // Enough of them reached and passed the message decoders to mean something.
  EXPECT_GT(decoded_ok, 10000);
}

}  // namespace
}  // namespace srdma::cm
