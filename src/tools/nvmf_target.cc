#include "tools/nvmf_target.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <mutex>
#include <sstream>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "nvmf/auth.h"
#include "nvmf/namespace.h"
#include "nvmf/rdma_target.h"
#include "nvmf/subsystem.h"
#include "srdma/device.h"
#include "srdma/net.h"
#include "tools/address_option.h"
#include "tools/nvmf_reload.h"
#include "tools/run_cost.h"
#include "tools/sd_notify.h"

namespace srdma::tools {
namespace {

constexpr std::uint32_t kBlockSize = 4096;

}  // namespace

Result<void> check_nvmf_target_config(const NvmfTargetConfig& c) {
  if (c.ip.empty()) return make_error(EINVAL, "ip: the target needs a device address");
  if (auto a = parse_ip_option("ip", c.ip); !a) return std::unexpected(a.error());
  if (c.port == 0) return make_error(EINVAL, "port: 1..65535");
  if (c.subsystems.empty()) return make_error(EINVAL, "subsystems: at least one");
  for (const auto& s : c.subsystems) {
    if (s.nqn.empty()) return make_error(EINVAL, "subsystems[].nqn: every subsystem needs an NQN");
    if (std::count_if(c.subsystems.begin(), c.subsystems.end(), [&](const auto& o) { return o.nqn == s.nqn; }) > 1)
      return make_error(EINVAL, fmt::format("{}: listed twice", s.nqn));
    for (const auto& h : s.allowed_hosts)
      if (h.empty() || h.size() > nvmf::kMaxNqnLength)
        return make_error(EINVAL, fmt::format("{}: allowed host '{}': a host NQN is 1..{} bytes", s.nqn, h,
                                              nvmf::kMaxNqnLength));
    if (s.namespaces.empty()) return make_error(EINVAL, fmt::format("{}: at least one namespace", s.nqn));
    for (const auto& n : s.namespaces) {
      if (n.size < kBlockSize || n.size % kBlockSize)
        return make_error(EINVAL, fmt::format("{}: size {} is not a positive multiple of {}", s.nqn, n.size, kBlockSize));
      if (n.backend != "ram" && (n.backend.rfind("file:", 0) != 0 || n.backend.size() == 5))
        return make_error(EINVAL, fmt::format("{}: backend '{}': ram or file:PATH", s.nqn, n.backend));
    }
    for (const auto& [host, sec] : s.host_secrets) {
      if (std::find(s.allowed_hosts.begin(), s.allowed_hosts.end(), host) == s.allowed_hosts.end())
        return make_error(EINVAL, fmt::format("{}: secrets for {}, which is not an allowed host", s.nqn, host));
      if (sec.dhchap_secret.empty())
        return make_error(EINVAL, fmt::format("{}: {}: a controller secret needs a host secret", s.nqn, host));
      for (const std::string* text : {&sec.dhchap_secret, &sec.dhchap_ctrl_secret}) {
        if (text->empty()) continue;
        if (auto k = nvmf::auth::parse_dhchap_secret(*text); !k)
          return make_error(EINVAL, fmt::format("{}: {}: {}", s.nqn, host, k.error().reason));
      }
    }
  }
  return {};
}

Result<NvmfTargetConfig> parse_nvmf_target_config(const std::string& text) {
  NvmfTargetConfig c;
  try {
    const auto j = nlohmann::json::parse(text);
    if (!j.is_object()) return make_error(EINVAL, "the config is not a JSON object");
    c.ip = j.at("ip").get<std::string>();
    if (j.contains("port")) {
      const auto p = j.at("port").get<std::int64_t>();
      if (p < 1 || p > 65535) return make_error(EINVAL, fmt::format("port {}: 1..65535", p));
      c.port = static_cast<std::uint16_t>(p);
    }
    if (j.contains("pool_cqs")) c.pool_cqs = j.at("pool_cqs").get<bool>();
    for (const auto& js : j.at("subsystems")) {
      NvmfSubsystemConfig s;
      s.nqn = js.at("nqn").get<std::string>();
      if (js.contains("allowed_hosts")) {
        for (const auto& jh : js.at("allowed_hosts")) {
          if (jh.is_string()) {
            s.allowed_hosts.push_back(jh.get<std::string>());
            continue;
          }
          const std::string host = jh.at("nqn").get<std::string>();
          s.allowed_hosts.push_back(host);
          NvmfSubsystemConfig::Secrets sec;
          if (jh.contains("dhchap_secret")) sec.dhchap_secret = jh.at("dhchap_secret").get<std::string>();
          if (jh.contains("dhchap_ctrl_secret")) sec.dhchap_ctrl_secret = jh.at("dhchap_ctrl_secret").get<std::string>();
          if (!sec.dhchap_secret.empty() || !sec.dhchap_ctrl_secret.empty()) s.host_secrets[host] = std::move(sec);
        }
      }
      for (const auto& jn : js.at("namespaces")) {
        NvmfNamespaceConfig n;
        if (jn.contains("backend")) n.backend = jn.at("backend").get<std::string>();
        if (jn.contains("size")) n.size = jn.at("size").get<std::uint64_t>();
        s.namespaces.push_back(std::move(n));
      }
      c.subsystems.push_back(std::move(s));
    }
  } catch (const nlohmann::json::exception& e) {
    return make_error(EINVAL, fmt::format("the config: {}", e.what()));
  }
  if (auto r = check_nvmf_target_config(c); !r) return std::unexpected(r.error());
  return c;
}

Result<NvmfTargetConfig> nvmf_target_config(const NvmfTargetOptions& o) {
  if (!o.config.empty()) {
    if (!o.ip.empty() || !o.nqn.empty() || !o.allowed_hosts.empty() || !o.dhchap_secret.empty() ||
        !o.dhchap_ctrl_secret.empty())
      return make_error(EINVAL,
                        "--config holds the whole configuration: no --ip, --nqn, --allow-host or --dhchap-* with it");
    std::ifstream f(o.config);
    if (!f) return make_error(ENOENT, fmt::format("--config {}: cannot open it", o.config));
    std::stringstream ss;
    ss << f.rdbuf();
    return parse_nvmf_target_config(ss.str());
  }
  if (o.ip.empty()) return make_error(EINVAL, "--ip: the target needs a device address (or --config)");
  auto ip = parse_ip_option("--ip", o.ip);
  if (!ip) return std::unexpected(ip.error());
  if (o.nqn.empty()) return make_error(EINVAL, "--nqn: the subsystem needs an NQN (or --config)");
  NvmfTargetConfig c;
  c.ip = ip_str(*ip);  // ::ffff:a.b.c.d is a.b.c.d
  c.port = o.port;
  c.pool_cqs = o.pool_cqs;
  NvmfSubsystemConfig s{o.nqn, o.allowed_hosts, {}, {{o.backend, o.size}}};
  if (!o.dhchap_secret.empty() || !o.dhchap_ctrl_secret.empty()) {
    if (o.allowed_hosts.empty())
      return make_error(EINVAL, "--dhchap-secret: name the host it is for with --allow-host");
    for (const auto& h : o.allowed_hosts) s.host_secrets[h] = {o.dhchap_secret, o.dhchap_ctrl_secret};
  }
  c.subsystems.push_back(std::move(s));
  if (auto r = check_nvmf_target_config(c); !r) return std::unexpected(r.error());
  return c;
}

Result<void> nvmf_target(const NvmfTargetConfig& c, std::ostream& log, const std::string& reload_from) {
  if (auto r = check_nvmf_target_config(c); !r) return r;
  std::mutex log_mu;
  auto say = [&](const std::string& line) {
    std::lock_guard lock(log_mu);
    log << fmt::format("{:%F %T} srdma nvmf target: {}", std::chrono::system_clock::now(), line) << std::endl;
  };
  // Blocked before any thread starts: every thread inherits the mask, and
  // sigwait below is the one place they arrive.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGUSR1);  // print the counters and go on
  sigaddset(&stop, SIGHUP);   // re-read the configuration and go on (a daemon's convention)
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  const auto started = std::chrono::steady_clock::now();
  // SRDMA_SAME_HOST, SRDMA_BUSY_POLL_US ... apply here too; the address is ours.
  auto env = NetConfig::from_env();
  if (!env) return std::unexpected(env.error());
  NetConfig net = *env;
  const IpAddress ip = parse_ip(c.ip).value();  // checked above
  net.ip = ip_str(ip);
  auto dev = Device::open(Profile{}, "srdma-target", net);
  if (!dev) return std::unexpected(dev.error());
  nvmf::TargetOptions topts;
  topts.pool_cqs = c.pool_cqs;
  topts.log = say;
  auto target = nvmf::RdmaTarget::create(*dev, topts);
  if (!target) return std::unexpected(target.error());
  ServedConfig served(**target, say);
  if (auto r = served.start(c); !r) return r;
  if (auto r = (*target)->listen(c.port); !r) return r;
  say(fmt::format("listening on {}, {} CQs", host_port_str(ip, c.port), c.pool_cqs ? "pooled" : "private"));
  auto status = [&] {
    return fmt::format("STATUS=serving {} subsystems on {}", served.config().subsystems.size(),
                       host_port_str(ip, c.port));
  };
  // Under systemd (Type=notify): accepting from now on.
  notify_service_manager(fmt::format("READY=1\n{}", status()));

  // What the target refused, reaped and dropped so far (SIGUSR1, and once
  // more when it stops): an operator's first look at a flood or a scan.
  auto counters = [&] {
    const nvmf::TargetStats s = (*target)->stats();
    std::string line = fmt::format(
        "counters: queues={} controllers={} commands={} errors={} evicted_unconnected={} "
        "refused_unconnected_per_host={} refused_queues={} refused_requests={} refused_connects={} "
        "reaped_unconnected={} queue_alloc_failures={} authenticated={} auth_failures={}",
        s.queues, s.controllers, s.commands, s.errors, s.evicted_unconnected, s.refused_unconnected_per_host,
        s.refused_queues, s.refused_requests, s.refused_connects, s.reaped_unconnected, s.queue_alloc_failures,
        s.authenticated, s.auth_failures);
    if (auto cm = (*target)->cm_counters())
      line += fmt::format(
          " cm_received={} cm_sent={} cm_resent={} cm_rejects_sent={} cm_evicted_half_open={} "
          "cm_refused_half_open_per_source={} cm_clamped_timeouts={} cm_dropped_malformed={} "
          "cm_dropped_unknown_id={} cm_dropped_wrong_peer={} cm_dropped_unexpected={}",
          cm->received, cm->sent, cm->resent, cm->rejects_sent, cm->evicted_half_open,
          cm->refused_half_open_per_source, cm->clamped_timeouts, cm->dropped_malformed, cm->dropped_unknown_id,
          cm->dropped_wrong_peer, cm->dropped_unexpected);
    say(line);
  };
  // SIGHUP: the --config file again. A config that does not parse or that
  // the running target cannot take is logged and changes nothing.
  auto reload = [&] {
    notify_service_manager(fmt::format("RELOADING=1\nMONOTONIC_USEC={}", monotonic_usec()));
    std::string outcome;
    if (reload_from.empty()) {
      outcome = "SIGHUP: nothing to re-read (started without --config)";
    } else {
      NvmfTargetOptions o;
      o.config = reload_from;
      auto next = nvmf_target_config(o);
      auto done = next ? served.reload(*next) : std::unexpected(next.error());
      outcome = done ? *done
                     : fmt::format("reload of {} refused: {}; the running configuration stays", reload_from,
                                   done.error().to_string());
    }
    say(outcome);
    notify_service_manager(fmt::format("READY=1\n{}; {}", status(), outcome));
  };
  int sig = 0;
  for (;;) {
    sigwait(&stop, &sig);
    if (sig == SIGUSR1) {
      counters();
    } else if (sig == SIGHUP) {
      reload();
    } else {
      break;
    }
  }
  notify_service_manager("STOPPING=1");
  counters();
  say(fmt::format("{}: disconnecting the hosts", sig == SIGINT ? "SIGINT" : "SIGTERM"));
  target->reset();  // closes every queue and waits for their I/O
  // What serving cost, for an operator and for bench scripts comparing CQ
  // modes across processes: completion events (interrupts), the vector
  // threads' wake-ups, completions, and the process's CPU time.
  const VectorTotals v = vector_totals(*dev);
  say(fmt::format("stopped: interrupts={} wakeups={} completions={} cpu_s={:.3f} uptime_s={:.3f}", v.interrupts,
                  v.wakeups, v.completions, process_cpu_seconds(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()));
  return {};
}

}  // namespace srdma::tools
