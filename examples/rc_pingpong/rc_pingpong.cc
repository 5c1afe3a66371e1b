// rc_pingpong: an RC ping-pong on softrdma's C++ API (include/srdma only).
//
//   rc_pingpong [-n N] [-s SIZE]                  two devices in this process,
//                                                 on the in-process link
//   rc_pingpong --ip A [-p PORT]                  server, on RoCEv2 (UDP 4791):
//                                                 waits for one client
//   rc_pingpong --ip B --peer A [-p PORT] [-n -s] client: runs the ping-pong
//
// The client SENDs message i (a pattern of i), the server checks it and
// SENDs back its complement, the client checks that: N round trips, each
// timed; it prints the round trip's average, p50 and p99 and half the
// average (one way). Between processes the two sides trade QP numbers,
// PSNs and MTUs over TCP (PORT, default 18516) on the server's address;
// each side's starting PSN comes from getrandom(2), as a stranger on the
// network must not be able to guess it.
// Exits non-zero on any error, a wrong byte or a completion that fails.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "srdma/access.h"
#include "srdma/device.h"
#include "srdma/net.h"

namespace {

using namespace srdma;
using Clock = std::chrono::steady_clock;

struct Options {
  std::uint32_t iterations = 1000;
  std::uint32_t size = 64;
  std::string ip;    // RoCEv2: this side's address
  std::string peer;  // RoCEv2 client: the server's address
  std::uint16_t port = 18516;
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "rc_pingpong: %s\n", what.c_str());
  std::exit(1);
}

template <class T>
T check(Result<T> r, const char* what) {
  if (!r) die(std::string(what) + ": " + r.error().to_string());
  if constexpr (!std::is_void_v<T>) return std::move(*r);
}

std::uint8_t pattern(std::uint32_t i, std::uint32_t j) { return static_cast<std::uint8_t>(i * 131 + j * 7 + 1); }

// One end: a device, a PD, a send and a receive buffer in one MR, a CQ, an RC QP.
struct End {
  Device dev;
  ProtectionDomain pd;
  std::vector<std::uint8_t> buf;  // [0, size): send; [size, 2 size): receive
  MemoryRegion mr;
  std::unique_ptr<CompletionQueue> cq;
  std::unique_ptr<QueuePair> qp;
  std::uint32_t size = 0;

  End(const Profile& profile, const std::string& name, const std::string& ip, std::uint32_t msg_size) : size(msg_size) {
    if (ip.empty()) {
      dev = check(Device::open(profile, name), "open");
    } else {
      NetConfig net;
      net.ip = ip;
      dev = check(Device::open(profile, name, net), "open");
    }
    pd = check(dev.alloc_pd(), "alloc_pd");
    buf.assign(2 * std::size_t{size}, 0);
    mr = check(pd.reg_mr(buf.data(), buf.size(), ACCESS_LOCAL_WRITE), "reg_mr");
    cq = check(dev.create_cq(CqInit{.cqe = 4}), "create_cq");
    QpInitAttr init;
    init.send_cq = cq.get();
    init.recv_cq = cq.get();
    init.cap = QpCaps{.max_send_wr = 2, .max_recv_wr = 2};
    qp = check(pd.create_qp(init), "create_qp");
  }

  std::uint8_t* send_buf() { return buf.data(); }
  std::uint8_t* recv_buf() { return buf.data() + size; }

  void post_recv() {
    Sge sge{reinterpret_cast<std::uint64_t>(recv_buf()), size, mr.lkey()};
    RecvWr wr;
    wr.wr_id = 2;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    check(qp->post_recv(wr), "post_recv");
  }
  void post_send() {
    Sge sge{reinterpret_cast<std::uint64_t>(send_buf()), size, mr.lkey()};
    SendWr wr;
    wr.wr_id = 1;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = WrOpcode::kSend;
    wr.send_flags = SEND_SIGNALED;
    check(qp->post_send(wr), "post_send");
  }
  // Polls until a send (want_send) or a receive has completed, counting
  // the other kind for later (a reply's receive may complete before the
  // send it answers); a failed completion, or none in 10 s, is fatal.
  void wait(bool want_send) {
    auto deadline = Clock::now() + std::chrono::seconds(10);
    for (std::uint32_t spins = 0;; ++spins) {
      std::uint32_t& done = want_send ? sends_done : recvs_done;
      if (done > 0) {
        --done;
        return;
      }
      Wc wc;
      if (cq->poll(std::span<Wc>(&wc, 1)) == 1) {
        if (wc.status != WcStatus::kSuccess)
          die(std::string("completion failed: ") + std::string(wc_status_str(wc.status)));
        if (!wc.is_send_cqe && wc.byte_len != size) die("a message of " + std::to_string(wc.byte_len) + " bytes");
        ++(wc.is_send_cqe ? sends_done : recvs_done);
      } else if ((spins & 1023) == 0 && Clock::now() > deadline) {
        die(std::string("no ") + (want_send ? "send" : "receive") + " completion in 10 s");
      }
    }
  }
  std::uint32_t sends_done = 0, recvs_done = 0;
};

