// `srdma perf` between processes, with both sides in this test's process:
// a server and a client thread, each with its own RoCEv2 device on a
// loopback address of this process, talking over the TCP side channel.
// Every test across the wire, --verify, and the refusals: no server, a
// port already taken, a mismatched test or size, an MTU above the port's,
// a peer that breaks the protocol. Over IPv6 too (both sides on ::1, the
// side channel on TCP over IPv6), and the addresses refused.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>

#include <future>
#include <sstream>
#include <string>
#include <thread>

#include "loopback.h"
#include "tools/perf.h"
#include "tools/side_channel.h"

namespace srdma::tools {
namespace {

using test::loopback_ip;

// A TCP port of this process's own for the side channel.
std::uint16_t side_port(unsigned k = 0) {
  return static_cast<std::uint16_t>(20000 + (::getpid() * 7 + k * 13) % 30000);
}

PerfOptions opts(const std::string& test, std::uint64_t iters, std::uint16_t port) {
  PerfOptions o;
  o.test = test;
  o.iterations = iters;
  o.copy_budget_ms = 0;
  o.port = port;
  return o;
}

// Starts a server (on `ip`) and waits until it listens (its "waiting" line).
class ServerThread {
 public:
  explicit ServerThread(PerfOptions o, std::string ip = loopback_ip(1)) {
    o.ip = std::move(ip);
    std::promise<void> listening;
    ready_ = listening.get_future();
    thread_ = std::thread([this, o, p = std::move(listening)]() mutable {
      ListenSignal out(std::move(p));
      std::ostream os(&out);
      result_ = run_perf(o, &os);
      out.release();
    });
    ready_.wait_for(std::chrono::seconds(30));  // bounded: a server that cannot listen returns at once
  }
  ~ServerThread() {
    if (thread_.joinable()) thread_.join();
  }
  Result<PerfReport>& join() {
    thread_.join();
    return *result_;
  }

 private:
  // Fulfils the promise at the first "waiting for a client" line, or when
  // the server returns without one.
  class ListenSignal : public std::stringbuf {
   public:
    explicit ListenSignal(std::promise<void> p) : p_(std::move(p)) {}
    void release() {
      if (!done_) p_.set_value();
      done_ = true;
    }

   protected:
    int sync() override {
      if (!done_ && str().find("waiting for a client on") != std::string::npos) release();
      return 0;
    }

