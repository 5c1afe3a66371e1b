// `srdma perf`: perftest's header block and columns, and the --json file.
#include <fstream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "hca/copy.h"
#include "tools/perf.h"

namespace srdma::tools {
namespace {

constexpr std::string_view kRule =
    "---------------------------------------------------------------------------------------";

std::string_view title(PerfTest t) {
  switch (t) {
    case PerfTest::kWriteBw: return "RDMA_Write BW Test";
    case PerfTest::kReadBw: return "RDMA_Read BW Test";
    case PerfTest::kSendBw: return "Send BW Test";
    case PerfTest::kWriteLat: return "RDMA_Write Latency Test";
    case PerfTest::kReadLat: return "RDMA_Read Latency Test";
    case PerfTest::kSendLat: return "Send Latency Test";
    case PerfTest::kAtomicLat: return "Atomic FETCH_AND_ADD Latency Test";
  }
  return "";
}

const char* on_off(bool b) { return b ? "ON" : "OFF"; }

void address_line(std::ostream& out, const char* what, const PerfEndpoint& e) {
  fmt::print(out, " {} address: LID 0000 QPN {:#06x} PSN {:#08x} RKey {:#010x} VAddr {:#016x}\n", what, e.qpn,
             e.psn, e.rkey, e.vaddr);
}

}  // namespace

void print_header(const PerfReport& r, std::ostream& out) {
  const PerfSettings& s = r.settings;
  const bool bw = is_bandwidth(s.test);
  const bool sends = s.test == PerfTest::kSendBw || s.test == PerfTest::kSendLat;
  fmt::print(out, "{}\n", kRule);
  fmt::print(out, "{:>20}{}\n", "", title(s.test));
  fmt::print(out, " Dual-port       : OFF\t\tDevice         : {}\n", r.device);
  fmt::print(out, " Number of qps   : {}\t\tTransport type : IB (software HCA)\n", s.num_qps);
  fmt::print(out, " Connection type : RC\t\tUsing SRQ      : OFF\n");
  fmt::print(out, " TX depth        : {}\n", s.tx_depth);
  if (sends) fmt::print(out, " RX depth        : {}\n", s.rx_depth);
  fmt::print(out, " CQ Moderation   : {}\n", s.cq_mod);
  fmt::print(out, " Mtu             : {}[B]\n", s.mtu);
  if (s.impair.any())
    fmt::print(out, " Link type       : {}, impaired ({})\n", r.link, to_string(s.impair));
  else
    fmt::print(out, " Link type       : {}\n", r.link);
  fmt::print(out, " Max inline data : {}[B]\n", s.inline_size);
  fmt::print(out, " Use events      : {}\n", on_off(s.use_events));
  if (s.duration_s > 0) fmt::print(out, " Duration        : {}[s]\n", s.duration_s);
  if (s.verify) fmt::print(out, " Verify          : ON (a pattern per WR, checked on completion)\n");
  if (!bw && (s.test == PerfTest::kWriteLat || s.test == PerfTest::kSendLat))
    fmt::print(out, " Sides           : {}\n", s.single_thread ? "one thread, alternating" : "one thread each");
  fmt::print(out, " rdma_cm QPs\t : OFF\n");
  fmt::print(out, " Data ex. method : {}\n", r.exchange);
  fmt::print(out, "{}\n", kRule);
  address_line(out, "local", r.local);
  if (!r.local_gid.empty()) fmt::print(out, " GID: {}\n", r.local_gid);
  address_line(out, "remote", r.remote);
  if (!r.remote_gid.empty()) fmt::print(out, " GID: {}\n", r.remote_gid);
  fmt::print(out, "{}\n", kRule);
  if (bw) {
    fmt::print(out, " {:<10} {:<14} {:<18} {:<21} {:<15} {:<17} {:<9} {}\n", "#bytes", "#iterations",
               "BW peak[MiB/sec]", "BW average[MiB/sec]", "MsgRate[Mpps]", "copy[MiB/sec]", "BW/copy", "copy by");
  } else {
    fmt::print(out, " {:<7} {:<13} {:<14} {:<14} {:<16} {:<14} {:<15} {:<22} {}\n", "#bytes", "#iterations",
               "t_min[usec]", "t_max[usec]", "t_typical[usec]", "t_avg[usec]", "t_stdev[usec]",
               "99% percentile[usec]", "99.9% percentile[usec]");
  }
  out.flush();  // a long run shows its header now, not at its end
}

void print_row(const PerfReport& r, std::size_t i, std::ostream& out) {
  if (is_bandwidth(r.settings.test)) {
    const BwRow& b = r.bw.at(i);
    fmt::print(out, " {:<10} {:<14} {:<18.2f} {:<21.2f} {:<15.6f} {:<17.2f} {:<9.2f} {}\n", b.bytes, b.iterations,
               b.bw_peak_mib_s, b.bw_avg_mib_s, b.msg_rate_mpps, b.copy_bw_mib_s, b.bw_over_copy,
               b.loop_mib_s >= b.memcpy_mib_s ? r.loop_name : std::string("memcpy"));
  } else {
    const LatRow& l = r.lat.at(i);
    fmt::print(out, " {:<7} {:<13} {:<14.2f} {:<14.2f} {:<16.2f} {:<14.2f} {:<15.2f} {:<22.2f} {:.2f}\n", l.bytes,
               l.iterations, l.t_min_us, l.t_max_us, l.t_typical_us, l.t_avg_us, l.t_stdev_us, l.t_p99_us,
               l.t_p999_us);
  }
  out.flush();
}

void print_footer(const PerfReport& r, std::ostream& out) {
  fmt::print(out, "{}\n", kRule);
  if (is_bandwidth(r.settings.test))
    fmt::print(out, " copy: the faster of glibc memcpy and the tool's {} loop, same size, same run\n", r.loop_name);
  else if (r.settings.test == PerfTest::kWriteLat || r.settings.test == PerfTest::kSendLat)
    fmt::print(out, " latencies are half the round trip\n");
  else
    fmt::print(out, " latencies are the full round trip\n");
  const hca::CopyChoice engine_copy = hca::engine_copy_choice();
  fmt::print(out, " engine copy of 256 B - 4 MiB: {} ({})\n", hca::copy_routine_name(engine_copy.routine),
             engine_copy.how);
  print_transport(r.transport, r.settings.impair, out);
}

void print_report(const PerfReport& r, std::ostream& out) {
  print_header(r, out);
  const std::size_t n = is_bandwidth(r.settings.test) ? r.bw.size() : r.lat.size();
  for (std::size_t i = 0; i < n; ++i) print_row(r, i, out);
  print_footer(r, out);
}

nlohmann::json to_json(const PerfReport& r) {
  nlohmann::json results = nlohmann::json::array();
  if (is_bandwidth(r.settings.test)) {
    for (const auto& b : r.bw)
      results.push_back({{"bytes", b.bytes},
                         {"iterations", b.iterations},
                         {"bw_avg_mib_s", b.bw_avg_mib_s},
                         {"msg_rate_mpps", b.msg_rate_mpps},
                         {"copy_bw_mib_s", b.copy_bw_mib_s}});
  } else {
    for (const auto& l : r.lat)
      results.push_back({{"bytes", l.bytes},
                         {"iterations", l.iterations},
                         {"t_avg_us", l.t_avg_us},
                         {"t_p50_us", l.t_p50_us},
                         {"t_p99_us", l.t_p99_us},
                         {"t_p999_us", l.t_p999_us}});
  }
  return nlohmann::json{
      {"test", std::string(perf_test_name(r.settings.test))},
      {"results", std::move(results)},
      {"role", r.role},
      {"mtu", r.settings.mtu},
      {"link", {{"type", r.local_gid.empty() ? "in-process" : "roce_v2"},
                {"description", r.link},
                {"active_mtu", r.active_mtu},
                {"local_gid", r.local_gid},
                {"remote_gid", r.remote_gid}}},
      {"local", {{"qpn", r.local.qpn}, {"psn", r.local.psn}, {"rkey", r.local.rkey}, {"vaddr", r.local.vaddr}}},
      {"remote", {{"qpn", r.remote.qpn}, {"psn", r.remote.psn}, {"rkey", r.remote.rkey}, {"vaddr", r.remote.vaddr}}},
      {"impair", r.settings.impair.any() ? nlohmann::json(to_string(r.settings.impair)) : nlohmann::json(nullptr)},
      {"transport", to_json(r.transport)}};
}

Result<void> write_json(const PerfReport& r, const std::string& path) {
  std::ofstream f(path);
  if (!f) return make_error(EIO, fmt::format("--json: cannot open '{}' for writing", path));
  f << to_json(r).dump(2) << '\n';
  f.close();
  if (!f) return make_error(EIO, fmt::format("--json: cannot write '{}'", path));
  return {};
}

}  // namespace srdma::tools
