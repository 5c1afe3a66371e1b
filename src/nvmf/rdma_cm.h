// An in-process connection manager for RC queue pairs: what rdma_cm's
// connect / accept / reject / disconnect give a ULP, for devices on the
// in-process link.
//
// A passive side listens on (device address, port). The active side creates
// its QP in RESET and calls connect() with its QPN and private data; the
// listener creates its own QP, connects it to the requester and replies with
// its QPN and private data (or refuses: the error is the reject). The active
// side then connects its QP to the reply's QPN. Both sides share the
// returned CmConnection: either may disconnect(), which runs the other
// side's handler once (RDMA_CM_EVENT_DISCONNECTED).
//
// A later shared-memory or RoCEv2 link carries the same request and reply
// as CM MADs; only this class changes.
// Thread safety: all calls may be made from any thread. Handlers run on the
// disconnecting thread with no CM lock held.
#pragma once

#include <atomic>
#include <cstddef>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "srdma/status.h"

namespace srdma::nvmf {

// One connection, shared by its two ends.
class CmConnection {
 public:
  enum Side : int { kActive = 0, kPassive = 1 };
  using Handler = std::function<void()>;

  // The handler `side` wants run when the other side disconnects. Setting an
  // empty one (at teardown) waits until a running handler of `side` returns.
  void set_disconnect_handler(Side side, Handler h);
  // Idempotent: the first call from either side runs the other's handler.
  void disconnect(Side from);
  bool disconnected() const;
  // The CM handshake is done (the RTU came): the requester owns the
  // address it claimed, unlike a spoofed one. Set once, read anywhere.
  void mark_established() { established_.store(true, std::memory_order_release); }
  bool established() const { return established_.load(std::memory_order_acquire); }
  // What carries the connection (the wire CM's agent, wire_cm.h): kept
  // alive as long as the connection is.
  void hold(std::shared_ptr<void> transport) { transport_ = std::move(transport); }

 private:
  std::shared_ptr<void> transport_;
  mutable std::mutex mu_;
  std::condition_variable idle_;
  Handler handlers_[2];
  int running_[2] = {0, 0};
  bool disconnected_ = false;
  std::atomic<bool> established_{false};
};

struct CmRequest {
  std::uint64_t peer_addr = 0;  // the active side's device
  std::uint32_t peer_qpn = 0;
  // The active side's first PSN (its sq_psn; an IB CM REQ's Starting PSN).
  // Random (common/secure_random.h): a stranger who knows the QPN must
  // still guess 2^24 PSNs to inject into the connection.
  std::uint32_t psn = 0;
  // The path MTU both ends run the connection at (an IB CM REQ's Path
  // Packet Payload MTU: the passive side takes it from the request).
  std::uint32_t path_mtu = 4096;
  std::vector<std::byte> private_data;
};

struct CmReply {
  std::uint32_t qpn = 0;  // the passive side's QP, connected to the requester
  std::uint32_t psn = 0;  // the passive side's first PSN (a REP's Starting PSN), random as the request's
  std::vector<std::byte> private_data;
};

class CmListener {
 public:
  virtual ~CmListener() = default;
  // Accept: create a QP, connect it to the requester, return its QPN. An
  // error is the reject the active side receives. `conn` is the connection
  // the reply belongs to.
  virtual Result<CmReply> on_connect_request(const CmRequest& req, const std::shared_ptr<CmConnection>& conn) = 0;
};

class ConnectionManager {
 public:
  static ConnectionManager& instance();

  // EADDRINUSE when (addr, port) already has a listener.
  Result<void> listen(std::uint64_t addr, std::uint16_t port, CmListener* listener);
  // Afterwards no on_connect_request of this listener runs or will run.
  void stop_listening(std::uint64_t addr, std::uint16_t port);

  // Whether a listener in this process is on (addr, port).
  bool listening(std::uint64_t addr, std::uint16_t port);
  // ECONNREFUSED when nothing listens there; the listener's error otherwise.
  Result<std::pair<CmReply, std::shared_ptr<CmConnection>>> connect(std::uint64_t addr, std::uint16_t port,
                                                                    const CmRequest& req);

 private:
  struct Entry {
    CmListener* listener = nullptr;
    int running = 0;  // on_connect_request calls in progress
  };
  std::mutex mu_;
  std::condition_variable idle_;
  std::map<std::pair<std::uint64_t, std::uint16_t>, Entry> listeners_;
};

}  // namespace srdma::nvmf