   private:
    std::promise<void> p_;
    bool done_ = false;
  };
  std::future<void> ready_;
  std::thread thread_;
  std::optional<Result<PerfReport>> result_;
};

Result<PerfReport> client(PerfOptions o) {
  o.ip = loopback_ip(2);
  o.server = loopback_ip(1);
  return run_perf(o);
}

class PerfRemoteTest : public ::testing::TestWithParam<const char*> {};

TEST_P(PerfRemoteTest, EveryTestRunsBetweenTwoDevicesOverRoceV2) {
  // The tool's devices read the environment (NetConfig::from_env): over the
  // wire, not the same-host path.
  struct WireOnly {
    WireOnly() { ::setenv("SRDMA_SAME_HOST", "0", 1); }
    ~WireOnly() { ::unsetenv("SRDMA_SAME_HOST"); }
  } wire_only;
  const std::string test = GetParam();
  const bool bw = test.ends_with("_bw");
  PerfOptions o = opts(test, bw ? 200 : 100, side_port(1));
  o.mtu = 1024;
  if (bw) o.size = 10000;  // ten packets, the last short
  ServerThread server(o);
  auto c = client(o);
  ASSERT_TRUE(c) << c.error().reason;
  auto& s = server.join();
  ASSERT_TRUE(s) << s.error().reason;
  EXPECT_EQ(c->settings.mtu, 1024u);
  EXPECT_EQ(c->role, "client");
  EXPECT_EQ(s->role, "server");
  EXPECT_EQ(c->local_gid, "::ffff:" + loopback_ip(2));
  EXPECT_EQ(c->remote_gid, "::ffff:" + loopback_ip(1));
  EXPECT_EQ(c->remote.qpn, s->local.qpn);
  EXPECT_EQ(c->remote.psn, s->local.psn);
  EXPECT_EQ(c->remote.rkey, s->local.rkey);
  EXPECT_EQ(c->local.qpn, s->remote.qpn);
  if (bw) {
    ASSERT_EQ(c->bw.size(), 1u);
    EXPECT_EQ(c->bw[0].iterations, 200u);
    EXPECT_GT(c->bw[0].bw_avg_mib_s, 0);
    ASSERT_EQ(s->bw.size(), 1u);  // the server prints the client's row
    EXPECT_EQ(s->bw[0].bw_avg_mib_s, c->bw[0].bw_avg_mib_s);
  } else {
    ASSERT_EQ(c->lat.size(), 1u);
    EXPECT_EQ(c->lat[0].iterations, 100u);
    EXPECT_GT(c->lat[0].t_typical_us, 0);
  }
  // Both devices' counters, the server's through the side channel; on a
  // clean loopback the WRs crossed as frames both ways.
  ASSERT_EQ(c->transport.size(), 2u);
  EXPECT_EQ(c->transport[1].role, "server");
  EXPECT_GT(c->transport[0].wire.frames_sent, 0u);
  EXPECT_GT(c->transport[1].wire.frames_received, 0u);
  EXPECT_EQ(c->transport[0].wire.same_host_frames_sent, 0u) << "SRDMA_SAME_HOST=0: the wire's test";
  // Every request sent arrived, unless the loopback lost some (then resent).
  if (c->transport[0].counters.retransmissions == 0) {
    EXPECT_EQ(c->transport[1].counters.requests_received, c->transport[0].counters.requests_sent);
  }
  const auto j = to_json(*c);
  EXPECT_EQ(j["link"]["type"], "roce_v2");
  EXPECT_EQ(j["link"]["active_mtu"], 4096u);  // lo's port; the path MTU is --mtu
  EXPECT_EQ(j["mtu"], 1024u);
}

INSTANTIATE_TEST_SUITE_P(Tests, PerfRemoteTest,
                         ::testing::Values("write_bw", "read_bw", "send_bw", "write_lat", "read_lat", "send_lat",
                                           "atomic_lat"));

TEST(PerfRemote, VerifyChecksEveryByteAcrossTheWire) {
  for (const char* t : {"write_bw", "read_bw", "send_bw"}) {
    PerfOptions o = opts(t, 40, side_port(2));
    o.verify = true;
    o.all_sizes = false;
    o.size = 70000;
    o.mtu = 4096;
    ServerThread server(o);
    auto c = client(o);
    ASSERT_TRUE(c) << t << ": " << c.error().reason;
    auto& s = server.join();
    ASSERT_TRUE(s) << t << ": " << s.error().reason;
    EXPECT_EQ(c->bw.at(0).iterations, 40u) << t;
  }
}

TEST(PerfRemote, ManyQpsOfOnePairOfDevicesDemultiplexByDestQp) {
  for (const char* t : {"write_bw", "send_bw"}) {
    PerfOptions o = opts(t, 100, side_port(9));
    o.num_qps = 8;
    o.size = 5000;
    o.mtu = 1024;
    ServerThread server(o);
    auto c = client(o);
    ASSERT_TRUE(c) << t << ": " << c.error().reason;
    auto& s = server.join();
    ASSERT_TRUE(s) << t << ": " << s.error().reason;
    EXPECT_EQ(c->bw.at(0).iterations, 100u);
    // 8 QPs x 100 WRs x 5 packets each, sent once plus any resends. Every
    // packet reached a responder of the server at least once, and none was
    // dropped as for no QP or from a wrong source. Loopback may still lose
    // datagrams (a full receive buffer under a sanitizer's slow receiver):
    // those are what the resends replaced, so only without resends must
    // every packet sent have arrived.
    const TransportCounters& sent = c->transport.at(0).counters;
    const TransportCounters& got = c->transport.at(1).counters;
    EXPECT_EQ(sent.requests_sent - sent.retransmissions, 8u * 100u * 5u) << t;
    EXPECT_GE(got.requests_received, 8u * 100u * 5u) << t;
    EXPECT_LE(got.requests_received, sent.requests_sent) << t;
    if (sent.retransmissions == 0) {
      EXPECT_EQ(got.requests_received, sent.requests_sent) << t;
      EXPECT_EQ(got.dropped_total(), 0u) << t;
    }
    EXPECT_EQ(got.dropped_for(DropReason::kUnknownQp), 0u) << t;
    EXPECT_EQ(got.dropped_for(DropReason::kBadSource), 0u) << t;
  }
}

TEST(PerfRemote, NoServerIsRefusedAtOnce) {
  PerfOptions o = opts("write_bw", 10, side_port(3));
  auto c = client(o);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ECONNREFUSED);
  EXPECT_NE(c.error().reason.find("cannot reach the perf server at " + loopback_ip(1)), std::string::npos)
      << c.error().reason;
}

TEST(PerfRemote, APortTakenIsRefusedNamingIt) {
  const std::uint16_t port = side_port(4);
  auto taken = SideListener::listen(loopback_ip(1), port);
  ASSERT_TRUE(taken) << taken.error().reason;
  PerfOptions o = opts("write_bw", 10, port);
  o.ip = loopback_ip(1);
  auto s = run_perf(o);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, EADDRINUSE);
  EXPECT_NE(s.error().reason.find(loopback_ip(1) + ":" + std::to_string(port)), std::string::npos);
}

