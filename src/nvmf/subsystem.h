// NVM subsystems and their registry.
//
// A subsystem is what a host connects to by NQN (the SUBNQN of the Connect
// data): a serial number, a model, and namespaces numbered from 1. The
// registry finds a subsystem by NQN for the target's Connect handling.
//
// Publication: a subsystem is shared (std::shared_ptr); namespaces may be
// added while it is in use, and lookups return shared_ptrs, so a namespace a
// queue is using stays alive if it is removed meanwhile.
// Thread-safe: Subsystem and SubsystemRegistry lock internally.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nvmf/namespace.h"
#include "srdma/status.h"

namespace srdma::nvmf {

inline constexpr std::size_t kMaxNqnLength = 223;  // bytes, NVMe base 4.5
// The well-known discovery subsystem (NVMe-oF 1.1 section 5).
inline constexpr std::string_view kDiscoveryNqn = "nqn.2014-08.org.nvmexpress.discovery";

// EINVAL with a reason unless `nqn` is an NVMe Qualified Name (NVMe base 4.5):
// at most 223 bytes, and either
//   nqn.yyyy-mm.<reverse domain>[:<anything>]  (yyyy-mm a date the domain was
//     owned; the domain of letters, digits, '-' and '.'), or
//   nqn.2014-08.org.nvmexpress:uuid:<8-4-4-4-12 hex UUID>.
Result<void> validate_nqn(std::string_view nqn);

class Subsystem {
 public:
  // EINVAL for a bad NQN, a serial that is not 1..20 printable ASCII bytes
  // or a model that is not 1..40 (the widths of Identify Controller's SN and MN).
  static Result<std::shared_ptr<Subsystem>> create(std::string nqn, std::string serial,
                                                   std::string model);

  const std::string& nqn() const { return nqn_; }
  const std::string& serial() const { return serial_; }
  const std::string& model() const { return model_; }

  // Adds a namespace under the lowest free nsid (from 1); returns the nsid.
  // EINVAL for a null namespace; ENOSPC past `kMaxNamespaces`.
  Result<std::uint32_t> add_namespace(std::shared_ptr<Namespace> ns);
  // ENOENT if nsid is not active.
  Result<void> remove_namespace(std::uint32_t nsid);
  // nullptr if nsid is not an active namespace.
  std::shared_ptr<Namespace> find_namespace(std::uint32_t nsid) const;
  // Active nsids greater than `after`, increasing, at most `max` of them
  // (the Identify CNS 02h list).
  std::vector<std::uint32_t> active_nsids(std::uint32_t after = 0,
                                          std::size_t max = kMaxActiveNamespaceList) const;
  // The highest nsid ever allocatable here (Identify Controller NN).
  static constexpr std::uint32_t kMaxNamespaces = 1024;

  // Hosts allowed to connect (nvmet's allowed_hosts); none added: any host.
  // With a DH-HMAC-CHAP secret (nvmet's dhchap_key, and dhchap_ctrl_key for
  // bidirectional authentication), the host must authenticate on every
  // queue before anything but AUTH_Send/AUTH_Receive runs. The secrets are
  // in nvme-cli's DHHC-1 text form, checked by whoever configures the
  // target (auth::parse_dhchap_secret). EINVAL for a bad NQN, or a
  // controller secret without a host secret.
  struct HostSecrets {
    std::string dhchap_secret;
    std::string dhchap_ctrl_secret;  // empty: the controller does not prove itself
  };
  Result<void> allow_host(std::string hostnqn, HostSecrets secrets = {});
  // Replaces the allowed hosts and their secrets at once (a reload of the
  // target's configuration); an empty list allows any host. Every entry is
  // checked as allow_host checks it before anything changes: on EINVAL the
  // old list stays. Controllers already made are the target's to revoke
  // (RdmaTarget::access_changed).
  using HostList = std::vector<std::pair<std::string, HostSecrets>>;
  Result<void> set_hosts(HostList hosts);
  bool host_allowed(std::string_view hostnqn) const;
  // The host's secrets; nullopt when it has none (no authentication).
  std::optional<HostSecrets> host_secrets(std::string_view hostnqn) const;

 private:
  Subsystem(std::string nqn, std::string serial, std::string model)
      : nqn_(std::move(nqn)), serial_(std::move(serial)), model_(std::move(model)) {}

  const std::string nqn_, serial_, model_;
  mutable std::shared_mutex mu_;  // guards namespaces_ and allowed_hosts_
  std::map<std::uint32_t, std::shared_ptr<Namespace>> namespaces_;
  std::vector<std::string> allowed_hosts_;
  std::map<std::string, HostSecrets, std::less<>> secrets_;
};

// Identify Controller fields that come from the subsystem: SN, MN (space
// padded), SUBNQN, NN. The target fills the controller's own (cntlid, sizes).
void fill_identify_controller(const Subsystem& subsys, IdentifyController& id);

class SubsystemRegistry {
 public:
  // EEXIST if a subsystem with that NQN is registered; EINVAL for null.
  Result<void> add(std::shared_ptr<Subsystem> subsys);
  // ENOENT if none has that NQN.
  Result<void> remove(std::string_view nqn);
  // nullptr if none has that NQN (the target answers Connect Invalid
  // Parameters with IPO at SUBNQN, as Linux's nvmet does).
  std::shared_ptr<Subsystem> find(std::string_view nqn) const;
  std::vector<std::string> nqns() const;

 private:
  mutable std::shared_mutex mu_;  // guards by_nqn_
  std::map<std::string, std::shared_ptr<Subsystem>, std::less<>> by_nqn_;
};

}  // namespace srdma::nvmf
