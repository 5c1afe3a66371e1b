// srdma blk bench: the options it refuses, --verify on a clean run and on a
// corruption injected on purpose, and the JSON it writes.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tools/blk_bench.h"
#include "tools/latency_histogram.h"

namespace srdma::tools {
namespace {

BlkBenchOptions small() {
  BlkBenchOptions o;
  o.controllers = 2;
  o.queues = 2;
  o.qd = 4;
  o.size = 1 << 20;  // 256 blocks of 4 KiB: slots revisit their blocks often
  o.ios = 3000;
  o.progress = false;
  o.cq = "pool";
  return o;
}

TEST(LatencyHistogram, QuantilesWithinTheBucketResolution) {
  LatencyHistogram h;
  for (std::uint64_t v = 1; v <= 100000; ++v) h.record(v * 10);  // 10 ns .. 1 ms, uniform
  EXPECT_EQ(h.count(), 100000u);
  EXPECT_NEAR(h.mean_ns(), 500005.0, 1.0);
  EXPECT_NEAR(h.quantile_ns(0.5), 500000.0, 500000.0 / 16);
  EXPECT_NEAR(h.quantile_ns(0.99), 990000.0, 990000.0 / 16);
  LatencyHistogram other;
  other.record(5);
  h.merge(other);
  EXPECT_EQ(h.count(), 100001u);
  EXPECT_EQ(LatencyHistogram().quantile_ns(0.5), 0.0);
}

TEST(BlkBench, RefusesBadOptions) {
  std::ostringstream out;
  auto expect_einval = [&](BlkBenchOptions o) {
    auto r = blk_bench(o, out);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, EINVAL) << r.error().to_string();
  };
  BlkBenchOptions o = small();
  o.rw = "seqread";
  expect_einval(o);
  // --connect: the host's --ip and the --nqn are needed, one controller,
  // an address with a port in range; --ip and --nqn only with it.
  auto remote = [&] {
    BlkBenchOptions r = small();
    r.controllers = 1;
    r.connect = "127.0.0.1";
    r.ip = "127.0.0.2";
    r.nqn = "nqn.2026-12.io.softrdma:x";
    return r;
  };
  o = remote();
  o.ip.clear();
  expect_einval(o);
  o = remote();
  o.nqn.clear();
  expect_einval(o);
  o = remote();
  o.controllers = 64;  // the controllers' slices of 256 blocks hold fewer than their 8 I/Os in flight
  expect_einval(o);
  o = remote();
  o.controllers = 65;
  expect_einval(o);
  o = remote();
  o.connect = "127.0.0.1:70000";
  expect_einval(o);
  o = remote();
  o.connect = "localhost";
  expect_einval(o);
  o = small();
  o.nqn = "nqn.2026-12.io.softrdma:x";
  expect_einval(o);
  o = small();
  o.bs = 1000;
  expect_einval(o);
  o = small();
  o.cq = "shared";
  expect_einval(o);
  o = small();
  o.reg = "dma";
  expect_einval(o);
  o = small();
  o.qd = 0;
  expect_einval(o);
  o = small();
  o.size = 4096 * 4;  // fewer blocks than I/Os in flight per controller
  expect_einval(o);
  o = small();
  o.backend = "tape";
  expect_einval(o);
}

TEST(BlkBench, RefusesBadMtuAndImpairNamingTheOption) {
  std::ostringstream out;
  auto refused = [&](BlkBenchOptions o, const char* names) {
    auto r = blk_bench(o, out);
    ASSERT_FALSE(r) << names;
    EXPECT_EQ(r.error().code, EINVAL);
    EXPECT_NE(r.error().reason.find(names), std::string::npos) << r.error().reason;
  };
  for (std::uint32_t mtu : {0u, 255u, 768u, 8192u}) {
    BlkBenchOptions o = small();
    o.mtu = mtu;
    refused(o, "--mtu");
  }
  for (const char* text : {"loss=1.5", "reorder=0.1,reorder=0.2", "jitter=0.1", "seed=-3"}) {
    BlkBenchOptions o = small();
    o.impair = text;
    refused(o, "--impair");
  }
}

TEST(BlkBench, VerifiedRandomReadWriteFindsNoMismatchInEitherMode) {
  BlkBenchOptions o = small();
  o.rw = "randrw";
  o.verify = true;
  o.cq = "both";
  std::ostringstream out;
  auto r = blk_bench(o, out);
  ASSERT_TRUE(r) << r.error().to_string() << "\n" << out.str();
  ASSERT_EQ(r->size(), 2u);
  for (const auto& m : *r) {
    EXPECT_EQ(m.verify_errors, 0u) << m.mode;
    EXPECT_EQ(m.io_errors, 0u) << m.mode;
    EXPECT_GE(m.ios, o.ios) << m.mode;
  }
  EXPECT_NE(out.str().find("pool/private"), std::string::npos);
}

// Every loss, duplicate and reordering of the link is the transport's to
// hide: the NVMe-oF layer sees no failed I/O and no wrong data. One I/O in
// flight per queue (see the test below for more).
TEST(BlkBench, VerifiedRandomReadWriteAcrossAnImpairedLink) {
  BlkBenchOptions o = small();
  o.rw = "randrw";
  o.verify = true;
  o.qd = 1;
  o.ios = 400;
  o.impair = "loss=0.02,reorder=0.02,dup=0.01,seed=5";
  std::ostringstream out;
  auto r = blk_bench(o, out);
  ASSERT_TRUE(r) << r.error().to_string() << "\n" << out.str();
  ASSERT_EQ(r->size(), 1u);
  const BlkModeResult& m = (*r)[0];
  EXPECT_EQ(m.verify_errors, 0u);
  EXPECT_EQ(m.io_errors, 0u);
  EXPECT_GE(m.ios, o.ios);
  ASSERT_EQ(m.transport.size(), 2u);
  std::uint64_t dropped = 0, retransmitted = 0;
  for (const DeviceTransport& d : m.transport) {
    dropped += d.impair.dropped;
    retransmitted += d.counters.retransmissions;
  }
  EXPECT_GT(dropped, 0u);
  EXPECT_GT(retransmitted, 0u);
  EXPECT_NE(out.str().find("impaired link loss=0.02"), std::string::npos) << out.str();
}

// The same with four I/Os in flight per queue. Under loss a send completion
// can lag (a lost ACK waits for the transport timeout) while the host's next
// command arrives, so the target's send queue fills: the target must wait
// for room, not drop the response (it did, and the host's I/O hung until
// its 10 s timeout failed the controller).
TEST(BlkBench, VerifiedRandomReadWriteAcrossAnImpairedLinkAtDepth) {
  BlkBenchOptions o = small();
  o.rw = "randrw";
  o.verify = true;
  o.ios = 600;
  o.impair = "loss=0.02,reorder=0.02,dup=0.01,seed=5";
  std::ostringstream out;
  auto r = blk_bench(o, out);
  ASSERT_TRUE(r) << r.error().to_string() << "\n" << out.str();
  EXPECT_EQ((*r)[0].verify_errors, 0u);
  EXPECT_EQ((*r)[0].io_errors, 0u);
}

// The target's full send queue, often: at 10% loss many ACKs are late, so
// many response SENDs stay outstanding while the host's next commands
// arrive. Every response must still go out (dropped, the I/O timed out in
// eight runs of ten).
TEST(BlkBench, TargetSendQueueFullWhileAcksAreLost) {
  BlkBenchOptions o = small();
  o.controllers = 1;
  o.rw = "randrw";
  o.verify = true;
  o.ios = 300;
  o.impair = "loss=0.1,seed=1";
  std::ostringstream out;
  auto r = blk_bench(o, out);
  ASSERT_TRUE(r) << r.error().to_string() << "\n" << out.str();
  EXPECT_EQ((*r)[0].io_errors, 0u);
  EXPECT_EQ((*r)[0].verify_errors, 0u);
}

// A small path MTU: every 4 KiB block crosses as 16 packets, and arrives whole.
TEST(BlkBench, VerifiedAtTheSmallestMtu) {
  BlkBenchOptions o = small();
  o.rw = "randrw";
  o.verify = true;
  o.mtu = 256;
  o.ios = 600;
  std::ostringstream out;
  auto r = blk_bench(o, out);
  ASSERT_TRUE(r) << r.error().to_string() << "\n" << out.str();
  EXPECT_EQ((*r)[0].verify_errors, 0u);
  EXPECT_EQ((*r)[0].io_errors, 0u);
  EXPECT_NE(out.str().find("MTU 256"), std::string::npos) << out.str();
}

// Without --mtu the path MTU is the host port's active MTU (4096 in
// process; 1024 on a 1500-byte link, tests/ipv6_hosts_test.sh).
TEST(BlkBench, WithoutAnMtuThePortsActiveMtuIsUsed) {
  BlkBenchOptions o = small();
  o.ios = 200;
  std::ostringstream out;
  auto r = blk_bench(o, out);
  ASSERT_TRUE(r) << r.error().to_string() << "\n" << out.str();
  EXPECT_NE(out.str().find("MTU 4096"), std::string::npos) << out.str();
}

TEST(BlkBench, VerifyCatchesAnInjectedCorruption) {
  BlkBenchOptions o = small();
  o.rw = "randwrite";  // the corrupted write is read back at once
  o.verify = true;
  o.inject_corruption_after = 500;
  std::ostringstream out;
  auto r = blk_bench(o, out);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EIO);
  EXPECT_NE(r.error().reason.find("mismatch"), std::string::npos) << r.error().reason;
}

