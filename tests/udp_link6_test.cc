// The RoCEv2 link over IPv6 (udp_link.h): two devices of this process on
// ::1 (sharing this process's port as a host's devices do: loopback.h)
// carry every RC operation as IPv6 datagrams, UD datagrams arrive behind
// the IPv6 header in their GRH area with the AH's hop limit and traffic
// class, and frames that are not right are dropped and counted.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "cm/cm_agent.h"
#include "hca/roce_frame.h"
#include "hca/udp_link.h"
#include "hca_pair.h"
#include "link_nodes.h"
#include "loopback.h"

namespace srdma::hca {
namespace {

using namespace pair;
using test::eventually;
using test::loopback6_net;
using test::loopback6_port;

const IpAddress kLoopback6 = parse_ip("::1").value();

Side side6() {
  const NetConfig n = loopback6_net();
  return Side(256, kSideCaps, nullptr, nullptr, &n);
}

struct Udp6Pair {
  Side a = side6();
  Side b = side6();
  // Both devices in the host group's map: a frame for b's QP reaches b.
  bool steered() const {
    return a.dev->udp()->steering()->stats().members == 2 && b.dev->udp()->steering()->stats().members == 2;
  }
};

TEST(UdpLink6, AnIpv6DeviceHasAnIpv6AddressAndTheLoopbackMtu) {
  Udp6Pair p;
  const std::uint64_t a = p.a.dev->engine().address();
  EXPECT_TRUE(is_roce6_address(a));
  EXPECT_FALSE(is_roce_address(a));
  EXPECT_EQ(a, p.b.dev->engine().address()) << "one address, two devices";
  EXPECT_EQ(ip_of_roce_address(a), kLoopback6);
  EXPECT_EQ(gid_of_roce_address(a), kLoopback6.bytes);
  EXPECT_TRUE(p.a.dev->udp()->ipv6());
  EXPECT_EQ(p.a.dev->engine().active_mtu(), 4096u);  // lo's MTU is 65536
  // Each device's QPNs carry its slot: the host group steers by them.
  EXPECT_NE(p.a.qp->qpn() >> 16, p.b.qp->qpn() >> 16);
  // An IPv6 link reaches IPv6 peers only: an IPv4 address is no peer of it.
  EXPECT_TRUE(p.a.dev->udp()->knows(a));
  EXPECT_FALSE(p.a.dev->udp()->knows(roce_address(0x7f000001)));
  EXPECT_FALSE(p.a.dev->udp()->knows(roce6_address(kMaxIpv6Addresses - 1))) << "an index never handed out";
  // Multicast groups are IPv4's.
  EXPECT_EQ(p.a.dev->udp()->attach_mcast(0xe0000101, p.a.qp->qpn()).error().code, EOPNOTSUPP);
}

TEST(UdpLink6, AnIpv4DeviceDoesNotReachAnIpv6Address) {
  const NetConfig n4 = test::loopback_net(1);
  Side v4(256, kSideCaps, nullptr, nullptr, &n4);
  Side v6 = side6();
  EXPECT_FALSE(v4.dev->udp()->knows(v6.dev->engine().address()));
}

TEST(UdpLink6, AddressesADeviceCannotHoldAreRefused) {
  for (const char* ip : {"::", "ff02::1", "::1:2:3:4:5:6:7:8:9", "fe80::1%lo"}) {
    NetConfig n = loopback6_net();
    n.ip = ip;
    auto dev = SoftHca::open(small_profile(), &n);
    ASSERT_FALSE(dev) << ip;
    EXPECT_EQ(dev.error().code, EINVAL) << ip;
  }
  NetConfig foreign = loopback6_net();
  foreign.ip = "2001:db8::77";  // documentation prefix: on no interface here
  foreign.shared = false;
  auto dev = SoftHca::open(small_profile(), &foreign);
  ASSERT_FALSE(dev);
  EXPECT_EQ(dev.error().code, EADDRNOTAVAIL);
  EXPECT_NE(dev.error().reason.find("[2001:db8::77]:"), std::string::npos) << dev.error().reason;
}

class UdpLink6Mtu : public ::testing::TestWithParam<std::uint32_t> {};

TEST_P(UdpLink6Mtu, EveryRcOperationCrossesTheWire) {
  Udp6Pair p;
  ASSERT_TRUE(eventually([&] { return p.steered(); }));
  PathParams pp;
  pp.path_mtu = GetParam();
  pp.sq_psn = pp.rq_psn = 0xfffff0;  // wraps on the way
  pp.timeout = 14;
  pp.retry_cnt = 7;
  connect(p.a, p.b, pp);
  std::iota(p.a.buf.begin(), p.a.buf.end(), 0);

  // WRITE of 40000 bytes: FIRST, MIDDLEs, LAST.
  Sge s{p.a.addr(), 40000, p.a.key};
  ASSERT_TRUE(post(p.a, write_wr(1, s, p.b.addr(100), p.b.key)));
  auto wc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(p.a.buf.data(), p.b.buf.data() + 100, 40000), 0);

