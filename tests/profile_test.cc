#include "srdma/profile.h"

#include <gtest/gtest.h>

#include <thread>

namespace srdma {
namespace {

TEST(Profile, DefaultsAreMthcasAndValid) {
  std::vector<std::string> repairs;
  Profile p = validate_profile(Profile{}, &repairs).value();
  EXPECT_EQ(p.num_qp, 1 << 16);
  EXPECT_EQ(p.num_cq, 1 << 16);
  EXPECT_EQ(p.num_mpt, 1 << 17);
  EXPECT_EQ(p.num_mtt_segs, 1 << 20);
  EXPECT_EQ(p.fmr_reserved_mtt_segs, 1 << 18);
  EXPECT_EQ(p.log_mtts_per_seg, 3);
  unsigned cpus = std::thread::hardware_concurrency();
  EXPECT_EQ(p.num_comp_vectors, cpus == 0 ? 1 : cpus);
  ASSERT_EQ(repairs.size(), 1u);  // only num_comp_vectors 0 -> online CPUs
}

TEST(Profile, NonPositiveMeansDefaultAndSizesRoundUp) {
  Profile in;
  in.num_qp = 0;
  in.num_cq = -5;
  in.num_mpt = 1000;
  in.num_pd = 3;
  in.max_cqe = -1;
  in.max_sge = 7;  // a limit, not a table: not rounded
  Profile p = validate_profile(in).value();
  EXPECT_EQ(p.num_qp, 1 << 16);
  EXPECT_EQ(p.num_cq, 1 << 16);
  EXPECT_EQ(p.num_mpt, 1024);
  EXPECT_EQ(p.num_pd, 4);
  EXPECT_EQ(p.max_cqe, Profile{}.max_cqe);
  EXPECT_EQ(p.max_sge, 7);
}

TEST(Profile, FmrReservationAndSegmentSizeRepairedAsMthcaDoes) {
  Profile in;
  in.num_mtt_segs = 1 << 10;
  in.fmr_reserved_mtt_segs = 1 << 10;
  in.log_mtts_per_seg = 6;
  std::vector<std::string> repairs;
  Profile p = validate_profile(in, &repairs).value();
  EXPECT_EQ(p.fmr_reserved_mtt_segs, 1 << 9);
  EXPECT_EQ(p.log_mtts_per_seg, 3);
  in.log_mtts_per_seg = 0;
  EXPECT_EQ(validate_profile(in)->log_mtts_per_seg, 3);
  in.log_mtts_per_seg = 5;
  EXPECT_EQ(validate_profile(in)->log_mtts_per_seg, 5);
  in.fmr_reserved_mtt_segs = 3000;  // rounds to 4096 first, then > num_mtt_segs
  EXPECT_EQ(validate_profile(in)->fmr_reserved_mtt_segs, 1 << 9);
  EXPECT_GE(repairs.size(), 2u);
}

TEST(Profile, UnrepairableValuesAreErrorsNamingTheField) {
  auto expect_einval = [](Profile p, const char* field) {
    auto r = validate_profile(p);
    ASSERT_FALSE(r) << field;
    EXPECT_EQ(r.error().code, EINVAL);
    EXPECT_NE(r.error().reason.find(field), std::string::npos) << r.error().reason;
  };
  Profile p;
  p.num_qp = (1 << 24) + 1;
  expect_einval(p, "num_qp");
  p = {};
  p.num_mpt = std::int64_t{1} << 40;
  expect_einval(p, "num_mpt");
  p = {};
  p.reserved_qps = 1 << 16;
  expect_einval(p, "reserved_qps");
  p = {};
  p.reserved_mrws = -1;
  expect_einval(p, "reserved_mrws");
  p = {};
  p.reserved_mtt_segs = 1 << 18;
  expect_einval(p, "reserved_mtt_segs");
  p = {};
  p.num_comp_vectors = 100000;
  expect_einval(p, "num_comp_vectors");
  p = {};
  p.max_cqe = std::int64_t{1} << 30;
  expect_einval(p, "max_cqe");
}

TEST(Profile, SetByName) {
  Profile p;
  ASSERT_TRUE(p.set("num_mpt", 4096));
  EXPECT_EQ(p.num_mpt, 4096);
  EXPECT_EQ(p.set("num_bogus", 1).error().code, EINVAL);
  EXPECT_EQ(p.fields().size(), 18u);
  ASSERT_TRUE(p.set("congestion_control", 0));
  EXPECT_EQ(p.congestion_control, 0);
}

}  // namespace
}  // namespace srdma
