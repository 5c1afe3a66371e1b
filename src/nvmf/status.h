// NVMe status: what a target puts in the status field of a completion.
//
// A status is a Status Code Type (SCT) and a Status Code (SC), plus the Do Not
// Retry and More bits. `StatusCode` names each one we use by (SCT << 8) | SC,
// the way Linux's NVME_SC_* constants do, so a code is one comparable value.
// The 16-bit completion status field is (NVMe base 4.6.1, Figure "Completion
// Queue Entry: Status Field"):
//   bit 0 phase tag, bits 8:1 SC, bits 11:9 SCT, bits 13:12 CRD, bit 14 More,
//   bit 15 DNR.
//
// This header deliberately does not use srdma::Result (std::expected): the
// capsule parser and this file are also compiled by clang 14 for the libFuzzer
// target, and clang 14 cannot use libstdc++ 12's <expected>.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace srdma::nvmf {

enum class StatusCodeType : std::uint8_t {
  kGeneric = 0x0,
  kCommandSpecific = 0x1,
  kMediaError = 0x2,
  kPathRelated = 0x3,
  kVendorSpecific = 0x7,
};

enum class StatusCode : std::uint16_t {
  // Generic command status (SCT 0), NVMe base Figure "Generic Command Status Values".
  kSuccess = 0x000,
  kInvalidOpcode = 0x001,
  kInvalidField = 0x002,
  kCommandIdConflict = 0x003,
  kDataTransferError = 0x004,
  kAbortedPowerLoss = 0x005,
  kInternalError = 0x006,
  kAbortRequested = 0x007,
  kAbortedSqDeletion = 0x008,
  kInvalidNamespace = 0x00B,  // Invalid Namespace or Format
  kCommandSequenceError = 0x00C,
  kInvalidSglSegmentDescriptor = 0x00D,
  kInvalidSglDescriptorCount = 0x00E,
  kDataSglLengthInvalid = 0x00F,
  kMetadataSglLengthInvalid = 0x010,
  kSglDescriptorTypeInvalid = 0x011,
  kSglOffsetInvalid = 0x016,
  kHostIdInconsistentFormat = 0x018,
  kKeepAliveTimerExpired = 0x019,
  kKeepAliveTimeoutInvalid = 0x01A,
  kSglDataBlockGranularityInvalid = 0x01E,
  kTransientTransportError = 0x022,
  // Generic, NVM command set specific (SCT 0, 0x80..).
  kLbaOutOfRange = 0x080,
  kCapacityExceeded = 0x081,
  kNamespaceNotReady = 0x082,
  // Command specific (SCT 1): queue management codes reused by Connect.
  kInvalidQueueIdentifier = 0x101,
  kInvalidQueueSize = 0x102,
  // Command specific (SCT 1), Fabrics commands (NVMe-oF 1.1 Figure 15).
  kConnectIncompatibleFormat = 0x180,
  kConnectControllerBusy = 0x181,
  kConnectInvalidParameters = 0x182,
  kConnectRestartDiscovery = 0x183,
  kConnectInvalidHost = 0x184,
  kInvalidQueueType = 0x185,
  // NVMe base 2.0: a command other than AUTH_Send/Receive on a queue whose
  // host has not authenticated yet (Linux NVME_SC_AUTH_REQUIRED).
  kAuthenticationRequired = 0x191,
  // Media and data integrity errors (SCT 2).
  kWriteFault = 0x280,
  kUnrecoveredReadError = 0x281,
};

// The table behind names and default DNR: one row per StatusCode above.
struct StatusCodeInfo {
  StatusCode code;
  const char* name;
  bool default_dnr;  // retrying the same command cannot help
};
std::span<const StatusCodeInfo> all_status_codes();

// A status as it travels: code plus the DNR and More bits.
struct NvmeStatus {
  StatusCode code = StatusCode::kSuccess;
  bool dnr = false;   // do not retry
  bool more = false;  // more information in a log page

  // The code with its table DNR (success has none).
  static NvmeStatus of(StatusCode c);
  static constexpr NvmeStatus success() { return {}; }

  constexpr bool ok() const { return code == StatusCode::kSuccess; }
  constexpr StatusCodeType sct() const {
    return static_cast<StatusCodeType>((static_cast<std::uint16_t>(code) >> 8) & 0x7);
  }
  constexpr std::uint8_t sc() const { return static_cast<std::uint8_t>(code); }

  // The 16-bit completion status field with the given phase tag.
  constexpr std::uint16_t encode(bool phase = false) const {
    return static_cast<std::uint16_t>((phase ? 1u : 0u) | (std::uint32_t{sc()} << 1) |
                                      (std::uint32_t(sct()) << 9) | (more ? 1u << 14 : 0u) |
                                      (dnr ? 1u << 15 : 0u));
  }
  // Decodes any 16-bit field; an SCT/SC pair we have no name for keeps its
  // value (name() then says "unknown"). CRD and the phase are dropped.
  static constexpr NvmeStatus decode(std::uint16_t field) {
    NvmeStatus s;
    s.code = static_cast<StatusCode>((((field >> 9) & 0x7) << 8) | ((field >> 1) & 0xFF));
    s.more = (field >> 14) & 1;
    s.dnr = (field >> 15) & 1;
    return s;
  }
  static constexpr bool phase_of(std::uint16_t field) { return field & 1; }

  friend constexpr bool operator==(const NvmeStatus&, const NvmeStatus&) = default;

  // "Invalid Field in Command (sct 0x0 sc 0x02, DNR)".
  std::string to_string() const;
};

// The specification's name of a code ("LBA Out of Range"), or "unknown".
std::string_view status_name(StatusCode c);

}  // namespace srdma::nvmf
