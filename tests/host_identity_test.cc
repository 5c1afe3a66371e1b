// The default host NQN: /etc/nvme/hostnqn when it holds one, else derived
// from the machine ID without revealing it, else random per process.
#include "nvmf/host_identity.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace srdma::nvmf {
namespace {

class HostIdentity : public ::testing::Test {
 protected:
  std::string dir_;
  void SetUp() override {
    char tmpl[] = "/tmp/srdma-hostid-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { (void)std::system(("rm -rf " + dir_).c_str()); }
  std::string file(const std::string& name, const std::string& text) {
    const std::string p = dir_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  std::string none() const { return dir_ + "/absent"; }
};

constexpr std::string_view kUuidPrefix = "nqn.2014-08.org.nvmexpress:uuid:";

TEST_F(HostIdentity, TheHostNqnFileWins) {
  const auto h = file("hostnqn", "  nqn.2014-08.org.nvmexpress:uuid:1b4e28ba-2fa1-11d2-883f-0016d3cca427\n");
  const auto m = file("machine-id", "0123456789abcdef0123456789abcdef\n");
  EXPECT_EQ(default_host_nqn(h, m), "nqn.2014-08.org.nvmexpress:uuid:1b4e28ba-2fa1-11d2-883f-0016d3cca427");
}

TEST_F(HostIdentity, AMachineIdGivesAStableUuidThatDoesNotShowIt) {
  const auto m = file("machine-id", "0123456789abcdef0123456789abcdef\n");
  const std::string a = default_host_nqn(none(), m);
  EXPECT_EQ(a, default_host_nqn(none(), m)) << "the same machine, the same NQN";
  ASSERT_EQ(a.size(), kUuidPrefix.size() + 36);
  EXPECT_EQ(a.substr(0, kUuidPrefix.size()), kUuidPrefix);
  EXPECT_EQ(a[kUuidPrefix.size() + 14], '4') << "a version 4 UUID";
  EXPECT_EQ(a.find("0123456789abcdef"), std::string::npos) << "the machine ID stays private";
  EXPECT_EQ(a.find("01234567-89ab"), std::string::npos);
  const auto other = file("machine-id2", "fedcba9876543210fedcba9876543210\n");
  EXPECT_NE(a, default_host_nqn(none(), other)) << "two machines, two NQNs";
}

TEST_F(HostIdentity, GarbageFallsThroughAndNothingGivesARandomOne) {
  const auto bad_nqn = file("hostnqn", "not an nqn\n");
  const auto bad_id = file("machine-id", "xyz\n");
  const std::string a = default_host_nqn(bad_nqn, bad_id);
  const std::string b = default_host_nqn(none(), none());
  EXPECT_EQ(a.substr(0, kUuidPrefix.size()), kUuidPrefix);
  EXPECT_NE(a, b) << "random each time";
  EXPECT_NE(a, "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001");
}

}  // namespace
}  // namespace srdma::nvmf