TEST(PerfRemote, MismatchedTestOrSizeIsRefusedOnBothSides) {
  {
    PerfOptions so = opts("write_bw", 10, side_port(5));
    ServerThread server(so);
    auto c = client(opts("read_bw", 10, side_port(5)));
    ASSERT_FALSE(c);
    EXPECT_NE(c.error().reason.find("the server runs write_bw, the client asked for read_bw"), std::string::npos)
        << c.error().reason;
    auto& s = server.join();
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().code, EINVAL);
  }
  {
    PerfOptions so = opts("write_bw", 10, side_port(6));
    so.size = 4096;
    ServerThread server(so);
    PerfOptions co = opts("write_bw", 10, side_port(6));
    co.size = 8192;
    auto c = client(co);
    ASSERT_FALSE(c);
    EXPECT_NE(c.error().reason.find("the server was given size(s) 4096, the client 8192"), std::string::npos)
        << c.error().reason;
    EXPECT_FALSE(server.join());
  }
}

TEST(PerfRemote, AnMtuThatIsNoIbMtuIsRefusedBeforeConnecting) {
  // (An MTU above the port's needs a link below 4096: two_hosts_test.sh.)
  PerfOptions o = opts("write_bw", 10, side_port(7));
  o.mtu = 3000;
  auto c = client(o);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, EINVAL);
}

TEST(PerfRemote, APeerThatBreaksTheProtocolIsRefused) {
  // A "client" that sends garbage after connecting: the server refuses it
  // with EPROTO and a reason, and does not crash or hang.
  PerfOptions o = opts("write_bw", 10, side_port(8));
  ServerThread server(o);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(side_port(8));
  a.sin_addr.s_addr = htonl(parse_ipv4(loopback_ip(1)).value());
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const unsigned char junk[] = {0, 0, 0, 5, '{', '"', 'x', '"', '}'};  // length 5, then not an object
  ASSERT_EQ(::send(fd, junk, sizeof junk, 0), static_cast<ssize_t>(sizeof junk));
  auto& s = server.join();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, EPROTO) << s.error().reason;
  ::close(fd);
}

// ---------------------------------------------------------------------------
// RoCEv2 over IPv6. IPv6 loopback has one address: both sides' devices are
// on ::1 and share this process's own RoCEv2 port (SRDMA_PORT, which the
// tool's NetConfig reads), steered as a host's processes are.
struct OnIpv6Loopback {
  OnIpv6Loopback() { ::setenv("SRDMA_PORT", std::to_string(test::loopback6_port()).c_str(), 1); }
  ~OnIpv6Loopback() { ::unsetenv("SRDMA_PORT"); }
};

Result<PerfReport> client6(PerfOptions o) {
  o.ip = "::1";
  o.server = "::1";
  return run_perf(o);
}

