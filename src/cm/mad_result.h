// The CM codec's statuses as srdma::Error, and the codec in Result form, for
// callers that speak the project's error vocabulary (cm_mad.h itself cannot:
// it is built without <expected> for the fuzzer).
//
// errno: EINVAL for what the caller got wrong (a buffer of the wrong size, a
// value that does not fit, a header for another attribute); EPROTO for what
// the peer got wrong (versions, class, method, attribute, reserved values).
#pragma once

#include <cstdint>
#include <span>

#include "cm/cm_mad.h"
#include "srdma/status.h"

namespace srdma::cm {

// `s` must not be ok(). The reason is describe(s).
Error to_error(const MadStatus& s);

Result<CmMad> decode_mad(std::span<const std::byte> mad);
Result<Mad> encode_mad(const MadHeader& h, const Message& m);
Result<Mad> encode_mad(const Message& m, std::uint64_t transaction_id);

}  // namespace srdma::cm
