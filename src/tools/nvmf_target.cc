#include "tools/nvmf_target.h"

#include <pthread.h>
#include <signal.h>

#include <fmt/format.h>

#include "nvmf/namespace.h"
#include "nvmf/rdma_target.h"
#include "nvmf/subsystem.h"
#include "srdma/device.h"
#include "srdma/net.h"

namespace srdma::tools {
namespace {
constexpr std::uint32_t kBlockSize = 4096;
}

Result<void> nvmf_target(const NvmfTargetOptions& o, std::ostream& log) {
  if (o.ip.empty()) return make_error(EINVAL, "--ip: the target needs a device address");
  if (auto a = parse_ipv4(o.ip); !a) return make_error(EINVAL, fmt::format("--ip: {}", a.error().reason));
  if (o.nqn.empty()) return make_error(EINVAL, "--nqn: the subsystem needs an NQN");
  if (o.size < kBlockSize || o.size % kBlockSize)
    return make_error(EINVAL, fmt::format("--size {} is not a positive multiple of {}", o.size, kBlockSize));
  // Blocked before any thread starts: every thread inherits the mask, and
  // sigwait below is the one place they arrive.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  NetConfig net;
  net.ip = o.ip;
  auto dev = Device::open(Profile{}, "srdma-target", net);
  if (!dev) return std::unexpected(dev.error());
  nvmf::TargetOptions topts;
  topts.pool_cqs = o.pool_cqs;
  auto target = nvmf::RdmaTarget::create(*dev, topts);
  if (!target) return std::unexpected(target.error());
  std::shared_ptr<nvmf::Namespace> ns;
  if (o.backend == "ram") {
    auto r = nvmf::make_ram_namespace(o.size / kBlockSize, kBlockSize);
    if (!r) return std::unexpected(r.error());
    ns = std::move(*r);
  } else if (o.backend.rfind("file:", 0) == 0) {
    nvmf::FileNamespaceOptions fo;
    fo.block_size = kBlockSize;
    fo.create_blocks = o.size / kBlockSize;
    auto r = nvmf::open_file_namespace(o.backend.substr(5), fo);
    if (!r) return std::unexpected(r.error());
    ns = std::move(*r);
  } else {
    return make_error(EINVAL, fmt::format("--backend '{}': ram or file:PATH", o.backend));
  }
  auto sub = nvmf::Subsystem::create(o.nqn, "SRDMA0001", "softrdma target");
  if (!sub) return std::unexpected(sub.error());
  if (auto r = (*sub)->add_namespace(ns); !r) return std::unexpected(r.error());
  if (auto r = (*target)->add_subsystem(*sub); !r) return r;
  if (auto r = (*target)->listen(o.port); !r) return r;
  log << fmt::format("srdma nvmf target: {} on {}:{}, namespace 1: {} blocks of {} ({}), {} CQs", o.nqn, o.ip, o.port,
                     ns->block_count(), kBlockSize, o.backend, o.pool_cqs ? "pooled" : "private")
      << std::endl;

  int sig = 0;
  sigwait(&stop, &sig);
  log << fmt::format("srdma nvmf target: {}: disconnecting the hosts", sig == SIGINT ? "SIGINT" : "SIGTERM")
      << std::endl;
  const nvmf::TargetStats s = (*target)->stats();
  target->reset();  // closes every queue and waits for their I/O
  log << fmt::format("srdma nvmf target: stopped after {} commands ({} errors)", s.commands, s.errors) << std::endl;
  return {};
}

}  // namespace srdma::tools