  // READ back 20000 of them.
  Sge r{p.a.addr(45000), 20000, p.a.key};
  SendWr rd;
  rd.wr_id = 2;
  rd.opcode = WrOpcode::kRdmaRead;
  rd.sg_list = &r;
  rd.num_sge = 1;
  rd.send_flags = SEND_SIGNALED;
  rd.remote_addr = p.b.addr(100);
  rd.rkey = p.b.key;
  ASSERT_TRUE(post(p.a, rd));
  wc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(p.a.buf.data() + 45000, p.a.buf.data(), 20000), 0);

  // SEND with immediate, b to a this time.
  Sge rs{p.a.addr(50000), 8000, p.a.key};
  RecvWr rw;
  rw.wr_id = 7;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  const RecvWr* bad_recv = nullptr;
  ASSERT_TRUE(p.a.qp->post_recv(&rw, &bad_recv));
  for (std::size_t i = 0; i < 5000; ++i) p.b.buf[60000 + i] = static_cast<std::uint8_t>(i * 13 + 5);
  Sge ss{p.b.addr(60000), 5000, p.b.key};
  SendWr sd;
  sd.wr_id = 3;
  sd.opcode = WrOpcode::kSendWithImm;
  sd.sg_list = &ss;
  sd.num_sge = 1;
  sd.send_flags = SEND_SIGNALED;
  sd.imm_data = 0xabcdef01;
  ASSERT_TRUE(post(p.b, sd));
  auto rwc = poll_n(*p.a.rcq, 1);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(rwc[0].byte_len, 5000u);
  EXPECT_EQ(rwc[0].imm_data, 0xabcdef01u);
  EXPECT_EQ(rwc[0].src_qp, p.b.qp->qpn());
  EXPECT_EQ(std::memcmp(p.a.buf.data() + 50000, p.b.buf.data() + 60000, 5000), 0);
  EXPECT_EQ(poll_n(*p.b.scq, 1).size(), 1u);

  // An atomic on a word of b.
  std::uint64_t word = 40;
  std::memcpy(p.b.buf.data() + 64, &word, 8);
  Sge as{p.a.addr(62000), 8, p.a.key};
  SendWr fa;
  fa.wr_id = 4;
  fa.opcode = WrOpcode::kAtomicFetchAndAdd;
  fa.sg_list = &as;
  fa.num_sge = 1;
  fa.send_flags = SEND_SIGNALED;
  fa.remote_addr = p.b.addr(64);
  fa.rkey = p.b.key;
  fa.compare_add = 2;
  ASSERT_TRUE(post(p.a, fa));
  ASSERT_EQ(poll_n(*p.a.scq, 1).size(), 1u);
  std::uint64_t orig = 0;
  std::memcpy(&orig, p.a.buf.data() + 62000, 8);
  EXPECT_EQ(orig, 40u);
  std::memcpy(&word, p.b.buf.data() + 64, 8);
  EXPECT_EQ(word, 42u);

