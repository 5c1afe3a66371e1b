// One host, many processes (hca/host_steering.h): devices that share an
// address, each packet steered to the one that owns its QP; the host
// registry's rules; what a stranger's datagrams can and cannot do.
// (Across processes, with kill -9: host_processes_test.sh.)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "connected_pair.h"
#include "srdma/access.h"
#include "srdma/pd.h"
#include "wait.h"

namespace srdma::test {
namespace {

// The host registry in a directory of the test's own, so that what it
// checks is not another test's file.
class HostSteeringTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/srdma-registry.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::setenv("SRDMA_REGISTRY_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("SRDMA_REGISTRY_DIR");
    std::filesystem::remove_all(dir_);
  }
  std::string registry(unsigned k) const {
    struct stat ns{};
    EXPECT_EQ(::stat("/proc/self/ns/net", &ns), 0);
    return dir_ + "/srdma-" + std::to_string(::geteuid()) + "-" + std::to_string(ns.st_ino) + "-" + loopback_ip(k) +
           "-4791";
  }
  static PairNode::Options udp(unsigned k) {
    PairNode::Options o;
    o.link = LinkKind::kUdp;
    o.k = k;
    return o;
  }
  std::string dir_;
};

// A raw datagram to the group's address, from `src` (a local address).
void send_raw(const std::string& src, const std::string& dst, const void* data, std::size_t n) {
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(s, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, src.c_str(), &a.sin_addr);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ::inet_pton(AF_INET, dst.c_str(), &a.sin_addr);
  a.sin_port = htons(kRoceV2UdpPort);
  EXPECT_EQ(::sendto(s, data, n, 0, reinterpret_cast<sockaddr*>(&a), sizeof a), static_cast<ssize_t>(n));
  ::close(s);
}

void write_and_check(PairNode& from, PairNode& to, std::uint8_t seed) {
  for (std::size_t i = 0; i < 8192; ++i) from.buf[i] = static_cast<std::uint8_t>(seed + i * 7);
  const Sge sge{from.addr(0), 8192, from.mr.lkey()};
  SendWr w = send_wr(1, sge, WrOpcode::kRdmaWrite);
  w.remote_addr = to.addr(4096);
  w.rkey = to.mr.rkey();
  ASSERT_EQ(post_and_poll(from, w).status, WcStatus::kSuccess);
  for (std::size_t i = 0; i < 8192; ++i) ASSERT_EQ(to.buf[4096 + i], from.buf[i]) << i;
}

TEST_F(HostSteeringTest, TwoDevicesShareOneAddressEachWithASlotOfItsOwn) {
  PairNode a(udp(1)), b(udp(1));
  EXPECT_EQ(a.dev.address(), b.dev.address());
  const std::uint32_t sa = a.dev.host_slot(), sb = b.dev.host_slot();
  EXPECT_GE(sa, 1u);
  EXPECT_LE(sa, 254u);
  EXPECT_GE(sb, 1u);
  EXPECT_NE(sa, sb);
  // A QPN's top byte is its slot: the packet's way to its process.
  EXPECT_EQ(a.qp->qp_num() >> 16, sa);
  EXPECT_EQ(b.qp->qp_num() >> 16, sb);
  EXPECT_TRUE(eventually([&] { return a.dev.wire_stats().host_members == 2; }));
  connect(a, b);
  write_and_check(a, b, 1);
  write_and_check(b, a, 2);
  struct stat st{};
  ASSERT_EQ(::stat(registry(1).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, ::geteuid());
}

TEST_F(HostSteeringTest, AnExclusiveDeviceHoldsItsAddressAlone) {
  NetConfig n = loopback_net(2);
  n.shared = false;
  auto first = Device::open(small_profile(), "srdma1", n);
  ASSERT_TRUE(first) << first.error().reason;
  EXPECT_EQ(first->host_slot(), 0u);
  auto shared = Device::open(small_profile(), "srdma2", loopback_net(2));
  ASSERT_FALSE(shared);
  EXPECT_EQ(shared.error().code, EADDRINUSE);
  EXPECT_NE(shared.error().reason.find(n.ip + ":4791"), std::string::npos) << shared.error().reason;
  auto second = Device::open(small_profile(), "srdma3", n);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, EADDRINUSE);
}

TEST_F(HostSteeringTest, AListenerIsClaimedForTheWholeHost) {
  PairNode a(udp(1)), b(udp(1));
  constexpr std::uint64_t kService = 0x0000000001061234ull;
  ASSERT_TRUE(a.dev.claim_service(kService));
  auto again = b.dev.claim_service(kService);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, EADDRINUSE);
  EXPECT_FALSE(a.dev.claim_service(kService));  // ours already
  ASSERT_TRUE(b.dev.claim_service(kService + 1));
  a.dev.release_service(kService);
  EXPECT_TRUE(b.dev.claim_service(kService));
}

