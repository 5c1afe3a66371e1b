#include <unistd.h>

#include <cstdio>
#include <vector>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "srdma/device.h"
#include "srdma/net.h"
#include "tools/address_option.h"
#include "tools/commands.h"

namespace srdma::tools {
namespace {

// Resident bytes of this process (from /proc/self/statm).
std::size_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long size = 0, resident = 0;
  int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

}  // namespace

Result<void> info(const Profile& requested, std::ostream& out, const std::string& ip) {
  std::vector<std::string> repairs;
  auto p = validate_profile(requested, &repairs);
  if (!p) return std::unexpected(p.error());
  for (const auto& r : repairs) fmt::print(out, "profile: {}\n", r);

  const std::size_t rss_before = resident_bytes();
  NetConfig net;
  if (!ip.empty()) {
    auto env = NetConfig::from_env();
    if (!env) return std::unexpected(env.error());
    net = *env;
    auto a = parse_ip_option("--ip", ip);
    if (!a) return std::unexpected(a.error());
    net.ip = ip_str(*a);  // ::ffff:a.b.c.d is a.b.c.d
  }
  auto dev = ip.empty() ? Device::open(*p) : Device::open(*p, "srdma0", net);
  if (!dev) return std::unexpected(dev.error());
  const std::size_t rss_after = resident_bytes();

  DeviceAttr a = dev->query();
  fmt::print(out, "device {}\n", a.name);
  fmt::print(out, "  {:<18} {:#x}\n", "max_mr_size", a.max_mr_size);
  fmt::print(out, "  {:<18} {:#x}\n", "page_size_cap", a.page_size_cap);
  for (auto [name, v] : {std::pair{"max_qp", a.max_qp}, {"max_qp_wr", a.max_qp_wr}, {"max_sge", a.max_sge},
                         {"max_cq", a.max_cq}, {"max_cqe", a.max_cqe}, {"max_mr", a.max_mr},
                         {"max_pd", a.max_pd}, {"max_inline_data", a.max_inline_data},
                         {"max_map_per_fmr", a.max_map_per_fmr}, {"num_comp_vectors", a.num_comp_vectors}})
    fmt::print(out, "  {:<18} {}\n", name, v);

  const PortAttr port = dev->query_port();
  fmt::print(out, "port 1\n");
  fmt::print(out, "  {:<18} {}\n", "link_layer", port.ethernet ? "Ethernet (RoCEv2, UDP " + std::to_string(net.port) + ")" : "in-process");
  fmt::print(out, "  {:<18} {}\n", "active_mtu", port.active_mtu);
  fmt::print(out, "  {:<18} {:#06x}\n", "lid", port.lid);
  std::string gid;
  for (std::size_t i = 0; i < port.gid.size(); i += 2)
    gid += fmt::format("{}{:02x}{:02x}", i ? ":" : "", port.gid[i], port.gid[i + 1]);
  fmt::print(out, "  {:<18} {}{}\n", "gid[0]", gid,
             port.ethernet ? fmt::format(" ({})", gid_str(port.address)) : "");

  fmt::print(out, "profile\n");
  for (const auto& [name, v] : dev->profile().fields()) fmt::print(out, "  {:<22} {}\n", name, v);

  fmt::print(out, "tables\n  {:<14} {:>10} {:>10} {:>10}\n", "table", "used", "reserved", "total");
  for (const auto& t : dev->table_usage())
    fmt::print(out, "  {:<14} {:>10} {:>10} {:>10}\n", t.name, t.used, t.reserved, t.total);

  for (const auto& b : dev->buddy_usage()) {
    fmt::print(out, "{} buddy (max_order {}): free blocks per order\n ", b.name, b.max_order);
    for (int o = 0; o <= b.max_order; ++o) fmt::print(out, " {}:{}", o, b.free_per_order[o]);
    fmt::print(out, "\n");
  }
  fmt::print(out, "completion vectors\n  {:<7} {:>4} {:>12} {:>12} {:>12} {:>12}\n", "vector", "cpu", "interrupts",
             "events", "cqes", "handled");
  for (const auto& v : dev->comp_vector_stats())
    fmt::print(out, "  {:<7} {:>4} {:>12} {:>12} {:>12} {:>12}\n", v.vector, v.cpu, v.interrupts, v.events, v.cqes,
               v.completions_handled);
  auto pool = dev->cq_pool_stats();
  fmt::print(out, "CQ pool{}\n", pool.empty() ? ": empty (CQs are created on the first cq_pool_get)" : "");
  if (!pool.empty()) {
    fmt::print(out, "  {:<4} {:>6} {:<10} {:>6} {:>8} {:>4} {:>12} {:>11} {:>12}\n", "cq", "vector", "context", "cqe",
               "cqe_used", "qps", "completions", "interrupts", "compl/intr");
    for (const auto& c : pool)
      fmt::print(out, "  {:<4} {:>6} {:<10} {:>6} {:>8} {:>4} {:>12} {:>11} {:>12.2f}\n", c.id, c.vector,
                 poll_context_name(c.ctx), c.cqe, c.cqe_used, c.qps, c.completions, c.interrupts,
                 c.completions_per_interrupt);
  }
  // The device's transport counters (a device that has moved no packet yet
  // shows zeros; the names are those of the QP and device queries).
  const TransportCounters tc = dev->counters();
  fmt::print(out, "transport counters\n");
  for (auto [name, v] : {std::pair{"requests_sent", tc.requests_sent}, {"requests_received", tc.requests_received},
                         {"responses_sent", tc.responses_sent}, {"responses_received", tc.responses_received},
                         {"retransmissions", tc.retransmissions}, {"timeouts", tc.timeouts}, {"rto_expiries", tc.rto_expiries},
                         {"tail_probes", tc.tail_probes},
                         {"rnr_naks_sent", tc.rnr_naks_sent}, {"rnr_naks_received", tc.rnr_naks_received},
                         {"rnr_retries", tc.rnr_retries}, {"seq_naks_sent", tc.seq_naks_sent},
                         {"seq_naks_received", tc.seq_naks_received}, {"duplicate_requests", tc.duplicate_requests},
                         {"cnps_sent", tc.cnps_sent}, {"cnps_received", tc.cnps_received},
                         {"rate_decreases", tc.rate_decreases}, {"rate_increases", tc.rate_increases},
                         {"paced_waits", tc.paced_waits}, {"lowest_rate_mbps", tc.lowest_rate_mbps}})
    fmt::print(out, "  {:<22} {}\n", name, v);
  for (std::size_t r = 0; r < kNumDropReasons; ++r)
    fmt::print(out, "  dropped_{:<14} {}\n", drop_reason_str(static_cast<DropReason>(r)), tc.dropped[r]);
  // Class C NAKs by cause (sent) and by code (received): IBA's names.
  for (std::size_t i = 0; i < kNumNakCauses; ++i)
    fmt::print(out, "  nak_sent_{:<13} {}\n", nak_cause_str(static_cast<NakCause>(i)), tc.naks_sent[i]);
  for (std::size_t i = 0; i < kNumNakCodes; ++i)
    fmt::print(out, "  nak_received_{:<9} {}\n", nak_code_str(static_cast<NakCode>(i)), tc.naks_received[i]);
  fmt::print(out, "footprint\n  {:<22} {}\n  {:<22} {}\n", "table address space", dev->table_bytes(),
             "resident after open", rss_after > rss_before ? rss_after - rss_before : 0);
  return {};
}

}  // namespace srdma::tools
