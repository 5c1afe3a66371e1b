// The subsystems `srdma nvmf target` serves, built from its configuration
// and changed to another one while it serves (SIGHUP, `systemctl reload`).
//
// A reload adds and removes subsystems and changes who may connect; the
// connections that stay allowed are untouched. A host that is no longer
// allowed (removed from a subsystem's allowed_hosts, or its subsystem
// removed) is refused from then on and its controllers are disconnected at
// once: access is revoked, not left to the next reconnect. A host's secrets
// changed on reload apply to its next queue; a queue that authenticated
// stays. What a reload cannot change without dropping data or every host
// (the device's ip, port, pool_cqs, the namespaces of a subsystem it keeps)
// is refused with EINVAL naming it: a restart changes those.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nvmf/rdma_target.h"
#include "srdma/status.h"
#include "tools/nvmf_target.h"

namespace srdma::tools {

class ServedConfig {
 public:
  using Log = std::function<void(const std::string&)>;
  // `target` must outlive this.
  ServedConfig(nvmf::RdmaTarget& target, Log log) : target_(target), log_(std::move(log)) {}

  // Startup: every subsystem of `c` (checked: check_nvmf_target_config),
  // with its hosts and namespaces, added to the target.
  Result<void> start(const NvmfTargetConfig& c);

  // `next` replaces the running configuration. What can fail is done first
  // (`next` checked against the running one, the new subsystems built and
  // their namespaces opened): on an error nothing changed and the running
  // configuration stays. Then the new subsystems are added, the kept ones
  // get their new hosts, the removed ones go, and the target revokes the
  // controllers no longer allowed. Returns a one-line summary.
  Result<std::string> reload(const NvmfTargetConfig& next);

  const NvmfTargetConfig& config() const { return config_; }

 private:
  nvmf::RdmaTarget& target_;
  Log log_;
  NvmfTargetConfig config_;
  std::vector<std::shared_ptr<nvmf::Subsystem>> subsystems_;  // config_.subsystems' order
};

}  // namespace srdma::tools
