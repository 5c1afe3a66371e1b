#include "hca/udp_link.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "hca/queue_engine.h"
#include "hca/ring_train.h"
#include "hca/roce_frame.h"
#include "hca/rx_buffer_pool.h"
#include "hca/sock_addr.h"

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
#endif

namespace srdma::hca {

int device_udp_socket(int extra_flags, int family) {
  const int s = static_cast<int>(::syscall(SYS_socket, family, SOCK_DGRAM | SOCK_CLOEXEC | extra_flags, 0));
  if (s >= 0 && family == AF_INET6) {
    const int on = 1;
    (void)::setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
  }
  return s;
}
namespace {

// The wire orders what a datagram carries before whatever its receiver does.
// ThreadSanitizer cannot see through the kernel's sockets, so under it every
// send releases, and every receive acquires, one process-wide object standing
// for the wire. What sendmmsg reads of registered memory is DMA, as a NIC's
// is, not a C++ access: a retransmission may read a buffer that its owner
// reuses once the ACK of the first copy came (the responder discards the
// late copy by its PSN), so those reads are not reported.
[[maybe_unused]] char tsan_wire;
inline void wire_sending() {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(&tsan_wire);
  AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
#endif
}
inline void wire_sent() {
#if defined(__SANITIZE_THREAD__)
  AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
}
inline void wire_received() {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(&tsan_wire);
#endif
}

constexpr std::size_t kRecvBatch = 16;
// A slot holds more than the longest frame parse_frame() accepts: a longer
// datagram arrives truncated and is dropped as a bad length.
constexpr std::size_t kSlotBytes = 8192;
// receive_once(): while the same-host rings carry the traffic, an empty
// socket sits out at most this many looks.
constexpr std::uint32_t kMaxSocketSkips = 255;
static_assert(kSlotBytes > kMaxFrameBytes);
// With UDP_GRO a datagram is a run of one sender's frames, up to the
// largest UDP datagram: fewer, larger slots.
constexpr std::size_t kGroRecvBatch = 8;
constexpr std::size_t kGroSlotBytes = 65536;
// Receive buffers kept for reuse (rx_buffer_pool.h).
constexpr std::size_t kRxBuffersKept = 4;
constexpr std::size_t kSendBatch = 64;
constexpr std::size_t kMaxIov = 16;  // header, payload pieces, pad+ICRC
// The TTL a packet leaves with unless its AH asks for another (Linux's
// ip_default_ttl, which the sockets keep): then it goes as a control message.
constexpr std::uint8_t kDefaultTtl = 64;
// A GSO send: at most this many segments (the kernel's UDP_MAX_SEGMENTS is
// 64 or more) and this many bytes (one IPv4 datagram).
constexpr std::size_t kMaxGsoSegments = 64;
constexpr std::size_t kMaxGsoBytes = 65535 - 20 - 8;
constexpr int kSocketBuffer = 8 << 20;
constexpr std::size_t kEntropyPorts = 1u << 14;

std::string errno_str(int e) { return std::strerror(e); }

// What a parsed frame's packet learns from how it arrived, on the wire or
// through a same-host ring alike: its link addresses, the source QP (the
// path's, or a UD packet's DETH with its Q_Key) and the IP header's TTL
// and TOS.
void address_arrival(ParsedFrame& f, std::uint64_t src_addr, std::uint64_t dst_addr, int ttl, int tos) {
  Packet& p = f.pkt;
  p.src_addr = src_addr;
  p.dst_addr = dst_addr;
  p.src_qpn = kSrcQpnFromPath;
  if (p.transport == QpType::kUd) {  // a UD packet names its source QP and Q_Key (DETH)
    p.src_qpn = f.deth_src_qpn;
    p.qkey = f.qkey;
  }
  p.hop_limit = static_cast<std::uint8_t>(ttl);
  p.traffic_class = static_cast<std::uint8_t>(tos);
}

// The MTU of the interface that holds `addr` (lo's for loopback addresses
// not configured on an interface: the kernel routes all of 127/8 there).
std::uint32_t interface_mtu(const IpAddress& addr) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return 1500;
  std::string name;
  const std::uint32_t ip = addr.is_v4() ? addr.v4() : 0;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (addr.is_v4() && i->ifa_addr->sa_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      const bool loopback = (i->ifa_flags & IFF_LOOPBACK) && (ip >> 24) == 127;
      if (ntohl(a->sin_addr.s_addr) == ip || loopback) {
        name = i->ifa_name;
        if (ntohl(a->sin_addr.s_addr) == ip) break;
      }
    } else if (!addr.is_v4() && i->ifa_addr->sa_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      if (std::memcmp(&a->sin6_addr, addr.bytes.data(), 16) == 0) {
        name = i->ifa_name;
        break;
      }
    }
  }
  freeifaddrs(list);
  if (name.empty()) return 1500;
  int s = device_udp_socket();
  if (s < 0) return 1500;
  ifreq req{};
  std::strncpy(req.ifr_name, name.c_str(), IFNAMSIZ - 1);
  const int rc = ::ioctl(s, SIOCGIFMTU, &req);
  ::close(s);
  return rc == 0 && req.ifr_mtu > 0 ? static_cast<std::uint32_t>(req.ifr_mtu) : 1500;
}

// Sockets send DF with Identification 0 (see udp_link.h) and get big
// buffers: the kernel's drops are loss, which the transport survives, but
// each one costs a retransmission.
void tune_socket(int fd, int rcvbuf, int family) {
  if (family == AF_INET6) {
    const int pmtu = IPV6_PMTUDISC_DO;  // never fragmented by the sender either
    (void)::setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu, sizeof pmtu);
  } else {
    const int pmtu = IP_PMTUDISC_DO;
    (void)::setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
  }
  const int sndbuf = kSocketBuffer;
  // FORCE passes rmem_max/wmem_max when we may (root); else take what the
  // limits give.
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof sndbuf) != 0)
    (void)::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) != 0)
    (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
}

}  // namespace

