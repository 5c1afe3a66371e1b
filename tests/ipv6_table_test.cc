// The process's IPv6 table (net.h): what this process names is added; what
// merely arrives is added only as a MAD's source, within the CM's bounded
// allowance, so a flood of spoofed sources takes that many entries for the
// process's life and no more.
#include <gtest/gtest.h>

#include <random>

#include "srdma/net.h"

namespace srdma {
namespace {

// A fresh address in 2001:db8::/32 (never named by another test).
IpAddress fresh(std::mt19937_64& rng) {
  IpAddress a;
  a.bytes = {0x20, 0x01, 0x0d, 0xb8};
  for (std::size_t i = 4; i < 16; ++i) a.bytes[i] = static_cast<std::uint8_t>(rng());
  return a;
}

TEST(Ipv6Table, ArrivalsTakeTheirAllowanceAndNoMore) {
  std::mt19937_64 rng(std::random_device{}());
  const std::size_t taken_before = ipv6_arrivals_taken();
  ASSERT_LE(taken_before, kMaxIpv6Arrivals);
  const std::size_t size_before = ipv6_table_size();
  // A flood of sources: the allowance's worth is admitted, each once.
  std::size_t admitted = 0;
  IpAddress first{};
  for (std::uint32_t i = 0; i < 2 * kMaxIpv6Arrivals; ++i) {
    const IpAddress a = fresh(rng);
    const std::uint64_t addr = roce_address_of_arrival(a);
    if (addr == 0) continue;
    if (admitted++ == 0) first = a;
    EXPECT_TRUE(is_roce6_address(addr));
    EXPECT_EQ(ip_of_roce_address(addr), a);
    EXPECT_EQ(roce_address_of_arrival(a), addr) << "the same source again takes nothing more";
  }
  EXPECT_EQ(admitted, kMaxIpv6Arrivals - taken_before);
  EXPECT_EQ(ipv6_arrivals_taken(), kMaxIpv6Arrivals);
  EXPECT_EQ(ipv6_table_size(), size_before + admitted);
  // Spent: a new source is not admitted, a known one still resolves.
  EXPECT_EQ(roce_address_of_arrival(fresh(rng)), 0u);
  if (admitted > 0) EXPECT_NE(roce_address_of_arrival(first), 0u);
  // What this process names is still added: the rest of the table is its.
  const IpAddress named = fresh(rng);
  auto addr = roce_address_of(named);
  ASSERT_TRUE(addr) << addr.error().reason;
  EXPECT_EQ(roce_address_of_arrival(named), *addr) << "a named address arrives as itself";
  EXPECT_EQ(ipv6_arrivals_taken(), kMaxIpv6Arrivals);
}

TEST(Ipv6Table, NeitherTheUnspecifiedNorAMulticastSourceIsAdmitted) {
  const std::size_t before = ipv6_table_size();
  EXPECT_EQ(roce_address_of_arrival(IpAddress{}), 0u);
  EXPECT_EQ(roce_address_of_arrival(parse_ip("ff02::1").value()), 0u);
  EXPECT_EQ(ipv6_table_size(), before);
  // An IPv4 source is its own address, as ever.
  EXPECT_EQ(roce_address_of_arrival(IpAddress::of_v4(0x7f000001)), roce_address(0x7f000001));
}

}  // namespace
}  // namespace srdma