// A file keeps what the other mode and the run before wrote: a block this
// mode has not written is not judged (fio's rule), and one it wrote is
// checked against this mode's nonce, not a generation an earlier run reused.
std::string fresh_file(const char* name) {
  const std::string path = ::testing::TempDir() + name;
  std::remove(path.c_str());
  return path;
}

TEST(BlkBench, AFileVerifiesBackToBackModesAndASecondRunWithoutFalseMismatches) {
  BlkBenchOptions o = small();
  o.backend = "file:" + fresh_file("blk_verify_twice.img");
  o.controllers = 1;
  o.rw = "randrw";
  o.verify = true;
  o.cq = "both";
  for (int run = 0; run < 2; ++run) {
    std::ostringstream out;
    auto r = blk_bench(o, out);
    ASSERT_TRUE(r) << "run " << run << ": " << r.error().to_string() << "\n" << out.str();
    ASSERT_EQ(r->size(), 2u);
    for (const auto& m : *r) {
      EXPECT_EQ(m.verify_errors, 0u) << "run " << run << " " << m.mode;
      EXPECT_EQ(m.io_errors, 0u);
    }
  }
  std::remove(o.backend.substr(5).c_str());
}

TEST(BlkBench, VerifyCatchesACorruptionOfAFileBlockTheRunBeforeWrote) {
  BlkBenchOptions o = small();
  o.backend = "file:" + fresh_file("blk_verify_corrupt.img");
  o.controllers = 1;
  o.rw = "randwrite";  // every block written: the next run finds them all used
  o.verify = true;
  std::ostringstream out;
  ASSERT_TRUE(blk_bench(o, out)) << out.str();
  o.inject_corruption_after = 100;  // early: the block it hits holds the run before's data
  auto r = blk_bench(o, out);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EIO);
  EXPECT_NE(r.error().reason.find("mismatch"), std::string::npos) << r.error().reason;
  std::remove(o.backend.substr(5).c_str());
}