// The datagrams a thread has sent inside its SendBatch and not yet handed
// to the kernel.
struct PendingSends {
  UdpLink* link = nullptr;
  std::size_t n = 0;
  struct Datagram {
    FrameHeaders headers;
    std::array<std::byte, 8> tail{};  // pad + ICRC
    std::array<iovec, kMaxIov> iov{};
    std::size_t iovs = 0;
    std::size_t bytes = 0;  // the frame's length
    std::uint32_t dst_ip = 0;     // IPv4 (the same-host path's)
    std::uint64_t dst_addr = 0;   // the link address (either family)
    std::uint32_t dst_qpn = 0;
    std::uint32_t psn = 0;
    bool request = false;
    std::uint8_t ttl = kDefaultTtl;  // IPv4 TTL and TOS, IPv6 hop limit and traffic class (a UD AH's)
    std::uint8_t tos = 0;
    std::uint16_t sport = 0;
    int fd = -1;
    bool corrupted = false;
    // Payload a packet owns (a copy an impairing link made): kept alive
    // until the kernel has copied it.
    std::shared_ptr<const std::vector<std::byte>> owned;
    // A payload of more pieces than the iovecs hold is gathered here.
    std::vector<std::byte> bounce;
  };
  std::array<Datagram, kSendBatch> d;
  // What flush() hands to sendmmsg: one message per datagram or per GSO
  // run of datagrams.
  std::array<mmsghdr, kSendBatch> msgs{};
  std::array<SockAddr, kSendBatch> dsts{};
  std::array<iovec, kSendBatch * kMaxIov> iovs{};
  // UDP_SEGMENT, IP_TTL and IP_TOS (IPV6_HOPLIMIT and IPV6_TCLASS).
  static constexpr std::size_t kCtl = CMSG_SPACE(sizeof(std::uint16_t)) + 2 * CMSG_SPACE(sizeof(int));
  alignas(cmsghdr) std::array<std::array<std::byte, kCtl>, kSendBatch> ctl{};
  std::array<bool, kSendBatch> gso{};  // the message is a GSO send
  std::array<std::size_t, kSendBatch> first{};  // the first datagram of each message
};

namespace {
thread_local PendingSends tls_pending;
// Set while a consumer's poll() receives on that link: its payload-less
// answers (ACKs, NAKs, atomic ACKs) are deferred (see defer()).
thread_local const UdpLink* tls_deferring = nullptr;
// Set between a blocked consumer's prepare_sleep() that parked the rings
// and its end_sleep().
thread_local bool tls_parked_rings = false;
}

Result<std::unique_ptr<UdpLink>> UdpLink::open(const NetConfig& config) {
  auto ip = parse_ip(config.ip);
  if (!ip) return std::unexpected(ip.error());
  if (config.port == 0) return make_error(EINVAL, "the RoCEv2 port cannot be 0");
  const bool v6 = !ip->is_v4();
  if (v6 && (*ip == IpAddress{} || ip->bytes[0] == 0xff))
    return make_error(EINVAL, fmt::format("{} is not an address a device can hold (unspecified or multicast)",
                                          config.ip));
  const std::uint32_t mtu = ib_mtu_for_ip_mtu(interface_mtu(*ip), v6);
  if (mtu == 0) return make_error(EINVAL, fmt::format("the interface of {} has an MTU below 256 + headers", config.ip));
  // An IPv6 device's own address is the first this process names.
  auto address = roce_address_of(*ip);
  if (!address) return std::unexpected(address.error());
  const int family = v6 ? AF_INET6 : AF_INET;
  std::unique_ptr<HostSteering> steer;
  int fd = -1;
  if (config.shared) {
    auto s = HostSteering::join(*ip, config.port);
    if (!s) return std::unexpected(s.error());
    steer = std::move(*s);
    fd = steer->fd();
  } else {
    fd = device_udp_socket(0, family);
    if (fd < 0) return make_error(errno, fmt::format("socket(): {}", errno_str(errno)));
    const SockAddr a = SockAddr::of(*ip, config.port);
    if (::bind(fd, a.ptr(), a.len()) != 0) {
      const int e = errno;
      ::close(fd);
      return make_error(e, fmt::format("cannot bind {}:{}: {}", v6 ? "[" + config.ip + "]" : config.ip, config.port,
                                       errno_str(e)));
    }
  }
  tune_socket(fd, kSocketBuffer, family);
  const int on = 1;
  (void)::setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &on, sizeof on);  // the kernel's drop count
  if (v6) {
    // A UD receive's GRH shows the datagram's hop limit and traffic class.
    (void)::setsockopt(fd, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, &on, sizeof on);
    (void)::setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &on, sizeof on);
  } else {
    // Multicast leaves on the device's interface, not the default route's.
    const in_addr mif{htonl(ip->v4())};
    (void)::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &mif, sizeof mif);
    // A UD receive's GRH area shows the datagram's TTL and TOS.
    (void)::setsockopt(fd, IPPROTO_IP, IP_RECVTTL, &on, sizeof on);
    (void)::setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &on, sizeof on);
  }
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    const int e = errno;
    ::close(fd);
    return make_error(e, fmt::format("eventfd(): {}", errno_str(e)));
  }
  // UDP GSO (Linux 4.18): a run of equal frames leaves in one send.
  const int seg = 1024;
  const bool gso = ::setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof seg) == 0;
  if (gso) {
    const int off = 0;  // per send, in a control message, not for every datagram
    (void)::setsockopt(fd, SOL_UDP, UDP_SEGMENT, &off, sizeof off);
  }
  // UDP GRO (Linux 5.0): such a run arrives as one datagram, its segment
  // size in a control message, instead of being cut up in the kernel.
  const bool gro = config.gro && ::setsockopt(fd, SOL_UDP, UDP_GRO, &on, sizeof on) == 0;
  // The same-host path is an optimisation: a device without it (its name
  // taken, no memfd) still reaches everyone over the wire. IPv4 only so far:
  // an IPv6 device's frames all take the wire.
  std::unique_ptr<SameHostPath> same_host;
  if (steer && config.same_host && !v6) {
    auto p = SameHostPath::open(ip->v4(), config.port, steer->slot());
    if (p) same_host = std::move(*p);
  }
  return std::unique_ptr<UdpLink>(
      new UdpLink(config, *ip, *address, fd, wake, mtu, gso, gro, std::move(steer), std::move(same_host)));
}

