#include "tools/side_channel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "hca/sock_addr.h"
#include "srdma/net.h"
#include "tools/address_option.h"

namespace srdma::tools {
namespace {

// A side-channel message is parameters and addresses: far below this.
constexpr std::uint32_t kMaxMessage = 1u << 20;
// A message that has begun arrives whole within this.
constexpr int kRestOfMessageMs = 30'000;

// The side channel speaks the family of the device's address: an IPv6
// device's peer is on IPv6 (an IPv4-mapped address is IPv4).
Result<hca::SockAddr> sockaddr_of(const std::string& ip, std::uint16_t port) {
  auto a = parse_ip(ip);
  if (!a) return std::unexpected(a.error());
  return hca::SockAddr::of(*a, port);
}

std::string str(const hca::SockAddr& a) {
  if (a.family() == AF_INET6) {
    IpAddress ip;
    std::memcpy(ip.bytes.data(), &a.u.v6.sin6_addr, 16);
    return host_port_str(ip, ntohs(a.u.v6.sin6_port));
  }
  return host_port_str(IpAddress::of_v4(ntohl(a.u.v4.sin_addr.s_addr)), ntohs(a.u.v4.sin_port));
}

// A TCP socket of `family`; an IPv6 one is IPv6 only, as the device's is.
int tcp_socket(int family) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd >= 0 && family == AF_INET6) {
    const int one = 1;
    (void)::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  }
  return fd;
}

// Waits until `fd` is ready for `events`; ETIMEDOUT after timeout_ms.
Result<void> wait_for(int fd, short events, int timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int left = -1;
    if (timeout_ms >= 0) {
      left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      if (left < 0) left = 0;
    }
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, left);
    if (rc > 0) return {};
    if (rc == 0) return make_error(ETIMEDOUT, "timed out");
    if (errno != EINTR) return make_error(errno, std::strerror(errno));
  }
}

}  // namespace

Result<SideChannel> SideChannel::connect(const std::string& ip, std::uint16_t port, int timeout_ms) {
  auto to = sockaddr_of(ip, port);
  if (!to) return std::unexpected(to.error());
  const int fd = tcp_socket(to->family());
  if (fd < 0) return make_error(errno, fmt::format("socket(): {}", std::strerror(errno)));
  auto fail = [&](int e, const std::string& why) -> Result<SideChannel> {
    ::close(fd);
    return make_error(e, fmt::format("cannot reach the perf server at {}: {}", str(*to), why));
  };
  if (::connect(fd, to->ptr(), to->len()) != 0) {
    if (errno != EINPROGRESS) return fail(errno, std::strerror(errno));
    if (auto w = wait_for(fd, POLLOUT, timeout_ms); !w) return fail(w.error().code, w.error().reason);
    int err = 0;
    socklen_t len = sizeof err;
    (void)::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return fail(err, std::strerror(err));
  }
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return SideChannel(fd, str(*to));
}

SideChannel& SideChannel::operator=(SideChannel&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    peer_ = std::move(o.peer_);
    o.fd_ = -1;
  }
  return *this;
}

SideChannel::~SideChannel() {
  if (fd_ >= 0) ::close(fd_);
}

Result<void> SideChannel::send(const nlohmann::json& msg) {
  const std::string body = msg.dump();
  if (body.size() > kMaxMessage) return make_error(EMSGSIZE, "side-channel message too long");
  std::string frame(4, '\0');
  const auto n = static_cast<std::uint32_t>(body.size());
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>(n >> (24 - 8 * i));
  frame += body;
  std::size_t off = 0;
  while (off < frame.size()) {
    const ssize_t w = ::send(fd_, frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
    if (w > 0) {
      off += static_cast<std::size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (auto r = wait_for(fd_, POLLOUT, 30'000); !r)
        return make_error(r.error().code, fmt::format("side channel to {}: send {}", peer_, r.error().reason));
      continue;
    }
    const int e = w < 0 ? errno : EPIPE;
    return make_error(e == EPIPE ? ECONNRESET : e,
                      fmt::format("side channel to {}: the peer is gone ({})", peer_, std::strerror(e)));
  }
  return {};
}

Result<nlohmann::json> SideChannel::receive(int timeout_ms) {
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
  auto read_exact = [&](char* p, std::size_t n) -> Result<void> {
    std::size_t off = 0;
    while (off < n) {
      int left = -1;
      if (timeout_ms >= 0)
        left = std::max<int>(0, static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                     deadline - Clock::now())
                                                     .count()));
      if (auto w = wait_for(fd_, POLLIN, left); !w)
        return make_error(w.error().code, fmt::format("side channel to {}: no message ({})", peer_, w.error().reason));
      const ssize_t r = ::recv(fd_, p + off, n - off, 0);
      if (r > 0) {
        off += static_cast<std::size_t>(r);
        continue;
      }
      if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      return make_error(ECONNRESET, fmt::format("side channel to {}: the peer closed it{}", peer_,
                                                r < 0 ? fmt::format(" ({})", std::strerror(errno)) : ""));
    }
    return {};
  };
  // The timeout is for a message to begin: once its first byte is here the
  // rest is read with a deadline of its own, so that a timeout never leaves
  // half a message consumed (the next read would take its body for a length).
  if (auto w = wait_for(fd_, POLLIN, timeout_ms); !w)
    return make_error(w.error().code, fmt::format("side channel to {}: no message ({})", peer_, w.error().reason));
  timeout_ms = kRestOfMessageMs;
  deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  char len[4];
  if (auto r = read_exact(len, 4); !r) return std::unexpected(r.error());
  std::uint32_t n = 0;
  for (char c : len) n = (n << 8) | static_cast<std::uint8_t>(c);
  if (n == 0 || n > kMaxMessage)
    return make_error(EPROTO, fmt::format("side channel to {}: a message of {} bytes (1 .. {})", peer_, n, kMaxMessage));
  std::string body(n, '\0');
  if (auto r = read_exact(body.data(), n); !r) return std::unexpected(r.error());
  auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return make_error(EPROTO, fmt::format("side channel to {}: a message that is not a JSON object", peer_));
  return j;
}

bool SideChannel::readable() const {
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

Result<SideListener> SideListener::listen(const std::string& ip, std::uint16_t port) {
  auto at = sockaddr_of(ip, port);
  if (!at) return std::unexpected(at.error());
  const int fd = tcp_socket(at->family());
  if (fd < 0) return make_error(errno, fmt::format("socket(): {}", std::strerror(errno)));
  const int one = 1;
  (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, at->ptr(), at->len()) != 0 || ::listen(fd, 4) != 0) {
    const int e = errno;
    ::close(fd);
    return make_error(e, fmt::format("cannot listen on {}: {}", str(*at), std::strerror(e)));
  }
  return SideListener(fd);
}

SideListener& SideListener::operator=(SideListener&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

SideListener::~SideListener() {
  if (fd_ >= 0) ::close(fd_);
}

Result<SideChannel> SideListener::accept(int timeout_ms) {
  for (;;) {
    if (auto w = wait_for(fd_, POLLIN, timeout_ms); !w)
      return make_error(w.error().code, fmt::format("no perf client came ({})", w.error().reason));
    hca::SockAddr from;
    socklen_t len = sizeof from.u;
    const int c = ::accept4(fd_, from.ptr(), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      return make_error(errno, fmt::format("accept(): {}", std::strerror(errno)));
    }
    const int one = 1;
    (void)::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return SideChannel(c, str(from));
  }
}

}  // namespace srdma::tools
