// `srdma perf` in-process: every test with a few iterations, sane reports,
// exactly the JSON keys the issue names, refusals of bad options, -e.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "tools/perf.h"

namespace srdma::tools {
namespace {

PerfOptions opts(const std::string& test, std::uint64_t iters = 50) {
  PerfOptions o;
  o.test = test;
  o.iterations = iters;
  o.copy_budget_ms = 1;
  return o;
}

std::set<std::string> keys(const nlohmann::json& j) {
  std::set<std::string> k;
  for (auto it = j.begin(); it != j.end(); ++it) k.insert(it.key());
  return k;
}

void check_bw(const PerfReport& r, const std::string& test, std::uint64_t bytes, std::uint64_t iters) {
  ASSERT_EQ(r.bw.size(), 1u) << test;
  EXPECT_TRUE(r.lat.empty());
  const BwRow& b = r.bw[0];
  EXPECT_EQ(b.bytes, bytes);
  EXPECT_EQ(b.iterations, iters);
  EXPECT_GT(b.bw_avg_mib_s, 0);
  EXPECT_GE(b.bw_peak_mib_s, b.bw_avg_mib_s);
  EXPECT_GT(b.msg_rate_mpps, 0);
  EXPECT_GT(b.copy_bw_mib_s, 0);
  EXPECT_EQ(b.copy_bw_mib_s, std::max(b.memcpy_mib_s, b.loop_mib_s));
  EXPECT_NEAR(b.bw_over_copy, b.bw_avg_mib_s / b.copy_bw_mib_s, 1e-9);
  auto j = to_json(r);
  EXPECT_EQ(keys(j), (std::set<std::string>{"test", "role", "results", "mtu", "link", "local", "remote", "impair", "transport"}));
  EXPECT_EQ(keys(j["transport"]), (std::set<std::string>{"client", "server"}));
  EXPECT_EQ(j["test"], test);
  ASSERT_EQ(j["results"].size(), 1u);
  EXPECT_EQ(keys(j["results"][0]),
            (std::set<std::string>{"bytes", "iterations", "bw_avg_mib_s", "msg_rate_mpps", "copy_bw_mib_s"}));
  EXPECT_EQ(j["results"][0]["bytes"], bytes);
}

void check_lat(const PerfReport& r, const std::string& test, std::uint64_t bytes, std::uint64_t iters) {
  ASSERT_EQ(r.lat.size(), 1u) << test;
  EXPECT_TRUE(r.bw.empty());
  const LatRow& l = r.lat[0];
  EXPECT_EQ(l.bytes, bytes);
  EXPECT_EQ(l.iterations, iters);
  EXPECT_GT(l.t_min_us, 0);
  EXPECT_LE(l.t_min_us, l.t_p50_us);
  EXPECT_LE(l.t_p50_us, l.t_p99_us);
  EXPECT_LE(l.t_p99_us, l.t_p999_us);
  EXPECT_LE(l.t_p999_us, l.t_max_us);
  EXPECT_LE(l.t_min_us, l.t_avg_us);
  EXPECT_LE(l.t_avg_us, l.t_max_us);
  EXPECT_GE(l.t_stdev_us, 0);
  auto j = to_json(r);
  EXPECT_EQ(keys(j), (std::set<std::string>{"test", "role", "results", "mtu", "link", "local", "remote", "impair", "transport"}));
  EXPECT_EQ(keys(j["transport"]), (std::set<std::string>{"client", "server"}));
  EXPECT_EQ(j["test"], test);
  ASSERT_EQ(j["results"].size(), 1u);
  EXPECT_EQ(keys(j["results"][0]),
            (std::set<std::string>{"bytes", "iterations", "t_avg_us", "t_p50_us", "t_p99_us", "t_p999_us"}));
}

TEST(Perf, BandwidthTests) {
  for (std::string t : {"write_bw", "read_bw", "send_bw"}) {
    auto r = run_perf(opts(t, 300));
    ASSERT_TRUE(r) << t << ": " << r.error().to_string();
    check_bw(*r, t, 65536, 300);
  }
}

TEST(Perf, BandwidthWithModerationAndQps) {
  for (std::string t : {"write_bw", "read_bw", "send_bw"}) {
    auto o = opts(t, 1000);
    o.size = 8;
    o.cq_mod = 16;
    o.num_qps = 3;
    o.tx_depth = 64;
    auto r = run_perf(o);
    ASSERT_TRUE(r) << t << ": " << r.error().to_string();
    check_bw(*r, t, 8, 1000);
    EXPECT_EQ(r->settings.cq_mod, 16u);
  }
}

TEST(Perf, VerifyChecksEveryWrOfEveryBandwidthTest) {
  for (std::string t : {"write_bw", "read_bw", "send_bw"}) {
    for (std::uint64_t size : {std::uint64_t{3}, std::uint64_t{65536 + 5}}) {
      auto o = opts(t, 40);
      o.size = size;
      o.num_qps = 2;
      o.verify = true;
      std::uint64_t checked = 0;
      o.before_verify = [&](std::uint32_t, std::uint64_t, std::span<std::uint8_t> dst) {
        EXPECT_EQ(dst.size(), size);
        ++checked;
      };
      auto r = run_perf(o);
      ASSERT_TRUE(r) << t << ": " << r.error().to_string();
      check_bw(*r, t, size, 40);
      EXPECT_EQ(checked, 2u * 40) << t << ": every WR of both QPs";
      EXPECT_EQ(r->settings.tx_depth, 1u);
      EXPECT_EQ(r->settings.cq_mod, 1u);
    }
  }
}

TEST(Perf, VerifyCatchesACorruptedAndAStaleDestination) {
  for (std::string t : {"write_bw", "read_bw", "send_bw"}) {
    // One flipped byte in the middle of iteration 7's data on QP 1.
    auto o = opts(t, 20);
    o.size = 4096;
    o.num_qps = 2;
    o.verify = true;
    o.before_verify = [](std::uint32_t qp, std::uint64_t k, std::span<std::uint8_t> dst) {
      if (qp == 1 && k == 7) dst[1234] ^= 0x40;
    };
    auto r = run_perf(o);
    ASSERT_FALSE(r) << t;
    EXPECT_EQ(r.error().code, EIO);
    EXPECT_NE(r.error().reason.find("QP 1 iteration 7: byte 1234 of 4096"), std::string::npos) << r.error().reason;
    // A transfer that did not happen: the destination still holds the
    // previous iteration's bytes.
    std::vector<std::uint8_t> previous;
    o.before_verify = [&](std::uint32_t qp, std::uint64_t k, std::span<std::uint8_t> dst) {
      if (qp != 0) return;
      if (k == 5) std::memcpy(dst.data(), previous.data(), dst.size());
      previous.assign(dst.begin(), dst.end());
    };
    r = run_perf(o);
    ASSERT_FALSE(r) << t;
    EXPECT_EQ(r.error().code, EIO);
    EXPECT_NE(r.error().reason.find("QP 0 iteration 5: byte 0 of 4096"), std::string::npos) << r.error().reason;
  }
}

TEST(Perf, VerifyIsForBandwidthTestsWithOneWrInFlight) {
  auto o = opts("write_lat");
  o.verify = true;
  EXPECT_EQ(run_perf(o).error().code, EINVAL);
  o = opts("write_bw");
  o.verify = true;
  o.tx_depth = 8;
  auto r = run_perf(o);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EINVAL);
  EXPECT_NE(r.error().reason.find("-t 8"), std::string::npos) << r.error().reason;
}

TEST(Perf, ModerationClampsToTxDepthAndIterationsNeedNotDivide) {
  auto o = opts("write_bw", 37);
  o.size = 64;
  o.tx_depth = 8;
  o.cq_mod = 100;
  auto r = run_perf(o);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->settings.cq_mod, 8u);
  check_bw(*r, "write_bw", 64, 37);
}