// What a receiver needs for one recvmmsg: used by whoever holds rx_busy_.
struct UdpLink::RxState {
  std::array<mmsghdr, kRecvBatch> msgs{};
  std::array<iovec, kRecvBatch> iovs{};
  std::array<SockAddr, kRecvBatch> from{};
  // SO_RXQ_OVFL's drop count, the TTL, the TOS and UDP_GRO's segment size.
  static constexpr std::size_t kCtl = CMSG_SPACE(sizeof(std::uint32_t)) + CMSG_SPACE(sizeof(int)) +
                                      CMSG_SPACE(sizeof(std::uint8_t)) + CMSG_SPACE(sizeof(int)) + 16;
  alignas(cmsghdr) std::array<std::array<std::byte, kCtl>, kRecvBatch> ctl{};
  explicit RxState(bool gro)
      : slots(gro ? kGroRecvBatch : kRecvBatch),
        slot_bytes(gro ? kGroSlotBytes : kSlotBytes),
        pool(RxBufferPool::make(slots * slot_bytes, kRxBuffersKept)) {}
  const std::size_t slots, slot_bytes;  // per recvmmsg
  // The receive buffers: a response that a QP keeps for later (its inbox)
  // keeps the whole batch's buffer alive through Packet::owned, and the
  // next batch then takes another from the pool.
  std::shared_ptr<RxBufferPool> pool;
  RxBufferPool::Buffer buf;
  bool handed_out = false;  // a packet was given a reference to buf
  // A same-host frame's headers, copied out of the ring to be parsed.
  std::array<std::byte, kSlotBytes> scratch{};
  std::uint32_t last_ovfl = 0;
  // receive_once(): whether the rings had the last frame, and how many
  // looks the socket sits out (now, and after its next empty look).
  bool rings_lead = false;
  std::uint32_t socket_skips = 0;
  std::uint32_t skip_span = 0;
};

UdpLink::UdpLink(const NetConfig& config, const IpAddress& ip, std::uint64_t address, int fd, int wake_fd,
                 std::uint32_t active_mtu, bool gso, bool gro, std::unique_ptr<HostSteering> steer,
                 std::unique_ptr<SameHostPath> same_host)
    : config_(config),
      ip_addr_(ip),
      v6_(!ip.is_v4()),
      family_(v6_ ? AF_INET6 : AF_INET),
      ip_(v6_ ? 0 : ip.v4()),
      address_(address),
      steer_(std::move(steer)),
      same_host_(std::move(same_host)),
      fd_(fd),
      wake_fd_(wake_fd),
      active_mtu_(active_mtu),
      gso_(gso && config.gso),
      gro_(gro),
      rx_(std::make_unique<RxState>(gro)),
      sockets_(new std::atomic<int>[kEntropyPorts]) {
  for (std::size_t i = 0; i < kEntropyPorts; ++i) sockets_[i].store(-1, std::memory_order_relaxed);
}

UdpLink::~UdpLink() {
  stop();
  if (tls_pending.link == this) {  // never sent: this thread's batch outlived the link
    tls_pending.n = 0;
    tls_pending.link = nullptr;
  }
  for (std::size_t i = 0; i < kEntropyPorts; ++i) {
    const int s = sockets_[i].load(std::memory_order_relaxed);
    if (s >= 0 && s != fd_) ::close(s);
  }
  for (auto& [group, g] : groups_) ::close(g.fd);
  ::close(wake_fd_);
  ::close(fd_);
}

std::uint64_t UdpLink::address() const { return address_; }

bool UdpLink::knows(std::uint64_t addr) const {
  // Any host of the device's family may be a peer; whether one answers is
  // the transport's business (its timeout), as on a real network. An IPv6
  // peer is one this process named (net.h's table).
  if (v6_) return roce6_known(addr) && ip_of_roce_address(addr) != IpAddress{};
  return is_roce_address(addr) && roce_ipv4(addr) != 0 && roce_ipv4(addr) != 0xffffffff;
}

void UdpLink::start(QueueEngine& engine) {
  engine_ = &engine;
  // A rebuild's probes may be ours to answer: whoever rebuilds receives.
  if (steer_)
    steer_->set_pump([this] {
      if (rx_busy_.exchange(true, std::memory_order_acquire)) return;  // another receiver answers
      (void)receive_once();
      rx_busy_.store(false, std::memory_order_release);
    });
  rx_thread_ = std::thread([this] { receive_loop(); });
}

void UdpLink::stop() {
  if (!rx_thread_.joinable()) return;
  stopping_.store(true, std::memory_order_release);
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  rx_thread_.join();
  // A consumer's poll() may still be delivering: wait for it, and keep any
  // later one out.
  while (rx_busy_.exchange(true, std::memory_order_acquire)) std::this_thread::yield();
  // Answers a consumer left deferred go out now: a program that polled its
  // last completion and closes the device still acknowledges its peer's
  // last message.
  flush_deferred();
}

int UdpLink::socket_for(std::uint16_t sport) {
  std::atomic<int>& slot = sockets_[sport & (kEntropyPorts - 1)];
  int s = slot.load(std::memory_order_acquire);
  if (s >= 0) [[likely]]
    return s;
  std::lock_guard lock(sockets_mu_);
  s = slot.load(std::memory_order_relaxed);
  if (s >= 0) return s;
  s = device_udp_socket(0, family_);
  const SockAddr a = SockAddr::of(ip_addr_, sport);
  // Shared with this user's other processes on the address, as the
  // device's port is: each may send from the same entropy port.
  const int on = 1;
  if (s >= 0 && steer_) (void)::setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on);
  if (s >= 0 && ::bind(s, a.ptr(), a.len()) == 0) {
    tune_socket(s, 4096, family_);  // it only sends: peers answer to the device's port
    if (!v6_) {
      const in_addr mif{htonl(ip_)};
      (void)::setsockopt(s, IPPROTO_IP, IP_MULTICAST_IF, &mif, sizeof mif);
    }
  } else {
    if (s >= 0) ::close(s);
    s = fd_;  // taken by someone else: send from the device's port
    port_fallbacks_.fetch_add(1, std::memory_order_relaxed);
  }
  slot.store(s, std::memory_order_release);
  return s;
}

bool UdpLink::send(Packet&& in) {
  if (!knows(in.dst_addr)) return false;
  if (tls_deferring == this && is_response(in.op)) {
    if (in.payload_length == 0 && in.count == 1) {
      defer(std::move(in));
      return true;
    }
    flush_deferred();  // an answer that cannot wait goes after those that did
  } else if (tls_deferring != this && has_deferred_.load(std::memory_order_acquire)) {
    // A consumer's reply goes behind the ACK of what it answers, in the
    // same sendmmsg: the peer completes its send before it sees the reply,
    // as with an HCA, which acknowledges on arrival. Programs that wait for
    // both on one completion channel (perftest's -e loops) count on it.
    std::lock_guard lock(deferred_mu_);  // to the sendmmsg (flush_deferred)
    take_deferred();
    enqueue(std::move(in));
    flush_pending();
    return true;
  }
  enqueue(std::move(in));
  return true;
}

void UdpLink::enqueue(Packet&& in) {
  // A train goes whole (in parts of at most a ring's share) to a peer on
  // this host, packet by packet to any other.
  if (const std::uint32_t slot = in.count > 1 ? ring_slot(in.dst_addr, in.dst_qpn) : 0; slot != 0) {
    const std::uint32_t mtu = train_mtu(in);
    const auto most = static_cast<std::uint32_t>(
        std::max<std::size_t>(2, (same_host_->max_frame_bytes() - kMaxTrainPrefix) / mtu));
    split_train(in, mtu, most, [&](Packet& part) {
      if (part.count == 1 || !send_train_same_host(part, slot)) enqueue_packets(part);
    });
  } else {
    enqueue_packets(in);
  }
  if (!SendBatch::open()) flush_pending();
}

