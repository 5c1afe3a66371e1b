// The RoCEv2 link (udp_link.h) between two devices of this process on two
// loopback addresses: every RC operation crosses real UDP sockets as wire
// frames, and frames that are not what they should be are dropped and
// counted.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstring>
#include <numeric>

#include "hca/roce_frame.h"
#include "hca_pair.h"
#include "loopback.h"

namespace srdma::hca {
namespace {

using namespace pair;
using test::eventually;
using test::loopback_ip;
using test::loopback_net;

struct UdpPair {
  Side a = side_on(test::LinkKind::kUdp, 1);
  Side b = side_on(test::LinkKind::kUdp, 2);
};

// A frame of `p` up to its ICRC.
std::vector<std::byte> frame_of(const Packet& p) {
  FrameHeaders h = build_headers(p);
  std::vector<std::byte> f(h.bytes.begin(), h.bytes.begin() + h.length);
  for (const MemPiece& m : std::span<const MemPiece>(p.payload)) f.insert(f.end(), m.addr, m.addr + m.length);
  f.resize(f.size() + h.pad);
  return f;
}

// A well-formed 16-byte WRITE ONLY of 0x5a bytes to `to`'s QP and buffer at
// PSN 0: from anyone but its peer, a stranger's. `data` holds the payload.
Packet write_to(Side& to, std::array<std::byte, 16>& data) {
  data.fill(std::byte{0x5a});
  Packet w;
  w.op = Opcode::kWriteOnly;
  w.dst_qpn = to.qp->qpn();
  w.psn = 0;
  w.va = to.addr(0);
  w.rkey = to.key;
  w.dma_length = 16;
  w.payload_length = 16;
  w.payload.push_back(MemPiece{data.data(), 16});
  return w;
}

// A raw UDP socket on a third loopback address, for frames of our making.
class Injector {
 public:
  explicit Injector(std::uint16_t sport = 0xC123) {
    fd_ = ::socket(AF_INET, SOCK_DGRAM, 0);
    ip_ = parse_ipv4(loopback_ip(3)).value();
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(ip_);
    a.sin_port = htons(sport);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
    const int pmtu = IP_PMTUDISC_DO;
    ::setsockopt(fd_, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
    sport_ = sport;
  }
  ~Injector() { ::close(fd_); }
  // Sends `p` as a well-formed frame (good ICRC unless `bad_icrc`).
  void send(const Packet& p, std::uint32_t dst_ip, bool bad_icrc = false) { with_icrc(frame_of(p), dst_ip, bad_icrc); }
  // Sends `f` (a frame up to its ICRC) with an ICRC appended.
  void with_icrc(std::vector<std::byte> f, std::uint32_t dst_ip, bool bad_icrc = false) {
    IpUdpFields ip{ip_, dst_ip, sport_, kRoceV2Port, 0, true};
    std::uint32_t icrc = compute_icrc(ip, f);
    if (bad_icrc) icrc ^= 0x10;
    for (int i = 0; i < 4; ++i) f.push_back(static_cast<std::byte>(icrc >> (8 * i)));
    raw(f, dst_ip);
  }
  // Sends `frames` (each up to its ICRC; all of one size but the last,
  // which may be shorter) as one UDP GSO send: on lo the receiver's
  // socket gets them as one datagram where it asks for UDP_GRO. Segment k
  // leaves with Identification k; `bad_icrc` names one to spoil.
  void gso_run(std::vector<std::vector<std::byte>> frames, std::uint32_t dst_ip, int bad_icrc = -1) {
    std::vector<std::byte> all;
    for (std::size_t k = 0; k < frames.size(); ++k) {
      IpUdpFields ip{ip_, dst_ip, sport_, kRoceV2Port, static_cast<std::uint16_t>(k), true};
      std::uint32_t icrc = compute_icrc(ip, frames[k]);
      if (static_cast<int>(k) == bad_icrc) icrc ^= 0x10;
      for (int i = 0; i < 4; ++i) frames[k].push_back(static_cast<std::byte>(icrc >> (8 * i)));
      all.insert(all.end(), frames[k].begin(), frames[k].end());
    }
    sockaddr_in d{};
    d.sin_family = AF_INET;
    d.sin_addr.s_addr = htonl(dst_ip);
    d.sin_port = htons(kRoceV2Port);
    iovec iov{all.data(), all.size()};
    alignas(cmsghdr) std::array<std::byte, CMSG_SPACE(sizeof(std::uint16_t))> ctl{};
    msghdr m{};
    m.msg_name = &d;
    m.msg_namelen = sizeof d;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl.data();
    m.msg_controllen = ctl.size();
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_UDP;
    c->cmsg_type = UDP_SEGMENT;
    c->cmsg_len = CMSG_LEN(sizeof(std::uint16_t));
    const auto seg = static_cast<std::uint16_t>(frames.front().size());
    std::memcpy(CMSG_DATA(c), &seg, sizeof seg);
    ASSERT_EQ(::sendmsg(fd_, &m, 0), static_cast<ssize_t>(all.size())) << std::strerror(errno);
  }
  void raw(std::span<const std::byte> bytes, std::uint32_t dst_ip) {
    sockaddr_in d{};
    d.sin_family = AF_INET;
    d.sin_addr.s_addr = htonl(dst_ip);
    d.sin_port = htons(kRoceV2Port);
    ASSERT_EQ(::sendto(fd_, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&d), sizeof d),
              static_cast<ssize_t>(bytes.size()))
        << std::strerror(errno);
  }
  std::uint32_t ip() const { return ip_; }

