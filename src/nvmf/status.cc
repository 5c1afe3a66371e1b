#include "nvmf/status.h"

#include <cstdio>

namespace srdma::nvmf {
namespace {

// Names as the specification writes them. DNR defaults: a refusal of the
// command's form (opcode, field, SGL, namespace, range) is permanent; a state
// of the controller or the path (busy, not ready, internal, transport) may pass.
constexpr StatusCodeInfo kTable[] = {
    {StatusCode::kSuccess, "Successful Completion", false},
    {StatusCode::kInvalidOpcode, "Invalid Command Opcode", true},
    {StatusCode::kInvalidField, "Invalid Field in Command", true},
    {StatusCode::kCommandIdConflict, "Command ID Conflict", true},
    {StatusCode::kDataTransferError, "Data Transfer Error", false},
    {StatusCode::kAbortedPowerLoss, "Commands Aborted due to Power Loss Notification", false},
    {StatusCode::kInternalError, "Internal Error", false},
    {StatusCode::kAbortRequested, "Command Abort Requested", false},
    {StatusCode::kAbortedSqDeletion, "Command Aborted due to SQ Deletion", false},
    {StatusCode::kInvalidNamespace, "Invalid Namespace or Format", true},
    {StatusCode::kCommandSequenceError, "Command Sequence Error", true},
    {StatusCode::kInvalidSglSegmentDescriptor, "Invalid SGL Segment Descriptor", true},
    {StatusCode::kInvalidSglDescriptorCount, "Invalid Number of SGL Descriptors", true},
    {StatusCode::kDataSglLengthInvalid, "Data SGL Length Invalid", true},
    {StatusCode::kMetadataSglLengthInvalid, "Metadata SGL Length Invalid", true},
    {StatusCode::kSglDescriptorTypeInvalid, "SGL Descriptor Type Invalid", true},
    {StatusCode::kSglOffsetInvalid, "SGL Offset Invalid", true},
    {StatusCode::kHostIdInconsistentFormat, "Host Identifier Inconsistent Format", true},
    {StatusCode::kKeepAliveTimerExpired, "Keep Alive Timer Expired", false},
    {StatusCode::kKeepAliveTimeoutInvalid, "Keep Alive Timeout Invalid", true},
    {StatusCode::kSglDataBlockGranularityInvalid, "SGL Data Block Granularity Invalid", true},
    {StatusCode::kTransientTransportError, "Transient Transport Error", false},
    {StatusCode::kLbaOutOfRange, "LBA Out of Range", true},
    {StatusCode::kCapacityExceeded, "Capacity Exceeded", true},
    {StatusCode::kNamespaceNotReady, "Namespace Not Ready", false},
    {StatusCode::kInvalidQueueIdentifier, "Invalid Queue Identifier", true},
    {StatusCode::kInvalidQueueSize, "Invalid Queue Size", true},
    {StatusCode::kConnectIncompatibleFormat, "Connect Incompatible Format", true},
    {StatusCode::kConnectControllerBusy, "Connect Controller Busy", false},
    {StatusCode::kConnectInvalidParameters, "Connect Invalid Parameters", true},
    {StatusCode::kConnectRestartDiscovery, "Connect Restart Discovery", true},
    {StatusCode::kConnectInvalidHost, "Connect Invalid Host", true},
    {StatusCode::kAuthenticationRequired, "Authentication Required", true},
    {StatusCode::kInvalidQueueType, "Invalid Queue Type", true},
    {StatusCode::kWriteFault, "Write Fault", false},
    {StatusCode::kUnrecoveredReadError, "Unrecovered Read Error", false},
};

const StatusCodeInfo* find(StatusCode c) {
  for (const auto& row : kTable)
    if (row.code == c) return &row;
  return nullptr;
}

}  // namespace

std::span<const StatusCodeInfo> all_status_codes() { return kTable; }

NvmeStatus NvmeStatus::of(StatusCode c) {
  const StatusCodeInfo* row = find(c);
  return NvmeStatus{c, row ? row->default_dnr : c != StatusCode::kSuccess, false};
}

std::string_view status_name(StatusCode c) {
  const StatusCodeInfo* row = find(c);
  return row ? row->name : "unknown";
}

std::string NvmeStatus::to_string() const {
  char buf[64];
  std::snprintf(buf, sizeof buf, " (sct 0x%x sc 0x%02x%s%s)", static_cast<unsigned>(sct()),
                static_cast<unsigned>(sc()), dnr ? ", DNR" : "", more ? ", More" : "");
  return std::string(status_name(code)) + buf;
}

}  // namespace srdma::nvmf