std::uint32_t UdpLink::ring_slot(std::uint64_t dst_addr, std::uint32_t dst_qpn) const {
  // QP0/QP1 (slot 0) and multicast (slot 255) are the wire's, as is a
  // device's traffic with itself (its own slot on its own address: the
  // same slot on another address is another device).
  if (!same_host_ || v6_) return 0;
  const std::uint32_t slot = dst_qpn >> 16;
  if (slot < HostSteering::kFirstSlot || slot > HostSteering::kLastSlot ||
      (slot == same_host_->slot() && roce_ipv4(dst_addr) == ip_))
    return 0;
  return slot;
}

bool UdpLink::carries_trains_to(std::uint64_t addr, std::uint32_t qpn) {
  const std::uint32_t slot = ring_slot(addr, qpn);
  return slot != 0 && same_host_->reachable(roce_ipv4(addr), slot);
}

bool UdpLink::send_train_same_host(const Packet& train, std::uint32_t slot) {
  const TrainPrefix prefix = encode_train(train);
  thread_local std::vector<std::span<const std::byte>> pieces;
  pieces.clear();
  pieces.emplace_back(prefix.bytes.data(), prefix.length);
  std::uint64_t left = train.payload_length;
  for (const MemPiece& m : std::span<const MemPiece>(train.payload)) {
    if (left == 0) break;
    const std::uint64_t n = std::min(m.length, left);
    pieces.emplace_back(m.addr, n);
    left -= n;
  }
  wire_sending();
  const SameHostPath::Sent r = same_host_->send(
      roce_ipv4(train.dst_addr), slot, pieces, train.hop_limit != 0 ? train.hop_limit : kDefaultTtl,
      train.traffic_class, kShmTrain | (train.corrupted ? kShmCorrupted : 0), SendBatch::open());
  wire_sent();
  return r != SameHostPath::Sent::kNotHere;  // kFull: lost, as a datagram the kernel dropped
}

void UdpLink::enqueue_packets(const Packet& in) {
  PendingSends& q = tls_pending;
  if (q.link != this || q.n == kSendBatch) flush_pending();
  q.link = this;
  unroll(in, in.count > 1 ? train_mtu(in) : active_mtu_, [&](Packet& p) {
    if (q.n == kSendBatch) {
      flush_pending();
      q.link = this;
    }
    PendingSends::Datagram& g = q.d[q.n];
    g.fd = p.udp_sport != 0 ? socket_for(p.udp_sport) : fd_;
    g.sport = g.fd == fd_ ? config_.port : p.udp_sport;
    g.dst_ip = v6_ ? 0 : roce_ipv4(p.dst_addr);
    g.dst_addr = p.dst_addr;
    g.dst_qpn = p.dst_qpn;
    g.psn = p.psn;
    g.request = is_request(p.op);
    // Hop limit 0 means unset (a zeroed GRH); the kernel refuses TTL 0.
    g.ttl = p.hop_limit != 0 ? p.hop_limit : kDefaultTtl;
    g.tos = p.traffic_class;
    g.corrupted = p.corrupted;
    g.headers = build_headers(p);
    const FrameHeaders& h = g.headers;
    std::size_t k = 0;
    g.iov[k++] = {const_cast<std::byte*>(h.bytes.data()), h.length};
    const std::span<const MemPiece> pieces = p.payload;
    std::uint32_t left = p.payload_length;
    if (pieces.size() <= kMaxIov - 2) {
      for (const MemPiece& m : pieces) {
        if (left == 0) break;
        const std::size_t n = std::min<std::uint64_t>(m.length, left);
        g.iov[k++] = {m.addr, n};
        left -= static_cast<std::uint32_t>(n);
      }
    } else {
      g.bounce.clear();
      for (const MemPiece& m : pieces) {
        const std::size_t n = std::min<std::uint64_t>(m.length, left);
        g.bounce.insert(g.bounce.end(), m.addr, m.addr + n);
        left -= static_cast<std::uint32_t>(n);
      }
      g.iov[k++] = {g.bounce.data(), g.bounce.size()};
    }
    g.tail = {};
    g.iov[k++] = {g.tail.data(), std::size_t{h.pad} + kIcrcBytes};
    g.iovs = k;
    g.bytes = frame_bytes(h.length, p.payload_length);
    if (same_host_ && send_same_host(g.dst_addr, g.dst_qpn, std::span(g.iov.data(), g.iovs), g.ttl, g.tos, g.corrupted))
      return;  // copied into the peer's ring
    g.owned = p.owned;
    ++q.n;
  });
}

void UdpLink::end_batch() {
  if (tls_deferring != this && has_deferred_.load(std::memory_order_acquire))
    flush_deferred();  // what was deferred since this thread's last request
  else
    flush_pending();
}

// A consumer that receives a request in poll() usually answers it with a
// request of its own right after (a ping-pong's reply): its ACK then leaves
// in the same sendmmsg as that reply, one system call where there were two.
// Deferred answers go out, ahead of whatever is sent then, at the next
// send or poll() on this link by any thread, or when the receive thread
// next looks (within kConsumerCheckNs): a consumer that stops polling
// delays an ACK by that much at most, not until its peer's timeout.
// Only payload-less packets wait: a READ response's payload is the MR's
// memory, which must not be read after its delivery ends.
void UdpLink::defer(Packet&& p) {
  {
    std::lock_guard lock(deferred_mu_);
    deferred_.push_back(std::move(p));
    has_deferred_.store(true, std::memory_order_seq_cst);
  }
  // A receive thread asleep in poll() would not look again until traffic
  // comes: wake it, so that its bound holds (a Dekker pair with the store
  // of parked_ and the load of has_deferred_ in receive_loop).
  if (parked_.load(std::memory_order_seq_cst)) {
    const std::uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }
}

void UdpLink::flush_deferred() {
  if (!has_deferred_.load(std::memory_order_acquire)) {
    flush_pending();
    return;
  }
  // From the take to the sendmmsg under the lock: two threads taking turns
  // cannot put one QP's later answer on the wire before its earlier one.
  std::lock_guard lock(deferred_mu_);
  take_deferred();
  flush_pending();
}

void UdpLink::take_deferred() {
  for (Packet& p : deferred_) enqueue(std::move(p));
  deferred_.clear();
  has_deferred_.store(false, std::memory_order_relaxed);
}

