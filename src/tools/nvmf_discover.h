// `srdma nvmf discover`: what a target's discovery controller lists for
// this host (Get Log Page 70h), printed as nvme-cli's `nvme discover` does.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "srdma/status.h"

namespace srdma::tools {

struct NvmfDiscoverOptions {
  std::string ip;       // this host's device address (RoCEv2)
  std::string target;   // ADDR[:PORT], port 4420 by default
  std::string hostnqn;  // empty: the host library's default
};

Result<void> nvmf_discover(const NvmfDiscoverOptions& o, std::ostream& out);

}  // namespace srdma::tools
