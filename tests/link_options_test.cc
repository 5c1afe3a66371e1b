// The benchmarks' shared wire options (tools/link_options.h): a path MTU is
// one of IBA's and never wider than the port it leaves from.
#include <gtest/gtest.h>

#include "tools/link_options.h"

namespace srdma::tools {
namespace {

TEST(LinkOptions, PathMtuIsTheOptionOrThePortsAndNeverAboveThePort) {
  EXPECT_EQ(path_mtu_option(std::nullopt, 1024).value(), 1024u);
  EXPECT_EQ(path_mtu_option(512, 1024).value(), 512u);
  EXPECT_EQ(path_mtu_option(1024, 1024).value(), 1024u);
  auto r = path_mtu_option(4096, 1024);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EINVAL);
  EXPECT_EQ(r.error().reason, "--mtu 4096: the port's active MTU is 1024");
}

TEST(LinkOptions, OnlyIbaPathMtusPass) {
  for (std::uint32_t m : {256u, 512u, 1024u, 2048u, 4096u}) EXPECT_TRUE(check_mtu_option(m)) << m;
  for (std::uint32_t m : {0u, 128u, 1000u, 1500u, 8192u}) {
    auto r = check_mtu_option(m);
    ASSERT_FALSE(r) << m;
    EXPECT_EQ(r.error().code, EINVAL);
    EXPECT_NE(r.error().reason.find("--mtu"), std::string::npos);
  }
}

}  // namespace
}  // namespace srdma::tools
