// `srdma nvmf target`: the NVMe-oF target as a service on a RoCEv2 device,
// for hosts in other processes and on other hosts (they connect through
// the CM on the wire). Subsystems by NQN, each with its namespaces (RAM or
// a file) and the hosts allowed (none listed: any), from a JSON file or the
// one-line form for one subsystem with one namespace. It runs until SIGINT
// or SIGTERM: then the hosts are disconnected, the I/O in flight finishes,
// and it exits 0. Connects, refusals and closed queues are logged. SIGHUP
// reloads the configuration file (nvmf_reload.h).
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "srdma/status.h"

namespace srdma::tools {

struct NvmfNamespaceConfig {
  std::string backend = "ram";       // ram | file:PATH
  std::uint64_t size = 64ull << 20;  // bytes
};

struct NvmfSubsystemConfig {
  std::string nqn;
  std::vector<std::string> allowed_hosts;  // empty: any host
  // DH-HMAC-CHAP secrets (DHHC-1 text) of allowed hosts that must
  // authenticate, by host NQN: the host's, and the controller's for
  // bidirectional authentication (may be empty).
  struct Secrets {
    std::string dhchap_secret;
    std::string dhchap_ctrl_secret;
  };
  std::map<std::string, Secrets> host_secrets;
  std::vector<NvmfNamespaceConfig> namespaces;
};

struct NvmfTargetConfig {
  std::string ip;  // the device's address
  std::uint16_t port = 4420;
  bool pool_cqs = true;
  std::vector<NvmfSubsystemConfig> subsystems;
};

// The JSON form:
//   {"ip": "127.0.0.1", "port": 4420, "pool_cqs": true,
//    "subsystems": [{"nqn": "nqn...", "allowed_hosts": ["nqn...",
//                      {"nqn": "nqn...", "dhchap_secret": "DHHC-1:01:...:",
//                       "dhchap_ctrl_secret": "DHHC-1:00:...:"}],
//                    "namespaces": [{"backend": "ram", "size": 67108864}]}]}
// An allowed host given as an object with a dhchap_secret must pass
// DH-HMAC-CHAP (NVMe in-band authentication) on every queue;
// dhchap_ctrl_secret (optional) lets it authenticate the target in turn.
// ip and at least one subsystem with at least one namespace are required.
// EINVAL naming the field for anything missing, mistyped or out of range.
Result<NvmfTargetConfig> parse_nvmf_target_config(const std::string& json);

// The options of the one-line form (what the command line gives).
struct NvmfTargetOptions {
  std::string config;  // a JSON file; then the fields below must stay unset
  std::string ip;
  std::uint16_t port = 4420;
  std::string nqn;
  std::string backend = "ram";
  std::uint64_t size = 64ull << 20;
  std::vector<std::string> allowed_hosts;
  // For every --allow-host of the line (nvme-cli's names).
  std::string dhchap_secret;
  std::string dhchap_ctrl_secret;
  bool pool_cqs = true;
};
Result<NvmfTargetConfig> nvmf_target_config(const NvmfTargetOptions& o);

// EINVAL naming the field for a configuration the target cannot serve.
Result<void> check_nvmf_target_config(const NvmfTargetConfig& c);

// Runs until SIGINT or SIGTERM (blocked in the calling thread, which waits
// for them). Logs to `log`. SIGHUP re-reads `reload_from` (the --config
// file; empty: nothing to re-read) and applies it (nvmf_reload.h). Under a
// service manager ($NOTIFY_SOCKET, sd_notify.h) it reports READY=1 once it
// listens, RELOADING=1 and READY=1 around a reload, STOPPING=1.
Result<void> nvmf_target(const NvmfTargetConfig& c, std::ostream& log, const std::string& reload_from = {});

}  // namespace srdma::tools
