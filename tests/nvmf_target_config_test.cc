// srdma nvmf target's configuration: the JSON form and the one-line form,
// and what each refuses (naming the field).
#include <gtest/gtest.h>

#include "tools/nvmf_target.h"

namespace srdma::tools {
namespace {

TEST(NvmfTargetConfig, TheJsonFormNamesSubsystemsNamespacesAndHosts) {
  auto c = parse_nvmf_target_config(R"({
    "ip": "127.0.0.1", "port": 4421, "pool_cqs": false,
    "subsystems": [
      {"nqn": "nqn.2026-12.io.softrdma:a", "allowed_hosts": ["nqn.2026-12.io.softrdma:host1"],
       "namespaces": [{"backend": "ram", "size": 8388608}, {"size": 4096}]},
      {"nqn": "nqn.2026-12.io.softrdma:b", "namespaces": [{"backend": "file:/tmp/x.img"}]}
    ]})");
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->ip, "127.0.0.1");
  EXPECT_EQ(c->port, 4421);
  EXPECT_FALSE(c->pool_cqs);
  ASSERT_EQ(c->subsystems.size(), 2u);
  EXPECT_EQ(c->subsystems[0].allowed_hosts, std::vector<std::string>{"nqn.2026-12.io.softrdma:host1"});
  ASSERT_EQ(c->subsystems[0].namespaces.size(), 2u);
  EXPECT_EQ(c->subsystems[0].namespaces[0].size, 8388608u);
  EXPECT_EQ(c->subsystems[0].namespaces[1].backend, "ram");
  EXPECT_TRUE(c->subsystems[1].allowed_hosts.empty());
  EXPECT_EQ(c->subsystems[1].namespaces[0].backend, "file:/tmp/x.img");
}

TEST(NvmfTargetConfig, BadConfigsAreEinvalNamingWhat) {
  const char* bad[] = {
      "",                                                    // not JSON
      "[]",                                                  // not an object
      R"({"subsystems": []})",                               // no ip
      R"({"ip": "127.0.0.1", "subsystems": []})",            // no subsystem
      R"({"ip": "300.0.0.1", "subsystems": [{"nqn": "n", "namespaces": [{}]}]})",
      R"({"ip": "127.0.0.1", "port": 70000, "subsystems": [{"nqn": "n", "namespaces": [{}]}]})",
      R"({"ip": "127.0.0.1", "subsystems": [{"namespaces": [{}]}]})",          // no nqn
      R"({"ip": "127.0.0.1", "subsystems": [{"nqn": "n", "namespaces": []}]})",  // no namespace
      R"({"ip": "127.0.0.1", "subsystems": [{"nqn": "n", "namespaces": [{"size": 1000}]}]})",
      R"({"ip": "127.0.0.1", "subsystems": [{"nqn": "n", "namespaces": [{"backend": "tape"}]}]})",
      R"({"ip": 7, "subsystems": [{"nqn": "n", "namespaces": [{}]}]})",  // mistyped
  };
  for (const char* j : bad) {
    auto c = parse_nvmf_target_config(j);
    ASSERT_FALSE(c) << j;
    EXPECT_EQ(c.error().code, EINVAL) << j;
    EXPECT_FALSE(c.error().reason.empty());
  }
}

TEST(NvmfTargetConfig, TheOneLineFormIsOneSubsystemWithOneNamespace) {
  NvmfTargetOptions o;
  o.ip = "127.0.0.1";
  o.nqn = "nqn.2026-12.io.softrdma:one";
  o.allowed_hosts = {"nqn.2026-12.io.softrdma:h"};
  auto c = nvmf_target_config(o);
  ASSERT_TRUE(c) << c.error().to_string();
  ASSERT_EQ(c->subsystems.size(), 1u);
  EXPECT_EQ(c->subsystems[0].namespaces.size(), 1u);
  EXPECT_EQ(c->subsystems[0].allowed_hosts.size(), 1u);
  o.nqn.clear();
  EXPECT_EQ(nvmf_target_config(o).error().code, EINVAL);
  o.nqn = "nqn.2026-12.io.softrdma:one";
  o.config = "/nonexistent.json";
  EXPECT_EQ(nvmf_target_config(o).error().code, EINVAL) << "--config with --ip";
  o.ip.clear();
  o.nqn.clear();
  o.allowed_hosts.clear();
  EXPECT_EQ(nvmf_target_config(o).error().code, ENOENT);
}

TEST(NvmfTargetConfig, AllowedHostsMayCarryDhchapSecretsAndBadOnesAreEinval) {
  const std::string good = "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:";
  auto c = parse_nvmf_target_config(R"({"ip": "127.0.0.1", "subsystems": [{"nqn": "n",
      "allowed_hosts": ["nqn.h1", {"nqn": "nqn.h2", "dhchap_secret": ")" + good + R"(",
                                   "dhchap_ctrl_secret": ")" + good + R"("}],
      "namespaces": [{}]}]})");
  ASSERT_TRUE(c) << c.error().to_string();
  const auto& sub = c->subsystems[0];
  EXPECT_EQ(sub.allowed_hosts, (std::vector<std::string>{"nqn.h1", "nqn.h2"}));
  ASSERT_EQ(sub.host_secrets.size(), 1u);
  EXPECT_EQ(sub.host_secrets.at("nqn.h2").dhchap_secret, good);
  EXPECT_EQ(sub.host_secrets.at("nqn.h2").dhchap_ctrl_secret, good);

  const std::string bad[] = {
      // a secret that does not parse (its CRC is wrong)
      R"({"ip": "127.0.0.1", "subsystems": [{"nqn": "n", "allowed_hosts": [{"nqn": "nqn.h",
          "dhchap_secret": "DHHC-1:00:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2m:"}], "namespaces": [{}]}]})",
      // a controller secret without the host's
      R"({"ip": "127.0.0.1", "subsystems": [{"nqn": "n", "allowed_hosts": [{"nqn": "nqn.h",
          "dhchap_ctrl_secret": ")" + good + R"("}], "namespaces": [{}]}]})",
      // not a secret at all
      R"({"ip": "127.0.0.1", "subsystems": [{"nqn": "n", "allowed_hosts": [{"nqn": "nqn.h",
          "dhchap_secret": "secret"}], "namespaces": [{}]}]})",
  };
  for (const std::string& j : bad) {
    auto r = parse_nvmf_target_config(j);
    ASSERT_FALSE(r) << j;
    EXPECT_EQ(r.error().code, EINVAL) << j;
  }

  NvmfTargetOptions o;
  o.ip = "127.0.0.1";
  o.nqn = "nqn.2026-12.io.softrdma:one";
  o.dhchap_secret = good;
  EXPECT_EQ(nvmf_target_config(o).error().code, EINVAL) << "a secret needs the host it is for";
  o.allowed_hosts = {"nqn.h"};
  auto one = nvmf_target_config(o);
  ASSERT_TRUE(one) << one.error().to_string();
  EXPECT_EQ(one->subsystems[0].host_secrets.at("nqn.h").dhchap_secret, good);
  o.dhchap_secret = "DHHC-1:09:xyz:";
  EXPECT_EQ(nvmf_target_config(o).error().code, EINVAL);
}

}  // namespace
}  // namespace srdma::tools
