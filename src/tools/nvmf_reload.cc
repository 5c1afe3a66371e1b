#include "tools/nvmf_reload.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "nvmf/namespace.h"
#include "nvmf/subsystem.h"
#include "srdma/net.h"

namespace srdma::tools {
namespace {

constexpr std::uint32_t kBlockSize = 4096;

Result<std::shared_ptr<nvmf::Namespace>> open_namespace(const NvmfNamespaceConfig& n) {
  if (n.backend == "ram") {
    auto r = nvmf::make_ram_namespace(n.size / kBlockSize, kBlockSize);
    if (!r) return std::unexpected(r.error());
    return std::shared_ptr<nvmf::Namespace>(std::move(*r));
  }
  nvmf::FileNamespaceOptions fo;
  fo.block_size = kBlockSize;
  fo.create_blocks = n.size / kBlockSize;
  auto r = nvmf::open_file_namespace(n.backend.substr(5), fo);
  if (!r) return std::unexpected(r.error());
  return std::shared_ptr<nvmf::Namespace>(std::move(*r));
}

nvmf::Subsystem::HostList host_list(const NvmfSubsystemConfig& sc) {
  nvmf::Subsystem::HostList hosts;
  for (const auto& h : sc.allowed_hosts) {
    nvmf::Subsystem::HostSecrets secrets;
    if (auto it = sc.host_secrets.find(h); it != sc.host_secrets.end())
      secrets = {it->second.dhchap_secret, it->second.dhchap_ctrl_secret};
    hosts.emplace_back(h, std::move(secrets));
  }
  return hosts;
}

// A subsystem of `sc` with its hosts and namespaces, not yet served.
Result<std::shared_ptr<nvmf::Subsystem>> build(const NvmfSubsystemConfig& sc, const ServedConfig::Log& log) {
  auto sub = nvmf::Subsystem::create(sc.nqn, "SRDMA0001", "softrdma target");
  if (!sub) return std::unexpected(sub.error());
  if (auto r = (*sub)->set_hosts(host_list(sc)); !r)
    return make_error(r.error().code, fmt::format("{}: {}", sc.nqn, r.error().reason));
  for (const auto& [host, secrets] : sc.host_secrets)
    log(fmt::format("{}: {} must authenticate (DH-HMAC-CHAP{})", sc.nqn, host,
                    secrets.dhchap_ctrl_secret.empty() ? "" : ", bidirectional"));
  for (const auto& nc : sc.namespaces) {
    auto ns = open_namespace(nc);
    if (!ns) return make_error(ns.error().code, fmt::format("{}: {}: {}", sc.nqn, nc.backend, ns.error().reason));
    auto nsid = (*sub)->add_namespace(*ns);
    if (!nsid) return std::unexpected(nsid.error());
    log(fmt::format("{} namespace {}: {} blocks of {} ({})", sc.nqn, *nsid, (*ns)->block_count(), kBlockSize,
                    nc.backend));
  }
  return *sub;
}

bool same_namespaces(const NvmfSubsystemConfig& a, const NvmfSubsystemConfig& b) {
  return std::equal(a.namespaces.begin(), a.namespaces.end(), b.namespaces.begin(), b.namespaces.end(),
                    [](const NvmfNamespaceConfig& x, const NvmfNamespaceConfig& y) {
                      return x.backend == y.backend && x.size == y.size;
                    });
}

bool same_hosts(const NvmfSubsystemConfig& a, const NvmfSubsystemConfig& b) {
  auto secrets = [](const NvmfSubsystemConfig& s) {
    std::map<std::string, std::pair<std::string, std::string>> m;
    for (const auto& [h, sec] : s.host_secrets) m[h] = {sec.dhchap_secret, sec.dhchap_ctrl_secret};
    return m;
  };
  return std::set(a.allowed_hosts.begin(), a.allowed_hosts.end()) ==
             std::set(b.allowed_hosts.begin(), b.allowed_hosts.end()) &&
         secrets(a) == secrets(b);
}

const NvmfSubsystemConfig* find(const NvmfTargetConfig& c, const std::string& nqn) {
  for (const auto& s : c.subsystems)
    if (s.nqn == nqn) return &s;
  return nullptr;
}

}  // namespace

Result<void> ServedConfig::start(const NvmfTargetConfig& c) {
  if (auto r = check_nvmf_target_config(c); !r) return r;
  for (const auto& sc : c.subsystems) {
    auto sub = build(sc, log_);
    if (!sub) return std::unexpected(sub.error());
    if (auto r = target_.add_subsystem(*sub); !r) return r;
    subsystems_.push_back(std::move(*sub));
  }
  config_ = c;
  return {};
}

Result<std::string> ServedConfig::reload(const NvmfTargetConfig& next) {
  if (auto r = check_nvmf_target_config(next); !r) return std::unexpected(r.error());
  // What only a restart changes.
  const auto next_ip = parse_ip(next.ip), ip = parse_ip(config_.ip);
  if (!next_ip || !ip || *next_ip != *ip)  // the address, however written
    return make_error(EINVAL, fmt::format("ip: {} -> {} needs a restart (the device's address)", config_.ip, next.ip));
  if (next.port != config_.port)
    return make_error(EINVAL, fmt::format("port: {} -> {} needs a restart (the listener)", config_.port, next.port));
  if (next.pool_cqs != config_.pool_cqs) return make_error(EINVAL, "pool_cqs: changing it needs a restart");
  for (const auto& sc : next.subsystems)
    if (const auto* old = find(config_, sc.nqn); old && !same_namespaces(*old, sc))
      return make_error(EINVAL, fmt::format("{}: its namespaces changed: that needs a restart (a subsystem the reload "
                                            "keeps keeps its namespaces and their data)",
                                            sc.nqn));

  // The new subsystems, whole, before anything served changes.
  std::vector<std::shared_ptr<nvmf::Subsystem>> added;
  for (const auto& sc : next.subsystems) {
    if (find(config_, sc.nqn)) continue;
    auto sub = build(sc, log_);
    if (!sub) return std::unexpected(sub.error());
    added.push_back(std::move(*sub));
  }

  // Then the change. Nothing below fails on a config checked as above (the
  // hosts as set_hosts checks them, NQNs new to the target); should it, the
  // error is returned as it stands.
  int added_count = 0, hosts_changed = 0, removed = 0;
  std::vector<std::shared_ptr<nvmf::Subsystem>> served;
  for (const auto& sc : next.subsystems) {
    const auto* old = find(config_, sc.nqn);
    if (!old) {
      auto sub = added.front();
      added.erase(added.begin());
      if (auto r = target_.add_subsystem(sub); !r) return std::unexpected(r.error());
      log_(fmt::format("reload: {} added", sc.nqn));
      ++added_count;
      served.push_back(std::move(sub));
      continue;
    }
    auto& sub = subsystems_[static_cast<std::size_t>(old - config_.subsystems.data())];  // in config_'s order
    if (!same_hosts(*old, sc)) {
      if (auto r = sub->set_hosts(host_list(sc)); !r) return std::unexpected(r.error());
      ++hosts_changed;
      log_(fmt::format("reload: {} allows {}", sc.nqn,
                       sc.allowed_hosts.empty() ? "any host" : fmt::format("{}", fmt::join(sc.allowed_hosts, ", "))));
    }
    served.push_back(sub);
  }
  std::size_t revoked = 0;
  for (const auto& old : config_.subsystems) {
    if (find(next, old.nqn)) continue;
    auto r = target_.remove_subsystem(old.nqn);
    if (!r) return std::unexpected(r.error());
    revoked += *r;
    ++removed;
    log_(fmt::format("reload: {} removed", old.nqn));
  }
  revoked += target_.access_changed();  // the hosts that left a subsystem that stays
  subsystems_ = std::move(served);
  config_ = next;
  return fmt::format("reloaded: {} subsystems (+{} -{}), hosts changed on {}, {} controllers disconnected",
                     config_.subsystems.size(), added_count, removed, hosts_changed, revoked);
}

}  // namespace srdma::tools
