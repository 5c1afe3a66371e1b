#include "cm/cm_mad.h"

#include <algorithm>
#include <concepts>
#include <iterator>
#include <type_traits>
#include <utility>

namespace srdma::cm {
namespace {

// ---------------------------------------------------------- the layout --

// A field where IBA's message tables put it: its most significant bit at
// Byte[Bit] of the MAD (bit 0 is a byte's most significant bit, as in the
// tables), `width` bits from there on, big-endian.
struct Field {
  std::uint16_t byte;
  std::uint8_t bit;
  std::uint8_t width;
  std::string_view name;
};

// A run of whole bytes: GIDs, ARI, private data.
struct Bytes {
  std::uint16_t byte;
  std::uint16_t length;
};

// The reader and writer load at most 8 bytes per field, so a field may not
// reach past the 64th bit from its first byte's start. Checked at compile
// time: a layout typo does not build.
consteval Field mad_field(unsigned byte, unsigned bit, unsigned width, std::string_view name) {
  if (bit > 7 || width == 0 || bit + width > 64 || byte + (bit + width + 7) / 8 > kMadBytes)
    throw "field outside the MAD or wider than a 64-bit load";
  return Field{static_cast<std::uint16_t>(byte), static_cast<std::uint8_t>(bit), static_cast<std::uint8_t>(width),
               name};
}
// IBA 12.6 counts a message's offsets from the start of the CM data, after
// the common header (as Linux's CM_FIELD*_LOC do).
consteval Field cm_field(unsigned byte, unsigned bit, unsigned width, std::string_view name) {
  return mad_field(byte + kMadHeaderBytes, bit, width, name);
}
consteval Bytes cm_bytes(unsigned byte, unsigned length) {
  if (byte + kMadHeaderBytes + length > kMadBytes) throw "bytes outside the MAD";
  return Bytes{static_cast<std::uint16_t>(byte + kMadHeaderBytes), static_cast<std::uint16_t>(length)};
}

// The common MAD header (IBA 13.4).
constexpr Field kBaseVersion = mad_field(0, 0, 8, "MAD BaseVersion");
constexpr Field kMgmtClass = mad_field(1, 0, 8, "MAD MgmtClass");
constexpr Field kClassVersion = mad_field(2, 0, 8, "MAD ClassVersion");
constexpr Field kMethod = mad_field(3, 0, 8, "MAD Method");
constexpr Field kStatus = mad_field(4, 0, 16, "MAD Status");
constexpr Field kClassSpecific = mad_field(6, 0, 16, "MAD ClassSpecific");
constexpr Field kTransactionId = mad_field(8, 0, 64, "MAD TransactionID");
constexpr Field kAttributeId = mad_field(16, 0, 16, "MAD AttributeID");
// 18..19 reserved
constexpr Field kAttributeModifier = mad_field(20, 0, 32, "MAD AttributeModifier");

// The communication IDs lead every connection message.
constexpr Field kLocalCommId = cm_field(0, 0, 32, "Local Communication ID");
constexpr Field kRemoteCommId = cm_field(4, 0, 32, "Remote Communication ID");

// REQ (IBA Table 106). Reserved: 4, 24..27, and the bits between the
// fields below.
namespace req {
constexpr Field kVendorId = cm_field(5, 0, 24, "REQ VendorID");
constexpr Field kServiceId = cm_field(8, 0, 64, "REQ ServiceID");
constexpr Field kLocalCaGuid = cm_field(16, 0, 64, "REQ Local CA GUID");
constexpr Field kLocalQkey = cm_field(28, 0, 32, "REQ Local Q_Key");
constexpr Field kLocalQpn = cm_field(32, 0, 24, "REQ Local QPN");
constexpr Field kResponderResources = cm_field(35, 0, 8, "REQ Responder Resources");
constexpr Field kLocalEecn = cm_field(36, 0, 24, "REQ Local EECN");
constexpr Field kInitiatorDepth = cm_field(39, 0, 8, "REQ Initiator Depth");
constexpr Field kRemoteEecn = cm_field(40, 0, 24, "REQ Remote EECN");
constexpr Field kRemoteCmResponseTimeout = cm_field(43, 0, 5, "REQ Remote CM Response Timeout");
constexpr Field kTransportServiceType = cm_field(43, 5, 2, "REQ Transport Service Type");
constexpr Field kEndToEndFlowControl = cm_field(43, 7, 1, "REQ End-to-End Flow Control");
constexpr Field kStartingPsn = cm_field(44, 0, 24, "REQ Starting PSN");
constexpr Field kLocalCmResponseTimeout = cm_field(47, 0, 5, "REQ Local CM Response Timeout");
constexpr Field kRetryCount = cm_field(47, 5, 3, "REQ Retry Count");
constexpr Field kPkey = cm_field(48, 0, 16, "REQ Partition Key");
constexpr Field kPathMtu = cm_field(50, 0, 4, "REQ Path Packet Payload MTU");
constexpr Field kRdcExists = cm_field(50, 4, 1, "REQ RDC Exists");
constexpr Field kRnrRetryCount = cm_field(50, 5, 3, "REQ RNR Retry Count");
constexpr Field kMaxCmRetries = cm_field(51, 0, 4, "REQ Max CM Retries");
constexpr Field kSrq = cm_field(51, 4, 1, "REQ SRQ");
constexpr Field kExtendedTransportType = cm_field(51, 5, 3, "REQ Extended Transport Type");
constexpr Field kSapSupported = cm_field(139, 5, 1, "REQ SAP Supported");
constexpr Bytes kPrivateData = cm_bytes(140, kReqPrivateDataBytes);

// A path: 44 bytes, the primary at 52, the alternate at 96.
struct PathFields {
  Field local_lid, remote_lid;
  Bytes local_gid, remote_gid;
  Field flow_label, packet_rate, traffic_class, hop_limit, sl, subnet_local, local_ack_timeout;
};
constexpr PathFields kPrimary{
    cm_field(52, 0, 16, "REQ Primary Local Port LID"),
    cm_field(54, 0, 16, "REQ Primary Remote Port LID"),
    cm_bytes(56, 16),
    cm_bytes(72, 16),
    cm_field(88, 0, 20, "REQ Primary Flow Label"),
    cm_field(91, 2, 6, "REQ Primary Packet Rate"),
    cm_field(92, 0, 8, "REQ Primary Traffic Class"),
    cm_field(93, 0, 8, "REQ Primary Hop Limit"),
    cm_field(94, 0, 4, "REQ Primary SL"),
    cm_field(94, 4, 1, "REQ Primary Subnet Local"),
    cm_field(95, 0, 5, "REQ Primary Local ACK Timeout"),
};
constexpr PathFields kAlternate{
    cm_field(96, 0, 16, "REQ Alternate Local Port LID"),
    cm_field(98, 0, 16, "REQ Alternate Remote Port LID"),
    cm_bytes(100, 16),
    cm_bytes(116, 16),
    cm_field(132, 0, 20, "REQ Alternate Flow Label"),
    cm_field(135, 2, 6, "REQ Alternate Packet Rate"),
    cm_field(136, 0, 8, "REQ Alternate Traffic Class"),
    cm_field(137, 0, 8, "REQ Alternate Hop Limit"),
    cm_field(138, 0, 4, "REQ Alternate SL"),
    cm_field(138, 4, 1, "REQ Alternate Subnet Local"),
    cm_field(139, 0, 5, "REQ Alternate Local ACK Timeout"),
};
}  // namespace req

// MRA (IBA Table 107).
namespace mra {
constexpr Field kMessageMraed = cm_field(8, 0, 2, "MRA Message MRAed");
constexpr Field kServiceTimeout = cm_field(9, 0, 5, "MRA Service Timeout");
constexpr Bytes kPrivateData = cm_bytes(10, kMraPrivateDataBytes);
}  // namespace mra

// REJ (IBA Table 108).
namespace rej {
constexpr Field kMessageRejected = cm_field(8, 0, 2, "REJ Message REJected");
constexpr Field kRejectInfoLength = cm_field(9, 0, 7, "REJ Reject Info Length");
constexpr Field kReason = cm_field(10, 0, 16, "REJ Reason");
constexpr Bytes kAri = cm_bytes(12, kRejAriBytes);
constexpr Bytes kPrivateData = cm_bytes(84, kRejPrivateDataBytes);
}  // namespace rej

// REP (IBA Table 110). The ECE vendor ID fills the low byte of each 24-bit
// field's word: bits 23..16 at 15, 15..8 at 19, 7..0 at 23.
namespace rep {
constexpr Field kLocalQkey = cm_field(8, 0, 32, "REP Local Q_Key");
constexpr Field kLocalQpn = cm_field(12, 0, 24, "REP Local QPN");
constexpr Field kVendorIdHigh = cm_field(15, 0, 8, "REP VendorID[23:16]");
constexpr Field kLocalEecn = cm_field(16, 0, 24, "REP Local EE Context Number");
constexpr Field kVendorIdMid = cm_field(19, 0, 8, "REP VendorID[15:8]");
constexpr Field kStartingPsn = cm_field(20, 0, 24, "REP Starting PSN");
constexpr Field kVendorIdLow = cm_field(23, 0, 8, "REP VendorID[7:0]");
constexpr Field kResponderResources = cm_field(24, 0, 8, "REP Responder Resources");
constexpr Field kInitiatorDepth = cm_field(25, 0, 8, "REP Initiator Depth");
constexpr Field kTargetAckDelay = cm_field(26, 0, 5, "REP Target ACK Delay");
constexpr Field kFailoverAccepted = cm_field(26, 5, 2, "REP Failover Accepted");
constexpr Field kEndToEndFlowControl = cm_field(26, 7, 1, "REP End-to-End Flow Control");
constexpr Field kRnrRetryCount = cm_field(27, 0, 3, "REP RNR Retry Count");
constexpr Field kSrq = cm_field(27, 3, 1, "REP SRQ");
constexpr Field kLocalCaGuid = cm_field(28, 0, 64, "REP Local CA GUID");
constexpr Bytes kPrivateData = cm_bytes(36, kRepPrivateDataBytes);
}  // namespace rep

// RTU, DREQ, DREP (IBA Tables 111, 112, 113).
constexpr Bytes kRtuPrivateData = cm_bytes(8, kRtuPrivateDataBytes);
constexpr Field kDreqRemoteQpnEecn = cm_field(8, 0, 24, "DREQ Remote QPN/EECN");
constexpr Bytes kDreqPrivateData = cm_bytes(12, kDreqPrivateDataBytes);
constexpr Bytes kDrepPrivateData = cm_bytes(8, kDrepPrivateDataBytes);

// SIDR_REQ (IBA Table 119): 6..7 reserved.
namespace sidr_req {
constexpr Field kRequestId = cm_field(0, 0, 32, "SIDR_REQ RequestID");
constexpr Field kPkey = cm_field(4, 0, 16, "SIDR_REQ Partition Key");
constexpr Field kServiceId = cm_field(8, 0, 64, "SIDR_REQ ServiceID");
constexpr Bytes kPrivateData = cm_bytes(16, kSidrReqPrivateDataBytes);
}  // namespace sidr_req

// SIDR_REP (IBA Table 120). The ECE vendor ID: bits 23..8 at 6..7, 7..0 at 11.
namespace sidr_rep {
constexpr Field kRequestId = cm_field(0, 0, 32, "SIDR_REP RequestID");
constexpr Field kStatus = cm_field(4, 0, 8, "SIDR_REP Status");
constexpr Field kInfoLength = cm_field(5, 0, 8, "SIDR_REP Additional Information Length");
constexpr Field kVendorIdHigh = cm_field(6, 0, 16, "SIDR_REP VendorID[23:8]");
constexpr Field kQpn = cm_field(8, 0, 24, "SIDR_REP QPN");
constexpr Field kVendorIdLow = cm_field(11, 0, 8, "SIDR_REP VendorID[7:0]");
constexpr Field kServiceId = cm_field(12, 0, 64, "SIDR_REP ServiceID");
constexpr Field kQkey = cm_field(20, 0, 32, "SIDR_REP Q_Key");
constexpr Bytes kInfo = cm_bytes(24, kSidrRepInfoBytes);
constexpr Bytes kPrivateData = cm_bytes(96, kSidrRepPrivateDataBytes);
}  // namespace sidr_rep

constexpr std::uint64_t mask_of(unsigned width) {
  return width >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << width) - 1;
}

// ------------------------------------------------- reading and writing --

class MadReader {
 public:
  explicit MadReader(std::span<const std::byte, kMadBytes> mad) : mad_(mad) {}

