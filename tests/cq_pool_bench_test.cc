// srdma cq-pool-bench: it runs both modes, reports what each mode's CQs
// hold, sizes its profile for thousands of pairs and refuses what the
// profile cannot hold, and bad options.
#include "tools/cq_pool_bench.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/cq_impl.h"
#include "hca/cq.h"
#include "srdma/device.h"
#include "tools/cq_footprint.h"

namespace srdma::tools {
namespace {

// A short run: few pairs, shallow, a fraction of a second per mode.
CqPoolBenchOptions quick(int pairs, int depth, double seconds) {
  CqPoolBenchOptions o;
  o.pairs = pairs;
  o.depth = depth;
  o.seconds = seconds;
  return o;
}

TEST(CqPoolBench, RunsBothModesAndCountsWhatItSees) {
  CqPoolBenchOptions o = quick(4, 4, 0.1);
  std::ostringstream out;
  auto rows = cq_pool_bench(o, out);
  ASSERT_TRUE(rows) << rows.error().to_string();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_STREQ((*rows)[0].mode, "private");
  EXPECT_EQ((*rows)[0].cqs, 8);  // one per QP on each side
  EXPECT_STREQ((*rows)[1].mode, "pool");
  EXPECT_LE((*rows)[1].cqs, 4);  // one per vector on each side
  for (const auto& r : *rows) {
    EXPECT_GT(r.ops_per_s, 0);
    EXPECT_GT(r.interrupts_per_s, 0);
    EXPECT_GE(r.completions_per_interrupt, 1.0);
  }
  EXPECT_NE(out.str().find("compl/interrupt"), std::string::npos);
}

TEST(CqPoolBench, ABatchingTargetThreadAnswersToo) {
  CqPoolBenchOptions o = quick(4, 4, 0.1);
  o.service_us = 20;
  std::ostringstream out;
  auto rows = cq_pool_bench(o, out);
  ASSERT_TRUE(rows) << rows.error().to_string();
  ASSERT_EQ(rows->size(), 2u);
  for (const auto& r : *rows) {
    EXPECT_GT(r.ops_per_s, 0);
    EXPECT_GE(r.completions_per_interrupt, 1.0);
  }
  EXPECT_NE(out.str().find("in batches after 20 us"), std::string::npos);
}

TEST(CqPoolBench, RoundsAlternateTheModesAndReportMedians) {
  CqPoolBenchOptions o = quick(2, 2, 0.05);
  o.rounds = 3;
  std::ostringstream out;
  auto rows = cq_pool_bench(o, out);
  ASSERT_TRUE(rows) << rows.error().to_string();
  ASSERT_EQ(rows->size(), 6u);
  for (std::size_t i = 0; i < rows->size(); ++i) EXPECT_STREQ((*rows)[i].mode, i % 2 == 0 ? "private" : "pool");
  EXPECT_NE(out.str().find("medians over 3 rounds"), std::string::npos);
  EXPECT_NE(out.str().find("pool / private"), std::string::npos);
}

TEST(CqPoolBench, OneModeAlone) {
  CqPoolBenchOptions o = quick(2, 2, 0.05);
  o.run_private = false;
  std::ostringstream out;
  auto rows = cq_pool_bench(o, out);
  ASSERT_TRUE(rows) << rows.error().to_string();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_STREQ((*rows)[0].mode, "pool");
  EXPECT_EQ(out.str().find("pool / private"), std::string::npos);
}

TEST(CqPoolBench, RefusesBadOptions) {
  std::ostringstream out;
  for (auto bad : {CqPoolBenchOptions{.pairs = 0}, CqPoolBenchOptions{.depth = 0},
                   CqPoolBenchOptions{.vectors = 0}, CqPoolBenchOptions{.seconds = -1},
                   CqPoolBenchOptions{.size = 0}, CqPoolBenchOptions{.rounds = 0},
                   CqPoolBenchOptions{.service_us = -1}, CqPoolBenchOptions{.service_us = 100001},
                   CqPoolBenchOptions{.run_private = false, .run_pool = false}}) {
    auto r = cq_pool_bench(bad, out);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, EINVAL);
  }
}

// Bytes of one CQ besides its ring: the device's object and the core's two.
constexpr std::uint64_t kCqStateBytes = sizeof(hca::Cq) + sizeof(CompletionQueue) + sizeof(detail::CqImpl);

TEST(CqFootprint, SumsRowsExactly) {
  const CqUsage rows[] = {
      {.cqn = 1, .cqe = 65, .cqe_capacity = 128, .cqe_bytes = 64, .state_bytes = 1000, .qps = 1, .cqe_used = 65},
      {.cqn = 2, .cqe = 4096, .cqe_capacity = 4096, .cqe_bytes = 64, .state_bytes = 1000, .shared = true,
       .cqe_used = 130},
  };
  const CqFootprint f = cq_footprint(std::span<const CqUsage>(rows));
  EXPECT_EQ(f, (CqFootprint{.cqs = 2, .entries_reserved = 4224, .entries_used = 195,
                            .memory_bytes = 4224 * 64 + 2 * 1000}));
  EXPECT_EQ(cq_footprint(std::span<const CqUsage>()), CqFootprint{});
  EXPECT_EQ((f + f).memory_bytes, 2 * f.memory_bytes);
}

// A small known device: three private CQs of 65 entries (rings of 128) and
// three pool leases of 65 entries on one vector (one pool CQ of 4096).
TEST(CqFootprint, OfADeviceCountsRoundingAndPoolRoom) {
  Profile p;
  p.num_comp_vectors = 1;
  p.num_qp = 64;
  p.num_cq = 64;
  auto dev = Device::open(p);
  ASSERT_TRUE(dev) << dev.error().to_string();
  EXPECT_EQ(cq_footprint(*dev), CqFootprint{});
  std::vector<std::unique_ptr<CompletionQueue>> cqs;
  for (int i = 0; i < 3; ++i) {
    auto cq = dev->alloc_cq(nullptr, 65, 0, PollContext::kSoftirq);
    ASSERT_TRUE(cq) << cq.error().to_string();
    cqs.push_back(std::move(*cq));
  }
  const CqFootprint priv = cq_footprint(*dev);
  EXPECT_EQ(priv, (CqFootprint{.cqs = 3, .entries_reserved = 3 * 128, .entries_used = 3 * 65,
                               .memory_bytes = 3 * 128 * hca::Cq::kCqeBytes + 3 * kCqStateBytes}));
  std::vector<CqLease> leases;
  for (int i = 0; i < 3; ++i) {
    auto l = dev->cq_pool_lease(65, -1, PollContext::kSoftirq);
    ASSERT_TRUE(l) << l.error().to_string();
    leases.push_back(std::move(*l));
  }
  const CqFootprint both = cq_footprint(*dev);
  EXPECT_EQ(both, (CqFootprint{.cqs = 4, .entries_reserved = 3 * 128 + 4096, .entries_used = 6 * 65,
                               .memory_bytes = (3 * 128 + 4096) * hca::Cq::kCqeBytes + 4 * kCqStateBytes}));
  const auto usage = dev->cq_usage();
  ASSERT_EQ(usage.size(), 4u);
  EXPECT_EQ(std::count_if(usage.begin(), usage.end(), [](const CqUsage& u) { return u.shared; }), 1);
  // A resize that grows the ring is what the footprint sees next.
  ASSERT_TRUE(cqs[0]->resize(200));
  EXPECT_EQ(cq_footprint(*dev).entries_reserved, 2 * 128 + 256 + 4096);
  leases.clear();
  cqs.clear();
  EXPECT_EQ(cq_footprint(*dev).cqs, 1u);  // the pool keeps its CQ, empty
  EXPECT_EQ(cq_footprint(*dev).entries_used, 0u);
}

TEST(CqPoolBench, ReportsWhatEachModesCqsHold) {
  CqPoolBenchOptions o = quick(4, 4, 0.05);  // CQs of 2 x 4 + 1 = 9 entries: rings of 16
  o.json = ::testing::TempDir() + "cq_pool_bench.json";
  std::ostringstream out;
  auto rows = cq_pool_bench(o, out);
  ASSERT_TRUE(rows) << rows.error().to_string();
  ASSERT_EQ(rows->size(), 2u);
  const CqPoolBenchRow& priv = (*rows)[0];
  const CqPoolBenchRow& pool = (*rows)[1];
  EXPECT_EQ(priv.cq, (CqFootprint{.cqs = 8, .entries_reserved = 8 * 16, .entries_used = 8 * 9,
                                  .memory_bytes = 8 * 16 * hca::Cq::kCqeBytes + 8 * kCqStateBytes}));
  // The pool grows by a CQ of 4096 entries per vector it spreads over.
  const std::uint64_t n = std::min(2u, std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(pool.cq, (CqFootprint{.cqs = 2 * n, .entries_reserved = 2 * n * 4096, .entries_used = 8 * 9,
                                  .memory_bytes = 2 * n * (4096 * hca::Cq::kCqeBytes + kCqStateBytes)}));
  EXPECT_EQ(priv.cqs, 8);
  EXPECT_EQ(pool.cqs, static_cast<int>(2 * n));
  for (const char* col : {"CQEs reserved", "CQEs used", "CQ memory", "1/"})
    EXPECT_NE(out.str().find(col), std::string::npos) << col;

  std::ifstream f(o.json);
  ASSERT_TRUE(f) << o.json;
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["pairs"], 4);
  ASSERT_EQ(j["rows"].size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& r = j["rows"][i];
    const CqPoolBenchRow& want = (*rows)[i];
    EXPECT_EQ(r["mode"], want.mode);
    EXPECT_EQ(r["cqs"], want.cq.cqs);
    EXPECT_EQ(r["cq_entries_reserved"], want.cq.entries_reserved);
    EXPECT_EQ(r["cq_entries_used"], want.cq.entries_used);
    EXPECT_EQ(r["cq_memory_bytes"], want.cq.memory_bytes);
    EXPECT_DOUBLE_EQ(r["ops_per_s"].get<double>(), want.ops_per_s);
    EXPECT_DOUBLE_EQ(r["interrupts_per_s"].get<double>(), want.interrupts_per_s);
  }
  EXPECT_EQ(j["medians"]["pool"]["cq_entries_used"], 72);
  EXPECT_EQ(j["medians"]["private"]["cqs"], 8);
}

TEST(CqPoolBench, SizesItsProfileForThousandsOfPairs) {
  CqPoolBenchOptions o;
  o.pairs = 4096;
  auto p = cq_pool_bench_profile(o);
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_EQ(p->num_qp, 8192);  // 4096 + 2 reserved, rounded up
  EXPECT_EQ(p->num_cq, 8192);
  EXPECT_EQ(p->num_comp_vectors, 2);
}

TEST(CqPoolBench, RefusesMorePairsThanTheProfileHoldsNamingTheLimit) {
  std::ostringstream out;
  struct Case {
    CqPoolBenchOptions o;
    const char* field;
    const char* needed;
  };
  const Case cases[] = {
      {{.pairs = 2000, .profile = {{"num_qp", 1024}}}, "num_qp", "num_qp=2002"},
      {{.pairs = 2000, .profile = {{"num_cq", 1024}}}, "num_cq", "num_cq=2001"},
      {{.pairs = 2000, .run_private = false, .profile = {{"num_cq", 2}}}, "num_cq", "pool CQs"},
      {{.pairs = 4, .depth = 8, .profile = {{"max_cqe", 16}}}, "max_cqe", "max_cqe=17"},
      {{.pairs = 4, .depth = 64, .profile = {{"max_qp_wr", 32}}}, "max_qp_wr", "max_qp_wr=64"},
      {{.pairs = 4096, .size = 65536, .profile = {{"num_mtt_segs", 4096}}}, "num_mtt_segs", "num_mtt_segs=65536"},
      // Beyond what any profile holds: QPNs are 24 bits.
      {{.pairs = 1 << 24}, "num_qp", "exceeds the limit 16777216"},
  };
  for (const auto& c : cases) {
    auto r = cq_pool_bench(c.o, out);
    ASSERT_FALSE(r) << c.field;
    EXPECT_EQ(r.error().code, EINVAL) << r.error().to_string();
    EXPECT_NE(r.error().reason.find(c.field), std::string::npos) << r.error().reason;
    EXPECT_NE(r.error().reason.find(c.needed), std::string::npos) << r.error().reason;
  }
  EXPECT_EQ(out.str(), "");  // refused before anything ran
  auto unknown = cq_pool_bench({.profile = {{"num_qps", 1}}}, out);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().reason.find("num_qps"), std::string::npos);
}

}  // namespace
}  // namespace srdma::tools
