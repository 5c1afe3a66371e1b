// The InfiniBand CM's messages as MADs (IBA vol. 1 ch. 12 and 13.4): what a
// device's GSI QP (QP1) sends and receives to set up, refuse and tear down
// connections. A pure codec: bytes to structs and back, no I/O, no state.
//
// A MAD is 256 bytes, all big-endian: the 24-byte common MAD header (base
// version 1, class 0x07 CM, class version 2, method Send) and 232 bytes of
// CM data laid out per message (IBA 12.6). Every field of REQ, MRA, REJ, REP,
// RTU, DREQ, DREP, SIDR_REQ and SIDR_REP is here at its IBA offset, including
// the ECE vendor IDs (IBA 1.4) that sit in bits older versions reserved;
// Linux's include/rdma/ibta_vol1_c12.h has the same offsets.
//
// Reserved bits: encode writes them as zero, decode ignores them (IBA's rule
// for reserved fields, and the reason an ECE peer still decodes here).
// Reserved *values* of a defined field (a REJ of message 3, path MTU 0) are
// refused: the sender is broken, and nothing sensible can be done with them.
// An unknown REJ reason or SIDR status is not refused: it still means "no".
//
// Decoding takes a span of any length and any content and never reads
// outside it. encode() refuses exactly what decode() refuses (a value wider
// than its field, a reserved value), so an encoded MAD always decodes.
//
// This file must compile without <expected> (the libFuzzer build uses
// clang 14): no srdma/status.h here. cm/mad_result.h turns a MadStatus into
// a srdma::Error.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>

namespace srdma::cm {

// ------------------------------------------------------------- the MAD --

constexpr std::size_t kMadBytes = 256;
constexpr std::size_t kMadHeaderBytes = 24;
constexpr std::size_t kCmDataBytes = kMadBytes - kMadHeaderBytes;  // 232

constexpr std::uint8_t kMgmtBaseVersion = 1;
constexpr std::uint8_t kMgmtClassCm = 0x07;
constexpr std::uint8_t kCmClassVersion = 2;  // IBA 1.2 and later

// MAD methods (IBA 13.4). Every CM message is a Send.
constexpr std::uint8_t kMethodGet = 0x01;
constexpr std::uint8_t kMethodSet = 0x02;
constexpr std::uint8_t kMethodSend = 0x03;
constexpr std::uint8_t kMethodGetResp = 0x81;

// The CM's attributes: the attribute ID names the message (Linux's
// CM_*_ATTR_ID in ib_cm.h).
// Open: a received ID may be any value (see is_cm_attribute).
enum class AttributeId : std::uint16_t {
  kClassPortInfo = 0x0001,
  kReq = 0x0010,
  kMra = 0x0011,
  kRej = 0x0012,
  kRep = 0x0013,
  kRtu = 0x0014,
  kDreq = 0x0015,
  kDrep = 0x0016,
  kSidrReq = 0x0017,
  kSidrRep = 0x0018,
  kLap = 0x0019,
  kApr = 0x001A,
};
// "REQ", "ClassPortInfo", ...; "unknown" for any other value.
std::string_view attribute_name(AttributeId a);
bool is_cm_attribute(AttributeId a);

// The common MAD header (IBA 13.4; Linux struct ib_mad_hdr), bytes 0..23.
// Bytes 18..19 are
// reserved.
struct MadHeader {
  std::uint8_t base_version = kMgmtBaseVersion;
  std::uint8_t mgmt_class = kMgmtClassCm;
  std::uint8_t class_version = kCmClassVersion;
  std::uint8_t method = kMethodSend;  // bit 7 is R (a response)
  std::uint16_t status = 0;
  std::uint16_t class_specific = 0;
  std::uint64_t transaction_id = 0;
  AttributeId attribute_id = AttributeId::kReq;
  // 0 for CM messages, but for ECE (IBA 1.4): a REQ's or REP's carries the
  // sender's vendor-specific connection options.
  std::uint32_t attribute_modifier = 0;

