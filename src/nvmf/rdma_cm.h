// What NVMe-oF sees of the RDMA CM: a connection request (the active
// side's QPN, first PSN, path MTU and private data), the reply (the passive
// side's QPN and PSN), the listener that turns one into the other, and the
// connection both ends then share until either disconnects
// (RDMA_CM_EVENT_DISCONNECTED).
//
// The one CM that carries them is the IB CM on each device's GSI QP
// (wire_cm.h), on the in-process link and on RoCEv2 alike: a target and
// its queues never know which link a connection came over.
// Thread safety: all calls may be made from any thread. Handlers run on the
// disconnecting thread (the CM agent's, for the peer's DREQ) with no CM
// lock held.
#pragma once

#include <atomic>
#include <cstddef>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "srdma/status.h"

namespace srdma::nvmf {

// One connection as one side holds it. Its two ends are the local queue's
// and the CM's: the queue's disconnect runs the CM's handler (a DREQ to
// the peer), the peer's DREQ runs the queue's. The host's queue is the
// kActive end, the target's the kPassive one.
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
  // What carries the connection (the device's CM agent, wire_cm.h): kept
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

}  // namespace srdma::nvmf