struct Peer {
  std::uint64_t addr = 0;
  std::uint32_t qpn = 0, psn = 0, mtu = 0;
};

void connect(End& e, const Peer& me, const Peer& peer) {
  RcConnection c;
  c.peer_addr = peer.addr;
  c.peer_qpn = peer.qpn;
  c.sq_psn = me.psn;
  c.rq_psn = peer.psn;
  c.path_mtu = std::min(me.mtu, peer.mtu);
  check(e.qp->connect(c), "connect");
}

// A starting PSN: 24 bits from the kernel's CSPRNG (never rand() or a
// seeded generator: one output of those gives the rest away).
std::uint32_t random_psn() {
  std::uint32_t v = 0;
  while (getrandom(&v, sizeof v, 0) != sizeof v) {
    if (errno != EINTR) die(std::string("getrandom: ") + std::strerror(errno));
  }
  return v & 0xFFFFFF;
}

Peer describe(End& e) {
  return Peer{e.dev.address(), e.qp->qp_num(), random_psn(), e.dev.query_port().active_mtu};
}

// The server's half: N times receive message i, check it, answer its complement.
void serve(End& e, std::uint32_t n) {
  for (std::uint32_t i = 0; i < n; ++i) {
    e.wait(false);
    for (std::uint32_t j = 0; j < e.size; ++j)
      if (e.recv_buf()[j] != pattern(i, j)) die("server: message " + std::to_string(i) + " byte " + std::to_string(j) + " wrong");
    if (i + 1 < n) e.post_recv();  // before the answer: the next message finds it
    for (std::uint32_t j = 0; j < e.size; ++j) e.send_buf()[j] = static_cast<std::uint8_t>(~pattern(i, j));
    e.post_send();
    e.wait(true);
  }
}

// The client's half: N round trips, each timed.
std::vector<double> ping(End& e, std::uint32_t n) {
  std::vector<double> rtt_us;
  rtt_us.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    for (std::uint32_t j = 0; j < e.size; ++j) e.send_buf()[j] = pattern(i, j);
    e.post_recv();
    auto t0 = Clock::now();
    e.post_send();
    e.wait(true);
    e.wait(false);
    rtt_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    for (std::uint32_t j = 0; j < e.size; ++j)
      if (e.recv_buf()[j] != static_cast<std::uint8_t>(~pattern(i, j)))
        die("client: answer " + std::to_string(i) + " byte " + std::to_string(j) + " wrong");
  }
  return rtt_us;
}

void report(std::vector<double> rtt, const Options& o, const char* link) {
  std::sort(rtt.begin(), rtt.end());
  double sum = 0;
  for (double v : rtt) sum += v;
  double avg = sum / static_cast<double>(rtt.size());
  auto pct = [&](double p) { return rtt[std::min(rtt.size() - 1, static_cast<std::size_t>(p * static_cast<double>(rtt.size())))]; };
  std::printf("%u messages of %u bytes over %s, every byte checked\n", o.iterations, o.size, link);
  std::printf("round trip: avg %.2f us, p50 %.2f us, p99 %.2f us; one way %.2f us\n", avg, pct(0.50), pct(0.99),
              avg / 2);
}

// --- The TCP side channel between two processes ---

int tcp_socket() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) die(std::string("socket: ") + std::strerror(errno));
  return fd;
}

sockaddr_in sockaddr_of(const std::string& ip, std::uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(check(parse_ipv4(ip), "address"));
  return sa;
}

void send_all(int fd, const void* p, std::size_t n) {
  if (::send(fd, p, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n)) die(std::string("side channel: ") + std::strerror(errno));
}
void recv_all(int fd, void* p, std::size_t n) {
  pollfd pfd{fd, POLLIN, 0};
  if (::poll(&pfd, 1, 30000) != 1) die("side channel: the peer said nothing for 30 s");
  if (::recv(fd, p, n, MSG_WAITALL) != static_cast<ssize_t>(n)) die("side channel: the peer went away");
}

// The client tells the server N and SIZE (the server sizes its buffers by them).
void trade_sizes(int fd, Options& o, bool client) {
  std::uint32_t v[2] = {htonl(o.iterations), htonl(o.size)};
  if (client) {
    send_all(fd, v, sizeof v);
    return;
  }
  recv_all(fd, v, sizeof v);
  o.iterations = ntohl(v[0]);
  o.size = ntohl(v[1]);
  if (o.iterations == 0 || o.size == 0 || o.size > (1u << 24)) die("the client asked for a bad -n or -s");
}

