// `srdma perf` between processes, with both sides in this test's process:
// a server and a client thread, each with its own RoCEv2 device on a
// loopback address of this process, talking over the TCP side channel.
// Every test across the wire, --verify, and the refusals: no server, a
// port already taken, a mismatched test or size, an MTU above the port's,
// a peer that breaks the protocol.
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

// Starts a server and waits until it listens (its "waiting" line).
class ServerThread {
 public:
  explicit ServerThread(PerfOptions o) {
    o.ip = loopback_ip(1);
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

}  // namespace
}  // namespace srdma::tools