  std::uint64_t get(const Field& f) const {
    const unsigned end_bit = f.bit + f.width;
    const unsigned n = (end_bit + 7) / 8;
    std::uint64_t v = 0;
    for (unsigned i = 0; i < n; ++i) v = (v << 8) | std::to_integer<std::uint64_t>(mad_[f.byte + i]);
    return (v >> (n * 8 - end_bit)) & mask_of(f.width);
  }
  template <class T>
  T get_as(const Field& f) const {
    return static_cast<T>(get(f));
  }
  bool get_bool(const Field& f) const { return get(f) != 0; }

  template <std::size_t N>
  void get(const Bytes& b, std::array<std::byte, N>& out) const {
    std::copy_n(mad_.begin() + b.byte, std::min<std::size_t>(N, b.length), out.begin());
  }

 private:
  std::span<const std::byte, kMadBytes> mad_;
};

// Writes fields into a zeroed MAD; the first value that does not fit is the
// status, and nothing of it is written.
class MadWriter {
 public:
  explicit MadWriter(std::span<std::byte, kMadBytes> mad) : mad_(mad) { std::fill(mad_.begin(), mad_.end(), std::byte{0}); }

  void put(const Field& f, std::uint64_t v) {
    if ((v & ~mask_of(f.width)) != 0) return refuse(f.name, v);
    const unsigned end_bit = f.bit + f.width;
    const unsigned n = (end_bit + 7) / 8;
    const unsigned shift = n * 8 - end_bit;
    std::uint64_t word = 0;
    for (unsigned i = 0; i < n; ++i) word = (word << 8) | std::to_integer<std::uint64_t>(mad_[f.byte + i]);
    const std::uint64_t m = mask_of(f.width) << shift;
    word = (word & ~m) | ((v << shift) & m);
    for (unsigned i = n; i-- > 0;) {
      mad_[f.byte + i] = static_cast<std::byte>(word & 0xff);
      word >>= 8;
    }
  }
  template <class E>
    requires std::is_enum_v<E>
  void put(const Field& f, E v) {
    put(f, static_cast<std::uint64_t>(v));
  }
  template <class B>
    requires std::same_as<B, bool>
  void put(const Field& f, B v) {
    put(f, std::uint64_t{v ? 1u : 0u});
  }