 private:
  int fd_ = -1;
  std::uint32_t ip_ = 0;
  std::uint16_t sport_ = 0;
};

TEST(UdpLink, DeviceAddressGidAndMtuComeFromItsInterface) {
  NetConfig n = loopback_net(1);
  auto dev = SoftHca::open(small_profile(), &n);
  ASSERT_TRUE(dev) << dev.error().reason;
  const std::uint32_t ip = parse_ipv4(n.ip).value();
  EXPECT_EQ((*dev)->engine().address(), roce_address(ip));
  EXPECT_EQ((*dev)->engine().active_mtu(), 4096u);  // lo's MTU is 65536
  const Gid g = gid_of_ipv4(ip);
  EXPECT_EQ(g[10], 0xff);
  EXPECT_EQ(g[11], 0xff);
  EXPECT_EQ(ipv4_of_gid(g).value(), ip);
}

TEST(UdpLink, ABindThatFailsSaysWhichAddressAndWhy) {
  NetConfig n = loopback_net(1);
  n.shared = false;  // a shared address takes any number (host_steering_test.cc)
  auto first = SoftHca::open(small_profile(), &n);
  ASSERT_TRUE(first);
  auto second = SoftHca::open(small_profile(), &n);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, EADDRINUSE);
  EXPECT_NE(second.error().reason.find(n.ip + ":4791"), std::string::npos) << second.error().reason;

  NetConfig foreign;
  foreign.ip = "192.0.2.77";  // TEST-NET-1: on no interface here
  auto third = SoftHca::open(small_profile(), &foreign);
  ASSERT_FALSE(third);
  EXPECT_EQ(third.error().code, EADDRNOTAVAIL);
  EXPECT_NE(third.error().reason.find("192.0.2.77"), std::string::npos);

  NetConfig bad;
  bad.ip = "127.0.0.300";
  auto fourth = SoftHca::open(small_profile(), &bad);
  ASSERT_FALSE(fourth);
  EXPECT_EQ(fourth.error().code, EINVAL);
}

TEST(UdpLink, PathMtuAboveTheActiveMtuIsRefused) {
  UdpPair p;
  QpAttr at;
  at.qp_state = QpState::kInit;
  ASSERT_TRUE(p.a.qp->modify(at, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS));
  at.path_mtu = 8192;
  EXPECT_EQ(p.a.qp->modify(at, QP_PATH_MTU).error().code, EINVAL);
}

// Both devices' wire and transport counters, for a failure's message.
std::string describe(const UdpPair& p) {
  std::string out;
  for (const Side* s : {&p.a, &p.b}) {
    const UdpLinkStats w = s->dev->udp()->stats();
    const TransportCounters c = s->dev->engine().counters();
    out += fmt::format("[{}: frames {} sent / {} received, send errors {}, overruns {}; requests {} / {}, "
                       "responses {} / {}, retransmissions {}, timeouts {}, seq NAKs {} / {}, dropped {} "
                       "(bad_psn {}, bad_icrc {}, bad_length {}, unknown_qp {})] ",
                       s == &p.a ? "a" : "b", w.frames_sent, w.frames_received, w.send_errors, w.rx_overruns,
                       c.requests_sent, c.requests_received, c.responses_sent, c.responses_received,
                       c.retransmissions, c.timeouts, c.seq_naks_sent, c.seq_naks_received, c.dropped_total(),
                       c.dropped_for(DropReason::kBadPsn), c.dropped_for(DropReason::kBadIcrc),
                       c.dropped_for(DropReason::kBadLength), c.dropped_for(DropReason::kUnknownQp));
  }
  return out;
}

class UdpLinkMtu : public ::testing::TestWithParam<std::uint32_t> {};

TEST_P(UdpLinkMtu, EveryRcOperationCrossesTheWire) {
  UdpPair p;
  PathParams pp;
  pp.path_mtu = GetParam();
  pp.sq_psn = pp.rq_psn = 0xfffff0;  // wraps on the way
  // Loopback loses nothing here; a timeout would only measure slowness (a
  // READ's 79 responses at MTU 256 outlast 4 ms under TSan): 67 ms, 7 tries.
  pp.timeout = 14;
  pp.retry_cnt = 7;
  connect(p.a, p.b, pp);
  std::iota(p.a.buf.begin(), p.a.buf.end(), 0);

  // WRITE of 40000 bytes: FIRST, MIDDLEs, LAST at this MTU.
  Sge s{p.a.addr(), 40000, p.a.key};
  ASSERT_TRUE(post(p.a, write_wr(1, s, p.b.addr(100), p.b.key)));
  auto wc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess) << describe(p);
  EXPECT_EQ(std::memcmp(p.a.buf.data(), p.b.buf.data() + 100, 40000), 0);

