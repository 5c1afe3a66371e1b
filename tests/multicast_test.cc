// UD multicast on the RoCEv2 link (udp_multicast.cc): a datagram sent to an
// IPv4 group with DestQP 0xFFFFFF reaches every UD QP attached to it, on
// every device that joined, each behind a GRH area naming the group; a QP
// detached gets no more; attaching is refused on the in-process link, for
// an address that is not a group, twice, and detaching what is not attached.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <set>

#include "hca/packet.h"
#include "hca/roce_frame.h"
#include "link_nodes.h"

namespace srdma {
namespace {

using test::LinkKind;
using test::LinkNode;

constexpr std::uint32_t kQkey = 0x01234567;
constexpr std::uint32_t kMulticastQpn = 0xFFFFFF;

// A group of this process's own (other processes may run the same test).
std::uint32_t test_group() {
  const auto pid = static_cast<std::uint32_t>(::getpid());
  return (239u << 24) | (0x5a << 16) | (pid & 0xffff);
}

SendWr to_group(std::uint64_t wr_id, const Sge& s, AddressHandle& ah) {
  SendWr w = test::send_wr(wr_id, s);
  w.ud.ah = &ah;
  w.ud.remote_qpn = kMulticastQpn;
  w.ud.remote_qkey = kQkey;
  return w;
}

TEST(MulticastTest, ADatagramToTheGroupReachesEveryAttachedQp) {
  const std::uint32_t group = test_group();
  LinkNode a(LinkKind::kUdp, 1), b(LinkKind::kUdp, 2), c(LinkKind::kUdp, 3);
  auto qa = a.ud_qp(kQkey), qb = b.ud_qp(kQkey), qc = c.ud_qp(kQkey), qb2 = b.ud_qp(kQkey);
  ASSERT_TRUE(b.dev.attach_mcast(qb->qp_num(), group));
  ASSERT_TRUE(b.dev.attach_mcast(qb2->qp_num(), group)) << "two QPs of one device";
  ASSERT_TRUE(c.dev.attach_mcast(qc->qp_num(), group));
  for (std::uint64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(qb->post_recv(test::recv_wr(i, b.sge(i * 256, 256))));
    ASSERT_TRUE(qb2->post_recv(test::recv_wr(i, b.sge(4096 + i * 256, 256))));
    ASSERT_TRUE(qc->post_recv(test::recv_wr(i, c.sge(i * 256, 256))));
  }
  auto ah = a.pd.create_ah(AhAttr{.dest_addr = roce_address(group)}).value();
  std::memcpy(a.buf.data(), "to the group", 13);
  ASSERT_TRUE(qa->post_send(to_group(1, a.sge(0, 13), *ah)));
  EXPECT_EQ(test::poll_one(*a.scq).status, WcStatus::kSuccess);
  std::set<std::uint32_t> reached;
  for (LinkNode* node : {&b, &b, &c}) {
    const Wc wc = test::poll_one(*node->rcq);
    ASSERT_EQ(wc.status, WcStatus::kSuccess);
    reached.insert(wc.qp_num);
    EXPECT_EQ(wc.src_qp, qa->qp_num());
    EXPECT_EQ(wc.byte_len, 40u + 13u);
    const std::size_t at = wc.qp_num == qb2->qp_num() ? 4096 : 0;
    const std::uint8_t* grh = node->buf.data() + at + (wc.wr_id * 256);
    const std::uint32_t dst = std::uint32_t{grh[36]} << 24 | std::uint32_t{grh[37]} << 16 | std::uint32_t{grh[38]} << 8 | grh[39];
    EXPECT_EQ(dst, group) << "the GRH area's IPv4 header names the group";
    EXPECT_STREQ(reinterpret_cast<const char*>(grh + 40), "to the group");
  }
  EXPECT_EQ(reached, (std::set<std::uint32_t>{qb->qp_num(), qb2->qp_num(), qc->qp_num()}));

  // c leaves: the next datagram reaches b's QPs only.
  ASSERT_TRUE(c.dev.detach_mcast(qc->qp_num(), group));
  std::memcpy(a.buf.data(), "second", 7);
  ASSERT_TRUE(qa->post_send(to_group(2, a.sge(0, 7), *ah)));
  EXPECT_EQ(test::poll_one(*b.rcq).status, WcStatus::kSuccess);
  EXPECT_EQ(test::poll_one(*b.rcq).status, WcStatus::kSuccess);
  auto ah_c = a.pd.create_ah(AhAttr{.dest_addr = c.dev.address()}).value();
  const Sge seven = a.sge(0, 7);  // (named: the WR points at it until the post)
  SendWr direct = to_group(3, seven, *ah_c);
  direct.ud.remote_qpn = qc->qp_num();
  ASSERT_TRUE(qa->post_send(direct));
  const Wc wc = test::poll_one(*c.rcq);
  EXPECT_EQ(wc.wr_id, 1u) << "c's next receive is the unicast datagram: the group's second one never came";
  std::array<Wc, 1> more;
  EXPECT_EQ(c.rcq->poll(more), 0);
  ASSERT_TRUE(b.dev.detach_mcast(qb->qp_num(), group));
  ASSERT_TRUE(b.dev.detach_mcast(qb2->qp_num(), group));
}

// A stranger's frames to a group, made by hand: a UD SEND to DestQP
// 0xFFFFFF is taken; one to another QPN, and an RC SEND, are dropped and
// counted (unknown_qp, bad_opcode) before any QP sees them.
TEST(MulticastTest, AGroupFrameThatIsNotAUdSendToTheGroupQpIsDroppedAndCounted) {
  const std::uint32_t group = test_group() + 2;
  LinkNode b(LinkKind::kUdp, 2);
  auto qb = b.ud_qp(kQkey);
  ASSERT_TRUE(b.dev.attach_mcast(qb->qp_num(), group));
  for (std::uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(qb->post_recv(test::recv_wr(i, b.sge(i * 256, 256))));

  const std::uint32_t src_ip = parse_ipv4(test::loopback_ip(3)).value();
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in me{};
  me.sin_family = AF_INET;
  me.sin_addr.s_addr = htonl(src_ip);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&me), sizeof me), 0);
  socklen_t len = sizeof me;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len), 0);
  const int pmtu = IP_PMTUDISC_DO;  // DF, Identification 0: what the ICRC below assumes
  ASSERT_EQ(::setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu), 0);
  const in_addr mif{htonl(src_ip)};
  ASSERT_EQ(::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &mif, sizeof mif), 0);
  auto send_frame = [&](QpType transport, std::uint32_t dst_qpn) {
    hca::Packet p;
    p.transport = transport;
    p.op = hca::Opcode::kSendOnly;
    p.dst_qpn = dst_qpn;
    p.src_qpn = 0x42;
    p.qkey = kQkey;
    const hca::FrameHeaders h = hca::build_headers(p);
    std::vector<std::byte> frame(h.bytes.begin(), h.bytes.begin() + h.length);
    const hca::IpUdpFields ip{src_ip, group, ntohs(me.sin_port), kRoceV2UdpPort, 0, true};
    const std::uint32_t icrc = hca::compute_icrc(ip, frame);
    for (int i = 0; i < 4; ++i) frame.push_back(static_cast<std::byte>(icrc >> (8 * i)));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(group);
    to.sin_port = htons(kRoceV2UdpPort);
    ASSERT_EQ(::sendto(fd, frame.data(), frame.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to),
              static_cast<ssize_t>(frame.size()));
  };
  send_frame(QpType::kUd, kMulticastQpn);
  const Wc wc = test::poll_one(*b.rcq);
  EXPECT_EQ(wc.status, WcStatus::kSuccess) << "the hand-made frame is a good one";
  EXPECT_EQ(wc.src_qp, 0x42u);

  const TransportCounters before = b.dev.counters();
  send_frame(QpType::kUd, qb->qp_num());  // a group frame must name QP 0xFFFFFF
  send_frame(QpType::kRc, kMulticastQpn);  // only UD is multicast
  EXPECT_TRUE(test::eventually([&] {
    b.dev.progress();
    const TransportCounters now = b.dev.counters();
    return now.dropped_for(DropReason::kUnknownQp) > before.dropped_for(DropReason::kUnknownQp) &&
           now.dropped_for(DropReason::kBadOpcode) > before.dropped_for(DropReason::kBadOpcode);
  }));
  std::array<Wc, 1> none;
  EXPECT_EQ(b.rcq->poll(none), 0) << "neither reached the QP";
  ::close(fd);
}