  template <std::size_t N>
  void put(const Bytes& b, const std::array<std::byte, N>& in) {
    std::copy_n(in.begin(), std::min<std::size_t>(N, b.length), mad_.begin() + b.byte);
  }

  void refuse(std::string_view field, std::uint64_t value) {
    if (status_.ok()) status_ = MadStatus{MadError::kInvalidField, field, value};
  }
  const MadStatus& status() const { return status_; }

 private:
  std::span<std::byte, kMadBytes> mad_;
  MadStatus status_;
};

// ------------------------------------------------------ reserved values --

// The values IBA reserves in each message, one list for both directions:
// decode reports `as` kReservedValue, encode kInvalidField, so encode
// refuses exactly what decode would.
MadStatus reserved_value(std::string_view field, std::uint64_t v, MadError as) { return MadStatus{as, field, v}; }

MadStatus check_values(const Req& m, MadError as) {
  const auto mtu = static_cast<std::uint8_t>(m.path_mtu);
  if (mtu < static_cast<std::uint8_t>(PathMtu::k256) || mtu > static_cast<std::uint8_t>(PathMtu::k4096))
    return reserved_value(req::kPathMtu.name, mtu, as);
  // Type 3 means "see the Extended Transport Type", of which only XRC is defined.
  if (m.transport_service_type == TransportServiceType::kExtended && m.extended_transport_type != kExtendedTransportXrc)
    return reserved_value(req::kExtendedTransportType.name, m.extended_transport_type, as);
  return {};
}
MadStatus check_values(const Mra& m, MadError as) {
  if (static_cast<std::uint8_t>(m.message_mraed) > static_cast<std::uint8_t>(MsgMraed::kLap))
    return reserved_value(mra::kMessageMraed.name, static_cast<std::uint8_t>(m.message_mraed), as);
  return {};
}
MadStatus check_values(const Rej& m, MadError as) {
  if (static_cast<std::uint8_t>(m.message_rejected) > static_cast<std::uint8_t>(MsgRejected::kOther))
    return reserved_value(rej::kMessageRejected.name, static_cast<std::uint8_t>(m.message_rejected), as);
  // A longer ARI than the field holds would send a consumer past it.
  if (m.ari_length > kRejAriBytes) return reserved_value(rej::kRejectInfoLength.name, m.ari_length, as);
  return {};
}
MadStatus check_values(const Rep& m, MadError as) {
  if (static_cast<std::uint8_t>(m.failover_accepted) > static_cast<std::uint8_t>(FailoverAccepted::kRejected))
    return reserved_value(rep::kFailoverAccepted.name, static_cast<std::uint8_t>(m.failover_accepted), as);
  return {};
}
MadStatus check_values(const Rtu&, MadError) { return {}; }
MadStatus check_values(const Dreq&, MadError) { return {}; }
MadStatus check_values(const Drep&, MadError) { return {}; }
MadStatus check_values(const SidrReq&, MadError) { return {}; }
MadStatus check_values(const SidrRep& m, MadError as) {
  if (m.info_length > kSidrRepInfoBytes) return reserved_value(sidr_rep::kInfoLength.name, m.info_length, as);
  return {};
}

// -------------------------------------------------------------- bodies --

void read_path(const MadReader& r, const req::PathFields& f, CmPath& p) {
  p.local_lid = r.get_as<std::uint16_t>(f.local_lid);
  p.remote_lid = r.get_as<std::uint16_t>(f.remote_lid);
  r.get(f.local_gid, p.local_gid);
  r.get(f.remote_gid, p.remote_gid);
  p.flow_label = r.get_as<std::uint32_t>(f.flow_label);
  p.packet_rate = r.get_as<std::uint8_t>(f.packet_rate);
  p.traffic_class = r.get_as<std::uint8_t>(f.traffic_class);
  p.hop_limit = r.get_as<std::uint8_t>(f.hop_limit);
  p.sl = r.get_as<std::uint8_t>(f.sl);
  p.subnet_local = r.get_bool(f.subnet_local);
  p.local_ack_timeout = r.get_as<std::uint8_t>(f.local_ack_timeout);
}
void write_path(MadWriter& w, const req::PathFields& f, const CmPath& p) {
  w.put(f.local_lid, p.local_lid);
  w.put(f.remote_lid, p.remote_lid);
  w.put(f.local_gid, p.local_gid);
  w.put(f.remote_gid, p.remote_gid);
  w.put(f.flow_label, p.flow_label);
  w.put(f.packet_rate, p.packet_rate);
  w.put(f.traffic_class, p.traffic_class);
  w.put(f.hop_limit, p.hop_limit);
  w.put(f.sl, p.sl);
  w.put(f.subnet_local, p.subnet_local);
  w.put(f.local_ack_timeout, p.local_ack_timeout);
}

void read_body(const MadReader& r, Req& m) {
  m.local_comm_id = r.get_as<std::uint32_t>(kLocalCommId);
  m.vendor_id = r.get_as<std::uint32_t>(req::kVendorId);
  m.service_id = r.get(req::kServiceId);
  m.local_ca_guid = r.get(req::kLocalCaGuid);
  m.local_qkey = r.get_as<std::uint32_t>(req::kLocalQkey);
  m.local_qpn = r.get_as<std::uint32_t>(req::kLocalQpn);
  m.responder_resources = r.get_as<std::uint8_t>(req::kResponderResources);
  m.local_eecn = r.get_as<std::uint32_t>(req::kLocalEecn);
  m.initiator_depth = r.get_as<std::uint8_t>(req::kInitiatorDepth);
  m.remote_eecn = r.get_as<std::uint32_t>(req::kRemoteEecn);
  m.remote_cm_response_timeout = r.get_as<std::uint8_t>(req::kRemoteCmResponseTimeout);
  m.transport_service_type = r.get_as<TransportServiceType>(req::kTransportServiceType);
  m.end_to_end_flow_control = r.get_bool(req::kEndToEndFlowControl);
  m.starting_psn = r.get_as<std::uint32_t>(req::kStartingPsn);
  m.local_cm_response_timeout = r.get_as<std::uint8_t>(req::kLocalCmResponseTimeout);
  m.retry_count = r.get_as<std::uint8_t>(req::kRetryCount);
  m.pkey = r.get_as<std::uint16_t>(req::kPkey);
  m.path_mtu = r.get_as<PathMtu>(req::kPathMtu);
  m.rdc_exists = r.get_bool(req::kRdcExists);
  m.rnr_retry_count = r.get_as<std::uint8_t>(req::kRnrRetryCount);
  m.max_cm_retries = r.get_as<std::uint8_t>(req::kMaxCmRetries);
  m.srq = r.get_bool(req::kSrq);
  m.extended_transport_type = r.get_as<std::uint8_t>(req::kExtendedTransportType);
  read_path(r, req::kPrimary, m.primary_path);
  read_path(r, req::kAlternate, m.alternate_path);
  m.sap_supported = r.get_bool(req::kSapSupported);
  r.get(req::kPrivateData, m.private_data);
}
void write_body(MadWriter& w, const Req& m) {
  w.put(kLocalCommId, m.local_comm_id);
  w.put(req::kVendorId, m.vendor_id);
  w.put(req::kServiceId, m.service_id);
  w.put(req::kLocalCaGuid, m.local_ca_guid);
  w.put(req::kLocalQkey, m.local_qkey);
  w.put(req::kLocalQpn, m.local_qpn);
  w.put(req::kResponderResources, m.responder_resources);
  w.put(req::kLocalEecn, m.local_eecn);
  w.put(req::kInitiatorDepth, m.initiator_depth);
  w.put(req::kRemoteEecn, m.remote_eecn);
  w.put(req::kRemoteCmResponseTimeout, m.remote_cm_response_timeout);
  w.put(req::kTransportServiceType, m.transport_service_type);
  w.put(req::kEndToEndFlowControl, m.end_to_end_flow_control);
  w.put(req::kStartingPsn, m.starting_psn);
  w.put(req::kLocalCmResponseTimeout, m.local_cm_response_timeout);
  w.put(req::kRetryCount, m.retry_count);
  w.put(req::kPkey, m.pkey);
  w.put(req::kPathMtu, m.path_mtu);
  w.put(req::kRdcExists, m.rdc_exists);
  w.put(req::kRnrRetryCount, m.rnr_retry_count);
  w.put(req::kMaxCmRetries, m.max_cm_retries);
  w.put(req::kSrq, m.srq);
  w.put(req::kExtendedTransportType, m.extended_transport_type);
  write_path(w, req::kPrimary, m.primary_path);
  write_path(w, req::kAlternate, m.alternate_path);
  w.put(req::kSapSupported, m.sap_supported);
  w.put(req::kPrivateData, m.private_data);
}

void read_body(const MadReader& r, Mra& m) {
  m.local_comm_id = r.get_as<std::uint32_t>(kLocalCommId);
  m.remote_comm_id = r.get_as<std::uint32_t>(kRemoteCommId);
  m.message_mraed = r.get_as<MsgMraed>(mra::kMessageMraed);
  m.service_timeout = r.get_as<std::uint8_t>(mra::kServiceTimeout);
  r.get(mra::kPrivateData, m.private_data);
}
void write_body(MadWriter& w, const Mra& m) {
  w.put(kLocalCommId, m.local_comm_id);
  w.put(kRemoteCommId, m.remote_comm_id);
  w.put(mra::kMessageMraed, m.message_mraed);
  w.put(mra::kServiceTimeout, m.service_timeout);
  w.put(mra::kPrivateData, m.private_data);
}

void read_body(const MadReader& r, Rej& m) {
  m.local_comm_id = r.get_as<std::uint32_t>(kLocalCommId);
  m.remote_comm_id = r.get_as<std::uint32_t>(kRemoteCommId);
  m.message_rejected = r.get_as<MsgRejected>(rej::kMessageRejected);
  m.ari_length = r.get_as<std::uint8_t>(rej::kRejectInfoLength);
  m.reason = r.get_as<RejectReason>(rej::kReason);
  r.get(rej::kAri, m.ari);
  r.get(rej::kPrivateData, m.private_data);
}
void write_body(MadWriter& w, const Rej& m) {
  w.put(kLocalCommId, m.local_comm_id);
  w.put(kRemoteCommId, m.remote_comm_id);
  w.put(rej::kMessageRejected, m.message_rejected);
  w.put(rej::kRejectInfoLength, m.ari_length);
  w.put(rej::kReason, m.reason);
  w.put(rej::kAri, m.ari);
  w.put(rej::kPrivateData, m.private_data);
}

void read_body(const MadReader& r, Rep& m) {
  m.local_comm_id = r.get_as<std::uint32_t>(kLocalCommId);
  m.remote_comm_id = r.get_as<std::uint32_t>(kRemoteCommId);
  m.local_qkey = r.get_as<std::uint32_t>(rep::kLocalQkey);
  m.local_qpn = r.get_as<std::uint32_t>(rep::kLocalQpn);
  m.local_eecn = r.get_as<std::uint32_t>(rep::kLocalEecn);
  m.starting_psn = r.get_as<std::uint32_t>(rep::kStartingPsn);
  m.vendor_id = static_cast<std::uint32_t>(r.get(rep::kVendorIdHigh) << 16 | r.get(rep::kVendorIdMid) << 8 |
                                           r.get(rep::kVendorIdLow));
  m.responder_resources = r.get_as<std::uint8_t>(rep::kResponderResources);
  m.initiator_depth = r.get_as<std::uint8_t>(rep::kInitiatorDepth);
  m.target_ack_delay = r.get_as<std::uint8_t>(rep::kTargetAckDelay);
  m.failover_accepted = r.get_as<FailoverAccepted>(rep::kFailoverAccepted);
  m.end_to_end_flow_control = r.get_bool(rep::kEndToEndFlowControl);
  m.rnr_retry_count = r.get_as<std::uint8_t>(rep::kRnrRetryCount);
  m.srq = r.get_bool(rep::kSrq);
  m.local_ca_guid = r.get(rep::kLocalCaGuid);
  r.get(rep::kPrivateData, m.private_data);
}
void write_body(MadWriter& w, const Rep& m) {
  w.put(kLocalCommId, m.local_comm_id);
  w.put(kRemoteCommId, m.remote_comm_id);
  w.put(rep::kLocalQkey, m.local_qkey);
  w.put(rep::kLocalQpn, m.local_qpn);
  w.put(rep::kLocalEecn, m.local_eecn);
  w.put(rep::kStartingPsn, m.starting_psn);
  if (m.vendor_id > mask_of(24)) w.refuse("REP VendorID", m.vendor_id);
  w.put(rep::kVendorIdHigh, (m.vendor_id >> 16) & 0xff);
  w.put(rep::kVendorIdMid, (m.vendor_id >> 8) & 0xff);
  w.put(rep::kVendorIdLow, m.vendor_id & 0xff);
  w.put(rep::kResponderResources, m.responder_resources);
  w.put(rep::kInitiatorDepth, m.initiator_depth);
  w.put(rep::kTargetAckDelay, m.target_ack_delay);
  w.put(rep::kFailoverAccepted, m.failover_accepted);
  w.put(rep::kEndToEndFlowControl, m.end_to_end_flow_control);
  w.put(rep::kRnrRetryCount, m.rnr_retry_count);
  w.put(rep::kSrq, m.srq);
  w.put(rep::kLocalCaGuid, m.local_ca_guid);
  w.put(rep::kPrivateData, m.private_data);
}

void read_body(const MadReader& r, Rtu& m) {
  m.local_comm_id = r.get_as<std::uint32_t>(kLocalCommId);
  m.remote_comm_id = r.get_as<std::uint32_t>(kRemoteCommId);
  r.get(kRtuPrivateData, m.private_data);
}
void write_body(MadWriter& w, const Rtu& m) {
  w.put(kLocalCommId, m.local_comm_id);
  w.put(kRemoteCommId, m.remote_comm_id);
  w.put(kRtuPrivateData, m.private_data);
}

void read_body(const MadReader& r, Dreq& m) {
  m.local_comm_id = r.get_as<std::uint32_t>(kLocalCommId);
  m.remote_comm_id = r.get_as<std::uint32_t>(kRemoteCommId);
  m.remote_qpn_eecn = r.get_as<std::uint32_t>(kDreqRemoteQpnEecn);
  r.get(kDreqPrivateData, m.private_data);
}
void write_body(MadWriter& w, const Dreq& m) {
  w.put(kLocalCommId, m.local_comm_id);
  w.put(kRemoteCommId, m.remote_comm_id);
  w.put(kDreqRemoteQpnEecn, m.remote_qpn_eecn);
  w.put(kDreqPrivateData, m.private_data);
}

void read_body(const MadReader& r, Drep& m) {
  m.local_comm_id = r.get_as<std::uint32_t>(kLocalCommId);
  m.remote_comm_id = r.get_as<std::uint32_t>(kRemoteCommId);
  r.get(kDrepPrivateData, m.private_data);
}
void write_body(MadWriter& w, const Drep& m) {
  w.put(kLocalCommId, m.local_comm_id);
  w.put(kRemoteCommId, m.remote_comm_id);
  w.put(kDrepPrivateData, m.private_data);
}

void read_body(const MadReader& r, SidrReq& m) {
  m.request_id = r.get_as<std::uint32_t>(sidr_req::kRequestId);
  m.pkey = r.get_as<std::uint16_t>(sidr_req::kPkey);
  m.service_id = r.get(sidr_req::kServiceId);
  r.get(sidr_req::kPrivateData, m.private_data);
}
void write_body(MadWriter& w, const SidrReq& m) {
  w.put(sidr_req::kRequestId, m.request_id);
  w.put(sidr_req::kPkey, m.pkey);
  w.put(sidr_req::kServiceId, m.service_id);
  w.put(sidr_req::kPrivateData, m.private_data);
}

void read_body(const MadReader& r, SidrRep& m) {
  m.request_id = r.get_as<std::uint32_t>(sidr_rep::kRequestId);
  m.status = r.get_as<SidrStatus>(sidr_rep::kStatus);
  m.info_length = r.get_as<std::uint8_t>(sidr_rep::kInfoLength);
  m.vendor_id = static_cast<std::uint32_t>(r.get(sidr_rep::kVendorIdHigh) << 8 | r.get(sidr_rep::kVendorIdLow));
  m.qpn = r.get_as<std::uint32_t>(sidr_rep::kQpn);
  m.service_id = r.get(sidr_rep::kServiceId);
  m.qkey = r.get_as<std::uint32_t>(sidr_rep::kQkey);
  r.get(sidr_rep::kInfo, m.info);
  r.get(sidr_rep::kPrivateData, m.private_data);
}
void write_body(MadWriter& w, const SidrRep& m) {
  w.put(sidr_rep::kRequestId, m.request_id);
  w.put(sidr_rep::kStatus, m.status);
  w.put(sidr_rep::kInfoLength, m.info_length);
  if (m.vendor_id > mask_of(24)) w.refuse("SIDR_REP VendorID", m.vendor_id);
  w.put(sidr_rep::kVendorIdHigh, (m.vendor_id >> 8) & 0xffff);
  w.put(sidr_rep::kVendorIdLow, m.vendor_id & 0xff);
  w.put(sidr_rep::kQpn, m.qpn);
  w.put(sidr_rep::kServiceId, m.service_id);
  w.put(sidr_rep::kQkey, m.qkey);
  w.put(sidr_rep::kInfo, m.info);
  w.put(sidr_rep::kPrivateData, m.private_data);
}

template <class M>
MadStatus decode_as(const MadReader& r, Message& out) {
  M m;
  read_body(r, m);
  const MadStatus s = check_values(m, MadError::kReservedValue);
  if (s.ok()) out = std::move(m);
  return s;
}

// The checks decode_header makes: its own errors when decoding,
// kInvalidField when encoding.
MadStatus check_header(const MadHeader& h, bool decoding) {
  auto fail = [&](MadError decode_error, const Field& f, std::uint64_t v) {
    return MadStatus{decoding ? decode_error : MadError::kInvalidField, f.name, v};
  };
  if (h.base_version != kMgmtBaseVersion) return fail(MadError::kBadBaseVersion, kBaseVersion, h.base_version);
  if (h.mgmt_class != kMgmtClassCm) return fail(MadError::kBadClass, kMgmtClass, h.mgmt_class);
  if (h.class_version != kCmClassVersion) return fail(MadError::kBadClassVersion, kClassVersion, h.class_version);
  return {};
}

// "7", "300 (0x12c)": decimal for a reader, hex for a field of bits.
void append_value(std::string& s, std::uint64_t v) {
  s += std::to_string(v);
  if (v < 10) return;
  static constexpr char kDigits[] = "0123456789abcdef";
  s += " (0x";
  int top = 60;
  while (top > 0 && ((v >> top) & 0xf) == 0) top -= 4;
  for (int sh = top; sh >= 0; sh -= 4) s += kDigits[(v >> sh) & 0xf];
  s += ')';
}

}  // namespace

