// `srdma perf`: bandwidth and latency tests in the style of perftest
// (ib_write_bw, ib_send_lat ...), through the public verbs only: between two
// software devices in this process over the in-process link, or, as
// perftest runs, between two processes (or hosts) over RoCEv2: a server
// (`--ip A`) waits for one client (`--ip B A`), and the two exchange their
// QPs' numbers, PSNs, rkeys, addresses and GIDs over a TCP side channel.
//
// run_perf() validates the options, sets up the devices, runs the test for
// each message size and returns the rows; print_report() and to_json()
// render them. A test calls run_perf() directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "srdma/impair.h"
#include "srdma/status.h"
#include "tools/transport_report.h"

namespace srdma::tools {

enum class PerfTest : std::uint8_t { kWriteBw, kReadBw, kSendBw, kWriteLat, kReadLat, kSendLat, kAtomicLat };

inline constexpr std::uint64_t kPerfMaxSize = 8ull << 20;  // -a goes 2 .. 8 MiB

std::string_view perf_test_name(PerfTest t);
Result<PerfTest> parse_perf_test(std::string_view name);
bool is_bandwidth(PerfTest t);

// What the command line gives; unset fields take perftest's defaults.
struct PerfOptions {
  std::string test;                       // write_bw, read_bw, send_bw, write_lat, read_lat, send_lat, atomic_lat
  std::optional<std::uint64_t> size;      // -s: 65536 for bandwidth, 2 for latency, 8 (only) for atomic_lat
  bool all_sizes = false;                 // -a: 2, 4, ... 8 MiB
  std::optional<std::uint64_t> iterations;  // -n: per QP; 5000 for bandwidth, 1000 for latency
  std::optional<double> duration_s;       // -D: run for this many seconds instead of -n
  std::uint32_t num_qps = 1;              // -q: QP pairs (bandwidth tests only)
  std::optional<std::uint32_t> tx_depth;  // -t: outstanding WRs per QP; 128 bandwidth, 1 latency
  std::uint32_t cq_mod = 1;               // -Q: signal every Nth WR (clamped to the TX depth, as perftest does)
  std::optional<std::uint32_t> inline_size;  // -I: inline up to this many bytes; 0 bandwidth, 236 latency
  bool use_events = false;                // -e: wait on a completion channel instead of busy polling
  bool single_thread = false;             // ping-pong tests: both sides alternate in one thread
  double copy_budget_ms = 20;             // time spent measuring each copy routine per size
  std::optional<std::uint32_t> mtu;       // --mtu: the QPs' path MTU, 256 .. 4096 (default 4096)
  std::uint32_t qp_timeout = 14;          // -u: this side's QPs' local ACK timeout, 4.096 us x 2^t (perftest's)
  std::string impair;                     // --impair: both devices send through an impairing link (impair.h)
  // --verify (bandwidth tests): WR k of QP i moves a pattern of its own
  // (k, i); its destination is checked when it completes, so a lost,
  // stale or misplaced transfer is an EIO error. One WR in flight per QP
  // (-t 1, -Q 1: the default with --verify), which the rates then reflect.
  bool verify = false;
  // Between processes: `ip` is this side's device address (RoCEv2); the
  // client names the server's (`server`, perftest's positional argument);
  // `port` is the side channel's TCP port.
  std::string ip;
  std::string server;
  std::uint16_t port = 18515;
  // Tests only: runs on each destination just before it is checked (the
  // QP, the iteration, the bytes), e.g. to corrupt one and see it caught.
  std::function<void(std::uint32_t, std::uint64_t, std::span<std::uint8_t>)> before_verify;
};

// The options after validation and defaults.
struct PerfSettings {
  PerfTest test = PerfTest::kWriteBw;
  std::vector<std::uint64_t> sizes;
  std::uint64_t iterations = 0;  // 0 with a duration
  double duration_s = 0;
  std::uint32_t num_qps = 1;
  std::uint32_t tx_depth = 1;
  std::uint32_t rx_depth = 0;     // receives kept posted per QP (send tests)
  std::uint32_t cq_mod = 1;
  std::uint32_t inline_size = 0;
  bool use_events = false;
  bool single_thread = false;
  double copy_budget_ms = 20;
  std::uint32_t mtu = 4096;
  std::uint8_t qp_timeout = 14;  // this side's: each process sets its own
  ImpairSpec impair;  // none unless impair.any()
  bool verify = false;
  std::function<void(std::uint32_t, std::uint64_t, std::span<std::uint8_t>)> before_verify;
};

// EINVAL naming the option for anything perftest would refuse.
Result<PerfSettings> resolve_perf_options(const PerfOptions& o);

struct BwRow {
  std::uint64_t bytes = 0;
  std::uint64_t iterations = 0;   // per QP
  double bw_peak_mib_s = 0;       // best of ~100 windows of the run
  double bw_avg_mib_s = 0;
  double msg_rate_mpps = 0;
  double memcpy_mib_s = 0;        // glibc memcpy, same size, same run
  double loop_mib_s = 0;          // the tool's 32-byte vector loop
  double copy_bw_mib_s = 0;       // the faster of the two
  double bw_over_copy = 0;
};

struct LatRow {
  std::uint64_t bytes = 0;
  std::uint64_t iterations = 0;
  double t_min_us = 0, t_max_us = 0, t_typical_us = 0, t_avg_us = 0, t_stdev_us = 0;
  double t_p50_us = 0, t_p99_us = 0, t_p999_us = 0;
};

// One side's identity, for perftest's "local address / remote address" lines.
struct PerfEndpoint {
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;
  std::uint32_t rkey = 0;
  std::uint64_t vaddr = 0;
};

struct PerfReport {
  PerfSettings settings;
  std::string role = "client";  // "server" for the waiting side of a run between processes
  std::string device;  // the client's device
  std::string link = "in-process";  // or "RoCEv2 a.b.c.d -> e.f.g.h"
  std::string exchange = "in-process";  // how the sides learnt each other's QPs
  std::uint32_t active_mtu = 4096;      // this side's port's (settings.mtu is the path MTU)
  std::string local_gid, remote_gid;    // RoCEv2: ::ffff:a.b.c.d
  std::string loop_name;  // "avx2" or "scalar"
  PerfEndpoint local, remote;
  std::vector<BwRow> bw;    // bandwidth tests
  std::vector<LatRow> lat;  // latency tests
  std::vector<DeviceTransport> transport;  // the client's and the server's, at the end of the run
};

// Runs the test. With `live`, prints the header before the first size and
// each row as it completes (what the command does). With options.ip set,
// runs one side of a run between processes (perf_remote.cc).
Result<PerfReport> run_perf(const PerfOptions& options, std::ostream* live = nullptr);
// The two sides between processes. The server prints "waiting for a client
// on A:PORT" to `live` (flushed) once it listens, serves one client and
// returns its view of the run (the client's rows).
Result<PerfReport> run_perf_server(const PerfSettings& s, const PerfOptions& o, std::ostream* live);
Result<PerfReport> run_perf_client(const PerfSettings& s, const PerfOptions& o, std::ostream* live);

void print_header(const PerfReport& r, std::ostream& out);
void print_row(const PerfReport& r, std::size_t i, std::ostream& out);
void print_footer(const PerfReport& r, std::ostream& out);
void print_report(const PerfReport& r, std::ostream& out);  // header, rows, footer

nlohmann::json to_json(const PerfReport& r);
Result<void> write_json(const PerfReport& r, const std::string& path);

// The copy routines the bandwidth rows compare with (perf_copy.cc).
void copy_vector_loop(void* dst, const void* src, std::size_t n);
const char* copy_vector_loop_name();
// MiB/s of the best batch (about 1 MiB of copies) of glibc memcpy, or of
// copy_vector_loop, copying n bytes src -> dst for about budget_ms.
double measure_copy(bool vector_loop, void* dst, const void* src, std::size_t n, double budget_ms);

}  // namespace srdma::tools