void UdpLink::flush_pending() {
  SameHostPath::flush_thread();
  PendingSends& q = tls_pending;
  UdpLink* link = q.link;
  if (q.n == 0 || link == nullptr) {
    q.n = 0;
    return;
  }
  // Group the datagrams into messages: a run to one destination from one
  // socket whose frames have one size (the last may be shorter) goes as
  // one UDP GSO send, which the kernel cuts into those frames.
  std::size_t msgs = 0, iov_used = 0;
  for (std::size_t i = 0; i < q.n;) {
    const PendingSends::Datagram& a = q.d[i];
    std::size_t j = i + 1, bytes = a.bytes;
    if (link->gso_.load(std::memory_order_relaxed)) {
      // The packets of one train (one QP, one direction, consecutive PSNs)
      // go together, and at its end the answer this side owes that QP
      // (a deferred ACK behind a ping-pong's reply): one skb through the
      // stack instead of two, about 1.3 us of a half round trip on lo.
      // A capture before segmentation (lo) shows such a run as one packet.
      while (j < q.n && j - i < kMaxGsoSegments && q.d[j].fd == a.fd && q.d[j].dst_addr == a.dst_addr &&
             q.d[j].dst_qpn == a.dst_qpn && q.d[j].ttl == a.ttl && q.d[j].tos == a.tos &&
             q.d[j].bytes <= a.bytes && q.d[j - 1].bytes == a.bytes &&
             bytes + q.d[j].bytes <= kMaxGsoBytes) {
        const bool train = q.d[j].request == a.request && q.d[j].psn == psn_add(q.d[j - 1].psn, 1);
        const bool answer = a.request && !q.d[j].request && q.d[j].bytes < a.bytes;
        if (!train && !answer) break;
        bytes += q.d[j].bytes;
        ++j;
        if (answer) break;
      }
    }
    mmsghdr& m = q.msgs[msgs];
    m = {};
    q.first[msgs] = i;
    q.dsts[msgs] = SockAddr::of(link->v6_ ? ip_of_roce_address(a.dst_addr) : IpAddress::of_v4(a.dst_ip),
                                link->config_.port);
    m.msg_hdr.msg_name = q.dsts[msgs].ptr();
    m.msg_hdr.msg_namelen = q.dsts[msgs].len();
    m.msg_hdr.msg_iov = &q.iovs[iov_used];
    for (std::size_t k = i; k < j; ++k) {
      PendingSends::Datagram& g = q.d[k];
      // Segment k - i of a GSO send leaves with IPv4 Identification k - i
      // (the kernel numbers the segments from the send's 0): the ICRC
      // covers it.
      IpUdpFields ip{link->ip_, g.dst_ip, g.sport, link->config_.port,
                     static_cast<std::uint16_t>(k - i), true};
      if (link->v6_) {  // no Identification: the same ICRC whichever segment
        ip.ipv6 = true;
        ip.src_ip6 = link->ip_addr_.bytes;
        ip.dst_ip6 = ip_of_roce_address(g.dst_addr).bytes;
      }
      std::uint32_t icrc = compute_icrc(ip, std::span(g.headers.bytes.data(), g.headers.length),
                                        std::span<const MemPiece>(), 0, 0);
      if (g.iovs > 2) {  // payload: the ICRC runs over it and the pad too
        std::vector<MemPiece> pieces;
        std::uint32_t len = 0;
        for (std::size_t v = 1; v + 1 < g.iovs; ++v) {
          pieces.push_back(MemPiece{static_cast<std::byte*>(g.iov[v].iov_base), g.iov[v].iov_len});
          len += static_cast<std::uint32_t>(g.iov[v].iov_len);
        }
        icrc = compute_icrc(ip, std::span(g.headers.bytes.data(), g.headers.length), pieces, len, g.headers.pad);
      } else if (g.headers.pad != 0) {
        icrc = compute_icrc(ip, std::span(g.headers.bytes.data(), g.headers.length), std::span<const MemPiece>(),
                            0, g.headers.pad);
      }
      if (g.corrupted) icrc ^= 1;  // an impairing link's corruption: the wire shows it as a bad ICRC
      for (int b = 0; b < 4; ++b) g.tail[g.headers.pad + b] = static_cast<std::byte>(icrc >> (8 * b));  // LE
      for (std::size_t v = 0; v < g.iovs; ++v) q.iovs[iov_used++] = g.iov[v];
      m.msg_hdr.msg_iovlen += g.iovs;
    }
    q.gso[msgs] = j - i > 1;
    // (An RC request under congestion control says ECT(0): one TOS.)
    const bool set_ttl = a.ttl != kDefaultTtl, set_tos = a.tos != 0;
    if (q.gso[msgs] || set_ttl || set_tos) {
      // Control messages only where needed: the common send has none.
      std::byte* ctl = q.ctl[msgs].data();
      std::size_t used = 0;
      auto add = [&](int level, int type, const void* v, std::size_t n) {
        auto* c = reinterpret_cast<cmsghdr*>(ctl + used);
        c->cmsg_level = level;
        c->cmsg_type = type;
        c->cmsg_len = CMSG_LEN(n);
        std::memcpy(CMSG_DATA(c), v, n);
        used += CMSG_SPACE(n);
      };
      if (q.gso[msgs]) {
        const auto seg = static_cast<std::uint16_t>(a.bytes);
        add(SOL_UDP, UDP_SEGMENT, &seg, sizeof seg);
      }
      const int ttl = a.ttl, tos = a.tos;
      if (set_ttl) add(link->v6_ ? IPPROTO_IPV6 : IPPROTO_IP, link->v6_ ? IPV6_HOPLIMIT : IP_TTL, &ttl, sizeof ttl);
      if (set_tos) add(link->v6_ ? IPPROTO_IPV6 : IPPROTO_IP, link->v6_ ? IPV6_TCLASS : IP_TOS, &tos, sizeof tos);
      m.msg_hdr.msg_control = ctl;
      m.msg_hdr.msg_controllen = used;
    }
    ++msgs;
    i = j;
  }
  std::size_t done = 0;
  while (done < msgs) {
    // One sendmmsg per run of messages from the same socket.
    const int fd = q.d[q.first[done]].fd;
    std::size_t end = done + 1;
    while (end < msgs && q.d[q.first[end]].fd == fd) ++end;
    wire_sending();
    const int rc = ::sendmmsg(fd, &q.msgs[done], static_cast<unsigned>(end - done), 0);
    wire_sent();
    link->send_calls_.fetch_add(1, std::memory_order_relaxed);
    if (rc > 0) {
      done += static_cast<std::size_t>(rc);
      continue;
    }
    if (rc < 0 && errno == EINTR) continue;
    // The kernel refused this message (no buffer, no route, too big): its
    // frames are lost, and the transport's timeout resends them. A GSO
    // send refused as such (a route without checksum offload or with
    // IPsec: EIO; a segment above the route's MTU: EINVAL) turns GSO off
    // for the link, so that the resend goes frame by frame.
    if (rc < 0 && (errno == EIO || errno == EINVAL) && q.gso[done])
      link->gso_.store(false, std::memory_order_relaxed);
    link->send_errors_.fetch_add(1, std::memory_order_relaxed);
    ++done;
  }
  link->frames_sent_.fetch_add(q.n, std::memory_order_relaxed);
  for (std::size_t i = 0; i < q.n; ++i) q.d[i].owned.reset();
  q.n = 0;
  q.link = nullptr;
}