std::string_view attribute_name(AttributeId a) {
  switch (a) {
    case AttributeId::kClassPortInfo: return "ClassPortInfo";
    case AttributeId::kReq: return "REQ";
    case AttributeId::kMra: return "MRA";
    case AttributeId::kRej: return "REJ";
    case AttributeId::kRep: return "REP";
    case AttributeId::kRtu: return "RTU";
    case AttributeId::kDreq: return "DREQ";
    case AttributeId::kDrep: return "DREP";
    case AttributeId::kSidrReq: return "SIDR_REQ";
    case AttributeId::kSidrRep: return "SIDR_REP";
    case AttributeId::kLap: return "LAP";
    case AttributeId::kApr: return "APR";
  }
  return "unknown";
}

bool is_cm_attribute(AttributeId a) { return attribute_name(a) != "unknown"; }

std::string_view reject_reason_name(RejectReason r) {
  switch (r) {
    case RejectReason::kNoQp: return "no QP available";
    case RejectReason::kNoEec: return "no EEC available";
    case RejectReason::kNoResources: return "no resources available";
    case RejectReason::kTimeout: return "timeout";
    case RejectReason::kUnsupported: return "unsupported request";
    case RejectReason::kInvalidCommId: return "invalid communication ID";
    case RejectReason::kInvalidCommInstance: return "invalid communication instance";
    case RejectReason::kInvalidServiceId: return "invalid service ID";
    case RejectReason::kInvalidTransportType: return "invalid transport service type";
    case RejectReason::kStaleConnection: return "stale connection";
    case RejectReason::kRdcNotExist: return "RDC does not exist";
    case RejectReason::kInvalidGid: return "primary remote port GID rejected";
    case RejectReason::kInvalidLid: return "primary remote port LID rejected";
    case RejectReason::kInvalidSl: return "invalid primary SL";
    case RejectReason::kInvalidTrafficClass: return "invalid primary traffic class";
    case RejectReason::kInvalidHopLimit: return "invalid primary hop limit";
    case RejectReason::kInvalidPacketRate: return "invalid primary packet rate";
    case RejectReason::kInvalidAltGid: return "alternate remote port GID rejected";
    case RejectReason::kInvalidAltLid: return "alternate remote port LID rejected";
    case RejectReason::kInvalidAltSl: return "invalid alternate SL";
    case RejectReason::kInvalidAltTrafficClass: return "invalid alternate traffic class";
    case RejectReason::kInvalidAltHopLimit: return "invalid alternate hop limit";
    case RejectReason::kInvalidAltPacketRate: return "invalid alternate packet rate";
    case RejectReason::kPortCmRedirect: return "port and CM redirection";
    case RejectReason::kPortRedirect: return "port redirection";
    case RejectReason::kInvalidMtu: return "invalid path MTU";
    case RejectReason::kInsufficientRespResources: return "insufficient responder resources";
    case RejectReason::kConsumerDefined: return "consumer defined";
    case RejectReason::kInvalidRnrRetry: return "invalid RNR retry count";
    case RejectReason::kDuplicateLocalCommId: return "duplicate local communication ID";
    case RejectReason::kInvalidClassVersion: return "invalid class version";
    case RejectReason::kInvalidFlowLabel: return "invalid primary flow label";
    case RejectReason::kInvalidAltFlowLabel: return "invalid alternate flow label";
    case RejectReason::kVendorOptionNotSupported: return "vendor option not supported";
  }
  return "reserved";
}