TEST(Perf, LatencyTests) {
  for (std::string t : {"write_lat", "read_lat", "send_lat", "atomic_lat"}) {
    auto r = run_perf(opts(t, 200));
    ASSERT_TRUE(r) << t << ": " << r.error().to_string();
    check_lat(*r, t, t == "atomic_lat" ? 8 : 2, 200);
  }
}

TEST(Perf, PingPongInOneThreadAndBiggerMessages) {
  for (std::string t : {"write_lat", "send_lat"}) {
    auto o = opts(t, 100);
    o.single_thread = true;
    o.size = 4096;  // beyond the inline size
    auto r = run_perf(o);
    ASSERT_TRUE(r) << t << ": " << r.error().to_string();
    check_lat(*r, t, 4096, 100);
  }
  auto o = opts("send_bw", 500);
  o.single_thread = true;
  o.size = 1024;
  auto r = run_perf(o);
  ASSERT_TRUE(r) << r.error().to_string();
  check_bw(*r, "send_bw", 1024, 500);
}

TEST(Perf, EventMode) {
  for (std::string t : {"write_bw", "send_bw", "write_lat", "send_lat", "read_lat", "atomic_lat"}) {
    auto o = opts(t, 100);
    o.use_events = true;
    auto r = run_perf(o);
    ASSERT_TRUE(r) << t << ": " << r.error().to_string();
    if (is_bandwidth(r->settings.test)) check_bw(*r, t, 65536, 100);
    else check_lat(*r, t, t == "atomic_lat" ? 8 : 2, 100);
  }
}

