// `srdma perf`'s names and options: parsing the test name, resolving and
// checking the options into the settings both fronts run with.

#include <algorithm>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "srdma/qp_attr.h"
#include "tools/link_options.h"
#include "tools/perf.h"
#include "tools/perf_side.h"

namespace srdma::tools {

// ---------------------------------------------------------------------------
// Names and options

namespace {


constexpr std::string_view kNames[] = {"write_bw", "read_bw", "send_bw", "write_lat",
                                       "read_lat", "send_lat", "atomic_lat"};
constexpr std::uint32_t kMaxQps = 256;
constexpr std::uint32_t kMaxInline = 512;  // the device's default max_inline_data
constexpr std::uint32_t kMaxQpWr = 16384;  // the device's default max_qp_wr
constexpr std::uint32_t kMaxCqe = 65535;   // a CQ per QP pair stays small; the device allows more

}  // namespace

std::string_view perf_test_name(PerfTest t) { return kNames[static_cast<int>(t)]; }

Result<PerfTest> parse_perf_test(std::string_view name) {
  for (int i = 0; i < 7; ++i)
    if (kNames[i] == name) return static_cast<PerfTest>(i);
  return make_error(EINVAL, fmt::format("unknown test '{}' (write_bw, read_bw, send_bw, write_lat, read_lat, "
                                        "send_lat, atomic_lat)",
                                        name));
}

bool is_bandwidth(PerfTest t) {
  return t == PerfTest::kWriteBw || t == PerfTest::kReadBw || t == PerfTest::kSendBw;
}

Result<PerfSettings> resolve_perf_options(const PerfOptions& o) {
  auto test = parse_perf_test(o.test);
  if (!test) return std::unexpected(test.error());
  PerfSettings s;
  s.test = *test;
  const bool bw = is_bandwidth(s.test);
  const bool atomic = s.test == PerfTest::kAtomicLat;

  if (o.all_sizes && o.size) return make_error(EINVAL, "-a (all sizes) and -s (one size) exclude each other");
  if (o.all_sizes) {
    if (atomic) return make_error(EINVAL, "-a: atomic_lat moves 8 bytes only");
    for (std::uint64_t n = 2; n <= kPerfMaxSize; n *= 2) s.sizes.push_back(n);
  } else {
    std::uint64_t size = o.size.value_or(atomic ? 8 : bw ? 65536 : 2);
    if (size == 0 || size > kPerfMaxSize)
      return make_error(EINVAL, fmt::format("-s {}: the message size must be 1 .. {} bytes", size, kPerfMaxSize));
    if (atomic && size != 8) return make_error(EINVAL, fmt::format("-s {}: atomic_lat moves 8 bytes", size));
    s.sizes.push_back(size);
  }

  if (o.iterations && o.duration_s) return make_error(EINVAL, "-n (iterations) and -D (seconds) exclude each other");
  if (o.duration_s) {
    if (!(*o.duration_s > 0) || *o.duration_s > 3600)
      return make_error(EINVAL, fmt::format("-D {}: the duration must be > 0 and at most 3600 seconds", *o.duration_s));
    s.duration_s = *o.duration_s;
  } else {
    s.iterations = o.iterations.value_or(bw ? 5000 : 1000);
    if (s.iterations == 0) return make_error(EINVAL, "-n 0: at least one iteration");
    if (s.iterations >= (1ull << 47)) return make_error(EINVAL, fmt::format("-n {}: too many iterations", s.iterations));
  }

  if (o.num_qps == 0 || o.num_qps > kMaxQps)
    return make_error(EINVAL, fmt::format("-q {}: the number of QPs must be 1 .. {}", o.num_qps, kMaxQps));
  if (!bw && o.num_qps != 1)
    return make_error(EINVAL, fmt::format("-q {}: latency tests use one QP (as perftest's do)", o.num_qps));
  s.num_qps = o.num_qps;

  if (o.verify && !bw) return make_error(EINVAL, "--verify: for the bandwidth tests (write_bw, read_bw, send_bw)");
  if (o.verify && o.tx_depth.value_or(1) != 1)
    return make_error(EINVAL, fmt::format("-t {}: --verify keeps one WR in flight per QP (-t 1)", *o.tx_depth));
  s.tx_depth = o.tx_depth.value_or(bw && !o.verify ? 128 : 1);
  if (s.tx_depth == 0 || s.tx_depth > kMaxQpWr)
    return make_error(EINVAL, fmt::format("-t {}: the TX depth must be 1 .. {}", s.tx_depth, kMaxQpWr));
  if (static_cast<std::uint64_t>(s.tx_depth) * s.num_qps > kMaxCqe)
    return make_error(EINVAL, fmt::format("-t {} -q {}: the CQ would need {} entries, more than max_cqe {}",
                                          s.tx_depth, s.num_qps,
                                          static_cast<std::uint64_t>(s.tx_depth) * s.num_qps, kMaxCqe));

  if (o.cq_mod == 0) return make_error(EINVAL, "-Q 0: CQ moderation must be at least 1");
  s.cq_mod = std::min(o.cq_mod, s.tx_depth);  // perftest clamps it to the TX depth
  if (s.test == PerfTest::kReadLat || atomic) s.cq_mod = 1;  // their latency is the completion's

  s.inline_size = o.inline_size.value_or(bw ? 0 : 236);
  if (s.inline_size > kMaxInline)
    return make_error(EINVAL, fmt::format("-I {}: at most {} bytes of inline data", s.inline_size, kMaxInline));
  if (s.test == PerfTest::kReadBw || s.test == PerfTest::kReadLat || atomic) s.inline_size = 0;

  if (s.test == PerfTest::kSendBw)
    s.rx_depth = std::min<std::uint32_t>(std::max<std::uint32_t>(s.tx_depth, 512), kMaxCqe / s.num_qps);
  else if (s.test == PerfTest::kSendLat)
    s.rx_depth = std::max<std::uint32_t>(s.tx_depth, 16);

  if (!(o.copy_budget_ms >= 0)) return make_error(EINVAL, "the copy budget must be >= 0 ms");
  s.copy_budget_ms = o.copy_budget_ms;
  if (o.mtu) {
    if (auto r = check_mtu_option(*o.mtu); !r) return std::unexpected(r.error());
    s.mtu = *o.mtu;
  }
  if (o.qp_timeout > 31) return make_error(EINVAL, fmt::format("--qp-timeout {}: 0..31", o.qp_timeout));
  s.qp_timeout = static_cast<std::uint8_t>(o.qp_timeout);
  auto impair = impair_option(o.impair);
  if (!impair) return std::unexpected(impair.error());
  s.impair = *impair;
  s.use_events = o.use_events;
  s.single_thread = o.single_thread;
  s.verify = o.verify;
  s.before_verify = o.before_verify;
  return s;
}

}  // namespace srdma::tools