  bool operator==(const MadHeader&) const = default;
};

// The header a CM message of attribute `a` goes out with.
constexpr MadHeader cm_header(AttributeId a, std::uint64_t transaction_id, std::uint32_t attribute_modifier = 0) {
  MadHeader h;
  h.attribute_id = a;
  h.transaction_id = transaction_id;
  h.attribute_modifier = attribute_modifier;
  return h;
}

// ------------------------------------------------------------- values ---

using Gid = std::array<std::byte, 16>;

// REQ Transport Service Type. 3 defers to the Extended Transport Type, whose
// only defined value is 1, XRC (the XRC annex; Linux's cm_req_get_qp_type).
enum class TransportServiceType : std::uint8_t { kRc = 0, kUc = 1, kRd = 2, kExtended = 3 };
constexpr std::uint8_t kExtendedTransportXrc = 1;

// Path MTU in IBA's encoding (Linux enum ib_mtu); 0 and 6..15 are reserved.
enum class PathMtu : std::uint8_t { k256 = 1, k512 = 2, k1024 = 3, k2048 = 4, k4096 = 5 };

// Which message a REJ refuses or an MRA acknowledges (Linux enum
// cm_msg_response); 3 is reserved in both.
enum class MsgRejected : std::uint8_t { kReq = 0, kRep = 1, kOther = 2 };
enum class MsgMraed : std::uint8_t { kReq = 0, kRep = 1, kLap = 2 };

// REP Failover Accepted; 3 is reserved.
enum class FailoverAccepted : std::uint8_t { kAccepted = 0, kNotSupported = 1, kRejected = 2 };

// REJ reasons (IBA's REJ reason table; Linux enum ib_cm_rej_reason).
// Open: any 16-bit value decodes, and a reason unknown here still rejects.
enum class RejectReason : std::uint16_t {
  kNoQp = 1,
  kNoEec = 2,
  kNoResources = 3,
  kTimeout = 4,
  kUnsupported = 5,
  kInvalidCommId = 6,
  kInvalidCommInstance = 7,
  kInvalidServiceId = 8,
  kInvalidTransportType = 9,
  kStaleConnection = 10,
  kRdcNotExist = 11,
  kInvalidGid = 12,
  kInvalidLid = 13,
  kInvalidSl = 14,
  kInvalidTrafficClass = 15,
  kInvalidHopLimit = 16,
  kInvalidPacketRate = 17,
  kInvalidAltGid = 18,
  kInvalidAltLid = 19,
  kInvalidAltSl = 20,
  kInvalidAltTrafficClass = 21,
  kInvalidAltHopLimit = 22,
  kInvalidAltPacketRate = 23,
  kPortCmRedirect = 24,
  kPortRedirect = 25,
  kInvalidMtu = 26,
  kInsufficientRespResources = 27,
  kConsumerDefined = 28,  // what rdma_reject() sends
  kInvalidRnrRetry = 29,
  kDuplicateLocalCommId = 30,
  kInvalidClassVersion = 31,
  kInvalidFlowLabel = 32,
  kInvalidAltFlowLabel = 33,
  kVendorOptionNotSupported = 35,  // ECE
};
// "consumer defined", ...; "reserved" for a value IBA does not define.
std::string_view reject_reason_name(RejectReason r);

// SIDR_REP status (Linux enum ib_cm_sidr_status). Open like RejectReason.
enum class SidrStatus : std::uint8_t {
  kSuccess = 0,
  kUnsupported = 1,
  kReject = 2,
  kNoQp = 3,
  kRedirect = 4,
  kUnsupportedVersion = 5,
};

// ------------------------------------------------------------ messages --

// Private data sizes (Linux enum ib_cm_data_size): whatever a message's
// fields leave of the 232 bytes. The wire carries no length: all of it goes.
constexpr std::size_t kReqPrivateDataBytes = 92;
constexpr std::size_t kMraPrivateDataBytes = 222;
constexpr std::size_t kRejPrivateDataBytes = 148;
constexpr std::size_t kRejAriBytes = 72;
constexpr std::size_t kRepPrivateDataBytes = 196;
constexpr std::size_t kRtuPrivateDataBytes = 224;
constexpr std::size_t kDreqPrivateDataBytes = 220;
constexpr std::size_t kDrepPrivateDataBytes = 224;
constexpr std::size_t kSidrReqPrivateDataBytes = 216;
constexpr std::size_t kSidrRepPrivateDataBytes = 136;
constexpr std::size_t kSidrRepInfoBytes = 72;

// One of a REQ's two paths (IBA Table 106, "REQ Message Contents").
struct CmPath {
  std::uint16_t local_lid = 0;
  std::uint16_t remote_lid = 0;
  Gid local_gid{};
  Gid remote_gid{};
  std::uint32_t flow_label = 0;     // 20 bits
  std::uint8_t packet_rate = 0;     // 6 bits, IBA's rate encoding
  std::uint8_t traffic_class = 0;
  std::uint8_t hop_limit = 0;
  std::uint8_t sl = 0;              // 4 bits
  bool subnet_local = false;
  std::uint8_t local_ack_timeout = 0;  // 5 bits: 4.096 us * 2^value

