#include "cm/mad_result.h"

namespace srdma::cm {

Error to_error(const MadStatus& s) {
  int code = EPROTO;
  switch (s.error) {
    case MadError::kTooShort:
    case MadError::kWrongSize:
    case MadError::kInvalidField:
    case MadError::kAttributeMismatch:
    case MadError::kShortPrivateData: code = EINVAL; break;
    case MadError::kNone:  // a caller bug, but still an error to report
    case MadError::kBadBaseVersion:
    case MadError::kBadClass:
    case MadError::kBadClassVersion:
    case MadError::kBadMethod:
    case MadError::kUnknownAttribute:
    case MadError::kUnsupportedAttribute:
    case MadError::kReservedValue: code = EPROTO; break;
  }
  return Error{code, describe(s)};
}

Result<CmMad> decode_mad(std::span<const std::byte> mad) {
  CmMad out;
  if (MadStatus s = decode(mad, out); !s.ok()) return std::unexpected(to_error(s));
  return out;
}

Result<Mad> encode_mad(const MadHeader& h, const Message& m) {
  Mad out;
  if (MadStatus s = encode(h, m, out); !s.ok()) return std::unexpected(to_error(s));
  return out;
}

Result<Mad> encode_mad(const Message& m, std::uint64_t transaction_id) {
  return encode_mad(cm_header(attribute_of(m), transaction_id), m);
}

}  // namespace srdma::cm