TEST(Perf, DurationMode) {
  for (std::string t : {"write_bw", "send_bw", "send_lat", "write_lat"}) {
    PerfOptions o;
    o.test = t;
    o.duration_s = 0.05;
    o.size = 64;
    o.copy_budget_ms = 1;
    auto r = run_perf(o);
    ASSERT_TRUE(r) << t << ": " << r.error().to_string();
    if (is_bandwidth(r->settings.test)) {
      ASSERT_EQ(r->bw.size(), 1u);
      EXPECT_GT(r->bw[0].iterations, 0u);
      EXPECT_GT(r->bw[0].bw_avg_mib_s, 0);
    } else {
      ASSERT_EQ(r->lat.size(), 1u);
      EXPECT_GT(r->lat[0].iterations, 0u);
      EXPECT_LE(r->lat[0].t_p50_us, r->lat[0].t_max_us);
    }
  }
}

TEST(Perf, AllSizes) {
  auto o = opts("write_bw", 4);
  o.all_sizes = true;
  o.copy_budget_ms = 0;
  auto r = run_perf(o);
  ASSERT_TRUE(r) << r.error().to_string();
  ASSERT_EQ(r->bw.size(), 23u);  // 2 .. 8 MiB
  EXPECT_EQ(r->bw.front().bytes, 2u);
  EXPECT_EQ(r->bw.back().bytes, 8u << 20);
  EXPECT_EQ(to_json(*r)["results"].size(), 23u);
  std::ostringstream out;
  print_report(*r, out);
  EXPECT_NE(out.str().find("BW average[MiB/sec]"), std::string::npos);
  EXPECT_NE(out.str().find("MsgRate[Mpps]"), std::string::npos);
  EXPECT_NE(out.str().find("Data ex. method"), std::string::npos);
  EXPECT_NE(out.str().find(" 8388608 "), std::string::npos);
}

TEST(Perf, LatencyHeaderAndJsonFile) {
  auto r = run_perf(opts("send_lat", 20));
  ASSERT_TRUE(r) << r.error().to_string();
  std::ostringstream out;
  print_report(*r, out);
  for (const char* col : {"#bytes", "#iterations", "t_min[usec]", "t_max[usec]", "t_typical[usec]", "t_avg[usec]",
                          "t_stdev[usec]", "99% percentile[usec]", "99.9% percentile[usec]", "Connection type : RC",
                          "CQ Moderation", "Mtu             : 4096[B]", "Send Latency Test"})
    EXPECT_NE(out.str().find(col), std::string::npos) << col;
  const std::string path = ::testing::TempDir() + "perf_test_" + std::to_string(::getpid()) + ".json";
  ASSERT_TRUE(write_json(*r, path));
  std::ifstream f(path);
  auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j, to_json(*r));
  std::remove(path.c_str());
  EXPECT_FALSE(write_json(*r, "/nonexistent-dir/x.json"));
}