TEST(PerfRemote6, WriteBwVerifiedAndSendLatOverIpv6ShowTheIpv6Gids) {
  OnIpv6Loopback v6;
  const std::string port6 = std::to_string(test::loopback6_port());
  for (const char* t : {"write_bw", "send_lat"}) {
    const bool bw = std::string(t) == "write_bw";
    const std::uint16_t port = side_port(bw ? 10 : 11);
    PerfOptions o = opts(t, bw ? 40 : 200, port);
    o.mtu = 1024;
    if (bw) {
      o.verify = true;  // every WRITE read back and checked
      o.size = 70000;   // 69 packets, the last short
    }
    ServerThread server(o, "::1");
    auto c = client6(o);
    ASSERT_TRUE(c) << t << ": " << c.error().reason;
    auto& s = server.join();
    ASSERT_TRUE(s) << t << ": " << s.error().reason;
    // An IPv6 device's GID is its address itself, not IPv4-mapped.
    EXPECT_EQ(c->local_gid, "::1") << t;
    EXPECT_EQ(c->remote_gid, "::1") << t;
    EXPECT_EQ(s->local_gid, "::1") << t;
    EXPECT_EQ(s->remote_gid, "::1") << t;
    EXPECT_EQ(c->link, "RoCEv2 (UDP " + port6 + ") ::1 -> ::1") << t;
    EXPECT_EQ(s->link, "RoCEv2 (UDP " + port6 + ") ::1 <- ::1") << t;
    EXPECT_EQ(c->exchange, "TCP side channel ([::1]:" + std::to_string(port) + ")") << t;
    EXPECT_EQ(s->exchange, "TCP side channel ([::1]:" + std::to_string(port) + ")") << t;
    EXPECT_EQ(c->remote.qpn, s->local.qpn) << t;
    EXPECT_EQ(c->local.qpn, s->remote.qpn) << t;
    EXPECT_NE(c->local.qpn >> 16, s->local.qpn >> 16) << t << ": one address, two slots of the host group";
    if (bw) {
      EXPECT_TRUE(c->settings.verify);
      ASSERT_EQ(c->bw.size(), 1u);
      EXPECT_EQ(c->bw[0].iterations, 40u);
    } else {
      ASSERT_EQ(c->lat.size(), 1u);
      EXPECT_EQ(c->lat[0].iterations, 200u);
      EXPECT_GT(c->lat[0].t_typical_us, 0);
    }
    // The frames crossed the IPv6 wire (no same-host rings on IPv6), and
    // none was dropped as from a source nobody named.
    ASSERT_EQ(c->transport.size(), 2u) << t;
    EXPECT_GT(c->transport[0].wire.frames_sent, 0u) << t;
    EXPECT_GT(c->transport[1].wire.frames_received, 0u) << t;
    EXPECT_EQ(c->transport[0].wire.same_host_frames_sent, 0u) << t;
    EXPECT_EQ(c->transport[1].counters.dropped_for(DropReason::kBadSource), 0u) << t;
    const auto j = to_json(*c);
    EXPECT_EQ(j["link"]["type"], "roce_v2");
    EXPECT_EQ(j["link"]["local_gid"], "::1");
  }
}

TEST(PerfRemote, AnIpv4MappedAddressIsItsIpv4Address) {
  struct WireOnly {
    WireOnly() { ::setenv("SRDMA_SAME_HOST", "0", 1); }
    ~WireOnly() { ::unsetenv("SRDMA_SAME_HOST"); }
  } wire_only;
  const std::uint16_t port = side_port(13);
  PerfOptions o = opts("write_bw", 50, port);
  ServerThread server(o, "::ffff:" + loopback_ip(1));
  o.ip = "::ffff:" + loopback_ip(2);
  o.server = "::ffff:" + loopback_ip(1);
  auto c = run_perf(o);
  ASSERT_TRUE(c) << c.error().reason;
  auto& s = server.join();
  ASSERT_TRUE(s) << s.error().reason;
  EXPECT_EQ(c->local_gid, "::ffff:" + loopback_ip(2));
  EXPECT_EQ(c->remote_gid, "::ffff:" + loopback_ip(1));
  EXPECT_EQ(s->exchange, "TCP side channel (" + loopback_ip(1) + ":" + std::to_string(port) + ")");
  EXPECT_EQ(c->exchange, "TCP side channel (" + loopback_ip(1) + ":" + std::to_string(port) + ")");
  EXPECT_NE(c->link.find(" " + loopback_ip(2) + " -> " + loopback_ip(1)), std::string::npos) << c->link;
}