namespace {
std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// While a consumer polls the device (poll()), the receive thread leaves the
// socket to it, looking again this often whether it still polls: one
// thread per process spins, not two. A consumer that goes on to spin on
// memory (an RDMA WRITE's last byte) without polling waits this long at
// most for a packet; one that blocks on a channel receives while it waits
// (prepare_sleep, core/cq.cc).
constexpr long kConsumerCheckNs = 100'000;
// While traffic flows, the receive thread looks at the same-host path's
// connections (a new peer's ring, a peer gone) this often.
constexpr std::int64_t kControlNs = 1'000'000;
}  // namespace

int UdpLink::poll() {
  // A count, not a clock read: the clock costs more than the poll on some
  // virtual machines, and the receive thread only asks whether it moved.
  consumer_polls_.fetch_add(1, std::memory_order_relaxed);
  if (rx_busy_.exchange(true, std::memory_order_acquire)) return 0;  // someone else is receiving
  flush_deferred();  // before anything newer of theirs can be answered
  tls_deferring = this;
  const int n = receive_once();
  tls_deferring = nullptr;
  rx_busy_.store(false, std::memory_order_release);
  return n;
}

bool UdpLink::prepare_sleep(std::vector<pollfd>& fds) {
  wire_fds(fds);
  tls_parked_rings = false;
  if (!same_host_) return true;
  // The rings ring only parked ones' doorbells. Parking needs the receiver;
  // whoever holds it now receives, and wakes this thread through its
  // channel as before.
  if (rx_busy_.exchange(true, std::memory_order_acquire)) return true;
  const bool idle = same_host_->park_rings(fds);
  rx_busy_.store(false, std::memory_order_release);
  tls_parked_rings = true;
  return idle;
}

void UdpLink::end_sleep() {
  if (tls_parked_rings) same_host_->unpark();
  tls_parked_rings = false;
}

int UdpLink::receive_once() {
  RxState& r = *rx_;
  // While the rings carry the traffic (the last frame came from one), an
  // empty socket is looked at less and less often, down to one look in
  // kMaxSocketSkips + 1: an empty recvmmsg is a system call, most of a
  // same-host round trip's cost, and a ring is a load. The receive thread,
  // standing aside meanwhile, watches the socket and says when it is
  // readable (socket_ready_); the first datagram gives it every look back.
  int n = 0;
  const bool ready = socket_ready_.load(std::memory_order_relaxed) &&
                     socket_ready_.exchange(false, std::memory_order_relaxed);
  if (ready || r.socket_skips == 0) {
    n = receive_datagrams();
    if (n > 0) {
      r.rings_lead = false;
      r.skip_span = 0;
    } else if (r.rings_lead) {
      r.skip_span = std::min(kMaxSocketSkips, r.skip_span * 2 + 1);
    }
    r.socket_skips = r.rings_lead ? r.skip_span : 0;
  } else {
    --r.socket_skips;
  }
  if (same_host_) {
    if (control_due_.load(std::memory_order_relaxed)) [[unlikely]]
      same_host_control_locked();
    if (const int rings = receive_same_host(); rings > 0) {
      n += rings;
      r.rings_lead = true;
    }
  }
  if (has_groups_.load(std::memory_order_acquire)) n += receive_groups();
  return n;
}

int UdpLink::receive_datagrams() {
  RxState& r = *rx_;
  // A buffer whose frames were handed out (a READ response's payload, read
  // later by the completer on another thread) is never written again: the
  // next batch gets a new one. One that nobody was given is reused.
  if (!r.buf || r.handed_out) {
    r.buf = r.pool->take();
    r.handed_out = false;
  }
  for (std::size_t i = 0; i < r.slots; ++i) {
    r.iovs[i] = {r.buf->data() + i * r.slot_bytes, r.slot_bytes};
    r.msgs[i] = {};
    r.msgs[i].msg_hdr.msg_name = &r.from[i];
    r.msgs[i].msg_hdr.msg_namelen = sizeof r.from[i].u;
    r.msgs[i].msg_hdr.msg_iov = &r.iovs[i];
    r.msgs[i].msg_hdr.msg_iovlen = 1;
    r.msgs[i].msg_hdr.msg_control = r.ctl[i].data();
    r.msgs[i].msg_hdr.msg_controllen = RxState::kCtl;
  }
  const int n = ::recvmmsg(fd_, r.msgs.data(), static_cast<unsigned>(r.slots), MSG_DONTWAIT, nullptr);
  // EAGAIN: nothing; ECONNREFUSED and friends (ICMP errors): nothing to read.
  if (n <= 0) return 0;
  wire_received();
  recv_calls_.fetch_add(1, std::memory_order_relaxed);
  datagrams_received_.fetch_add(static_cast<std::uint64_t>(n), std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    // The answers to one datagram's frames go out together, and before the
    // next datagram is looked at: a peer waiting for an ACK to open its
    // window should not wait for the rest of the batch.
    SendBatch batch(*this);
    msghdr& h = r.msgs[i].msg_hdr;
    int ttl = 64, tos = 0, segment = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
      if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) std::memcpy(&segment, CMSG_DATA(c), sizeof segment);
      if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TTL) std::memcpy(&ttl, CMSG_DATA(c), sizeof ttl);
      if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS)
        tos = std::to_integer<int>(*reinterpret_cast<const std::byte*>(CMSG_DATA(c)));
      if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_HOPLIMIT) std::memcpy(&ttl, CMSG_DATA(c), sizeof ttl);
      if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) std::memcpy(&tos, CMSG_DATA(c), sizeof tos);
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
        std::uint32_t v;  // the kernel's running count of drops on this socket
        std::memcpy(&v, CMSG_DATA(c), sizeof v);
        if (v != r.last_ovfl) {
          rx_overruns_.fetch_add(v - r.last_ovfl, std::memory_order_relaxed);
          r.last_ovfl = v;
        }
      }
    }
    IpAddress src;
    std::uint16_t src_port = 0;
    if ((h.msg_flags & MSG_TRUNC) || !r.from[i].ip_port(family_, h.msg_namelen, src, src_port)) {
      dropped_[static_cast<std::size_t>(DropReason::kBadLength)].fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    const std::uint32_t src_ip = v6_ ? 0 : src.v4();
    IpUdpFields ip{src_ip, ip_, src_port, config_.port, 0, true};
    if (v6_) {
      ip.ipv6 = true;
      ip.src_ip6 = src.bytes;
      ip.dst_ip6 = ip_addr_.bytes;
    }
    // With UDP_GRO a datagram may be a run of frames of one sender (one
    // GSO send on lo, or segments a NIC's GRO joined), cut every `segment`
    // bytes, the last piece shorter: each piece is a frame of its own, its
    // Identification its index in the run (the ICRC's window covers it).
    const std::span<const std::byte> datagram(r.buf->data() + i * r.slot_bytes, r.msgs[i].msg_len);
    const std::size_t step =
        segment > 0 && static_cast<std::size_t>(segment) < datagram.size() ? static_cast<std::size_t>(segment)
                                                                           : datagram.size();
    for (std::size_t off = 0; off < datagram.size(); off += step)
      receive_frame(datagram.subspan(off, std::min(step, datagram.size() - off)), src, ip, ttl, tos);
  }
  return n;
}