AttributeId attribute_of(const Message& m) {
  static constexpr AttributeId kIds[] = {AttributeId::kReq,  AttributeId::kMra,  AttributeId::kRej,
                                         AttributeId::kRep,  AttributeId::kRtu,  AttributeId::kDreq,
                                         AttributeId::kDrep, AttributeId::kSidrReq, AttributeId::kSidrRep};
  static_assert(std::size(kIds) == std::variant_size_v<Message>);
  return kIds[m.index()];
}

std::string_view mad_error_name(MadError e) {
  switch (e) {
    case MadError::kNone: return "no error";
    case MadError::kTooShort: return "shorter than the 24-byte common MAD header";
    case MadError::kWrongSize: return "a CM MAD is exactly 256 bytes";
    case MadError::kBadBaseVersion: return "not MAD base version 1";
    case MadError::kBadClass: return "not the CM management class (0x07)";
    case MadError::kBadClassVersion: return "not CM class version 2";
    case MadError::kBadMethod: return "a CM message is sent with method Send (0x03)";
    case MadError::kUnknownAttribute: return "not a CM attribute";
    case MadError::kUnsupportedAttribute: return "a CM attribute this codec does not decode";
    case MadError::kReservedValue: return "a value IBA reserves";
    case MadError::kInvalidField: return "does not fit the field, or is a value IBA reserves";
    case MadError::kAttributeMismatch: return "not the attribute of the message";
    case MadError::kShortPrivateData: return "shorter than the 36-byte RDMA CM header";
  }
  return "unknown error";
}