  // READ back 30000 bytes into a's buffer at 45000.
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
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess) << describe(p);
  EXPECT_EQ(std::memcmp(p.a.buf.data() + 45000, p.a.buf.data(), 20000), 0);

  // SEND with immediate into a posted receive.
  Sge rs{p.b.addr(50000), 8000, p.b.key};
  RecvWr rw;
  rw.wr_id = 7;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  const RecvWr* bad_recv = nullptr;
  ASSERT_TRUE(p.b.qp->post_recv(&rw, &bad_recv));
  Sge ss{p.a.addr(3), 5000, p.a.key};
  SendWr sd;
  sd.wr_id = 3;
  sd.opcode = WrOpcode::kSendWithImm;
  sd.sg_list = &ss;
  sd.num_sge = 1;
  sd.send_flags = SEND_SIGNALED;
  sd.imm_data = 0xabcdef01;
  ASSERT_TRUE(post(p.a, sd));
  auto rwc = poll_n(*p.b.rcq, 1);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(rwc[0].byte_len, 5000u);
  EXPECT_EQ(rwc[0].imm_data, 0xabcdef01u);
  EXPECT_EQ(rwc[0].src_qp, p.a.qp->qpn());
  EXPECT_EQ(std::memcmp(p.b.buf.data() + 50000, p.a.buf.data() + 3, 5000), 0);
  EXPECT_EQ(poll_n(*p.a.scq, 1).size(), 1u);

  // Atomics on an 8-byte word of b.
  std::uint64_t word = 40;
  std::memcpy(p.b.buf.data() + 64, &word, 8);
  Sge as{p.a.addr(60000), 8, p.a.key};
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
  std::memcpy(&orig, p.a.buf.data() + 60000, 8);
  EXPECT_EQ(orig, 40u);
  SendWr cs = fa;
  cs.wr_id = 5;
  cs.opcode = WrOpcode::kAtomicCmpAndSwp;
  cs.compare_add = 42;
  cs.swap = 1000;
  ASSERT_TRUE(post(p.a, cs));
  ASSERT_EQ(poll_n(*p.a.scq, 1).size(), 1u);
  std::memcpy(&word, p.b.buf.data() + 64, 8);
  EXPECT_EQ(word, 1000u);

  const UdpLinkStats sa = p.a.dev->udp()->stats();
  EXPECT_GT(sa.frames_sent, 40000u / GetParam());
  EXPECT_EQ(sa.send_errors, 0u);
  const TransportCounters cb = p.b.dev->engine().counters();
  EXPECT_EQ(cb.dropped_for(DropReason::kBadIcrc), 0u);
  EXPECT_EQ(cb.dropped_for(DropReason::kBadSource), 0u);
}

INSTANTIATE_TEST_SUITE_P(Mtus, UdpLinkMtu, ::testing::Values(256u, 1024u, 4096u));

