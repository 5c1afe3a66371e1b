// `srdma nvmf target`: the NVMe-oF target as a service on a RoCEv2 device,
// for hosts in other processes and on other hosts (they connect through
// the CM on the wire). One subsystem with one namespace (RAM or a file),
// until SIGINT or SIGTERM: then the hosts are disconnected, the I/O in
// flight finishes, and it exits 0.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "srdma/status.h"

namespace srdma::tools {

struct NvmfTargetOptions {
  std::string ip;                    // the device's address (required)
  std::uint16_t port = 4420;
  std::string nqn;                   // the subsystem's NQN (required)
  std::string backend = "ram";       // ram | file:PATH
  std::uint64_t size = 64ull << 20;  // bytes of the namespace
  bool pool_cqs = true;
};

// Runs until SIGINT or SIGTERM (which it blocks in the calling thread and
// waits for). Logs to `log`: the listen address, then one line at the end.
Result<void> nvmf_target(const NvmfTargetOptions& o, std::ostream& log);

}  // namespace srdma::tools