std::string describe(const MadStatus& s) {
  std::string out = "CM MAD: ";
  if (s.ok()) return out + "ok";
  out += s.field.empty() ? std::string_view{"MAD"} : s.field;
  out += " is ";
  append_value(out, s.value);
  out += ": ";
  out += mad_error_name(s.error);
  return out;
}

MadStatus decode_header(std::span<const std::byte> mad, MadHeader& out) {
  if (mad.size() < kMadHeaderBytes) return MadStatus{MadError::kTooShort, "MAD length", mad.size()};
  // The reader wants a whole MAD; the header's fields are all in its first 24 bytes.
  Mad whole{};
  std::copy_n(mad.begin(), kMadHeaderBytes, whole.begin());
  const MadReader r(whole);
  out.base_version = r.get_as<std::uint8_t>(kBaseVersion);
  out.mgmt_class = r.get_as<std::uint8_t>(kMgmtClass);
  out.class_version = r.get_as<std::uint8_t>(kClassVersion);
  out.method = r.get_as<std::uint8_t>(kMethod);
  out.status = r.get_as<std::uint16_t>(kStatus);
  out.class_specific = r.get_as<std::uint16_t>(kClassSpecific);
  out.transaction_id = r.get(kTransactionId);
  out.attribute_id = r.get_as<AttributeId>(kAttributeId);
  out.attribute_modifier = r.get_as<std::uint32_t>(kAttributeModifier);
  return check_header(out, true);
}

