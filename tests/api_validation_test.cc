// The verbs core refuses enum values outside their range with EINVAL and
// changes nothing (a caller's bad cast must never index a table).
#include <gtest/gtest.h>

#include "srdma/device.h"
#include "test_profile.h"

namespace srdma {
namespace {

TEST(ApiValidation, UnknownPollContextIsEinval) {
  auto dev = Device::open(test::small_profile());
  ASSERT_TRUE(dev);
  for (unsigned bad : {4u, 9u, 255u}) {
    auto cq = dev->alloc_cq(nullptr, 16, 0, static_cast<PollContext>(bad));
    ASSERT_FALSE(cq) << bad;
    EXPECT_EQ(cq.error().code, EINVAL);
    auto pooled = dev->cq_pool_get(16, 0, static_cast<PollContext>(bad));
    ASSERT_FALSE(pooled) << bad;
    EXPECT_EQ(pooled.error().code, EINVAL);
  }
  EXPECT_TRUE(dev->cq_pool_stats().empty()) << "a refused get creates no pool CQ";
  EXPECT_TRUE(dev->alloc_cq(nullptr, 16, 0, PollContext::kSoftirq));
}

TEST(ApiValidation, UnknownCqNotifyFlagsAreEinval) {
  auto dev = Device::open(test::small_profile());
  ASSERT_TRUE(dev);
  auto cq = dev->create_cq(CqInit{.cqe = 16});
  ASSERT_TRUE(cq);
  auto r = (*cq)->req_notify(1u << 12);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EINVAL);
}

}  // namespace
}  // namespace srdma
