// Subsystems by NQN: NQN validation, nsids from 1, the registry's lookups.
#include <gtest/gtest.h>

#include <cstring>

#include "nvmf/subsystem.h"

namespace srdma::nvmf {
namespace {

TEST(NvmfSubsystem, NqnForms) {
  for (std::string_view ok : {"nqn.2014-08.org.nvmexpress.discovery",
                              "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6",
                              "nqn.2026-11.io.softrdma:ram0", "nqn.1999-01.com.example:a:b:c",
                              "nqn.2016-06.io.spdk:cnode1"}) {
    auto r = validate_nqn(ok);
    EXPECT_TRUE(r.has_value()) << ok << ": " << r.error().to_string();
  }
  for (std::string_view bad : {"", "nqn.", "iqn.2014-08.org.example:x", "nqn.2014-8.org.example:x",
                               "nqn.2014-13.org.example:x", "nqn.2014-00.org.example:x",
                               "nqn.2014-08.:x", "nqn.2014-08.org..example:x",
                               "nqn.2014-08.org.ex ample:x", "nqn.2014-08.org.example:",
                               "nqn.2014-08.org.nvmexpress:uuid:not-a-uuid",
                               "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf"}) {
    auto r = validate_nqn(bad);
    EXPECT_FALSE(r.has_value()) << bad;
    if (!r) {
      EXPECT_EQ(r.error().code, EINVAL);
    }
  }
  std::string longest = "nqn.2026-11.io.softrdma:" ;
  longest += std::string(kMaxNqnLength - longest.size(), 'x');
  EXPECT_TRUE(validate_nqn(longest).has_value());
  auto too_long = validate_nqn(longest + "x");
  ASSERT_FALSE(too_long.has_value());
  EXPECT_NE(too_long.error().reason.find("223"), std::string::npos) << too_long.error().reason;
}

TEST(NvmfSubsystem, CreateChecksSerialAndModel) {
  EXPECT_EQ(Subsystem::create("bad", "SN1", "model").error().code, EINVAL);
  EXPECT_EQ(Subsystem::create("nqn.2026-11.io.softrdma:a", "", "m").error().code, EINVAL);
  EXPECT_EQ(Subsystem::create("nqn.2026-11.io.softrdma:a", std::string(21, '1'), "m").error().code, EINVAL);
  EXPECT_EQ(Subsystem::create("nqn.2026-11.io.softrdma:a", "SN", std::string(41, 'm')).error().code, EINVAL);
  EXPECT_EQ(Subsystem::create("nqn.2026-11.io.softrdma:a", "SN\n", "m").error().code, EINVAL);
  EXPECT_TRUE(Subsystem::create("nqn.2026-11.io.softrdma:a", std::string(20, '1'), std::string(40, 'm')));
}

TEST(NvmfSubsystem, NamespacesNumberFromOneAndReuseGaps) {
  auto s = Subsystem::create("nqn.2026-11.io.softrdma:ns", "SN42", "softrdma RAM").value();
  EXPECT_EQ(s->add_namespace(nullptr).error().code, EINVAL);
  for (std::uint32_t want = 1; want <= 3; ++want)
    EXPECT_EQ(s->add_namespace(make_ram_namespace(8).value()).value(), want);
  EXPECT_EQ(s->find_namespace(0), nullptr);
  EXPECT_NE(s->find_namespace(2), nullptr);
  EXPECT_EQ(s->find_namespace(4), nullptr);
  std::shared_ptr<Namespace> held = s->find_namespace(2);
  ASSERT_TRUE(s->remove_namespace(2).has_value());
  EXPECT_EQ(s->remove_namespace(2).error().code, ENOENT);
  EXPECT_EQ(held->block_count(), 8u) << "a namespace in use outlives its removal";
  EXPECT_EQ(s->active_nsids(), (std::vector<std::uint32_t>{1, 3}));
  EXPECT_EQ(s->add_namespace(make_ram_namespace(8).value()).value(), 2u) << "lowest free nsid";
  EXPECT_EQ(s->active_nsids(1), (std::vector<std::uint32_t>{2, 3}));
  EXPECT_EQ(s->active_nsids(0, 2), (std::vector<std::uint32_t>{1, 2}));

  IdentifyController id;
  fill_identify_controller(*s, id);
  EXPECT_EQ(std::string_view(id.sn, 20), "SN42                ");
  EXPECT_EQ(std::string_view(id.mn, 12), "softrdma RAM");
  EXPECT_EQ(std::string_view(id.subnqn), "nqn.2026-11.io.softrdma:ns");
  EXPECT_EQ(id.nn, Subsystem::kMaxNamespaces);
}

TEST(NvmfSubsystem, RegistryFindsByNqn) {
  SubsystemRegistry reg;
  auto a = Subsystem::create("nqn.2026-11.io.softrdma:a", "A", "m").value();
  auto b = Subsystem::create("nqn.2026-11.io.softrdma:b", "B", "m").value();
  ASSERT_TRUE(reg.add(a).has_value());
  ASSERT_TRUE(reg.add(b).has_value());
  EXPECT_EQ(reg.add(Subsystem::create("nqn.2026-11.io.softrdma:a", "C", "m").value()).error().code,
            EEXIST);
  EXPECT_EQ(reg.add(nullptr).error().code, EINVAL);
  EXPECT_EQ(reg.find("nqn.2026-11.io.softrdma:a"), a);
  EXPECT_EQ(reg.find("nqn.2026-11.io.softrdma:b"), b);
  EXPECT_EQ(reg.find("nqn.2026-11.io.softrdma:c"), nullptr);
  EXPECT_EQ(reg.nqns().size(), 2u);
  ASSERT_TRUE(reg.remove("nqn.2026-11.io.softrdma:a").has_value());
  EXPECT_EQ(reg.remove("nqn.2026-11.io.softrdma:a").error().code, ENOENT);
  EXPECT_EQ(reg.find("nqn.2026-11.io.softrdma:a"), nullptr);
}

}  // namespace
}  // namespace srdma::nvmf
