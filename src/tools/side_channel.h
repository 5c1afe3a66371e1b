// The TCP side channel two `srdma perf` processes talk over before and
// around a run, as perftest's out-of-band exchange does: the server listens
// on its device's address (port 18515 by default; TCP over IPv6 for an
// IPv6 device), one client connects, and
// they trade JSON messages (QPN, PSN, rkey, address and GID of each QP; the
// test's parameters; when a size starts and ends). Each message is a 4-byte
// big-endian length and that many bytes of JSON. What arrives is the peer's
// word, not ours: a message too long, not JSON or not an object is EPROTO,
// and callers check every field they read.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "srdma/status.h"

namespace srdma::tools {

inline constexpr std::uint16_t kPerfSidePort = 18515;  // perftest's default

class SideChannel {
 public:
  // Connects to ip:port (IPv4 or IPv6 text); ECONNREFUSED / ETIMEDOUT ...
  // naming the address.
  static Result<SideChannel> connect(const std::string& ip, std::uint16_t port, int timeout_ms);

  SideChannel() = default;
  SideChannel(SideChannel&& o) noexcept : fd_(o.fd_), peer_(std::move(o.peer_)) { o.fd_ = -1; }
  SideChannel& operator=(SideChannel&& o) noexcept;
  ~SideChannel();

  Result<void> send(const nlohmann::json& msg);
  // The next message; ETIMEDOUT after timeout_ms (-1: no limit),
  // ECONNRESET when the peer has closed the channel or gone away.
  Result<nlohmann::json> receive(int timeout_ms);
  // Whether the peer has closed the channel (or sent something) without
  // waiting: for a side that is busy with RDMA and checks now and then.
  bool readable() const;
  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }  // "a.b.c.d:port" or "[ipv6]:port"

 private:
  friend class SideListener;
  SideChannel(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}
  int fd_ = -1;
  std::string peer_;
};

class SideListener {
 public:
  // Listens on ip:port; EADDRINUSE ... naming the address.
  static Result<SideListener> listen(const std::string& ip, std::uint16_t port);

  SideListener() = default;
  SideListener(SideListener&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  SideListener& operator=(SideListener&& o) noexcept;
  ~SideListener();

  // The next client; ETIMEDOUT after timeout_ms (-1: wait for ever).
  Result<SideChannel> accept(int timeout_ms);

 private:
  explicit SideListener(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace srdma::tools