TEST(BlkBench, TheTableShowsTheCqsEachModeHolds) {
  BlkBenchOptions o = small();
  o.cq = "both";
  std::ostringstream out;
  auto r = blk_bench(o, out);
  ASSERT_TRUE(r) << r.error().to_string();
  const BlkModeResult& priv = r->at(0);
  const BlkModeResult& pool = r->at(1);
  // 2 controllers x (2 I/O queues + admin) on each of the two devices.
  EXPECT_GE(priv.cq_footprint.cqs, 2u * 2u * 3u);
  EXPECT_LT(pool.cq_footprint.cqs, priv.cq_footprint.cqs);
  for (const auto& m : *r) {
    EXPECT_GE(m.cq_footprint.entries_reserved, m.cq_footprint.entries_used) << m.mode;
    EXPECT_GT(m.cq_footprint.entries_used, 0u) << m.mode;
    EXPECT_GT(m.cq_footprint.memory_bytes, m.cq_footprint.entries_reserved) << m.mode;
  }
  for (const char* row : {"CQs (both devices)", "CQ entries reserved", "CQ entries used", "CQ memory (KiB)"})
    EXPECT_NE(out.str().find(row), std::string::npos) << row << "\n" << out.str();
}

TEST(BlkBench, FmrRegistrationAndJsonOutput) {
  BlkBenchOptions o = small();
  o.reg = "fmr";
  o.verify = true;
  o.rw = "randrw";
  o.json = ::testing::TempDir() + "blk_bench.json";
  o.plot = ::testing::TempDir() + "blk_bench.svg";
  std::ostringstream out;
  auto r = blk_bench(o, out);
  ASSERT_TRUE(r) << r.error().to_string();
  std::ifstream f(o.json);
  auto j = nlohmann::json::parse(f);
  const auto& m = j.at("modes").at("pool");
  for (const char* k : {"iops", "mib_s", "lat_avg_us", "lat_p50_us", "lat_p99_us", "lat_p9999_us", "interrupts_per_s",
                        "completions_per_interrupt", "cqs", "cpu_us_per_io", "verify_errors"})
    EXPECT_TRUE(m.contains(k)) << k;
  EXPECT_GT(m.at("iops").get<double>(), 0);
  EXPECT_EQ(m.at("verify_errors").get<int>(), 0);
  EXPECT_EQ(j.at("mtu"), 4096);
  EXPECT_TRUE(j.at("impair").is_null());
  for (const char* dev : {"host", "target"}) {
    const auto& t = m.at("transport").at(dev);
    for (const char* k : {"requests_sent", "retransmissions", "timeouts", "seq_naks_sent", "seq_naks_received",
                          "rnr_naks_sent", "rnr_naks_received", "duplicate_requests", "dropped", "dropped_total",
                          "impair"})
      EXPECT_TRUE(t.contains(k)) << dev << " " << k;
    EXPECT_GT(t.at("requests_sent").get<std::uint64_t>(), 0u) << dev;
  }
  std::ifstream svg(o.plot);
  std::string first;
  std::getline(svg, first);
  EXPECT_NE(first.find("<svg"), std::string::npos);
}

}  // namespace
}  // namespace srdma::tools
