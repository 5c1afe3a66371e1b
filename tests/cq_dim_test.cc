// Adaptive completion-event moderation: busy CQs climb the profile table,
// idle ones come back to an event per completion.
#include <gtest/gtest.h>

#include "core/cq_dim.h"
#include "hca/cq.h"

namespace srdma::core {
namespace {

void feed(CqDim& dim, hca::Cq& cq, int completions_per_event, int events) {
  for (int i = 0; i < events; ++i) dim.on_event(cq, completions_per_event);
}

TEST(CqDim, BusyCqClimbsToTheLargestProfileAndModeratesTheCq) {
  hca::Cq cq(1, 1024, nullptr, 0, nullptr);
  CqDim dim;
  EXPECT_EQ(dim.profile(), 0);
  feed(dim, cq, 100, CqDim::kSample - 1);
  EXPECT_EQ(dim.profile(), 0);  // no decision before a full sample
  feed(dim, cq, 100, 1);
  EXPECT_EQ(dim.profile(), 1);
  EXPECT_EQ(cq.moderation_count(), CqDim::kProfiles[1].comps);
  EXPECT_EQ(cq.moderation_usec(), CqDim::kProfiles[1].usec);
  feed(dim, cq, 100, 100 * CqDim::kSample);
  const int last = static_cast<int>(std::size(CqDim::kProfiles)) - 1;
  EXPECT_EQ(dim.profile(), last);
  EXPECT_EQ(cq.moderation_count(), 32);
  EXPECT_EQ(cq.moderation_usec(), 32);
}

TEST(CqDim, IdleCqStepsBackToAnEventPerCompletion) {
  hca::Cq cq(1, 1024, nullptr, 0, nullptr);
  CqDim dim;
  feed(dim, cq, 100, 4 * CqDim::kSample);
  EXPECT_EQ(dim.profile(), 4);
  feed(dim, cq, 1, 100 * CqDim::kSample);
  EXPECT_EQ(dim.profile(), 0);
  EXPECT_EQ(cq.moderation_count(), 0);
  EXPECT_EQ(cq.moderation_usec(), 0);
}

TEST(CqDim, SteadyLoadAtTheProfileCountStaysPut) {
  hca::Cq cq(1, 1024, nullptr, 0, nullptr);
  CqDim dim;
  feed(dim, cq, 100, 3 * CqDim::kSample);  // profile 3: {2 us, 8}
  ASSERT_EQ(dim.profile(), 3);
  const auto changes = dim.changes();
  feed(dim, cq, 5, 10 * CqDim::kSample);  // between comps / 2 and comps
  EXPECT_EQ(dim.profile(), 3);
  EXPECT_EQ(dim.changes(), changes);
}

}  // namespace
}  // namespace srdma::core
