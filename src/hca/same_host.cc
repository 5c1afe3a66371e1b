#include "hca/same_host.h"

#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <string>

#include <fmt/format.h>

namespace srdma::hca {

namespace {

constexpr std::uint32_t kHelloMagic = 0x53524853;  // "SRHS"
constexpr std::uint16_t kHelloVersion = 1;

// What a producer says when it hands over its ring.
struct Hello {
  std::uint32_t magic = kHelloMagic;
  std::uint16_t version = kHelloVersion;
  std::uint16_t reserved = 0;
  std::uint32_t src_ip = 0;
  std::uint32_t src_slot = 0;
  std::uint64_t ring_bytes = 0;
};

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Made by the system call, not libc's socket(): an LD_PRELOAD shim that
// wraps socket() must not take the device's sockets over.
int unix_socket() {
  return static_cast<int>(::syscall(SYS_socket, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
}

socklen_t name_of(std::uint32_t ip, std::uint16_t port, std::uint32_t slot, sockaddr_un& a) {
  a = {};
  a.sun_family = AF_UNIX;
  const std::string n = fmt::format("srdma-{}-{:08x}-{}-{}", ::geteuid(), ip, port, slot);
  std::memcpy(a.sun_path + 1, n.data(), n.size());  // sun_path[0] = 0: the abstract namespace
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n.size());
}

bool peer_is_us(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  return ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && len == sizeof cred &&
         cred.uid == ::geteuid();
}

bool is_eventfd(int fd) {
  char link[64] = {};
  const std::string path = fmt::format("/proc/self/fd/{}", fd);
  const ssize_t n = ::readlink(path.c_str(), link, sizeof link - 1);
  return n > 0 && std::string_view(link, static_cast<std::size_t>(n)) == "anon_inode:[eventfd]";
}

void drain(int eventfd) {
  std::uint64_t v;
  (void)!::read(eventfd, &v, sizeof v);  // nonblocking
}

}  // namespace

struct SameHostPath::Outbound {
  std::mutex mu;
  ShmRing ring;  // empty: no listener (retry_at says when to look again)
  int conn = -1;
  int doorbell = -1;
  std::int64_t retry_at = 0;
  std::atomic<bool> up{false};
  ~Outbound() {
    if (conn >= 0) ::close(conn);
    if (doorbell >= 0) ::close(doorbell);
  }
};

SameHostPath::Inbound::~Inbound() {
  if (conn >= 0) ::close(conn);
  if (doorbell >= 0) ::close(doorbell);
}

Result<std::unique_ptr<SameHostPath>> SameHostPath::open(std::uint32_t ip, std::uint16_t port, std::uint32_t slot,
                                                        std::size_t ring_bytes) {
  const int fd = unix_socket();
  if (fd < 0) return make_error(errno, fmt::format("socket(AF_UNIX): {}", std::strerror(errno)));
  sockaddr_un a;
  const socklen_t len = name_of(ip, port, slot, a);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), len) != 0 || ::listen(fd, 64) != 0) {
    const int e = errno;
    ::close(fd);
    return make_error(e, fmt::format("the same-host listener of slot {}: {}", slot, std::strerror(e)));
  }
  return std::unique_ptr<SameHostPath>(new SameHostPath(ip, port, slot, ring_bytes, fd));
}

SameHostPath::SameHostPath(std::uint32_t ip, std::uint16_t port, std::uint32_t slot, std::size_t ring_bytes,
                           int listen_fd)
    : ip_(ip), port_(port), slot_(slot), ring_bytes_(ring_bytes), listen_fd_(listen_fd) {}

SameHostPath::~SameHostPath() {
  for (int c : pending_) ::close(c);
  ::close(listen_fd_);
}

