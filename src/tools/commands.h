// The `srdma` subcommands other than the simulators. Each writes its report
// to `out` and returns an error for the caller to print.
#pragma once

#include <ostream>

#include "srdma/profile.h"
#include "srdma/status.h"

namespace srdma::tools {

// `srdma info`: device attributes, table occupancy, MTT buddies, footprint.
// `ip`: open the device on that IPv4 address (RoCEv2) instead of in process.
Result<void> info(const Profile& profile, std::ostream& out, const std::string& ip = "");

// `srdma demo`: registers memory and shows translations and refusals.
Result<void> demo(std::ostream& out);

}  // namespace srdma::tools
