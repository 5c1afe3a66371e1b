// The same-host path (hca/same_host.h): devices of one user on one host
// move their frames through shared-memory rings, with the transport's
// semantics unchanged; strangers at a device's listener are refused and
// change nothing; a peer that goes away is seen, and QPs to it retry out.
// (The transport's suites also run on this path: LinkKind::kSameHost.)
#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <string>

#include <fmt/format.h>

#include "connected_pair.h"
#include "hca/ring_train.h"
#include "hca/same_host.h"
#include "hca/shm_ring.h"
#include "srdma/access.h"
#include "wait.h"

namespace srdma::test {
namespace {

PairNode::Options on_host(unsigned k) {
  PairNode::Options o;
  o.link = LinkKind::kSameHost;
  o.k = k;
  return o;
}

void write_and_check(PairNode& from, PairNode& to, std::uint8_t seed, std::size_t n = 20000) {
  for (std::size_t i = 0; i < n; ++i) from.buf[i] = static_cast<std::uint8_t>(seed + i * 7);
  const Sge sge{from.addr(0), static_cast<std::uint32_t>(n), from.mr.lkey()};
  SendWr w = send_wr(1, sge, WrOpcode::kRdmaWrite);
  w.remote_addr = to.addr(30000);
  w.rkey = to.mr.rkey();
  ASSERT_EQ(post_and_poll(from, w).status, WcStatus::kSuccess);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(to.buf[30000 + i], from.buf[i]) << i;
}

// The abstract name a device listens on (same_host.cc).
sockaddr_un listener_of(const Device& d, socklen_t& len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string n = fmt::format("srdma-{}-{:08x}-{}-{}", ::geteuid(), roce_ipv4(d.address()), kRoceV2UdpPort,
                                    d.host_slot());
  std::memcpy(a.sun_path + 1, n.data(), n.size());
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n.size());
  return a;
}

int connect_to_listener(const Device& d) {
  socklen_t len = 0;
  const sockaddr_un a = listener_of(d, len);
  const int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  EXPECT_EQ(::connect(s, reinterpret_cast<const sockaddr*>(&a), len), 0) << std::strerror(errno);
  return s;
}

struct Hello {  // same_host.cc's
  std::uint32_t magic = 0x53524853;
  std::uint16_t version = 1;
  std::uint16_t reserved = 0;
  std::uint32_t src_ip = 0;
  std::uint32_t src_slot = 7;
  std::uint64_t ring_bytes = hca::SameHostPath::kRingBytes;
};

void send_with_fds(int s, const void* data, std::size_t n, std::initializer_list<int> fds) {
  iovec iov{const_cast<void*>(data), n};
  alignas(cmsghdr) std::byte ctl[CMSG_SPACE(4 * sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (fds.size() != 0) {
    m.msg_control = ctl;
    m.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
    std::memcpy(CMSG_DATA(c), std::data(fds), fds.size() * sizeof(int));
  }
  EXPECT_EQ(::sendmsg(s, &m, MSG_NOSIGNAL), static_cast<ssize_t>(n)) << std::strerror(errno);
}

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

// Two threads may sleep parked on one ring (the receive thread and a
// consumer blocked on a completion channel, Link::prepare_sleep): the one
// that wakes first must not silence the other's doorbell, and once the last
// is up the producers stop ringing.
// A process of our user that hands `to` a proper ring of its own, claiming
// to be `as`, and writes whatever it likes into it.
struct StrangerRing {
  StrangerRing(const Device& to, const Device& as) {
    auto r = hca::ShmRing::create(hca::SameHostPath::kRingBytes);
    EXPECT_TRUE(r);
    if (r) ring = std::move(*r);
    Hello hello;
    hello.src_ip = roce_ipv4(as.address());
    conn = connect_to_listener(to);
    send_with_fds(conn, &hello, sizeof hello, {ring.fd(), bell});
  }
  ~StrangerRing() {
    ::close(conn);
    ::close(bell);
  }
  // Pushes each record (with `flags`), publishes and rings the doorbell.
  void write(std::initializer_list<const std::vector<std::byte>*> records, std::uint8_t flags = 0) {
    for (const std::vector<std::byte>* f : records) {
      const std::array<std::span<const std::byte>, 1> pieces{std::span<const std::byte>(*f)};
      ASSERT_TRUE(ring.push(pieces, 64, 0, flags));
    }
    ring.publish();
    const std::uint64_t one = 1;
    ASSERT_EQ(::write(bell, &one, sizeof one), 8);
  }
  hca::ShmRing ring;
  int bell = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  int conn = -1;
};

TEST(SameHostPath, ADoorbellRingsWhileAnySleeperIsStillParked) {
  std::random_device rd;
  const std::uint32_t ip = 0x7F000000u | (rd() & 0xFFFFFEu) | 1u;  // some 127.x.y.z
  const std::uint16_t port = 40000 + static_cast<std::uint16_t>(rd() % 20000);
  auto a = hca::SameHostPath::open(ip, port, 1);
  auto b = hca::SameHostPath::open(ip, port, 2);
  ASSERT_TRUE(a && b);
  std::array<std::byte, 64> frame{};
  const std::array<std::span<const std::byte>, 1> pieces{std::span<const std::byte>(frame)};
  const auto send = [&] { return (*a)->send(ip, 2, pieces, 64, 0); };
  const auto take_all = [&] { return (*b)->receive(64, [](const hca::ShmRecord&, std::uint32_t) { return true; }); };
  ASSERT_EQ(send(), hca::SameHostPath::Sent::kSent);
  ASSERT_TRUE(eventually([&] {
    (*b)->control();  // the connection and its hello
    return (*b)->stats().peers_in == 1;
  }));
  EXPECT_EQ(take_all(), 1);

  std::vector<pollfd> thread_fds, consumer_fds;
  ASSERT_TRUE((*b)->park_rings(thread_fds));    // the receive thread sleeps
  ASSERT_TRUE((*b)->park_rings(consumer_fds));  // so does a consumer
  ASSERT_EQ(thread_fds.size(), 1u);
  const int doorbell = thread_fds[0].fd;
  EXPECT_FALSE(readable(doorbell));
  (*b)->unpark();  // the consumer is up first
  ASSERT_EQ(send(), hca::SameHostPath::Sent::kSent);
  EXPECT_TRUE(readable(doorbell)) << "the receive thread, still asleep, was not rung";
  (*b)->unpark();  // the receive thread is up
  EXPECT_EQ(take_all(), 1);

  // A second sleeper that finds frames waiting neither drains the first's
  // doorbell nor takes its flag down: the first, still asleep, is woken.
  {
    std::vector<pollfd> first_fds, second_fds;
    ASSERT_TRUE((*b)->park_rings(first_fds));  // the receive thread sleeps
    ASSERT_EQ(send(), hca::SameHostPath::Sent::kSent);
    ASSERT_TRUE(readable(doorbell));
    EXPECT_FALSE((*b)->park_rings(second_fds)) << "a frame waits";
    (*b)->unpark();  // the consumer does not sleep: it receives
    EXPECT_EQ(take_all(), 1);
    EXPECT_TRUE(readable(doorbell)) << "the sleeper's wakeup was taken";
    (*b)->unpark();  // the receive thread is up
  }

  // Nobody sleeps: a frame rings no doorbell (park_rings drains it, and the
  // last unpark takes the flags down).
  std::vector<pollfd> fds;
  ASSERT_TRUE((*b)->park_rings(fds));
  (*b)->unpark();
  EXPECT_FALSE(readable(doorbell));
  ASSERT_EQ(send(), hca::SameHostPath::Sent::kSent);
  EXPECT_FALSE(readable(doorbell));
  // A frame that waits keeps a sleeper awake: park_rings says so.
  std::vector<pollfd> again;
  EXPECT_FALSE((*b)->park_rings(again));
  (*b)->unpark();
  EXPECT_EQ(take_all(), 1);
}

TEST(SameHost, TwoDevicesMoveEveryByteThroughTheRingsAndNothingOverUdp) {
  for (unsigned kb : {2u, 1u}) {  // on two addresses of the host, then on one shared address
    PairNode a(on_host(1)), b(on_host(kb));
    connect(a, b);
    write_and_check(a, b, 1);
    write_and_check(b, a, 2);
    // A READ's response payload crosses too, and a SEND.
    for (std::size_t i = 0; i < 9000; ++i) b.buf[i] = static_cast<std::uint8_t>(i * 3);
    const Sge local{a.addr(40000), 9000, a.mr.lkey()};
    SendWr r = send_wr(2, local, WrOpcode::kRdmaRead);
    r.remote_addr = b.addr(0);
    r.rkey = b.mr.rkey();
    ASSERT_EQ(post_and_poll(a, r).status, WcStatus::kSuccess);
    for (std::size_t i = 0; i < 9000; ++i) ASSERT_EQ(a.buf[40000 + i], b.buf[i]) << i;
    const Sge rsge{b.addr(50000), 5000, b.mr.lkey()};
    ASSERT_TRUE(b.qp->post_recv(recv_wr(3, rsge)));
    const Sge ssge{a.addr(0), 5000, a.mr.lkey()};
    ASSERT_EQ(post_and_poll(a, send_wr(4, ssge)).status, WcStatus::kSuccess);
    const Wc rw = poll_one(*b.cq);
    EXPECT_EQ(rw.status, WcStatus::kSuccess);
    EXPECT_EQ(rw.byte_len, 5000u);
    EXPECT_EQ(std::memcmp(b.buf.data() + 50000, a.buf.data(), 5000), 0);

    const WireStats wa = a.dev.wire_stats(), wb = b.dev.wire_stats();
    EXPECT_EQ(wa.same_host_peers, 1u);
    EXPECT_EQ(wb.same_host_peers, 1u);
    EXPECT_GE(wa.same_host_frames_sent, 3u);  // the WRITE and the SEND (a record each: trains), a READ request
    EXPECT_EQ(wa.same_host_frames_sent, wb.same_host_frames_received);
    EXPECT_EQ(wb.same_host_frames_sent, wa.same_host_frames_received);
    EXPECT_EQ(wa.frames_sent + wb.frames_sent, 0u) << "a QP's frames took the wire";
    EXPECT_EQ(wa.same_host_ring_full + wa.same_host_refused, 0u);
  }
}

// A message crosses a ring whole (hca/ring_train.h): one record where the
// wire takes a frame per path MTU, every packet still counted by the
// transport; one beyond a ring's share goes in parts; a READ's responses
// come back as trains too.
TEST(SameHost, AMessageCrossesTheRingAsOneRecord) {
  PairNode::Options o = on_host(1);
  o.buf_bytes = 3 << 20;
  PairNode a(o);
  o.k = 2;
  PairNode b(o);
  connect(a, b);
  for (std::size_t i = 0; i < a.buf.size(); ++i) a.buf[i] = static_cast<std::uint8_t>(i * 7 + i / 4096);
  const WireStats w0 = a.dev.wire_stats();
  const TransportCounters c0 = a.dev.counters();
  constexpr int kWrites = 8;
  for (int k = 0; k < kWrites; ++k) {
    const Sge sge{a.addr(std::size_t(k) * 65536), 65536, a.mr.lkey()};
    SendWr w = send_wr(k, sge, WrOpcode::kRdmaWrite);
    w.remote_addr = b.addr(std::size_t(k) * 65536);
    w.rkey = b.mr.rkey();
    ASSERT_EQ(post_and_poll(a, w).status, WcStatus::kSuccess);
  }
  ASSERT_EQ(std::memcmp(b.buf.data(), a.buf.data(), kWrites * 65536), 0);
  const WireStats w1 = a.dev.wire_stats();
  const TransportCounters c1 = a.dev.counters();
  EXPECT_EQ(c1.requests_sent - c0.requests_sent, kWrites * 16u) << "16 packets a message, as on the wire";
  EXPECT_EQ(w1.same_host_frames_sent - w0.same_host_frames_sent, std::uint64_t{kWrites}) << "a record a message";
  EXPECT_EQ(c1.retransmissions, c0.retransmissions);

  // 2 MiB: beyond a quarter of the 2 MiB ring, so in parts.
  const std::size_t big = std::size_t{2} << 20;
  const Sge bsge{a.addr(0), static_cast<std::uint32_t>(big), a.mr.lkey()};
  SendWr bw = send_wr(20, bsge, WrOpcode::kRdmaWriteWithImm);
  bw.remote_addr = b.addr(4096);
  bw.rkey = b.mr.rkey();
  bw.imm_data = 0x1234;
  const Sge rsge{b.addr(0), 0, b.mr.lkey()};
  ASSERT_TRUE(b.qp->post_recv(recv_wr(21, rsge)));
  ASSERT_EQ(post_and_poll(a, bw).status, WcStatus::kSuccess);
  const Wc rw = poll_one(*b.cq);
  EXPECT_EQ(rw.status, WcStatus::kSuccess);
  EXPECT_EQ(rw.imm_data, 0x1234u);
  EXPECT_EQ(rw.byte_len, big);
  ASSERT_EQ(std::memcmp(b.buf.data() + 4096, a.buf.data(), big), 0);
  const WireStats w2 = a.dev.wire_stats();
  EXPECT_GE(w2.same_host_frames_sent - w1.same_host_frames_sent, 4u) << "512 KiB parts at most";
  EXPECT_LE(w2.same_host_frames_sent - w1.same_host_frames_sent, 64u) << "parts, not packets";

  // A READ of 1 MiB: its responses are trains from b.
  for (std::size_t i = 0; i < (1u << 20); ++i) b.buf[i] = static_cast<std::uint8_t>(i * 5 + 3);
  const WireStats wb0 = b.dev.wire_stats();
  const Sge lsge{a.addr(1u << 20), 1u << 20, a.mr.lkey()};
  SendWr r = send_wr(30, lsge, WrOpcode::kRdmaRead);
  r.remote_addr = b.addr(0);
  r.rkey = b.mr.rkey();
  ASSERT_EQ(post_and_poll(a, r).status, WcStatus::kSuccess);
  ASSERT_EQ(std::memcmp(a.buf.data() + (1u << 20), b.buf.data(), 1u << 20), 0);
  EXPECT_LE(b.dev.wire_stats().same_host_frames_sent - wb0.same_host_frames_sent, 16u) << "responses as trains";
  EXPECT_EQ(a.dev.wire_stats().frames_sent + b.dev.wire_stats().frames_sent, 0u) << "a QP's frames took the wire";
}

// A consumer whose traffic comes through the rings looks at its UDP socket
// less and less often (udp_link.cc, receive_once); a wire peer's datagrams
// still reach it, turn after turn, while the rings keep leading.
TEST(SameHost, WirePeersStillReachAConsumerWhoseRingsLead) {
  PairNode a(on_host(1)), b(on_host(2));
  PairNode::Options wire;
  wire.link = LinkKind::kUdp;  // no same-host path: its frames take the socket
  wire.k = 3;
  PairNode c(wire);
  connect(a, b);
  auto qa = a.pd.create_qp(QpInitAttr{a.cq.get(), a.cq.get(), QpCaps{64, 64, 2, 2, 64}, false, nullptr}).value();
  connect_qps(*qa, a.dev, *c.qp, c.dev);
  const WireStats w0 = a.dev.wire_stats();
  for (int round = 0; round < 50; ++round) {
    // The rings lead: a's consumer polls its CQ for a WRITE through them...
    write_and_check(a, b, static_cast<std::uint8_t>(round), 4096);
    // ... and a datagram from c arrives for it meanwhile.
    const Sge rsge{a.addr(8192), 64, a.mr.lkey()};
    ASSERT_TRUE(qa->post_recv(recv_wr(100 + round, rsge)));
    for (int i = 0; i < 64; ++i) c.buf[i] = static_cast<std::uint8_t>(round + i);
    ASSERT_TRUE(c.qp->post_send(send_wr(200 + round, Sge{c.addr(0), 64, c.mr.lkey()})));
    Wc got = poll_one(*a.cq);
    ASSERT_EQ(got.status, WcStatus::kSuccess) << round;
    ASSERT_EQ(got.wr_id, std::uint64_t(100 + round)) << round;
    ASSERT_EQ(std::memcmp(a.buf.data() + 8192, c.buf.data(), 64), 0) << round;
    ASSERT_EQ(poll_one(*c.cq).status, WcStatus::kSuccess) << round;
  }
  const WireStats w1 = a.dev.wire_stats();
  EXPECT_GE(w1.frames_received - w0.frames_received, 50u) << "c's SENDs came over the socket";
  EXPECT_GE(w1.same_host_frames_received - w0.same_host_frames_received, 50u) << "b's ACKs came through a ring";
}

// Slots are per address: a device on another address that drew our slot
// number is a peer like any other, not ourselves.
TEST(SameHost, APeerOnAnotherAddressWithOurSlotNumberGetsARing) {
  PairNode a(on_host(1));
  std::unique_ptr<PairNode> b;
  for (int tries = 0; tries < 4000 && (!b || b->dev.host_slot() != a.dev.host_slot()); ++tries)
    b = std::make_unique<PairNode>(on_host(2));
  ASSERT_EQ(b->dev.host_slot(), a.dev.host_slot()) << "no device on the second address drew the first's slot";
  connect(a, *b);
  write_and_check(a, *b, 9);
  write_and_check(*b, a, 10);
  EXPECT_EQ(a.dev.wire_stats().same_host_peers, 1u);
  EXPECT_EQ(a.dev.wire_stats().frames_sent + b->dev.wire_stats().frames_sent, 0u) << "frames took the wire";
}

TEST(SameHost, StrangersAtTheListenerAreRefusedAndChangeNothing) {
  PairNode a(on_host(1)), b(on_host(2));
  connect(a, b);
  write_and_check(a, b, 3);
  const std::uint64_t before = b.dev.wire_stats().same_host_refused;
  Hello hello;
  hello.src_ip = roce_ipv4(a.dev.address());
  int refusals = 0;
  {  // bytes that are no hello, and no descriptors
    const int s = connect_to_listener(b.dev);
    send_with_fds(s, "hello?", 6, {});
    ::close(s);
    ++refusals;
  }
  {  // a hello whose ring the sender could still shrink (not sealed)
    const int s = connect_to_listener(b.dev);
    const int mem = ::memfd_create("loose", MFD_CLOEXEC);
    ASSERT_EQ(::ftruncate(mem, static_cast<off_t>(hca::ShmRing::kHeaderPage + hello.ring_bytes)), 0);
    const int bell = ::eventfd(0, EFD_CLOEXEC);
    send_with_fds(s, &hello, sizeof hello, {mem, bell});
    ::close(mem);
    ::close(bell);
    ::close(s);
    ++refusals;
  }
  {  // a sealed ring of another size, and a pipe for a doorbell
    auto ring = hca::ShmRing::create(hca::ShmRing::kMinBytes);
    ASSERT_TRUE(ring);
    int p[2];
    ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
    const int s = connect_to_listener(b.dev);
    send_with_fds(s, &hello, sizeof hello, {ring->fd(), p[0]});
    ::close(s);
    ++refusals;
    auto right = hca::ShmRing::create(hello.ring_bytes);
    ASSERT_TRUE(right);
    const int s2 = connect_to_listener(b.dev);
    send_with_fds(s2, &hello, sizeof hello, {right->fd(), p[0]});  // the right ring, the pipe still
    ::close(s2);
    ++refusals;
    ::close(p[0]);
    ::close(p[1]);
  }
  {  // a hello with three descriptors
    auto ring = hca::ShmRing::create(hello.ring_bytes);
    ASSERT_TRUE(ring);
    const int bell = ::eventfd(0, EFD_CLOEXEC);
    const int s = connect_to_listener(b.dev);
    send_with_fds(s, &hello, sizeof hello, {ring->fd(), bell, bell});
    ::close(s);
    ::close(bell);
    ++refusals;
  }
  EXPECT_TRUE(eventually([&] { return b.dev.wire_stats().same_host_refused >= before + refusals; }))
      << b.dev.wire_stats().same_host_refused - before;
  write_and_check(a, b, 4);
  write_and_check(b, a, 5);
  EXPECT_EQ(b.dev.wire_stats().same_host_frames_sent, a.dev.wire_stats().same_host_frames_received);
}

// A slot's listener name is one device's: a second listener on it is refused.
TEST(SameHost, ASecondListenerOnASlotsNameIsRefused) {
  PairNode a(on_host(1));
  auto again = hca::SameHostPath::open(roce_ipv4(a.dev.address()), kRoceV2UdpPort, a.dev.host_slot());
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, EADDRINUSE);
}

// Connections that never say hello hold at most kMaxPending places: the
// oldest is dropped for each one beyond, and the device's peers go on.
TEST(SameHost, ConnectionsThatNeverSayHelloAreBounded) {
  PairNode a(on_host(1)), b(on_host(2));
  connect(a, b);
  const std::uint64_t before = b.dev.wire_stats().same_host_refused;
  constexpr std::size_t kExtra = 6;
  std::vector<int> silent;
  for (std::size_t i = 0; i < hca::SameHostPath::kMaxPending + kExtra; ++i) silent.push_back(connect_to_listener(b.dev));
  EXPECT_TRUE(eventually([&] { return b.dev.wire_stats().same_host_refused >= before + kExtra; }))
      << b.dev.wire_stats().same_host_refused - before;
  write_and_check(a, b, 11);
  write_and_check(b, a, 12);
  for (int s : silent) ::close(s);
}

// A stranger that does hand over a proper ring is a producer like any
// other: what it writes is parsed as a datagram would be, and nothing it
// writes reaches memory no key grants it.
TEST(SameHost, FramesAStrangerWritesIntoItsOwnRingAreCheckedLikeDatagrams) {
  PairNode a(on_host(1)), b(on_host(2));
  connect(a, b);
  std::memset(b.buf.data(), 0x5a, b.buf.size());
  StrangerRing stranger(b.dev, a.dev);
  // An RDMA WRITE Only (opcode 0x0A) for b's QP with a made-up rkey and
  // PSN, then one for a QPN of another slot, then bytes that are no frame.
  auto frame = [&](std::uint32_t qpn, std::uint32_t rkey) {
    std::vector<std::byte> f(12 + 16 + 64 + 4);
    f[0] = std::byte{0x0a};
    f[2] = std::byte{0xff};
    f[3] = std::byte{0xff};
    f[5] = static_cast<std::byte>(qpn >> 16);
    f[6] = static_cast<std::byte>(qpn >> 8);
    f[7] = static_cast<std::byte>(qpn);
    f[9] = std::byte{0x12};  // PSN
    const std::uint64_t va = b.addr(0);
    for (int i = 0; i < 8; ++i) f[12 + i] = static_cast<std::byte>(va >> (56 - 8 * i));
    for (int i = 0; i < 4; ++i) f[20 + i] = static_cast<std::byte>(rkey >> (24 - 8 * i));
    f[27] = std::byte{64};  // DMA length
    return f;
  };
  const auto wrong_key = frame(b.qp->qp_num(), b.mr.rkey() ^ 0x100);
  const auto other_slot = frame((b.qp->qp_num() & 0xffff) | ((b.dev.host_slot() % 254 + 1) << 16), b.mr.rkey());
  const std::vector<std::byte> junk(40, std::byte{0xee});
  const TransportCounters before = b.dev.counters();
  stranger.write({&wrong_key, &other_slot, &junk});
  EXPECT_TRUE(eventually([&] {
    const TransportCounters c = b.dev.counters();
    return c.dropped_for(DropReason::kUnknownQp) > before.dropped_for(DropReason::kUnknownQp) &&
           c.dropped_total() >= before.dropped_total() + 2;
  })) << "the frame for another slot and the junk are dropped and counted";
  for (std::size_t i = 0; i < b.buf.size(); ++i) ASSERT_EQ(b.buf[i], 0x5a) << i;
  // The honest peer's traffic goes on.
  write_and_check(a, b, 6);
}

// Train records (ring_train.h) a stranger forges in its own ring: each
// lie is dropped and counted before any QP sees it, the honest-looking one
// with a wrong key and PSN writes nothing, and the device goes on.
TEST(SameHost, ForgedTrainsInAStrangersRingAreCheckedBeforeAnyQpSeesThem) {
  PairNode a(on_host(1)), b(on_host(2));
  connect(a, b);
  std::memset(b.buf.data(), 0x5a, b.buf.size());
  StrangerRing stranger(b.dev, a.dev);
  std::vector<std::byte> payload(4 * 4096, std::byte{0xee});
  auto record = [&](std::uint32_t qpn, std::uint32_t rkey) {
    hca::Packet t;
    t.op = hca::Opcode::kWriteFirst;
    t.last_op = hca::Opcode::kWriteLast;
    t.count = 4;
    t.dst_qpn = qpn;
    t.psn = 0x12;
    t.va = b.addr(0);
    t.rkey = rkey;
    t.dma_length = static_cast<std::uint32_t>(payload.size());
    t.payload_length = t.dma_length;
    const hca::TrainPrefix pre = hca::encode_train(t);
    std::vector<std::byte> r(pre.bytes.begin(), pre.bytes.begin() + static_cast<std::ptrdiff_t>(pre.length));
    r.insert(r.end(), payload.begin(), payload.end());
    return r;
  };
  const auto wrong_key = record(b.qp->qp_num(), b.mr.rkey() ^ 0x100);
  const auto other_slot = record((b.qp->qp_num() & 0xffff) | ((b.dev.host_slot() % 254 + 1) << 16), b.mr.rkey());
  auto count_lie = record(b.qp->qp_num(), b.mr.rkey());
  count_lie[0] = std::byte{0xff};  // count 255 for 16 KiB: an MTU below 256
  auto length_lie = record(b.qp->qp_num(), b.mr.rkey());
  length_lie[6] = std::byte{0x01};  // 64 KiB more than the record holds
  auto huge_count = record(b.qp->qp_num(), b.mr.rkey());
  for (int i = 0; i < 4; ++i) huge_count[i] = std::byte{0xff};
  const TransportCounters before = b.dev.counters();
  stranger.write({&wrong_key, &other_slot, &count_lie, &length_lie, &huge_count}, hca::kShmTrain);
  EXPECT_TRUE(eventually([&] {
    const TransportCounters c = b.dev.counters();
    return c.dropped_for(DropReason::kUnknownQp) > before.dropped_for(DropReason::kUnknownQp) &&
           c.dropped_for(DropReason::kBadLength) >= before.dropped_for(DropReason::kBadLength) + 3;
  })) << "the train for another slot and the three length lies are dropped and counted";
  for (std::size_t i = 0; i < b.buf.size(); ++i) ASSERT_EQ(b.buf[i], 0x5a) << i;
  EXPECT_EQ(b.dev.counters().requests_received, before.requests_received + 4)
      << "only the well-formed train reached the QP (its 4 packets), and wrote nothing";
  write_and_check(a, b, 7);
}

TEST(SameHost, APeerThatGoesAwayIsSeenAndQpsToItRetryOut) {
  PairNode a(on_host(1));
  {
    PairNode b(on_host(2));
    // 16.8 ms a timeout (12): the first WRITE must not retry out on a
    // loaded host (at 1 ms, 9 runs in 200 did under a parallel ctest), and
    // the end still comes after three of them.
    connect(a, b, RcConnection{.access = kAccessAll, .retry_cnt = 2, .timeout = 12});
    write_and_check(a, b, 7);
    EXPECT_EQ(a.dev.wire_stats().same_host_peers, 1u);
  }
  // Its listener and connections closed: a forgets its ring.
  EXPECT_TRUE(eventually([&] {
    (void)a.dev.progress();
    return a.dev.wire_stats().same_host_peers == 0;
  })) << "the ring to a closed device stays";
  const Sge sge{a.addr(0), 100, a.mr.lkey()};
  SendWr w = send_wr(8, sge, WrOpcode::kRdmaWrite);
  w.remote_addr = 4096;
  w.rkey = 1;
  ASSERT_TRUE(a.qp->post_send(w));
  const Wc wc = poll_one(*a.cq);
  EXPECT_EQ(wc.status, WcStatus::kRetryExcErr);
}

// A listener's name is only a name: another user may bind it first. Our
// device then hands it nothing, and sends over the wire.
TEST(SameHost, ANameSquattedByAnotherUserGetsNoRing) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a process as another user";
  PairNode a(on_host(1));
  const std::uint32_t ip = roce_ipv4(a.dev.address());
  const std::uint32_t slot = a.dev.host_slot() % 254 + 1;  // a slot nobody of ours holds at that address
  int ready[2], told[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(told, O_CLOEXEC), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Named as our (root's) listener of `slot` would be.
    sockaddr_un n{};
    n.sun_family = AF_UNIX;
    const std::string name = fmt::format("srdma-{}-{:08x}-{}-{}", 0, ip, kRoceV2UdpPort, slot);
    std::memcpy(n.sun_path + 1, name.data(), name.size());
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    const int l = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (::bind(l, reinterpret_cast<sockaddr*>(&n), len) != 0 || ::listen(l, 4) != 0) ::_exit(3);
    (void)!::write(ready[1], "r", 1);
    const int c = ::accept(l, nullptr, nullptr);
    // What did it get? A hello with descriptors would be a leak.
    std::array<char, 64> buf{};
    alignas(cmsghdr) std::byte ctl[CMSG_SPACE(4 * sizeof(int))] = {};
    iovec iov{buf.data(), buf.size()};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    const ssize_t got = c >= 0 ? ::recvmsg(c, &m, 0) : -1;
    const char verdict = got > 0 || m.msg_controllen != 0 ? 'L' : 'n';
    (void)!::write(told[1], &verdict, 1);
    ::_exit(0);
  }
  char r = 0;
  ASSERT_EQ(::read(ready[0], &r, 1), 1);
  // A QP of ours towards a QP of that slot at that address.
  PairNode b(on_host(2));
  RcConnection c{.access = kAccessAll, .retry_cnt = 1, .timeout = 8};
  c.peer_addr = a.dev.address();
  c.peer_qpn = slot << 16 | 0x0101;
  ASSERT_TRUE(b.qp->connect(c));
  const Sge sge{b.addr(0), 64, b.mr.lkey()};
  SendWr w = send_wr(9, sge, WrOpcode::kRdmaWrite);
  w.remote_addr = 4096;
  w.rkey = 1;
  ASSERT_TRUE(b.qp->post_send(w));
  EXPECT_EQ(poll_one(*b.cq).status, WcStatus::kRetryExcErr);
  EXPECT_GE(b.dev.wire_stats().same_host_refused, 1u);
  EXPECT_EQ(b.dev.wire_stats().same_host_peers, 0u);
  char verdict = 0;
  ASSERT_EQ(::read(told[0], &verdict, 1), 1);
  EXPECT_EQ(verdict, 'n') << "the squatter received a hello or a descriptor";
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  for (int fd : {ready[0], ready[1], told[0], told[1]}) ::close(fd);
}

}  // namespace
}  // namespace srdma::test