std::shared_ptr<SameHostPath::Outbound> SameHostPath::connect_to(std::uint32_t dst_ip, std::uint32_t dst_slot) {
  auto out = std::make_shared<Outbound>();
  out->retry_at = now_ns() + kRetryNs;
  const int s = unix_socket();
  if (s < 0) return out;
  sockaddr_un a;
  const socklen_t len = name_of(dst_ip, port_, dst_slot, a);
  if (::connect(s, reinterpret_cast<const sockaddr*>(&a), len) != 0) {  // nobody there: the wire
    ::close(s);
    return out;
  }
  if (!peer_is_us(s)) {  // another user holds the name: nothing of ours goes to it
    refused_.fetch_add(1, std::memory_order_relaxed);
    ::close(s);
    return out;
  }
  auto ring = ShmRing::create(ring_bytes_);
  const int bell = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (!ring || bell < 0) {
    if (bell >= 0) ::close(bell);
    ::close(s);
    return out;
  }
  Hello hello;
  hello.src_ip = ip_;
  hello.src_slot = slot_;
  hello.ring_bytes = ring_bytes_;
  iovec iov{&hello, sizeof hello};
  alignas(cmsghdr) std::byte ctl[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctl;
  m.msg_controllen = sizeof ctl;
  cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(2 * sizeof(int));
  const int fds[2] = {ring->fd(), bell};
  std::memcpy(CMSG_DATA(c), fds, sizeof fds);
  if (::sendmsg(s, &m, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof hello)) {
    ::close(bell);
    ::close(s);
    return out;
  }
  out->ring = std::move(*ring);
  out->conn = s;
  out->doorbell = bell;
  out->up.store(true, std::memory_order_release);
  return out;
}

namespace {
// The rings this thread pushed to and has not published (see flush_thread).
thread_local std::vector<std::shared_ptr<SameHostPath::Outbound>> tls_unpublished;

void ring_doorbell(int fd) {
  const std::uint64_t one = 1;
  (void)!::write(fd, &one, sizeof one);
}
}  // namespace

void SameHostPath::flush_thread() {
  for (const std::shared_ptr<Outbound>& out : tls_unpublished) {
    bool wake = false;
    {
      std::lock_guard lock(out->mu);
      out->ring.publish();
      wake = out->ring.take_wakeup();
    }
    if (wake) ring_doorbell(out->doorbell);
  }
  tls_unpublished.clear();
}

std::shared_ptr<SameHostPath::Outbound> SameHostPath::outbound(std::uint32_t dst_ip, std::uint32_t dst_slot) {
  const std::uint64_t key = std::uint64_t{dst_ip} << 8 | (dst_slot & 0xff);
  std::lock_guard lock(out_mu_);
  std::shared_ptr<Outbound>& o = out_[key];
  // A destination with no listener is looked at again after a while; one
  // whose ring broke waits for control() to forget it (its connection may
  // be in the receiver's poll set until then).
  if (!o || (o->conn < 0 && now_ns() >= o->retry_at)) o = connect_to(dst_ip, dst_slot);
  return o;
}

bool SameHostPath::reachable(std::uint32_t dst_ip, std::uint32_t dst_slot) {
  return outbound(dst_ip, dst_slot)->up.load(std::memory_order_acquire);
}

SameHostPath::Sent SameHostPath::send(std::uint32_t dst_ip, std::uint32_t dst_slot,
                                      std::span<const std::span<const std::byte>> pieces, std::uint8_t ttl,
                                      std::uint8_t tos, std::uint8_t flags, bool batched) {
  const std::shared_ptr<Outbound> out = outbound(dst_ip, dst_slot);
  if (!out->up.load(std::memory_order_acquire)) return Sent::kNotHere;
  bool pushed = false, wake = false, broken = false;
  {
    std::lock_guard lock(out->mu);
    pushed = out->ring.push(pieces, ttl, tos, flags);
    for (std::int64_t until = 0; !pushed && !out->ring.broken();) {
      const std::int64_t now = now_ns();
      if (until == 0) until = now + kFullWaitNs;
      if (now >= until) break;
      out->ring.publish();  // what it must make room from
      if (out->ring.take_wakeup()) ring_doorbell(out->doorbell);  // asleep with a full ring
      ::sched_yield();
      pushed = out->ring.push(pieces, ttl, tos, flags);
    }
    if (!batched) {
      out->ring.publish();
      wake = out->ring.take_wakeup();
    }
    broken = out->ring.broken();
  }
  if (wake) ring_doorbell(out->doorbell);
  // Published when this thread's batch ends (another thread's publish may
  // take it along sooner).
  if (pushed && batched && std::find(tls_unpublished.begin(), tls_unpublished.end(), out) == tls_unpublished.end())
    tls_unpublished.push_back(out);
  if (broken) {  // the consumer wrote a tail out of range: not a peer to feed
    out->up.store(false, std::memory_order_release);
    broken_.fetch_add(1, std::memory_order_relaxed);
    return Sent::kNotHere;
  }
  if (!pushed) {
    ring_full_.fetch_add(1, std::memory_order_relaxed);
    return Sent::kFull;
  }
  frames_sent_.fetch_add(1, std::memory_order_relaxed);
  return Sent::kSent;
}

void SameHostPath::accept_new() {
  for (int i = 0; i < 16; ++i) {
    const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c < 0) return;
    if (!peer_is_us(c) || in_.size() + pending_.size() >= kMaxPeersIn) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      ::close(c);
      continue;
    }
    if (pending_.size() == kMaxPending) {  // connections that never say hello: the oldest goes
      ::close(pending_.front());
      pending_.erase(pending_.begin());
      refused_.fetch_add(1, std::memory_order_relaxed);
    }
    pending_.push_back(c);
  }
}