MadStatus decode(std::span<const std::byte> mad, CmMad& out) {
  if (mad.size() != kMadBytes) return MadStatus{MadError::kWrongSize, "MAD length", mad.size()};
  if (MadStatus s = decode_header(mad, out.header); !s.ok()) return s;
  const MadHeader& h = out.header;
  const MadReader r(mad.first<kMadBytes>());
  const auto attr = static_cast<std::uint16_t>(h.attribute_id);
  // The attribute first: a ClassPortInfo Get is unsupported, not a bad method.
  switch (h.attribute_id) {
    case AttributeId::kReq:
    case AttributeId::kMra:
    case AttributeId::kRej:
    case AttributeId::kRep:
    case AttributeId::kRtu:
    case AttributeId::kDreq:
    case AttributeId::kDrep:
    case AttributeId::kSidrReq:
    case AttributeId::kSidrRep: break;
    case AttributeId::kClassPortInfo:
    case AttributeId::kLap:
    case AttributeId::kApr: return MadStatus{MadError::kUnsupportedAttribute, kAttributeId.name, attr};
    default: return MadStatus{MadError::kUnknownAttribute, kAttributeId.name, attr};
  }
  if (h.method != kMethodSend) return MadStatus{MadError::kBadMethod, kMethod.name, h.method};
  switch (h.attribute_id) {
    case AttributeId::kReq: return decode_as<Req>(r, out.message);
    case AttributeId::kMra: return decode_as<Mra>(r, out.message);
    case AttributeId::kRej: return decode_as<Rej>(r, out.message);
    case AttributeId::kRep: return decode_as<Rep>(r, out.message);
    case AttributeId::kRtu: return decode_as<Rtu>(r, out.message);
    case AttributeId::kDreq: return decode_as<Dreq>(r, out.message);
    case AttributeId::kDrep: return decode_as<Drep>(r, out.message);
    case AttributeId::kSidrReq: return decode_as<SidrReq>(r, out.message);
    case AttributeId::kSidrRep: return decode_as<SidrRep>(r, out.message);
    case AttributeId::kClassPortInfo:
    case AttributeId::kLap:
    case AttributeId::kApr: break;
  }
  return MadStatus{MadError::kUnsupportedAttribute, kAttributeId.name, attr};  // not reached
}

