// Adaptive completion-event moderation: busy CQs climb the kernel's table by
// their batches, then above it for as long as longer periods cost no
// throughput; idle ones come back to an event per completion. Time is
// given to the DIM by the test (no clock involved).
#include <gtest/gtest.h>

#include "core/cq_dim.h"
#include "hca/cq.h"

namespace srdma::core {
namespace {

using std::chrono::microseconds;

class Feeder {
 public:
  // `events` events of `per_event` completions each, one every `gap`.
  void feed(CqDim& dim, hca::Cq& cq, int per_event, int events, microseconds gap) {
    for (int i = 0; i < events; ++i) {
      now_ += gap;
      dim.on_event(cq, per_event, now_);
    }
  }
  // One whole sample (the DIM decides once at its end).
  void sample(CqDim& dim, hca::Cq& cq, int per_event, microseconds gap) {
    feed(dim, cq, per_event, CqDim::kSample + 1, gap);
  }
  // Samples that batch 50% more each at the same throughput, until the
  // DIM is at the table's top.
  void climb_to_top(CqDim& dim, hca::Cq& cq) {
    for (int per_event = 40; dim.profile() < CqDim::kTop; per_event = per_event * 3 / 2)
      sample(dim, cq, per_event, microseconds(per_event));
  }

 private:
  CqDim::Clock::time_point now_{};
};

TEST(CqDim, BusyCqClimbsTheKernelsTableByItsBatches) {
  hca::Cq cq(1, 1024, nullptr, 0, nullptr);
  CqDim dim;
  Feeder f;
  EXPECT_EQ(dim.profile(), 0);
  f.feed(dim, cq, 100, CqDim::kSample, microseconds(100));
  EXPECT_EQ(dim.profile(), 0) << "no decision before a full sample";
  f.feed(dim, cq, 100, 1, microseconds(100));
  EXPECT_EQ(dim.profile(), 1);
  EXPECT_EQ(cq.moderation_count(), CqDim::kProfiles[1].comps);
  EXPECT_EQ(cq.moderation_usec(), CqDim::kProfiles[1].usec);
  for (int i = 0; i < CqDim::kKernelTop - 1; ++i) f.sample(dim, cq, 100, microseconds(100));
  EXPECT_EQ(dim.profile(), CqDim::kKernelTop);
  EXPECT_EQ(cq.moderation_count(), 32);
  EXPECT_EQ(cq.moderation_usec(), 32);
}

// Above the kernel's top: each longer period that batches more at the same
// throughput is kept, up to the table's top.
TEST(CqDim, LongerPeriodsAreKeptWhileTheyBatchMoreAtTheSameThroughput) {
  hca::Cq cq(1, 1024, nullptr, 0, nullptr);
  CqDim dim;
  Feeder f;
  while (dim.profile() < CqDim::kKernelTop) f.sample(dim, cq, 40, microseconds(40));  // 1000 per ms
  int per_event = 40;
  while (dim.profile() < CqDim::kTop) {
    const int before = dim.profile();
    per_event = per_event * 3 / 2;  // 50% more per event, as many per ms
    f.sample(dim, cq, per_event, microseconds(per_event));
    ASSERT_EQ(dim.profile(), before + 1);
  }
  EXPECT_EQ(cq.moderation_usec(), 1024);
  const auto changes = dim.changes();
  f.sample(dim, cq, per_event, microseconds(per_event));  // the same again: stays
  EXPECT_EQ(dim.profile(), CqDim::kTop);
  EXPECT_EQ(dim.changes(), changes);
}

// A latency-bound CQ: the first longer period costs throughput, and the
// climb turns back, then stays where it was best.
TEST(CqDim, APeriodThatCostsThroughputIsLeft) {
  hca::Cq cq(1, 1024, nullptr, 0, nullptr);
  CqDim dim;
  Feeder f;
  while (dim.profile() < CqDim::kKernelTop) f.sample(dim, cq, 40, microseconds(40));
  f.sample(dim, cq, 60, microseconds(60));  // batching better at the same rate: up once more
  ASSERT_EQ(dim.profile(), CqDim::kKernelTop + 1);
  f.sample(dim, cq, 60, microseconds(120));  // half the completions per ms: worse
  EXPECT_EQ(dim.profile(), CqDim::kKernelTop);
  f.sample(dim, cq, 60, microseconds(60));  // throughput back: better, still going down
  EXPECT_EQ(dim.profile(), CqDim::kKernelTop) << "the bottom of the climb: it does not go under the kernel's top";
  f.sample(dim, cq, 60, microseconds(60));
  EXPECT_EQ(dim.profile(), CqDim::kKernelTop) << "the same: stays";
}

// However long the period, the count leaves half the CQ free.
TEST(CqDim, TheCountNeverExceedsHalfTheCq) {
  hca::Cq cq(1, 100, nullptr, 0, nullptr);
  CqDim dim;
  Feeder f;
  f.climb_to_top(dim, cq);
  EXPECT_EQ(cq.moderation_count(), 50);
  EXPECT_EQ(cq.moderation_usec(), 1024);
}

TEST(CqDim, IdleCqStepsBackToAnEventPerCompletion) {
  hca::Cq cq(1, 1024, nullptr, 0, nullptr);
  CqDim dim;
  Feeder f;
  f.climb_to_top(dim, cq);
  for (int i = 0; i < 4 * CqDim::kTop && dim.profile() != 0; ++i) f.sample(dim, cq, 1, microseconds(1000));
  EXPECT_EQ(dim.profile(), 0);
  EXPECT_EQ(cq.moderation_count(), 0);
  EXPECT_EQ(cq.moderation_usec(), 0);
}

TEST(CqDim, SteadyLoadAtTheProfileCountStaysPut) {
  hca::Cq cq(1, 1024, nullptr, 0, nullptr);
  CqDim dim;
  Feeder f;
  for (int i = 0; i < 3; ++i) f.sample(dim, cq, 100, microseconds(100));  // profile 3: {2 us, 8}
  ASSERT_EQ(dim.profile(), 3);
  const auto changes = dim.changes();
  for (int i = 0; i < 10; ++i) f.sample(dim, cq, 5, microseconds(100));  // between comps / 2 and comps
  EXPECT_EQ(dim.profile(), 3);
  EXPECT_EQ(dim.changes(), changes);
}

}  // namespace
}  // namespace srdma::core