TEST_F(HostSteeringTest, TheLastMemberOutRemovesTheRegistry) {
  {
    PairNode a(udp(1));
    {
      PairNode b(udp(1));
      EXPECT_TRUE(std::filesystem::exists(registry(1)));
    }
    EXPECT_TRUE(std::filesystem::exists(registry(1)));
  }
  EXPECT_FALSE(std::filesystem::exists(registry(1)));
  // And the next one makes a new one.
  PairNode c(udp(1));
  EXPECT_TRUE(std::filesystem::exists(registry(1)));
}

TEST_F(HostSteeringTest, ARegistryThatIsNotOursOrNotPrivateIsRefused) {
  const std::string path = registry(1);
  {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
    ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  }
  auto d = Device::open(small_profile(), "srdma1", loopback_net(1));
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, EPERM);
  EXPECT_NE(d.error().reason.find(path), std::string::npos) << d.error().reason;
  // A symbolic link in its place (a squatter pointing us at a file of
  // ours) is not followed.
  ASSERT_EQ(::unlink(path.c_str()), 0);
  const std::string target = dir_ + "/elsewhere";
  ASSERT_EQ(::symlink(target.c_str(), path.c_str()), 0);
  auto e = Device::open(small_profile(), "srdma1", loopback_net(1));
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code, ELOOP);
  EXPECT_FALSE(std::filesystem::exists(target));
}

TEST_F(HostSteeringTest, ForgedProbesAndPacketsForOtherSlotsChangeNothing) {
  PairNode a(udp(1)), b(udp(1));
  connect(a, b);
  ASSERT_TRUE(eventually([&] { return a.dev.wire_stats().host_members == 2; }));
  auto sum = [&](auto field) { return a.dev.wire_stats().*field + b.dev.wire_stats().*field; };
  // A probe must carry the host's secret: a stranger's (from the group's own
  // address, and from another) is counted and ignored.
  unsigned char probe[16] = {0xff, 0};
  for (int i = 8; i < 16; ++i) probe[i] = static_cast<unsigned char>(0xa5 + i);
  send_raw(loopback_ip(1), loopback_ip(1), probe, sizeof probe);
  send_raw(loopback_ip(3), loopback_ip(1), probe, sizeof probe);
  EXPECT_TRUE(eventually([&] { return sum(&WireStats::steer_bad_probes) == 2; })) << sum(&WireStats::steer_bad_probes);
  // A packet for a QP of a slot nobody holds (a dead process's) is dropped
  // where the kernel's hash put it, never answered for its owner.
  std::uint32_t free_slot = 1;
  while (free_slot == a.dev.host_slot() || free_slot == b.dev.host_slot()) ++free_slot;
  unsigned char bth[12 + 16 + 4] = {0x06 /* RC WRITE ONLY */, 0, 0xff, 0xff, 0, static_cast<unsigned char>(free_slot),
                                    0x00, 0x05, 0x80 /* AckReq */};
  const std::uint64_t rebuilds = sum(&WireStats::steer_rebuilds);
  send_raw(loopback_ip(3), loopback_ip(1), bth, sizeof bth);
  EXPECT_TRUE(eventually([&] { return sum(&WireStats::steer_foreign) == 1; }));
  EXPECT_EQ(sum(&WireStats::steer_rebuilds), rebuilds);  // a free slot's packet is no reason to rebuild
  // The map the forgeries aimed at still steers.
  write_and_check(a, b, 3);
  write_and_check(b, a, 4);
}

// A child of fork() keeps neither the parent's slot nor its socket: when the
// parent's device closes, the registry goes although the child still runs.
TEST_F(HostSteeringTest, AForkedChildDoesNotKeepTheSlotAlive) {
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  pid_t child;
  {
    PairNode a(udp(2));
    child = ::fork();
    if (child == 0) {
      char c;
      (void)!::read(go[0], &c, 1);  // until the parent has checked
      ::_exit(0);
    }
    ASSERT_GT(child, 0);
  }
  EXPECT_FALSE(std::filesystem::exists(registry(2)));
  (void)!::write(go[1], "x", 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status));
  ::close(go[0]);
  ::close(go[1]);
}

}  // namespace
}  // namespace srdma::test
