// srdma cq-pool-bench: it runs both modes and refuses bad options.
#include "tools/cq_pool_bench.h"

#include <gtest/gtest.h>

#include <sstream>

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

}  // namespace
}  // namespace srdma::tools