TEST(Perf, BadOptionsAreRefused) {
  auto refused = [](PerfOptions o, const char* what) {
    auto r = run_perf(o);
    ASSERT_FALSE(r) << what;
    EXPECT_EQ(r.error().code, EINVAL) << what;
    EXPECT_FALSE(r.error().reason.empty());
  };
  auto o = opts("write_bw");
  o.size = 0;
  refused(o, "size 0");
  o.size = (8u << 20) + 1;
  refused(o, "size > 8 MiB");
  o = opts("write_bw");
  o.num_qps = 0;
  refused(o, "-q 0");
  o = opts("write_bw");
  o.tx_depth = 0;
  refused(o, "-t 0");
  o = opts("write_bw");
  o.cq_mod = 0;
  refused(o, "-Q 0");
  refused(opts("write_bandwidth"), "unknown test");
  refused(opts(""), "no test");
  o = opts("write_bw", 0);
  refused(o, "-n 0");
  o = opts("write_bw");
  o.duration_s = 1;
  refused(o, "-n and -D");
  o = opts("write_bw");
  o.iterations.reset();
  o.duration_s = -1;
  refused(o, "-D -1");
  o = opts("write_bw");
  o.all_sizes = true;
  o.size = 64;
  refused(o, "-a and -s");
  o = opts("send_lat");
  o.num_qps = 2;
  refused(o, "latency with 2 QPs");
  o = opts("atomic_lat");
  o.size = 16;
  refused(o, "atomic of 16 bytes");
  o = opts("write_bw");
  o.tx_depth = 4096;
  o.num_qps = 32;
  refused(o, "CQ beyond max_cqe");
  o = opts("send_lat");
  o.inline_size = 4096;
  refused(o, "inline beyond the device");
  auto r = parse_perf_test("nope");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().reason.find("write_bw"), std::string::npos) << "the error lists the tests";
}

TEST(Perf, MtuAndImpairOptions) {
  auto s = resolve_perf_options(opts("write_bw")).value();
  EXPECT_EQ(s.mtu, 4096u);
  EXPECT_FALSE(s.impair.any());
  auto o = opts("write_bw");
  o.mtu = 256;
  o.impair = "loss=0.05,reorder=0.01,seed=7";
  s = resolve_perf_options(o).value();
  EXPECT_EQ(s.mtu, 256u);
  EXPECT_EQ(s.impair.loss, 0.05);
  EXPECT_EQ(s.impair.reorder, 0.01);
  EXPECT_EQ(s.impair.seed, 7u);
  auto refused = [](PerfOptions bad, const char* names) {
    auto r = resolve_perf_options(bad);
    ASSERT_FALSE(r) << names;
    EXPECT_EQ(r.error().code, EINVAL);
    EXPECT_NE(r.error().reason.find(names), std::string::npos) << r.error().reason;
  };
  for (std::uint32_t mtu : {0u, 128u, 1000u, 8192u}) {
    o = opts("write_bw");
    o.mtu = mtu;
    refused(o, "--mtu");
  }
  for (const char* text : {"loss=1", "loss=-0.1", "drop=0.1", "loss", "seed=x", "depth=0"}) {
    o = opts("write_bw");
    o.impair = text;
    refused(o, "--impair");
  }
  o = opts("write_bw");
  o.impair = "dup=2";
  refused(o, "dup=\"2\"");  // the reason names the key and value
}