  bool operator==(const CmPath&) const = default;
};

// Connection request (IBA Table 106).
struct Req {
  std::uint32_t local_comm_id = 0;
  std::uint32_t vendor_id = 0;  // 24 bits (ECE)
  std::uint64_t service_id = 0;
  std::uint64_t local_ca_guid = 0;
  std::uint32_t local_qkey = 0;
  std::uint32_t local_qpn = 0;  // 24 bits
  std::uint8_t responder_resources = 0;
  std::uint32_t local_eecn = 0;  // 24 bits
  std::uint8_t initiator_depth = 0;
  std::uint32_t remote_eecn = 0;                 // 24 bits
  std::uint8_t remote_cm_response_timeout = 0;   // 5 bits
  TransportServiceType transport_service_type = TransportServiceType::kRc;
  bool end_to_end_flow_control = false;
  std::uint32_t starting_psn = 0;               // 24 bits
  std::uint8_t local_cm_response_timeout = 0;   // 5 bits
  std::uint8_t retry_count = 0;                 // 3 bits
  std::uint16_t pkey = 0xffff;
  PathMtu path_mtu = PathMtu::k1024;
  bool rdc_exists = false;
  std::uint8_t rnr_retry_count = 0;  // 3 bits
  std::uint8_t max_cm_retries = 0;   // 4 bits
  bool srq = false;
  std::uint8_t extended_transport_type = 0;  // 3 bits; see TransportServiceType
  CmPath primary_path;
  CmPath alternate_path;  // all zero: none
  bool sap_supported = false;
  std::array<std::byte, kReqPrivateDataBytes> private_data{};

  bool operator==(const Req&) const = default;
};

// Message receipt acknowledgement (IBA Table 107): "I have it, give me time".
struct Mra {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  MsgMraed message_mraed = MsgMraed::kReq;
  std::uint8_t service_timeout = 0;  // 5 bits
  std::array<std::byte, kMraPrivateDataBytes> private_data{};

  bool operator==(const Mra&) const = default;
};

// Reject (IBA Table 108).
struct Rej {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  MsgRejected message_rejected = MsgRejected::kReq;
  std::uint8_t ari_length = 0;  // 7 bits on the wire, at most kRejAriBytes
  RejectReason reason = RejectReason::kConsumerDefined;
  std::array<std::byte, kRejAriBytes> ari{};  // additional rejection information
  std::array<std::byte, kRejPrivateDataBytes> private_data{};

  bool operator==(const Rej&) const = default;
};

// Reply to a REQ (IBA Table 110).
struct Rep {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  std::uint32_t local_qkey = 0;
  std::uint32_t local_qpn = 0;  // 24 bits
  std::uint32_t local_eecn = 0;  // 24 bits
  std::uint32_t starting_psn = 0;  // 24 bits
  std::uint32_t vendor_id = 0;     // 24 bits (ECE): bytes 15, 19 and 23
  std::uint8_t responder_resources = 0;
  std::uint8_t initiator_depth = 0;
  std::uint8_t target_ack_delay = 0;  // 5 bits
  FailoverAccepted failover_accepted = FailoverAccepted::kAccepted;
  bool end_to_end_flow_control = false;
  std::uint8_t rnr_retry_count = 0;  // 3 bits
  bool srq = false;
  std::uint64_t local_ca_guid = 0;
  std::array<std::byte, kRepPrivateDataBytes> private_data{};

  bool operator==(const Rep&) const = default;
};

// Ready to use (IBA Table 111).
struct Rtu {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  std::array<std::byte, kRtuPrivateDataBytes> private_data{};