TEST(UdpLink, FramesThatAreNotRightAreDroppedAndCountedByReason) {
  UdpPair p;
  connect(p.a, p.b);
  Injector inj;
  const std::uint32_t b_ip = roce_ipv4(p.b.dev->engine().address());
  auto dropped = [&](DropReason r) { return p.b.dev->engine().counters().dropped_for(r); };

  // Shorter than a BTH.
  std::array<std::byte, 7> tiny{};
  inj.raw(tiny, b_ip);
  // A WRITE ONLY to b's QP, well formed, but from a host that is not its peer.
  std::array<std::byte, 16> data{};
  const Packet w = write_to(p.b, data);
  inj.send(w, b_ip);
  // The same with a broken ICRC.
  inj.send(w, b_ip, /*bad_icrc=*/true);
  // To a QPN nobody has.
  Packet u = w;
  u.dst_qpn = 0xabcdef;
  inj.send(u, b_ip);
  // A UC SEND ONLY (0x24) to b's RC QP, its ICRC right: the parser takes
  // it, the engine drops a packet of another transport than the QP's.
  std::vector<std::byte> uc(kBthBytes);
  uc[0] = std::byte{0x24};
  uc[2] = uc[3] = std::byte{0xff};  // the default P_Key
  const std::uint32_t b_qpn = p.b.qp->qpn();
  uc[5] = static_cast<std::byte>(b_qpn >> 16);
  uc[6] = static_cast<std::byte>(b_qpn >> 8);
  uc[7] = static_cast<std::byte>(b_qpn);
  inj.with_icrc(uc, b_ip);

  ASSERT_TRUE(eventually([&] {
    return dropped(DropReason::kBadLength) >= 1 && dropped(DropReason::kBadSource) >= 1 &&
           dropped(DropReason::kBadIcrc) >= 1 && dropped(DropReason::kUnknownQp) >= 1 &&
           dropped(DropReason::kBadOpcode) >= 1;
  })) << "length " << dropped(DropReason::kBadLength) << " source " << dropped(DropReason::kBadSource) << " icrc "
      << dropped(DropReason::kBadIcrc) << " qp " << dropped(DropReason::kUnknownQp) << " opcode "
      << dropped(DropReason::kBadOpcode);
  EXPECT_EQ(dropped(DropReason::kBadLength), 1u);
  EXPECT_EQ(dropped(DropReason::kBadSource), 1u);
  EXPECT_EQ(dropped(DropReason::kBadIcrc), 1u);
  EXPECT_EQ(dropped(DropReason::kUnknownQp), 1u);
  EXPECT_EQ(dropped(DropReason::kBadOpcode), 1u);
  // Nothing of it landed: b's buffer is untouched, and its PSN did not move
  // (the real peer's WRITE at PSN 0 still lands).
  EXPECT_NE(p.b.buf[0], 0x5a);
  std::fill(p.a.buf.begin(), p.a.buf.begin() + 16, 0x11);
  Sge s{p.a.addr(), 16, p.a.key};
  ASSERT_TRUE(post(p.a, write_wr(1, s, p.b.addr(0), p.b.key)));
  auto wc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(p.b.buf[0], 0x11);
}