// The report carries both devices' transport counters and, with --impair,
// what the impairing link did: in the JSON and under the table.
TEST(Perf, ReportCarriesTransportCountersAndImpairStats) {
  PerfReport r;
  r.settings.test = PerfTest::kWriteBw;
  r.settings.mtu = 1024;
  r.settings.impair.loss = 0.05;
  r.settings.impair.seed = 7;
  TransportCounters c;
  c.retransmissions = 12;
  c.timeouts = 3;
  c.seq_naks_received = 4;
  c.duplicate_requests = 2;
  c.dropped_for(DropReason::kBadPsn) = 5;
  c.cnps_received = 9;
  c.rate_decreases = 8;
  c.rate_increases = 20;
  c.paced_waits = 30;
  c.lowest_rate_mbps = 2500;
  r.transport = {DeviceTransport{"client", c, ImpairStats{100, 6, 1, 2, 3, 4, 11}, {}},
                 DeviceTransport{"server", {}, {}, {}}};
  auto j = to_json(r);
  EXPECT_EQ(j["mtu"], 1024);
  EXPECT_EQ(j["impair"], "loss=0.05,dup=0,reorder=0,corrupt=0,seed=7,depth=4");
  const auto& cj = j["transport"]["client"];
  for (const char* k : {"requests_sent", "requests_received", "responses_sent", "responses_received", "retransmissions",
                        "timeouts", "rnr_naks_sent", "rnr_naks_received", "rnr_retries", "seq_naks_sent",
                        "seq_naks_received", "duplicate_requests", "dropped", "dropped_total", "impair"})
    EXPECT_TRUE(cj.contains(k)) << k;
  EXPECT_EQ(cj["retransmissions"], 12);
  EXPECT_EQ(cj["dropped"]["bad_psn"], 5);
  EXPECT_EQ(cj["dropped_total"], 5);
  EXPECT_EQ(cj["impair"], (nlohmann::json{{"passed", 100}, {"dropped", 6}, {"duplicated", 1}, {"reordered", 2},
                                          {"corrupted", 3}, {"tail_dropped", 4}, {"ce_marked", 11}}));
  EXPECT_EQ(cj["cnps_received"], 9);
  EXPECT_EQ(cj["cnps_sent"], 0);
  EXPECT_EQ(cj["rate_decreases"], 8);
  EXPECT_EQ(cj["lowest_rate_mbps"], 2500);
  EXPECT_EQ(transport_from_json(cj).paced_waits, 30u);
  EXPECT_EQ(j["transport"]["server"]["retransmissions"], 0);

  std::ostringstream out;
  print_footer(r, out);
  for (const char* text : {"transport client: requests", "retransmissions 12", "timeouts 3", "seq NAKs 0 / 4",
                           "duplicate requests 2", "dropped 5 (bad_psn 5)", "impaired link loss=0.05",
                           "passed 100, dropped 6, duplicated 1, reordered 2, corrupted 3",
                           "congestion control: CNPs 0 sent / 9 received, rate cuts 8, increases 20, paced waits 30, "
                           "lowest rate now 2500 Mb/s"})
    EXPECT_NE(out.str().find(text), std::string::npos) << text << "\n" << out.str();
  r.settings.impair = {};
  EXPECT_TRUE(to_json(r)["impair"].is_null());
}

// A lossy link in both directions: the run completes (the transport
// recovers every loss) and the client's counters show the retransmissions.
TEST(Perf, ImpairedRunCompletesWithRetransmissions) {
  auto o = opts("write_bw", 400);
  o.size = 8192;
  o.tx_depth = 16;
  o.mtu = 1024;
  o.impair = "loss=0.05,seed=7";
  auto r = run_perf(o);
  ASSERT_TRUE(r) << r.error().to_string();
  check_bw(*r, "write_bw", 8192, 400);
  ASSERT_EQ(r->transport.size(), 2u);
  const DeviceTransport& client = r->transport[0];
  EXPECT_EQ(client.role, "client");
  EXPECT_GT(client.counters.retransmissions, 0u);
  EXPECT_GT(client.impair.dropped + r->transport[1].impair.dropped, 0u);
  auto j = to_json(*r);
  EXPECT_GT(j["transport"]["client"]["retransmissions"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(j["impair"], "loss=0.05,dup=0,reorder=0,corrupt=0,seed=7,depth=4");
}

TEST(Perf, Defaults) {
  PerfOptions o;
  o.test = "write_bw";
  auto s = resolve_perf_options(o).value();
  EXPECT_EQ(s.sizes, std::vector<std::uint64_t>{65536});
  EXPECT_EQ(s.tx_depth, 128u);
  EXPECT_EQ(s.iterations, 5000u);
  EXPECT_EQ(s.cq_mod, 1u);
  o.test = "send_lat";
  s = resolve_perf_options(o).value();
  EXPECT_EQ(s.sizes, std::vector<std::uint64_t>{2});
  EXPECT_EQ(s.tx_depth, 1u);
  EXPECT_EQ(s.iterations, 1000u);
  EXPECT_EQ(s.inline_size, 236u);
}

}  // namespace
}  // namespace srdma::tools