  bool operator==(const Rtu&) const = default;
};

// Disconnect request (IBA Table 112).
struct Dreq {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  std::uint32_t remote_qpn_eecn = 0;  // 24 bits
  std::array<std::byte, kDreqPrivateDataBytes> private_data{};

  bool operator==(const Dreq&) const = default;
};

// Disconnect reply (IBA Table 113).
struct Drep {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  std::array<std::byte, kDrepPrivateDataBytes> private_data{};

  bool operator==(const Drep&) const = default;
};

// Service ID resolution request, for UD (IBA Table 119).
struct SidrReq {
  std::uint32_t request_id = 0;
  std::uint16_t pkey = 0xffff;
  std::uint64_t service_id = 0;
  std::array<std::byte, kSidrReqPrivateDataBytes> private_data{};

  bool operator==(const SidrReq&) const = default;
};

// Service ID resolution reply (IBA Table 120).
struct SidrRep {
  std::uint32_t request_id = 0;
  SidrStatus status = SidrStatus::kSuccess;
  std::uint8_t info_length = 0;  // at most kSidrRepInfoBytes
  std::uint32_t vendor_id = 0;   // 24 bits (ECE): bytes 6..7 and 11
  std::uint32_t qpn = 0;         // 24 bits
  std::uint64_t service_id = 0;
  std::uint32_t qkey = 0;
  std::array<std::byte, kSidrRepInfoBytes> info{};
  std::array<std::byte, kSidrRepPrivateDataBytes> private_data{};

  bool operator==(const SidrRep&) const = default;
};

using Message = std::variant<Req, Mra, Rej, Rep, Rtu, Dreq, Drep, SidrReq, SidrRep>;
AttributeId attribute_of(const Message& m);

// A decoded CM MAD.
struct CmMad {
  MadHeader header;
  Message message;

  bool operator==(const CmMad&) const = default;
};

// --------------------------------------------------------------- status --

// Why bytes did not decode, or a message did not encode.
enum class MadError : std::uint8_t {
  kNone,
  kTooShort,              // shorter than the common MAD header
  kWrongSize,             // not exactly kMadBytes
  kBadBaseVersion,        // not 1
  kBadClass,              // not the CM class
  kBadClassVersion,       // not 2 (a REQ's answer is REJ kInvalidClassVersion)
  kBadMethod,             // a CM message that is not a Send
  kUnknownAttribute,      // not a CM attribute
  kUnsupportedAttribute,  // ClassPortInfo, LAP, APR: CM attributes not decoded here
  kReservedValue,         // decode: a field holds a value IBA reserves
  kInvalidField,          // encode: a value wider than its field, or reserved
  kAttributeMismatch,     // encode: the header's attribute is not the message's
  kShortPrivateData,      // private data shorter than the RDMA CM header (cma_header.h)
};
std::string_view mad_error_name(MadError e);

// What went wrong and where. `field` names the field ("REQ Path Packet
// Payload MTU"; static storage) and `value` what it held.
struct MadStatus {
  MadError error = MadError::kNone;
  std::string_view field;
  std::uint64_t value = 0;

  bool ok() const { return error == MadError::kNone; }
};
// One sentence: "CM MAD: REQ Path Packet Payload MTU is 0: a value IBA
// reserves".
std::string describe(const MadStatus& s);

// ------------------------------------------------------------ the codec --

using Mad = std::array<std::byte, kMadBytes>;

// The common header of `mad` (at least kMadHeaderBytes; more is not read),
// checked as far as a header can be: base version, class, class version.
// Enough to dispatch on the attribute.
MadStatus decode_header(std::span<const std::byte> mad, MadHeader& out);

// A whole CM MAD: exactly kMadBytes, the header checked, method Send, a
// decodable attribute, no reserved value in any field. On error `out` is
// unspecified.
MadStatus decode(std::span<const std::byte> mad, CmMad& out);

// `m` with header `h` into `out`. `h` must be a CM message header (as
// decode checks it) of m's attribute; every value must fit its field and not
// be reserved. Reserved bits are written as zero. On error `out` is
// unspecified.
MadStatus encode(const MadHeader& h, const Message& m, std::span<std::byte, kMadBytes> out);
// With cm_header(attribute_of(m), transaction_id).
MadStatus encode(const Message& m, std::uint64_t transaction_id, std::span<std::byte, kMadBytes> out);

}  // namespace srdma::cm