// Reads a pending connection's hello. The connection leaves pending_ here
// unless it has said nothing yet.
void SameHostPath::take_hello(int conn) {
  Hello hello;
  iovec iov{&hello, sizeof hello};
  alignas(cmsghdr) std::byte ctl[CMSG_SPACE(4 * sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctl;
  m.msg_controllen = sizeof ctl;
  const ssize_t n = ::recvmsg(conn, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // not yet
  std::erase(pending_, conn);
  // Every descriptor that came is ours to close unless kept.
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t j = 0; j < k; ++j) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + j * sizeof(int), sizeof fd);
      fds.push_back(fd);
    }
  }
  auto refuse = [&] {
    for (int fd : fds) ::close(fd);
    ::close(conn);
    refused_.fetch_add(1, std::memory_order_relaxed);
  };
  if (n != static_cast<ssize_t>(sizeof hello) || (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 || fds.size() != 2 ||
      hello.magic != kHelloMagic || hello.version != kHelloVersion || hello.ring_bytes != ring_bytes_ ||
      hello.src_slot == 0 || hello.src_slot > 0xff || !is_eventfd(fds[1])) {
    refuse();
    return;
  }
  auto ring = ShmRing::attach(fds[0], ring_bytes_);  // takes fds[0]
  fds.erase(fds.begin());
  if (!ring) {
    refuse();
    return;
  }
  auto in = std::make_unique<Inbound>();
  in->conn = conn;
  in->doorbell = fds[0];
  in->ring = std::move(*ring);
  in->src_ip = hello.src_ip;
  std::lock_guard lock(in_mu_);
  in_.push_back(std::move(in));
  peers_in_.store(static_cast<std::uint32_t>(in_.size()), std::memory_order_relaxed);
}

bool SameHostPath::control() {
  const std::size_t had_in = in_.size(), had_pending = pending_.size();
  accept_new();
  for (std::size_t i = pending_.size(); i-- > 0;) take_hello(pending_[i]);
  // Inbound: a peer that hung up (its frames delivered first: the caller
  // receives before it sleeps) or a ring that broke.
  std::unique_lock in_lock(in_mu_);
  std::erase_if(in_, [&](const std::unique_ptr<Inbound>& c) {
    if (c->ring.broken()) {
      broken_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    pollfd p{c->conn, POLLIN, 0};
    if (::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR | POLLIN)) != 0) {
      // Nothing more is ever said on a connection: readable means gone
      // (or a peer that speaks out of turn, which is gone to us too).
      if (!c->ring.empty()) return false;  // deliver what it left first
      return true;
    }
    return false;
  });
  peers_in_.store(static_cast<std::uint32_t>(in_.size()), std::memory_order_relaxed);
  in_lock.unlock();
  // Outbound: a peer that hung up, or a ring that broke, is forgotten; the
  // next frame for it looks again (a new process may hold the slot).
  std::lock_guard lock(out_mu_);
  const std::size_t had_out = out_.size();
  std::erase_if(out_, [&](const auto& kv) {
    const Outbound& o = *kv.second;
    if (!o.up.load(std::memory_order_relaxed)) return o.conn >= 0 || now_ns() >= o.retry_at;
    pollfd p{o.conn, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR | POLLIN)) != 0;
  });
  return in_.size() != had_in || pending_.size() != had_pending || out_.size() != had_out;
}

bool SameHostPath::park_rings(std::vector<pollfd>& fds) {
  bool idle = true;
  std::lock_guard in_lock(in_mu_);
  // The first sleeper arms the rings: drains the doorbells and sets the
  // flags. A later one only looks: a drain would take the wakeup another
  // sleeper is owed, and a failed park() clears the flag that sleeper
  // counts on (it then slept through every later frame).
  const bool first = sleepers_++ == 0;
  for (auto& c : in_) {
    if (first) {
      drain(c->doorbell);  // before the flag: a ring after it rings again
      if (!c->ring.park()) idle = false;
    } else if (!c->ring.empty()) {
      idle = false;
    }
    fds.push_back({c->doorbell, POLLIN, 0});
  }
  return idle;
}

void SameHostPath::control_fds(std::vector<pollfd>& fds) const {
  fds.push_back({listen_fd_, POLLIN, 0});
  for (int c : pending_) fds.push_back({c, POLLIN, 0});
  {
    std::lock_guard in_lock(in_mu_);
    for (const auto& c : in_) fds.push_back({c->conn, POLLIN, 0});
  }
  std::lock_guard lock(out_mu_);
  for (const auto& [key, o] : out_)
    if (o->up.load(std::memory_order_relaxed)) fds.push_back({o->conn, POLLIN, 0});
}

void SameHostPath::unpark() {
  std::lock_guard lock(in_mu_);
  if (sleepers_ > 0) --sleepers_;
  if (sleepers_ == 0)
    for (auto& c : in_) c->ring.unpark();
}

SameHostStats SameHostPath::stats() const {
  SameHostStats s;
  {
    std::lock_guard lock(out_mu_);
    for (const auto& [key, o] : out_) s.peers_out += o->up.load(std::memory_order_relaxed) ? 1 : 0;
  }
  s.peers_in = peers_in_.load(std::memory_order_relaxed);
  s.frames_sent = frames_sent_.load(std::memory_order_relaxed);
  s.frames_received = frames_received_.load(std::memory_order_relaxed);
  s.ring_full = ring_full_.load(std::memory_order_relaxed);
  s.refused = refused_.load(std::memory_order_relaxed);
  s.broken_rings = broken_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace srdma::hca