void UdpLink::receive_frame(std::span<const std::byte> frame, const IpAddress& src, const IpUdpFields& ip, int ttl,
                            int tos) {
  RxState& r = *rx_;
  if (steer_) {
    const HostSteering::Verdict v = steer_->admit(frame, src);
    if (v == HostSteering::Verdict::kProbe) return;
    if (v == HostSteering::Verdict::kForeign) {  // another process's QP: never answered for it
      dropped_[static_cast<std::size_t>(DropReason::kUnknownQp)].fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  ParsedFrame f;
  const FrameError e = parse_frame(frame, ip, config_.check_icrc, f);
  if (e != FrameError::kNone) {
    dropped_[static_cast<std::size_t>(drop_reason_of(e))].fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Packet& p = f.pkt;
  // An IPv6 source this process never named has no link address (the
  // table grows by what we name): no QP here can be its peer, so it is
  // dropped as a foreign source. Except a MAD for QP1, a CM message from
  // a host that reaches us first (a REQ to a listener), whose source the
  // table takes within the CM's bounded allowance (net.h).
  std::uint64_t src_addr = v6_ ? known_roce_address(src) : roce_address(ip.src_ip);
  if (src_addr == 0 && v6_ && p.dst_qpn == kGsiQpn) src_addr = roce_address_of_arrival(src);
  if (src_addr == 0) {
    dropped_[static_cast<std::size_t>(DropReason::kBadSource)].fetch_add(1, std::memory_order_relaxed);
    return;
  }
  address_arrival(f, src_addr, address_, ttl, tos);
  if (p.payload_length != 0 && is_response(p.op)) {
    p.owned = r.buf;
    r.handed_out = true;
  }
  frames_received_.fetch_add(1, std::memory_order_relaxed);
  engine_->receive(std::move(p));
}

bool UdpLink::send_same_host(std::uint64_t dst_addr, std::uint32_t dst_qpn, std::span<const iovec> iov,
                             std::uint8_t ttl, std::uint8_t tos, bool corrupted) {
  const std::uint32_t slot = ring_slot(dst_addr, dst_qpn);
  if (slot == 0) return false;
  std::array<std::span<const std::byte>, kMaxIov> pieces;
  for (std::size_t v = 0; v < iov.size(); ++v)
    pieces[v] = std::span(static_cast<const std::byte*>(iov[v].iov_base), iov[v].iov_len);
  wire_sending();
  // Inside a SendBatch the ring is published when the batch ends
  // (flush_pending), one fence for the batch's frames.
  const SameHostPath::Sent r = same_host_->send(roce_ipv4(dst_addr), slot, std::span(pieces.data(), iov.size()), ttl, tos,
                                                corrupted ? kShmCorrupted : 0, SendBatch::open());
  wire_sent();
  return r != SameHostPath::Sent::kNotHere;  // kFull: lost, as a datagram the kernel dropped
}

int UdpLink::receive_same_host() {
  RxState& r = *rx_;
  return same_host_->receive(static_cast<int>(kRecvBatch), [&](const ShmRecord& rec, std::uint32_t src_ip) {
    wire_received();
    SendBatch batch(*this);
    auto drop = [&](DropReason why) {
      dropped_[static_cast<std::size_t>(why)].fetch_add(1, std::memory_order_relaxed);
      return false;
    };
    if (rec.flags & kShmCorrupted) return drop(DropReason::kBadIcrc);
    // The producer may rewrite the ring while we read it: the headers are
    // parsed from a private copy (parse_frame reads nothing past them when
    // it does not check the ICRC, which no wire computed here), and only
    // the payload is read in place.
    ParsedFrame f;
    if (rec.flags & kShmTrain) {
      const FrameError e = decode_train(rec.frame, std::span<std::byte, kMaxTrainPrefix>(r.scratch.data(), kMaxTrainPrefix),
                                        active_mtu_, f);
      if (e != FrameError::kNone) return drop(drop_reason_of(e));
    } else {
      const std::size_t len = rec.frame.size();
      if (len > kMaxFrameBytes) return drop(DropReason::kBadLength);
      std::memcpy(r.scratch.data(), rec.frame.data(), std::min(len, kMaxHeaderBytes));
      const IpUdpFields ip{src_ip, ip_, config_.port, config_.port, 0, true};
      const FrameError e = parse_frame(std::span<const std::byte>(r.scratch.data(), len), ip, false, f);
      if (e != FrameError::kNone) return drop(drop_reason_of(e));
      if (f.pkt.payload_length != 0) {  // in place, read only, as a datagram's
        const std::size_t at = static_cast<std::size_t>(f.pkt.payload.front().addr - r.scratch.data());
        const std::uint32_t n = f.pkt.payload_length;
        f.pkt.payload = PieceList();
        f.pkt.payload.push_back(MemPiece{const_cast<std::byte*>(rec.frame.data() + at), n});
      }
    }
    Packet& p = f.pkt;
    // A ring carries frames for this device's QPs only.
    if ((p.dst_qpn >> 16) != same_host_->slot()) return drop(DropReason::kUnknownQp);
    if (p.payload_length != 0 && is_response(p.op)) {
      // A response may wait in its QP's inbox after the ring moved on:
      // it keeps a copy (as a datagram keeps its receive buffer).
      const std::byte* src = p.payload.front().addr;
      auto copy = std::make_shared<std::vector<std::byte>>(src, src + p.payload_length);
      p.payload = PieceList();
      p.payload.push_back(MemPiece{copy->data(), p.payload_length});
      p.owned = std::move(copy);
    }
    address_arrival(f, roce_address(src_ip), address_, rec.ttl, rec.tos);
    engine_->receive(std::move(p));
    return true;
  });
}

void UdpLink::same_host_control() {
  if (!same_host_) return;
  if (rx_busy_.exchange(true, std::memory_order_acquire)) {
    control_due_.store(true, std::memory_order_relaxed);
    return;
  }
  same_host_control_locked();
  rx_busy_.store(false, std::memory_order_release);
}

void UdpLink::same_host_control_locked() {
  control_due_.store(false, std::memory_order_relaxed);
  // A consumer that changed the channels changed the receive thread's poll
  // set too: it looks again.
  if (same_host_->control() && !on_rx_thread()) {
    const std::uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }
}

void UdpLink::receive_loop() {
  rx_thread_id_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  const std::int64_t busy_ns = std::int64_t{config_.busy_poll_us} * 1000;
  std::int64_t last_traffic = now_ns();
  std::uint64_t polls_seen = consumer_polls_.load(std::memory_order_relaxed);
  std::vector<pollfd> aside;  // what it watches while a consumer receives
  std::int64_t now = 0;  // the clock as last read (below)
  std::uint32_t turns = 0;
  while (!stopping_.load(std::memory_order_acquire)) {
    // A consumer polls, or holds the receiver now (it is inside a poll: a
    // recvmmsg takes longer than a turn of this loop), so it receives:
    // look again in a while whether it still does. (Spinning here instead
    // raced it for the receiver, and each turn's parked_ made its deferred
    // ACKs write the wakeup fd.)
    if (const std::uint64_t polls = consumer_polls_.load(std::memory_order_relaxed);
        polls != polls_seen || rx_busy_.load(std::memory_order_relaxed)) {
      polls_seen = polls;
      // The consumer looks at the socket only now and then while the rings
      // lead (receive_once): watch it for them, and say when it is readable.
      aside.assign(1, pollfd{wake_fd_, POLLIN, 0});
      if (!socket_ready_.load(std::memory_order_relaxed)) wire_fds(aside);
      const timespec check{0, kConsumerCheckNs};
      if (::ppoll(aside.data(), aside.size(), &check, nullptr) > 0 &&
          std::any_of(aside.begin() + 1, aside.end(), [](const pollfd& f) { return (f.revents & POLLIN) != 0; }))
        socket_ready_.store(true, std::memory_order_relaxed);
      last_traffic = 0;
      now = 0;  // read again next turn
      drain_wakeups();
      same_host_control();  // a new peer's ring is taken while the consumer polls
      if (steer_ && steer_->rebuild_due(now_ns())) (void)steer_->try_rebuild();
      if (consumer_polls_.load(std::memory_order_relaxed) == polls_seen) flush_deferred();  // it stopped
      continue;
    }
    // The clock is read every 16th turn while busy: it costs more than a
    // turn on some virtual machines (a tenth of a receiving thread's time).
    if ((++turns & 15) == 0 || now == 0) now = now_ns();
    // Not holding rx_busy_: a rebuild receives (its probes may be ours).
    if (steer_ && steer_->rebuild_due(now)) (void)steer_->try_rebuild();
    int n = 0;
    if (!rx_busy_.exchange(true, std::memory_order_acquire)) {
      flush_deferred();
      n = receive_once();
      rx_busy_.store(false, std::memory_order_release);
    }
    if (same_host_ && now - last_control_ >= kControlNs) {  // new peers' rings, peers gone
      last_control_ = now;
      same_host_control();
    }
    if (n > 0) {
      last_traffic = now;
      continue;
    }
    if (now - last_traffic < busy_ns) continue;  // poll on: traffic may follow
    parked_.store(true, std::memory_order_seq_cst);
    if (has_deferred_.load(std::memory_order_seq_cst)) {  // answers to send first (see defer)
      parked_.store(false, std::memory_order_relaxed);
      continue;
    }
    std::vector<pollfd> fds = {{wake_fd_, POLLIN, 0}};
    wire_fds(fds);
    if (same_host_) {
      // The rings' producers ring our doorbells only while we sleep; a
      // consumer's poll() holding the receiver means frames move: no sleep.
      if (rx_busy_.exchange(true, std::memory_order_acquire)) {
        parked_.store(false, std::memory_order_relaxed);
        continue;
      }
      same_host_control_locked();
      const bool idle = same_host_->park_rings(fds);
      same_host_->control_fds(fds);
      rx_busy_.store(false, std::memory_order_release);
      if (!idle) {
        same_host_->unpark();
        parked_.store(false, std::memory_order_relaxed);
        continue;
      }
    }
    // A group of several members looks now and then whether one is gone.
    (void)::poll(fds.data(), fds.size(), steer_ ? steer_->idle_timeout_ms() : -1);
    parked_.store(false, std::memory_order_relaxed);
    if (same_host_) {
      same_host_->unpark();
      same_host_control();
    }
    drain_wakeups();
    last_traffic = now = now_ns();
  }
}

void UdpLink::drain_wakeups() {
  if (stopping_.load(std::memory_order_acquire)) return;  // stop()'s wakeup stays readable
  std::uint64_t v;
  (void)!::read(wake_fd_, &v, sizeof v);  // nonblocking: EAGAIN when there was none
}

void UdpLink::add_drops(TransportCounters& c) const {
  for (std::size_t i = 0; i < kNumDropReasons; ++i) c.dropped[i] += dropped_[i].load(std::memory_order_relaxed);
}

UdpLinkStats UdpLink::stats() const {
  UdpLinkStats s;
  s.frames_sent = frames_sent_.load(std::memory_order_relaxed);
  s.frames_received = frames_received_.load(std::memory_order_relaxed);
  s.send_calls = send_calls_.load(std::memory_order_relaxed);
  s.recv_calls = recv_calls_.load(std::memory_order_relaxed);
  s.datagrams_received = datagrams_received_.load(std::memory_order_relaxed);
  s.send_errors = send_errors_.load(std::memory_order_relaxed);
  s.rx_overruns = rx_overruns_.load(std::memory_order_relaxed);
  s.source_port_fallbacks = port_fallbacks_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace srdma::hca
