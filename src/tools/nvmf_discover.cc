#include "tools/nvmf_discover.h"

#include <cstring>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "nvmf/rdma_host.h"
#include "nvmf/subsystem.h"
#include "nvmf/wire.h"
#include "srdma/device.h"
#include "srdma/net.h"
#include "tools/address_option.h"

namespace srdma::tools {
namespace {

// An ASCII field of the log, space padded (or NUL terminated).
std::string_view field(const char* p, std::size_t n) {
  std::string_view v(p, strnlen(p, n));
  while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
  return v;
}

const char* prtype_name(std::uint8_t t) {
  switch (t) {
    case nvmf::kRdmaPrtypeNotSpecified: return "not specified";
    case nvmf::kRdmaPrtypeIb: return "infiniband";
    case nvmf::kRdmaPrtypeRoce: return "roce";
    case nvmf::kRdmaPrtypeRoceV2: return "roce-v2";
    default: return "unrecognized";
  }
}

}  // namespace

Result<void> nvmf_discover(const NvmfDiscoverOptions& o, std::ostream& out) {
  if (o.ip.empty()) return make_error(EINVAL, "--ip: this host's device address");
  auto ip = parse_ip_option("--ip", o.ip);
  if (!ip) return std::unexpected(ip.error());
  auto target = parse_host_port("target", o.target, 4420);
  if (!target) return std::unexpected(target.error());
  if (auto r = check_same_family("the target", target->ip, "--ip", *ip); !r) return r;
  auto env = NetConfig::from_env();  // SRDMA_SAME_HOST ... apply here too; the address is ours
  if (!env) return std::unexpected(env.error());
  NetConfig net = *env;
  net.ip = ip_str(*ip);  // ::ffff:a.b.c.d is a.b.c.d
  auto dev = Device::open(Profile{}, "srdma-host", net);
  if (!dev) return std::unexpected(dev.error());
  nvmf::HostOptions ho;
  ho.subnqn = nvmf::kDiscoveryNqn;
  if (!o.hostnqn.empty()) ho.hostnqn = o.hostnqn;
  ho.kato_ms = 0;  // a discovery controller without keep-alive, as nvme discover's
  auto target_addr = roce_address_of(target->ip);  // an IPv6 target enters the process's table: we name it
  if (!target_addr) return std::unexpected(target_addr.error());
  auto ctrl = nvmf::HostController::connect(*dev, *target_addr, target->port, ho);
  if (!ctrl) return std::unexpected(ctrl.error());
  auto head = (*ctrl)->get_log_page(nvmf::kLogPageDiscovery, 0, sizeof(nvmf::DiscoveryLogHeader));
  if (!head) return std::unexpected(head.error());
  nvmf::DiscoveryLogHeader h;
  std::memcpy(&h, head->data(), sizeof h);
  constexpr std::uint64_t kMaxRecords = 127;  // what one admin transfer of 128 KiB holds
  if (h.numrec > kMaxRecords) return make_error(EPROTO, fmt::format("the log claims {} records", h.numrec));
  auto page = (*ctrl)->get_log_page(nvmf::kLogPageDiscovery, 0,
                                    static_cast<std::uint32_t>((h.numrec + 1) * sizeof(nvmf::DiscoveryLogEntry)));
  if (!page) return std::unexpected(page.error());
  fmt::print(out, "\nDiscovery Log Number of Records {}, Generation counter {}\n", h.numrec, h.genctr);
  for (std::uint64_t i = 0; i < h.numrec; ++i) {
    nvmf::DiscoveryLogEntry e;
    std::memcpy(&e, page->data() + (i + 1) * sizeof e, sizeof e);
    fmt::print(out, "=====Discovery Log Entry {}======\n", i);
    fmt::print(out, "trtype:  {}\n", e.trtype == nvmf::kTrtypeRdma ? "rdma" : "unrecognized");
    fmt::print(out, "adrfam:  {}\n", e.adrfam == nvmf::kAdrfamIpv4   ? "ipv4"
                                     : e.adrfam == nvmf::kAdrfamIpv6 ? "ipv6"
                                                                     : "unrecognized");
    fmt::print(out, "subtype: {}\n", e.subtype == nvmf::kSubtypeNvme ? "nvme subsystem"
                                     : e.subtype == nvmf::kSubtypeDiscovery ? "discovery subsystem" : "unrecognized");
    fmt::print(out, "treq:    not specified\n");
    fmt::print(out, "portid:  {}\n", e.portid);
    fmt::print(out, "trsvcid: {}\n", field(e.trsvcid, sizeof e.trsvcid));
    fmt::print(out, "subnqn:  {}\n", field(e.subnqn, sizeof e.subnqn));
    fmt::print(out, "traddr:  {}\n", field(e.traddr, sizeof e.traddr));
    fmt::print(out, "rdma_prtype: {}\n", prtype_name(e.rdma.prtype));
    fmt::print(out, "rdma_qptype: {}\n", e.rdma.qptype == nvmf::kRdmaQptypeConnected ? "connected" : "unrecognized");
    fmt::print(out, "rdma_cms:    {}\n", e.rdma.cms == nvmf::kRdmaCmsRdmaCm ? "rdma-cm" : "unrecognized");
    fmt::print(out, "rdma_pkey: 0x{:04x}\n", e.rdma.pkey);
  }
  return {};
}

}  // namespace srdma::tools