  // On the wire, every ICRC over the IPv6 pseudo-header checked out.
  const UdpLinkStats sa = p.a.dev->udp()->stats();
  EXPECT_GT(sa.frames_sent, 40000u / GetParam());
  EXPECT_EQ(sa.send_errors, 0u);
  for (const Side* x : {&p.a, &p.b}) {
    const TransportCounters c = x->dev->engine().counters();
    EXPECT_EQ(c.dropped_for(DropReason::kBadIcrc), 0u);
    EXPECT_EQ(c.dropped_for(DropReason::kBadSource), 0u);
    EXPECT_EQ(c.dropped_for(DropReason::kBadLength), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Mtus, UdpLink6Mtu, ::testing::Values(256u, 1024u, 4096u));

// A UDP socket on ::1 for frames of our making.
class Injector6 {
 public:
  explicit Injector6(std::uint16_t sport = 0xC321) : sport_(sport) {
    fd_ = ::socket(AF_INET6, SOCK_DGRAM, 0);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    a.sin6_port = htons(sport);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  }
  ~Injector6() { ::close(fd_); }
  // The frame of `p` up to its ICRC.
  static std::vector<std::byte> frame(const Packet& p) {
    FrameHeaders h = build_headers(p);
    std::vector<std::byte> f(h.bytes.begin(), h.bytes.begin() + h.length);
    for (const MemPiece& m : std::span<const MemPiece>(p.payload)) f.insert(f.end(), m.addr, m.addr + m.length);
    f.resize(f.size() + h.pad);
    return f;
  }
  // The ICRC fields of a datagram from us to ::1's device port.
  IpUdpFields fields() const {
    IpUdpFields ip;
    ip.ipv6 = true;
    ip.src_ip6 = kLoopback6.bytes;
    ip.dst_ip6 = kLoopback6.bytes;
    ip.src_port = sport_;
    ip.dst_port = loopback6_port();
    return ip;
  }
  // Sends `f` with the ICRC of `ip` appended.
  void with_icrc(std::vector<std::byte> f, const IpUdpFields& ip) {
    const std::uint32_t icrc = compute_icrc(ip, f);
    for (int i = 0; i < 4; ++i) f.push_back(static_cast<std::byte>(icrc >> (8 * i)));
    raw(f);
  }
  void raw(std::span<const std::byte> bytes) {
    sockaddr_in6 d{};
    d.sin6_family = AF_INET6;
    d.sin6_addr = in6addr_loopback;
    d.sin6_port = htons(loopback6_port());
    ASSERT_EQ(::sendto(fd_, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&d), sizeof d),
              static_cast<ssize_t>(bytes.size()))
        << std::strerror(errno);
  }

 private:
  int fd_ = -1;
  std::uint16_t sport_;
};

// A hostile sender on ::1: what it sends to b's QP never lands, each frame
// is dropped by its reason, and the real peer's traffic goes on.
TEST(UdpLink6, FramesThatAreNotRightAreDroppedAndCountedByReason) {
  Udp6Pair p;
  ASSERT_TRUE(eventually([&] { return p.steered(); }));
  connect(p.a, p.b);
  Injector6 inj;
  auto dropped = [&](DropReason r) { return p.b.dev->engine().counters().dropped_for(r); };
  // What names no QP (shorter than a BTH) goes where the kernel's hash puts it.
  auto dropped_either = [&](DropReason r) { return dropped(r) + p.a.dev->engine().counters().dropped_for(r); };

  std::array<std::byte, 16> data{};
  data.fill(std::byte{0x5a});
  Packet w;
  w.op = Opcode::kWriteOnly;
  w.dst_qpn = p.b.qp->qpn();
  w.psn = 0;  // the PSN b expects: only the ICRC stands between it and b's memory
  w.va = p.b.addr(0);
  w.rkey = p.b.key;
  w.dma_length = 16;
  w.payload_length = 16;
  w.payload.push_back(MemPiece{data.data(), 16});
  const std::vector<std::byte> f = Injector6::frame(w);

  // 1. Shorter than a BTH.
  std::array<std::byte, 7> tiny{};
  inj.raw(tiny);
  // 2. Its ICRC flipped.
  {
    IpUdpFields ip = inj.fields();
    std::vector<std::byte> g = f;
    const std::uint32_t icrc = compute_icrc(ip, g) ^ 0x10;
    for (int i = 0; i < 4; ++i) g.push_back(static_cast<std::byte>(icrc >> (8 * i)));
    inj.raw(g);
  }
  // 3. Its ICRC over the IPv4 pseudo-header (the wrong IP version: a frame
  // made for another network layer than the one it came on).
  {
    IpUdpFields ip{0x7f000001, 0x7f000001, 0xC321, loopback6_port(), 0, true};
    inj.with_icrc(f, ip);
  }
  // 4. Its ICRC over another IPv6 header than the datagram's: another
  // destination address; a payload length 4 short (the ICRC of the frame
  // cut there, sent whole).
  {
    IpUdpFields ip = inj.fields();
    ip.dst_ip6[15] ^= 2;
    inj.with_icrc(f, ip);
    std::vector<std::byte> g = f;
    const std::uint32_t icrc = compute_icrc(inj.fields(), std::span(f).first(f.size() - 4));
    for (int i = 0; i < 4; ++i) g.push_back(static_cast<std::byte>(icrc >> (8 * i)));
    inj.raw(g);
  }
  // 5. Cut on the way: the ICRC of the whole frame, 4 payload bytes
  // missing in front of it.
  {
    std::vector<std::byte> g = f;
    const std::uint32_t icrc = compute_icrc(inj.fields(), g);
    for (int i = 0; i < 4; ++i) g.push_back(static_cast<std::byte>(icrc >> (8 * i)));
    g.erase(g.end() - 8, g.end() - 4);
    inj.raw(g);
  }
  // (A wrong next header or an IPv6 payload length that disagrees with the
  // datagram never reaches a UDP socket: the kernel drops those.)

  ASSERT_TRUE(eventually([&] {
    return dropped_either(DropReason::kBadLength) + dropped(DropReason::kBadIcrc) >= 6;
  })) << "length " << dropped_either(DropReason::kBadLength) << " icrc " << dropped(DropReason::kBadIcrc);
  EXPECT_EQ(dropped_either(DropReason::kBadLength), 1u) << "the one shorter than a BTH";
  EXPECT_EQ(dropped(DropReason::kBadIcrc), 5u) << "steered to b, the QP's owner";
  EXPECT_EQ(p.a.dev->engine().counters().dropped_for(DropReason::kBadIcrc), 0u);
  // Nothing of it landed, and b's PSN did not move: the peer's WRITE at 0 does.
  EXPECT_NE(p.b.buf[0], 0x5a);
  std::fill(p.a.buf.begin(), p.a.buf.begin() + 16, 0x11);
  Sge s{p.a.addr(), 16, p.a.key};
  ASSERT_TRUE(post(p.a, write_wr(1, s, p.b.addr(0), p.b.key)));
  auto wc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(p.b.buf[0], 0x11);
}

}  // namespace
}  // namespace srdma::hca