// UDP_GRO: a run of frames arrives as one datagram and is cut at its
// segment size into frames, each one checked alone: one bad frame costs
// itself, never its neighbours; a stranger's run is dropped frame by frame
// and counted by reason.
TEST(UdpLink, AGroRunIsCutIntoFramesEachCheckedAlone) {
  UdpPair p;
  connect(p.a, p.b);
  UdpLink& b_link = *p.b.dev->udp();
  ASSERT_TRUE(b_link.gro()) << "on by default where the kernel has it (Linux 5.0)";
  const std::uint32_t b_ip = roce_ipv4(p.b.dev->engine().address());
  auto dropped = [&](DropReason r) { return p.b.dev->engine().counters().dropped_for(r); };

  // The real peer's 64 KiB WRITE at MTU 1024 (the pair's default path MTU
  // is 4096; 64 KiB is 16 frames then): its trains arrive as runs.
  const UdpLinkStats before = b_link.stats();
  std::vector<std::uint8_t> src(64 << 10), dst(64 << 10);
  std::iota(src.begin(), src.end(), std::uint8_t{7});
  const std::uint32_t lkey = p.a.reg(src.data(), src.size(), kAccessAll);
  const std::uint32_t rkey = p.b.reg(dst.data(), dst.size(), kAccessAll);
  Sge s{reinterpret_cast<std::uint64_t>(src.data()), static_cast<std::uint32_t>(src.size()), lkey};
  ASSERT_TRUE(post(p.a, write_wr(1, s, reinterpret_cast<std::uint64_t>(dst.data()), rkey)));
  auto wc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(dst == src);
  const UdpLinkStats after = b_link.stats();
  const std::uint64_t frames = after.frames_received - before.frames_received;
  const std::uint64_t datagrams = after.datagrams_received - before.datagrams_received;
  EXPECT_GE(frames, 16u);
  EXPECT_LT(datagrams, frames) << "runs of frames came as single datagrams";
  EXPECT_LE(after.recv_calls - before.recv_calls, datagrams);

  // A stranger's run of four: a well-formed WRITE (not the peer's), the
  // same with its ICRC spoiled, one to a QPN nobody has, and a short tail.
  Injector inj;
  std::array<std::byte, 16> data{};
  const Packet w = write_to(p.b, data);
  Packet u = w;
  u.dst_qpn = 0xabcdef;
  const std::vector<std::byte> tail(3, std::byte{0x11});  // with its 4 ICRC bytes: 7, shorter than a BTH
  const TransportCounters c0 = p.b.dev->engine().counters();
  inj.gso_run({frame_of(w), frame_of(w), frame_of(u), tail}, b_ip, /*bad_icrc=*/1);
  ASSERT_TRUE(eventually([&] {
    return dropped(DropReason::kBadSource) > c0.dropped_for(DropReason::kBadSource) &&
           dropped(DropReason::kBadIcrc) > c0.dropped_for(DropReason::kBadIcrc) &&
           dropped(DropReason::kUnknownQp) > c0.dropped_for(DropReason::kUnknownQp) &&
           dropped(DropReason::kBadLength) > c0.dropped_for(DropReason::kBadLength);
  })) << "source " << dropped(DropReason::kBadSource) << " icrc " << dropped(DropReason::kBadIcrc) << " qp "
      << dropped(DropReason::kUnknownQp) << " length " << dropped(DropReason::kBadLength);
  for (DropReason r : {DropReason::kBadSource, DropReason::kBadIcrc, DropReason::kUnknownQp, DropReason::kBadLength})
    EXPECT_EQ(dropped(r), c0.dropped_for(r) + 1) << drop_reason_str(r);
  EXPECT_NE(p.b.buf[0], 0x5a) << "nothing of the stranger's landed";

  // The peer still gets through.
  std::fill(p.a.buf.begin(), p.a.buf.begin() + 16, 0x22);
  Sge s2{p.a.addr(), 16, p.a.key};
  ASSERT_TRUE(post(p.a, write_wr(2, s2, p.b.addr(0), p.b.key)));
  wc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(p.b.buf[0], 0x22);
}

