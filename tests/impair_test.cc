// The --impair spec: what parse_impair accepts, what it refuses and why,
// and that to_string reads back to the same spec.
#include <gtest/gtest.h>

#include "srdma/impair.h"

namespace srdma {
namespace {

TEST(ImpairSpec, ParsesEveryKey) {
  auto s = parse_impair("loss=0.05,dup=0.01,reorder=0.02,corrupt=0.001,seed=7,depth=8");
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->loss, 0.05);
  EXPECT_EQ(s->dup, 0.01);
  EXPECT_EQ(s->reorder, 0.02);
  EXPECT_EQ(s->corrupt, 0.001);
  EXPECT_EQ(s->seed, 7u);
  EXPECT_EQ(s->reorder_depth, 8u);
  EXPECT_TRUE(s->any());
}

TEST(ImpairSpec, ParsesABottleneckAndRoundTripsIt) {
  auto s = parse_impair("rate=10,queue=256,ecn=16,seed=4");
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->rate_gbps, 10.0);
  EXPECT_EQ(s->queue_packets, 256u);
  EXPECT_EQ(s->ecn_packets, 16u);
  EXPECT_TRUE(s->any()) << "a port alone is an impairment";
  EXPECT_EQ(to_string(*s), "loss=0,dup=0,reorder=0,corrupt=0,seed=4,depth=4,rate=10,queue=256,ecn=16");
  auto back = parse_impair(to_string(*s));
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, *s);
  // The defaults: a 1000-packet queue that never marks.
  auto plain = parse_impair("rate=0.5");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->queue_packets, 1000u);
  EXPECT_EQ(plain->ecn_packets, 0u);
}

TEST(ImpairSpec, ParsesRedMarkingAndRoundTripsIt) {
  auto s = parse_impair("rate=10,queue=256,ecn=16,kmax=64,pmax=0.2");
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_EQ(s->ecn_packets, 16u);
  EXPECT_EQ(s->ecn_max_packets, 64u);
  EXPECT_EQ(s->ecn_pmax, 0.2);
  EXPECT_EQ(to_string(*s),
            "loss=0,dup=0,reorder=0,corrupt=0,seed=1,depth=4,rate=10,queue=256,ecn=16,kmax=64,pmax=0.2");
  auto back = parse_impair(to_string(*s));
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, *s);
  // kmax alone: Pmax 1.
  auto k = parse_impair("rate=1,ecn=4,kmax=4");
  ASSERT_TRUE(k) << k.error().to_string();
  EXPECT_EQ(k->ecn_pmax, 1.0);
}

TEST(ImpairSpec, KeysAreOptionalAndInAnyOrder) {
  auto s = parse_impair("seed=3,loss=0.5");
  ASSERT_TRUE(s) << s.error().to_string();
  ImpairSpec want;
  want.loss = 0.5;
  want.seed = 3;
  EXPECT_EQ(*s, want);
  auto none = parse_impair("loss=0,seed=9");
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->any());
}

TEST(ImpairSpec, RoundTripsThroughToString) {
  ImpairSpec s;
  s.loss = 0.1;
  s.dup = 1e-5;
  s.reorder = 0.333;
  s.corrupt = 0.25;
  s.seed = UINT64_MAX;
  s.reorder_depth = 64;
  EXPECT_EQ(to_string(s), "loss=0.1,dup=1e-05,reorder=0.333,corrupt=0.25,seed=18446744073709551615,depth=64");
  auto back = parse_impair(to_string(s));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, s);
}

// Each bad input is EINVAL with a reason that names what is wrong.
TEST(ImpairSpec, RefusesBadInputNamingIt) {
  struct Case {
    const char* text;
    const char* names;
  };
  const Case cases[] = {
      {"", "empty"},
      {"loss=1", "loss=\"1\""},
      {"loss=1.5", "loss=\"1.5\""},
      {"dup=-0.1", "dup=\"-0.1\""},
      {"reorder=nan", "reorder=\"nan\""},
      {"corrupt=inf", "corrupt=\"inf\""},
      {"loss=", "loss=\"\""},
      {"loss=0.1x", "loss=\"0.1x\""},
      {"seed=-1", "seed=\"-1\""},
      {"seed=18446744073709551616", "seed="},
      {"depth=0", "depth=\"0\""},
      {"depth=65", "depth=\"65\""},
      {"drop=0.1", "unknown impairment key \"drop\""},
      {"loss", "\"loss\" is not key=value"},
      {"loss=0.1,", "\"\" is not key=value"},
      {"loss=0.1,loss=0.2", "loss given twice"},
      {"rate=0", "rate=\"0\""},
      {"rate=1001", "rate=\"1001\""},
      {"rate=nan", "rate=\"nan\""},
      {"rate=1,queue=0", "queue=\"0\""},
      {"rate=1,queue=100001", "queue=\"100001\""},
      {"rate=1,queue=10,ecn=11", "ecn=11 is above queue=10"},
      {"queue=10", "need rate="},
      {"loss=0.1,ecn=5", "need rate="},
      {"kmax=5", "need rate="},
      {"rate=1,kmax=5", "need ecn="},
      {"rate=1,ecn=2,pmax=0.5", "pmax= is the marking probability at kmax="},
      {"rate=1,ecn=8,kmax=4", "kmax=4 is not in ecn..queue (8..1000)"},
      {"rate=1,queue=10,ecn=2,kmax=11", "kmax=11 is not in ecn..queue (2..10)"},
      {"rate=1,ecn=2,kmax=4,pmax=0", "pmax=\"0\""},
      {"rate=1,ecn=2,kmax=4,pmax=1.5", "pmax=\"1.5\""},
  };
  for (const Case& c : cases) {
    auto s = parse_impair(c.text);
    ASSERT_FALSE(s) << c.text;
    EXPECT_EQ(s.error().code, EINVAL) << c.text;
    EXPECT_NE(s.error().reason.find(c.names), std::string::npos) << c.text << ": " << s.error().reason;
  }
}

TEST(ImpairSpec, ValidateRefusesASpecBuiltOutOfRange) {
  EXPECT_TRUE(validate_impair(ImpairSpec{}));
  ImpairSpec s;
  s.corrupt = 1;
  auto r = validate_impair(s);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EINVAL);
  EXPECT_NE(r.error().reason.find("corrupt=1"), std::string::npos) << r.error().reason;
  s = ImpairSpec{};
  s.reorder_depth = 0;
  r = validate_impair(s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().reason.find("depth=0"), std::string::npos) << r.error().reason;
  s = ImpairSpec{};
  s.rate_gbps = 10;
  s.queue_packets = 8;
  s.ecn_packets = 9;
  r = validate_impair(s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().reason.find("queue=8 ecn=9"), std::string::npos) << r.error().reason;
  s.ecn_packets = 4;
  s.ecn_max_packets = 3;
  r = validate_impair(s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().reason.find("kmax=3"), std::string::npos) << r.error().reason;
  s.ecn_max_packets = 8;
  s.ecn_pmax = 0;
  r = validate_impair(s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().reason.find("pmax=0"), std::string::npos) << r.error().reason;
  s.ecn_pmax = 0.5;
  EXPECT_TRUE(validate_impair(s));
  s.rate_gbps = -1;
  s.ecn_packets = 0;
  s.ecn_max_packets = 0;
  EXPECT_FALSE(validate_impair(s));
}

}  // namespace
}  // namespace srdma