namespace srdma::test {
namespace {

std::uint16_t be16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] << 8 | p[1]); }

Device open6(const char* name) {
  auto d = Device::open(small_profile(), name, loopback6_net());
  EXPECT_TRUE(d) << d.error().reason;
  return std::move(*d);
}

// A UD datagram over IPv6 arrives behind the datagram's IPv6 header: the
// AH's traffic class and hop limit went out in it (IPV6_TCLASS,
// IPV6_HOPLIMIT) and came back from the kernel.
TEST(UdpLink6Ud, ADatagramArrivesBehindItsIpv6Header) {
  LinkNode a(open6("srdma61")), b(open6("srdma62"));
  ASSERT_TRUE(eventually([&] { return a.dev.wire_stats().host_members == 2 && b.dev.wire_stats().host_members == 2; }));
  constexpr std::uint32_t kQkey = 0x11111111;
  auto qa = a.ud_qp(kQkey), qb = b.ud_qp(kQkey);
  auto ah = a.pd.create_ah(AhAttr{.dest_addr = b.dev.address(), .hop_limit = 7, .traffic_class = 0x28}).value();
  const Sge r = b.sge(0, 8192);
  ASSERT_TRUE(qb->post_recv(recv_wr(10, r)));
  const std::uint32_t len = 1000;
  for (std::uint32_t i = 0; i < len; ++i) a.buf[i] = static_cast<std::uint8_t>(i * 7);
  const Sge s = a.sge(0, len);
  SendWr w = send_wr(1, s);
  w.ud.ah = ah.get();
  w.ud.remote_qpn = qb->qp_num();
  w.ud.remote_qkey = kQkey;
  ASSERT_TRUE(qa->post_send(w));
  EXPECT_EQ(poll_one(*a.scq).status, WcStatus::kSuccess);
  const Wc got = poll_one(*b.rcq);
  ASSERT_EQ(got.status, WcStatus::kSuccess);
  EXPECT_EQ(got.byte_len, kGrh + len);
  EXPECT_EQ(got.src_qp, qa->qp_num());
  EXPECT_EQ(got.wc_flags & WC_GRH, std::uint32_t{WC_GRH});
  const std::uint8_t* g = b.buf.data();
  EXPECT_EQ(g[0] >> 4, 6) << "version";
  EXPECT_EQ(((g[0] & 0xf) << 4) | (g[1] >> 4), 0x28) << "the AH's traffic class";
  // UDP + BTH + DETH + payload (1000: no pad) + ICRC.
  EXPECT_EQ(be16(g + 4), 8 + 12 + 8 + len + 4) << "payload length";
  EXPECT_EQ(g[6], 17) << "next header: UDP";
  EXPECT_EQ(g[7], 7) << "the AH's hop limit";
  EXPECT_EQ(std::memcmp(g + 8, hca::kLoopback6.bytes.data(), 16), 0);
  EXPECT_EQ(std::memcmp(g + 24, hca::kLoopback6.bytes.data(), 16), 0);
  EXPECT_EQ(std::memcmp(b.buf.data() + kGrh, a.buf.data(), len), 0);
}

