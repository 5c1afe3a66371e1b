// Addresses on the tools' command lines (tools/address_option.h): --ip
// takes IPv4 or IPv6 text, ADDR[:PORT] brackets an IPv6 address before its
// port, IPv4-mapped addresses are IPv4, and every refusal is EINVAL naming
// the option and the value.
#include <gtest/gtest.h>

#include <string>

#include "srdma/net.h"
#include "tools/address_option.h"

namespace srdma::tools {
namespace {

IpAddress ip(const char* s) { return parse_ip(s).value(); }

// The refusal of `value` for `option`: EINVAL, with `reason` in its text.
void expect_refused(const Result<HostPort>& r, const std::string& reason) {
  ASSERT_FALSE(r) << reason;
  EXPECT_EQ(r.error().code, EINVAL);
  EXPECT_NE(r.error().reason.find(reason), std::string::npos) << r.error().reason;
}

TEST(AddressOption, IpTakesEitherFamilyAndAMappedAddressIsIpv4) {
  EXPECT_EQ(parse_ip_option("--ip", "127.0.0.2").value(), IpAddress::of_v4(0x7f000002));
  const IpAddress v6 = parse_ip_option("--ip", "::1").value();
  EXPECT_FALSE(v6.is_v4());
  EXPECT_EQ(ip_str(v6), "::1");
  EXPECT_EQ(ip_str(parse_ip_option("--ip", "0:0:0:0:0:0:0:1").value()), "::1");
  const IpAddress mapped = parse_ip_option("--ip", "::ffff:127.0.0.3").value();
  EXPECT_TRUE(mapped.is_v4());
  EXPECT_EQ(ip_str(mapped), "127.0.0.3");
}

TEST(AddressOption, IpRefusalsNameTheOptionAndTheValue) {
  for (const char* bad : {"localhost", "1.2.3", "300.1.1.1", "[::1]", "::1::2", "fe80::1%lo", ""}) {
    auto r = parse_ip_option("--ip", bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, EINVAL);
    EXPECT_NE(r.error().reason.find(std::string("--ip: '") + bad + "' is not an IPv4 or IPv6 address"),
              std::string::npos)
        << r.error().reason;
  }
}

TEST(AddressOption, HostPortForms) {
  struct Case {
    const char* text;
    const char* ip;
    std::uint16_t port;
  };
  for (const Case& c : {Case{"127.0.0.1", "127.0.0.1", 4420}, Case{"127.0.0.1:4421", "127.0.0.1", 4421},
                        Case{"[::1]", "::1", 4420}, Case{"[::1]:4421", "::1", 4421}, Case{"::1", "::1", 4420},
                        Case{"fd00::a", "fd00::a", 4420}, Case{"[fd00::a:1]:65535", "fd00::a:1", 65535},
                        Case{"::ffff:127.0.0.4", "127.0.0.4", 4420}, Case{"[::ffff:127.0.0.4]:9", "127.0.0.4", 9}}) {
    auto r = parse_host_port("--connect", c.text, 4420);
    ASSERT_TRUE(r) << c.text << ": " << r.error().reason;
    EXPECT_EQ(r->ip, ip(c.ip)) << c.text;
    EXPECT_EQ(r->port, c.port) << c.text;
  }
  EXPECT_TRUE(parse_host_port("--connect", "::ffff:127.0.0.4", 1)->ip.is_v4());
}

TEST(AddressOption, HostPortRefusals) {
  auto p = [](const char* s) { return parse_host_port("--connect", s, 4420); };
  // An IPv6 address with a port must be bracketed: ::1:4420 is also an
  // address of its own, and is not guessed at.
  expect_refused(p("::1:4420"),
                 "--connect '::1:4420': an IPv6 address with a port is bracketed: [::1]:4420 (or [::1:4420] for "
                 "that address alone)");
  expect_refused(p("fd00::1:80"), "[fd00::1]:80");
  expect_refused(p("[::1"), "--connect '[::1': no ']' closes the IPv6 address");
  expect_refused(p("[::1]4420"), "--connect '[::1]4420': only :PORT may follow ']'");
  expect_refused(p("[127.0.0.1]:4420"), "'127.0.0.1' in brackets is not an IPv6 address");
  expect_refused(p("[]"), "'' in brackets is not an IPv6 address");
  expect_refused(p("localhost"), "--connect 'localhost': 'localhost' is not an IPv4 or IPv6 address");
  expect_refused(p("localhost:4420"), "--connect 'localhost:4420': 'localhost' is not an IPv4 or IPv6 address");
  expect_refused(p("target.example:4420"), "'target.example' is not an IPv4 or IPv6 address");
  expect_refused(p("::1::2"), "'::1::2' is not an IPv4 or IPv6 address");
  for (const char* port : {"127.0.0.1:0", "127.0.0.1:70000", "127.0.0.1:", "127.0.0.1:+1", "[::1]:0", "[::1]:",
                           "[::1]:65536", "[::1]:x", "[::1]:99999999999"})
    expect_refused(p(port), std::string("--connect '") + port + "': the port is not 1..65535");
}

TEST(AddressOption, HostPortTextBracketsIpv6) {
  EXPECT_EQ(host_port_str(ip("127.0.0.1"), 4420), "127.0.0.1:4420");
  EXPECT_EQ(host_port_str(ip("::1"), 4420), "[::1]:4420");
  EXPECT_EQ(host_port_str(ip("::ffff:10.0.0.1"), 80), "10.0.0.1:80");
}

TEST(AddressOption, GidTextIsMappedForIpv4AndTheAddressForIpv6) {
  EXPECT_EQ(gid_str(roce_address(0x7f000001)), "::ffff:127.0.0.1");
  EXPECT_EQ(gid_str(roce_address_of(ip("::1")).value()), "::1");
}

TEST(AddressOption, FamiliesMustMatch) {
  EXPECT_TRUE(check_same_family("--connect", ip("::1"), "--ip", ip("::1")));
  EXPECT_TRUE(check_same_family("--connect", ip("::ffff:127.0.0.1"), "--ip", ip("127.0.0.2")));
  auto r = check_same_family("--connect", ip("::1"), "--ip", ip("127.0.0.2"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EINVAL);
  EXPECT_EQ(r.error().reason,
            "--connect ::1 is IPv6 and --ip 127.0.0.2 is IPv4: a device reaches peers of its own family only");
}

}  // namespace
}  // namespace srdma::tools