MadStatus encode(const MadHeader& h, const Message& m, std::span<std::byte, kMadBytes> out) {
  if (MadStatus s = check_header(h, false); !s.ok()) return s;
  if (h.method != kMethodSend) return MadStatus{MadError::kInvalidField, kMethod.name, h.method};
  if (h.attribute_id != attribute_of(m))
    return MadStatus{MadError::kAttributeMismatch, kAttributeId.name, static_cast<std::uint16_t>(h.attribute_id)};
  if (MadStatus s = std::visit([](const auto& msg) { return check_values(msg, MadError::kInvalidField); }, m); !s.ok())
    return s;
  MadWriter w(out);
  w.put(kBaseVersion, h.base_version);
  w.put(kMgmtClass, h.mgmt_class);
  w.put(kClassVersion, h.class_version);
  w.put(kMethod, h.method);
  w.put(kStatus, h.status);
  w.put(kClassSpecific, h.class_specific);
  w.put(kTransactionId, h.transaction_id);
  w.put(kAttributeId, h.attribute_id);
  w.put(kAttributeModifier, h.attribute_modifier);
  std::visit([&](const auto& msg) { write_body(w, msg); }, m);
  return w.status();
}

MadStatus encode(const Message& m, std::uint64_t transaction_id, std::span<std::byte, kMadBytes> out) {
  return encode(cm_header(attribute_of(m), transaction_id), m, out);
}

}  // namespace srdma::cm