TEST(MulticastTest, RefusalsSayWhy) {
  const std::uint32_t group = test_group() + 1;
  LinkNode u(LinkKind::kUdp, 1), p(LinkKind::kInproc, 1);
  auto q = u.ud_qp(kQkey);
  EXPECT_EQ(u.dev.attach_mcast(q->qp_num(), 0x7f000001).error().code, EINVAL) << "127.0.0.1 is no group";
  ASSERT_TRUE(u.dev.attach_mcast(q->qp_num(), group));
  EXPECT_EQ(u.dev.attach_mcast(q->qp_num(), group).error().code, EEXIST);
  ASSERT_TRUE(u.dev.detach_mcast(q->qp_num(), group));
  EXPECT_EQ(u.dev.detach_mcast(q->qp_num(), group).error().code, ENOENT);
  auto qp = p.ud_qp(kQkey);
  EXPECT_EQ(p.dev.attach_mcast(qp->qp_num(), group).error().code, EOPNOTSUPP);
  EXPECT_EQ(p.dev.query().max_mcast_grp, 0u) << "the in-process link has no multicast";
}

// The limits the device reports (ibv_query_device's max_mcast_grp and
// max_mcast_qp_attach) are the ones it keeps.
TEST(MulticastTest, TheReportedLimitsHold) {
  LinkNode u(LinkKind::kUdp, 2);
  const DeviceAttr a = u.dev.query();
  ASSERT_GT(a.max_mcast_grp, 0u);
  ASSERT_GT(a.max_mcast_qp_attach, 0u);
  const std::uint32_t group = test_group() + 2;
  std::vector<std::unique_ptr<QueuePair>> qps;
  for (std::uint32_t i = 0; i < a.max_mcast_qp_attach; ++i) {
    qps.push_back(u.ud_qp(kQkey));
    ASSERT_TRUE(u.dev.attach_mcast(qps.back()->qp_num(), group)) << i;
  }
  qps.push_back(u.ud_qp(kQkey));
  EXPECT_EQ(u.dev.attach_mcast(qps.back()->qp_num(), group).error().code, ENOMEM);
  // Groups 239.96-99.g.pid: a socket each.
  auto nth = [](std::uint32_t g) { return (239u << 24) | ((0x60 + (g >> 8)) << 16) | ((g & 0xff) << 8) | (::getpid() & 0xff); };
  for (std::uint32_t g = 1; g < a.max_mcast_grp; ++g) ASSERT_TRUE(u.dev.attach_mcast(qps[0]->qp_num(), nth(g))) << g;
  EXPECT_EQ(u.dev.attach_mcast(qps[0]->qp_num(), nth(a.max_mcast_grp)).error().code, ENOMEM);
}

}  // namespace
}  // namespace srdma