// The port's GID is the device's IPv6 address itself (not IPv4-mapped), and
// an AH with a GRH must name that GID for its destination.
TEST(UdpLink6Gid, TheGidIsTheIpv6AddressAndAnAhsDgidMustMatchIt) {
  Device d = open6("srdma63");
  const PortAttr port = d.query_port();
  EXPECT_TRUE(port.ethernet);
  EXPECT_EQ(port.gid, hca::kLoopback6.bytes);
  EXPECT_FALSE(is_ipv4_mapped(port.gid));
  EXPECT_EQ(roce_address_of_gid(port.gid).value(), d.address()) << "the GID names the device's address back";
  auto pd = d.alloc_pd().value();
  AhAttr ah{.dest_addr = d.address(), .is_global = true, .dgid = port.gid};
  EXPECT_TRUE(pd.create_ah(ah));
  ah.dgid[15] = 2;  // ::2, another host
  EXPECT_EQ(pd.create_ah(ah).error().code, EINVAL);
  ah.dgid = gid_of_ipv4(0x7f000001);  // ::ffff:127.0.0.1
  EXPECT_EQ(pd.create_ah(ah).error().code, EINVAL);
  // A GID that is no host (::, multicast) has no link address.
  EXPECT_EQ(roce_address_of_gid(Gid{}).error().code, EINVAL);
  Gid mc{};
  mc[0] = 0xff;
  mc[15] = 1;
  EXPECT_EQ(roce_address_of_gid(mc).error().code, EINVAL);
}

}  // namespace
}  // namespace srdma::test

namespace srdma::cm {
namespace {

// The CM agent believes a MAD's sender only from a GRH area that is the
// IPv6 header of the datagram that carried it: anything else is refused.
TEST(Ipv6Grh, OnlyTheHeaderOfTheDatagramThatCarriedTheMadNamesItsSender) {
  constexpr std::size_t kMad = 256;
  std::array<std::byte, 40> g{};
  auto put16 = [&](std::size_t at, unsigned v) {
    g[at] = static_cast<std::byte>(v >> 8);
    g[at + 1] = static_cast<std::byte>(v);
  };
  g[0] = std::byte{0x60};
  put16(4, 8 + 12 + 8 + kMad + 4);  // UDP, BTH, DETH, the MAD, ICRC
  g[6] = std::byte{17};
  g[7] = std::byte{64};
  const IpAddress src = parse_ip("2001:db8::7").value();
  for (int i = 0; i < 16; ++i) g[8 + i] = static_cast<std::byte>(src.bytes[i]);
  ASSERT_EQ(ipv6_grh_source(g, kMad), src);
  auto with = [&](auto change) {
    auto h = g;
    change(h);
    return ipv6_grh_source(h, kMad);
  };
  EXPECT_FALSE(with([](auto& h) { h[0] = std::byte{0x45}; })) << "an IPv4 header";
  EXPECT_FALSE(with([](auto& h) { h[0] = std::byte{0x70}; })) << "version 7";
  EXPECT_FALSE(with([](auto& h) { h[6] = std::byte{6}; })) << "next header TCP";
  EXPECT_FALSE(with([](auto& h) { h[6] = std::byte{0}; })) << "next header hop-by-hop options";
  EXPECT_FALSE(with([](auto& h) { h[5] = static_cast<std::byte>(std::to_integer<int>(h[5]) - 4); }))
      << "a payload length 4 short";
  EXPECT_FALSE(with([](auto& h) { h[4] = std::byte{0xff}; })) << "a payload length past the datagram";
  EXPECT_FALSE(with([](auto& h) { std::fill(h.begin() + 8, h.begin() + 24, std::byte{0}); })) << "from ::";
  EXPECT_FALSE(with([](auto& h) {
    std::fill(h.begin() + 8, h.begin() + 24, std::byte{0});
    h[18] = h[19] = std::byte{0xff};
  })) << "from an IPv4-mapped address";
  EXPECT_FALSE(ipv6_grh_source(std::span(g).first(39), kMad)) << "short";
  // Traffic class, flow label and hop limit are the network's: any will do.
  EXPECT_EQ(with([](auto& h) {
              h[0] = std::byte{0x6f};
              h[1] = h[2] = h[3] = std::byte{0xff};
              h[7] = std::byte{1};
            }),
            src);
}

}  // namespace
}  // namespace srdma::cm