// Without GRO (NetConfig::gro false, SRDMA_GRO=0): one datagram per frame.
TEST(UdpLink, WithoutGroEveryFrameIsADatagram) {
  NetConfig na = loopback_net(1), nb = loopback_net(2);
  na.gro = nb.gro = false;
  struct {
    Side a, b;
  } p{Side(256, kSideCaps, nullptr, nullptr, &na), Side(256, kSideCaps, nullptr, nullptr, &nb)};
  connect(p.a, p.b);
  UdpLink& b_link = *p.b.dev->udp();
  EXPECT_FALSE(b_link.gro());
  const UdpLinkStats before = b_link.stats();
  std::vector<std::uint8_t> src(64 << 10, 3), dst(64 << 10);
  const std::uint32_t lkey = p.a.reg(src.data(), src.size(), kAccessAll);
  const std::uint32_t rkey = p.b.reg(dst.data(), dst.size(), kAccessAll);
  Sge s{reinterpret_cast<std::uint64_t>(src.data()), static_cast<std::uint32_t>(src.size()), lkey};
  ASSERT_TRUE(post(p.a, write_wr(1, s, reinterpret_cast<std::uint64_t>(dst.data()), rkey)));
  auto wc = poll_n(*p.a.scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(dst == src);
  const UdpLinkStats after = b_link.stats();
  EXPECT_EQ(after.datagrams_received - before.datagrams_received, after.frames_received - before.frames_received);
}

TEST(UdpLink, ThePeerGoneEndsTheQpWithRetryExceededAndFlushes) {
  ManualClock clock;
  Side a = side_on(test::LinkKind::kUdp, 1, 256, kSideCaps, &clock);
  NetConfig nb = loopback_net(2);
  auto b = std::make_unique<Side>(256, kSideCaps, nullptr, nullptr, &nb);
  PathParams pp;
  pp.retry_cnt = 3;
  connect(a, *b, pp);
  b.reset();  // the peer's process is gone: its address answers nothing
  Sge s{a.addr(), 4096, a.key};
  ASSERT_TRUE(post(a, write_wr(1, s, 0x1000, 0x1234)));
  ASSERT_TRUE(post(a, write_wr(2, s, 0x1000, 0x1234)));
  std::vector<Wc> wcs;
  ASSERT_TRUE(eventually([&] {
    clock.advance(std::chrono::seconds(1));  // beyond the 4 ms timeout each time
    for (Wc& w : poll_n(*a.scq, 2 - wcs.size(), std::chrono::milliseconds(1))) wcs.push_back(w);
    return wcs.size() == 2;
  }));
  EXPECT_EQ(wcs[0].status, WcStatus::kRetryExcErr);
  EXPECT_EQ(wcs[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(a.qp->state(), QpState::kErr);
  EXPECT_EQ(a.dev->engine().counters().timeouts, 4u);  // the first try and retry_cnt retries
}

}  // namespace
}  // namespace srdma::hca

namespace srdma {
namespace {

// The environment a program using the library sets: each bad value is
// EINVAL naming its variable, and good ones are taken.
TEST(NetConfigEnv, BadValuesAreRefusedNamingTheVariable) {
  struct Unset {
    ~Unset() {
      for (const char* v :
           {"SRDMA_ADDR", "SRDMA_PORT", "SRDMA_ICRC", "SRDMA_BUSY_POLL_US", "SRDMA_GSO", "SRDMA_GRO", "SRDMA_SAME_HOST"})
        ::unsetenv(v);
    }
  } unset;
  for (auto [var, value] : {std::pair{"SRDMA_ADDR", "10.0.0"}, {"SRDMA_ADDR", "localhost"}, {"SRDMA_PORT", "0"},
                            {"SRDMA_PORT", "65536"}, {"SRDMA_PORT", "47x"}, {"SRDMA_ICRC", "2"},
                            {"SRDMA_BUSY_POLL_US", "-1"}, {"SRDMA_GSO", "yes"}, {"SRDMA_GRO", "2"},
                            {"SRDMA_SAME_HOST", "2"}}) {
    ::setenv(var, value, 1);
    auto c = NetConfig::from_env();
    ASSERT_FALSE(c) << var << "=" << value;
    EXPECT_EQ(c.error().code, EINVAL);
    EXPECT_NE(c.error().reason.find(var), std::string::npos) << c.error().reason;
    ::unsetenv(var);
  }
  ::setenv("SRDMA_ADDR", "127.0.0.9", 1);
  ::setenv("SRDMA_PORT", "4800", 1);
  ::setenv("SRDMA_ICRC", "0", 1);
  ::setenv("SRDMA_GSO", "0", 1);
  ::setenv("SRDMA_GRO", "0", 1);
  ::setenv("SRDMA_SAME_HOST", "0", 1);
  auto c = NetConfig::from_env();
  ASSERT_TRUE(c) << c.error().reason;
  EXPECT_EQ(c->ip, "127.0.0.9");
  EXPECT_EQ(c->port, 4800);
  EXPECT_FALSE(c->check_icrc);
  EXPECT_FALSE(c->gso);
  EXPECT_FALSE(c->gro);
  EXPECT_FALSE(c->same_host);
}

TEST(NetConfigEnv, GidsAreIpv4MappedAndOthersRefused) {
  const std::uint32_t ip = parse_ipv4("192.0.2.7").value();
  EXPECT_EQ(ipv4_of_gid(gid_of_ipv4(ip)).value(), ip);
  Gid g = gid_of_ipv4(ip);
  g[0] = 0xfe;  // a link-local IPv6 GID, not RoCE v2 over IPv4
  EXPECT_EQ(ipv4_of_gid(g).error().code, EINVAL);
  EXPECT_FALSE(parse_ipv4("256.1.1.1"));
  EXPECT_EQ(ib_mtu_for_ip_mtu(1500), 1024u);
  EXPECT_EQ(ib_mtu_for_ip_mtu(65536), 4096u);
  EXPECT_EQ(ib_mtu_for_ip_mtu(300), 0u);
}

}  // namespace
}  // namespace srdma