// Each side sends what its peer's QP needs to connect to it.
Peer trade_peers(int fd, const Peer& me) {
  std::uint32_t out[5] = {htonl(static_cast<std::uint32_t>(me.addr >> 32)), htonl(static_cast<std::uint32_t>(me.addr)),
                          htonl(me.qpn), htonl(me.psn), htonl(me.mtu)};
  std::uint32_t in[5];
  send_all(fd, out, sizeof out);
  recv_all(fd, in, sizeof in);
  return Peer{(std::uint64_t{ntohl(in[0])} << 32) | ntohl(in[1]), ntohl(in[2]), ntohl(in[3]), ntohl(in[4])};
}

// Both sides reach this point before either goes on (a one-byte handshake).
void rendezvous(int fd) {
  char c = 1;
  send_all(fd, &c, 1);
  recv_all(fd, &c, 1);
}

Profile small_profile() {
  Profile p;
  p.num_qp = 64;
  p.num_cq = 64;
  p.num_mpt = 1 << 10;
  p.num_mtt_segs = 1 << 12;
  p.num_pd = 64;
  p.num_comp_vectors = 1;
  return check(validate_profile(p), "profile");
}

std::optional<std::uint32_t> number(std::string_view s) {
  char* end = nullptr;
  std::string str(s);
  unsigned long v = std::strtoul(str.c_str(), &end, 0);
  if (str.empty() || *end != '\0' || v > 0xffffffffu) return std::nullopt;
  return static_cast<std::uint32_t>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf("usage: rc_pingpong [-n N] [-s SIZE] [--ip ADDR [--peer SERVER] [-p PORT]]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) die(std::string(a) + " needs a value (or unknown option; see --help)");
    std::string_view v = argv[++i];
    if (a == "--ip") {
      o.ip = v;
    } else if (a == "--peer") {
      o.peer = v;
    } else {
      auto n = number(v);
      if (!n) die(std::string(a) + " '" + std::string(v) + "' is not a number");
      if (a == "-n") o.iterations = *n;
      else if (a == "-s") o.size = *n;
      else if (a == "-p" && *n > 0 && *n < 65536) o.port = static_cast<std::uint16_t>(*n);
      else die("unknown option or bad value: " + std::string(a));
    }
  }
  if (o.iterations == 0 || o.size == 0) die("-n and -s must be at least 1");
  if (!o.peer.empty() && o.ip.empty()) die("--peer needs --ip (this side's address)");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  Profile profile = small_profile();

  if (o.ip.empty()) {  // two devices in this process, on the in-process link
    End server(profile, "srdma0", "", o.size), client(profile, "srdma1", "", o.size);
    Peer s = describe(server), c = describe(client);
    connect(server, s, c);
    connect(client, c, s);
    server.post_recv();
    std::thread t([&] { serve(server, o.iterations); });
    auto rtt = ping(client, o.iterations);
    t.join();
    std::printf("devices %s and %s\n", server.dev.name().c_str(), client.dev.name().c_str());
    report(std::move(rtt), o, "the in-process link");
    return 0;
  }

  // Two processes on RoCEv2: the server waits on --ip, the client names it with --peer.
  bool is_client = !o.peer.empty();
  int fd = tcp_socket();
  if (is_client) {
    sockaddr_in sa = sockaddr_of(o.peer, o.port);
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      if (Clock::now() > deadline) die("no server on " + o.peer + ":" + std::to_string(o.port) + ": " + std::strerror(errno));
      ::close(fd);
      fd = tcp_socket();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } else {
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa = sockaddr_of(o.ip, o.port);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, 1) != 0)
      die("listen on " + o.ip + ":" + std::to_string(o.port) + ": " + std::strerror(errno));
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 60000) != 1) die("no client in 60 s");
    int conn = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) die(std::string("accept: ") + std::strerror(errno));
    ::close(fd);
    fd = conn;
  }
  trade_sizes(fd, o, is_client);
  End e(profile, is_client ? "srdma1" : "srdma0", o.ip, o.size);
  Peer me = describe(e);
  connect(e, me, trade_peers(fd, me));
  if (is_client) {
    rendezvous(fd);  // the server's first receive is posted
    auto rtt = ping(e, o.iterations);
    rendezvous(fd);  // both saw every completion: the devices may close
    std::printf("device %s on %s, server %s\n", e.dev.name().c_str(), o.ip.c_str(), o.peer.c_str());
    report(std::move(rtt), o, "RoCEv2 (UDP)");
  } else {
    e.post_recv();
    rendezvous(fd);
    serve(e, o.iterations);
    rendezvous(fd);
    std::printf("device %s on %s: served %u messages of %u bytes\n", e.dev.name().c_str(), o.ip.c_str(),
                o.iterations, o.size);
  }
  ::close(fd);
  return 0;
}