TEST(PerfRemote, AddressesThatAreNoneOrOfTheOtherFamilyAreRefused) {
  auto refused = [](PerfOptions o, const std::string& why) {
    auto r = run_perf(o);
    ASSERT_FALSE(r) << why;
    EXPECT_EQ(r.error().code, EINVAL) << r.error().reason;
    EXPECT_NE(r.error().reason.find(why), std::string::npos) << r.error().reason;
  };
  PerfOptions o = opts("write_bw", 10, side_port(14));
  o.ip = "localhost";
  refused(o, "--ip: 'localhost' is not an IPv4 or IPv6 address");
  o.ip = "[::1]";
  refused(o, "--ip: '[::1]' is not an IPv4 or IPv6 address");
  o.ip = loopback_ip(2);
  o.server = "server.example";
  refused(o, "the server: 'server.example' is not an IPv4 or IPv6 address");
  o.server = "::1";
  refused(o, "the server ::1 is IPv6 and this side's device (--ip) " + loopback_ip(2) +
                 " is IPv4: a device reaches peers of its own family only");
  o.ip = "::1";
  o.server = loopback_ip(1);
  refused(o, "the server " + loopback_ip(1) + " is IPv4 and this side's device (--ip) ::1 is IPv6");
}

TEST(PerfRemote, APeerOfTheOtherFamilyIsRefusedByTheServer) {
  // A client whose hello names an IPv6 GID to an IPv4 server: EPROTO, and
  // the client is told why (the device's family decides, not the peer).
  const std::uint16_t port = side_port(15);
  ServerThread server(opts("write_bw", 10, port));
  auto ch = SideChannel::connect(loopback_ip(1), port, 10'000);
  ASSERT_TRUE(ch) << ch.error().reason;
  // Every field as a client sends it (counts unsigned), the GID aside.
  nlohmann::json qp = {{"qpn", 0x10001u}, {"psn", 1u}, {"rkey", 1u}, {"addr", 4096u}};
  nlohmann::json hello = {{"srdma_perf", 1u},  {"test", "write_bw"}, {"iterations", 10u}, {"duration_s", 0.0},
                          {"num_qps", 1u},     {"tx_depth", 128u},   {"cq_mod", 1u},      {"inline_size", 0u},
                          {"verify", false},   {"mtu", 1024u},       {"gid", "::1"},      {"half", 0u}};
  hello["sizes"] = nlohmann::json::array({65536u});
  hello["qps"] = nlohmann::json::array({qp});
  ASSERT_TRUE(ch->send(hello));
  auto reply = ch->receive(30'000);
  ASSERT_TRUE(reply) << reply.error().reason;
  ASSERT_TRUE(reply->contains("error")) << reply->dump();
  EXPECT_NE((*reply)["error"].get<std::string>().find("the peer's GID ::1 is IPv6"), std::string::npos)
      << reply->dump();
  auto& s = server.join();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, EPROTO) << s.error().reason;
}

TEST(SideChannel6, AMessageCrossesTcpOverIpv6) {
  const std::uint16_t port = side_port(16);
  auto l = SideListener::listen("::1", port);
  ASSERT_TRUE(l) << l.error().reason;
  auto c = SideChannel::connect("::1", port, 10'000);
  ASSERT_TRUE(c) << c.error().reason;
  EXPECT_EQ(c->peer(), "[::1]:" + std::to_string(port));
  auto a = l->accept(10'000);
  ASSERT_TRUE(a) << a.error().reason;
  EXPECT_TRUE(a->peer().starts_with("[::1]:")) << a->peer();
  ASSERT_TRUE(c->send({{"gid", "::1"}}));
  auto m = a->receive(10'000);
  ASSERT_TRUE(m) << m.error().reason;
  EXPECT_EQ((*m)["gid"], "::1");
}

TEST(SideChannel6, NoListenerOnIpv6IsRefusedNamingTheBracketedAddress) {
  const std::uint16_t port = side_port(17);
  auto c = SideChannel::connect("::1", port, 10'000);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ECONNREFUSED);
  EXPECT_NE(c.error().reason.find("cannot reach the perf server at [::1]:" + std::to_string(port)), std::string::npos)
      << c.error().reason;
}

}  // namespace
}  // namespace srdma::tools
