// The NVMe-oF RDMA target (like nvmet-rdma): subsystems of namespaces
// behind a listener; one queue pair per host queue.
//
// Per queue (target_queue.cc): a ring of posted receives, one command slot
// each (capsule, response and data buffer); write data is fetched with
// RDMA READ, read data is returned with RDMA WRITE, then the response goes
// out with SEND (SEND_WITH_INV when the host's SGL asked for remote
// invalidation). CQs come from the device's shared pool, nr_cqe = recv +
// 2 x send + 1 on vector qid mod vectors, WORKQUEUE context, or are private
// per queue (TargetOptions::pool_cqs = false) for the comparison.
//
// Connections arrive through the device's CM agent (wire_cm.h, on either
// link) with the NVMe/RDMA private data (nvme_rdma_cm.h); the Fabrics
// Connect command then binds a queue to a controller (controller.h).
// Thread safety: every member may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "nvmf/auth_dhchap.h"
#include "nvmf/controller.h"
#include "nvmf/wire_cm.h"
#include "nvmf/rdma_cm.h"
#include "nvmf/subsystem.h"
#include "srdma/device.h"
#include "srdma/poll_context.h"

namespace srdma::nvmf {

class TargetQueue;

// What a stranger may make the target commit before a Connect from an
// allowed host (docs/DESIGN.md, threat model). A queue is "unconnected"
// from its CM REQ until its Fabrics Connect succeeds; it holds a QP, a CQ
// lease and one admission slot of a few KiB. Past max_unconnected_per_host
// from one address a request is refused; past max_unconnected in total the
// oldest unconnected queue is closed to make room, one whose CM handshake
// is not done first: requests from spoofed addresses (which never send the
// RTU) cannot lock a real host out.
struct AdmissionLimits {
  std::uint32_t max_unconnected = 256;         // in total (at most a quarter of the device's QPs)
  std::uint32_t max_unconnected_per_host = 8;  // per source address
  std::uint32_t max_queues = 1024;             // connected or not
  // A queue whose Connect has not succeeded by then is closed.
  std::chrono::milliseconds connect_timeout{5000};
};

struct TargetOptions {
  bool pool_cqs = true;  // false: one private CQ per queue
  PollContext poll_ctx = PollContext::kWorkqueue;
  ControllerLimits limits;
  AdmissionLimits admission;
  std::shared_ptr<Clock> clock = Clock::steady();  // times KATO (tests: a ManualClock)
  // One line per controller created or refused and per queue closed (a
  // service's log); called on the target's threads, never with a lock held
  // that the target needs.
  std::function<void(const std::string&)> log;
};

struct TargetStats {
  std::uint64_t commands = 0;
  std::uint64_t errors = 0;       // commands answered with a non-success status
  std::uint64_t queues = 0;       // live
  std::uint64_t controllers = 0;  // live
  // Refusals and reaping, each logged (TargetOptions::log) and counted.
  std::uint64_t evicted_unconnected = 0;           // closed to make room (max_unconnected)
  std::uint64_t refused_unconnected_per_host = 0;  // CM REQ over max_unconnected_per_host
  std::uint64_t refused_queues = 0;                // CM REQ over max_queues
  std::uint64_t refused_requests = 0;              // CM REQ with bad NVMe/RDMA private data
  std::uint64_t refused_connects = 0;              // Fabrics Connect refused (host, subsystem, parameters)
  std::uint64_t reaped_unconnected = 0;            // no Connect within connect_timeout
  std::uint64_t queue_alloc_failures = 0;          // admitted, but its memory could not be had
  std::uint64_t authenticated = 0;                 // queues whose host passed DH-HMAC-CHAP
  std::uint64_t auth_failures = 0;                 // and those whose host failed it
};

class RdmaTarget final : public CmListener {
 public:
  // `dev` must outlive the target.
  static Result<std::unique_ptr<RdmaTarget>> create(Device& dev, const TargetOptions& opts);
  // Disconnects every queue and stops listening.
  ~RdmaTarget() override;

  // EEXIST for a second subsystem with the same NQN. Also while listening
  // (a reload): the discovery log's generation moves on.
  Result<void> add_subsystem(std::shared_ptr<Subsystem> s);
  // ENOENT if none has that NQN, EINVAL for the discovery subsystem. Its
  // controllers are then revoked (access_changed, whose count it returns).
  Result<std::size_t> remove_subsystem(std::string_view nqn);
  // After subsystems or their allowed hosts changed (a reload): the
  // discovery log's generation moves on, and every controller whose host
  // may no longer reach its subsystem is revoked: the reaper closes its
  // queues at once (those that bind to it later too) and Connects naming
  // it are refused. The connections that stay allowed are untouched.
  // Returns how many controllers were revoked; each is logged.
  std::size_t access_changed();
  // Listens on (this device, port). EADDRINUSE if taken.
  Result<void> listen(std::uint16_t port);
  // Disconnects every queue of every controller (the host sees its queues
  // go away); controllers are freed with their admin queue.
  void disconnect_all();

  TargetStats stats() const;
  // The device's CM agent's counters (half-open refusals, drops, ...) once
  // the target listens; nullopt before.
  std::optional<cm::CmCounters> cm_counters() const;
  // The discovery log page (NVMe-oF 1.1 5.3) `hostnqn` sees: an entry per
  // subsystem that allows it and port listened on.
  std::vector<std::byte> discovery_log(std::string_view hostnqn) const;
  Device& device() { return dev_; }
  const TargetOptions& options() const { return opts_; }

  // CmListener.
  Result<CmReply> on_connect_request(const CmRequest& req, const std::shared_ptr<CmConnection>& conn) override;

  // --- For TargetQueue ---
  // Fabrics Connect: the admin queue's creates a controller, an I/O queue's
  // finds it. On failure, the status (and IPO/IATTR in *dw0).
  NvmeStatus connect_controller(TargetQueue& q, const ConnectFields& f, const ConnectInfo& info,
                                std::shared_ptr<Controller>* out, std::uint32_t* dw0);
  // The queue closed (host disconnect, error, keep-alive expiry): tear it
  // down on the reaper thread.
  void queue_closed(TargetQueue* q);
  // A queue admitted by Connect could not grow (its memory): logged, counted.
  void queue_refused(TargetQueue& q, const std::string& why);
  // DH-HMAC-CHAP for `hostnqn` on `sub`: nullopt when the host has no
  // secret there; EINVAL when its secrets do not parse.
  Result<std::optional<auth::ControllerConfig>> auth_config(const Subsystem& sub, const std::string& hostnqn) const;
  // A queue's authentication ended (either way): logged, counted.
  void auth_outcome(TargetQueue& q, const std::string& hostnqn, const auth::AuthResult& r);
  void count_command(bool error) {
    commands_.fetch_add(1, std::memory_order_relaxed);
    if (error) errors_.fetch_add(1, std::memory_order_relaxed);
  }
  ProtectionDomain& pd() { return pd_; }

 private:
  RdmaTarget(Device& dev, ProtectionDomain pd, const TargetOptions& opts);
  void reaper_loop();
  NvmeStatus connect_locked(TargetQueue& q, const ConnectFields& f, const ConnectInfo& info,
                            std::shared_ptr<Controller>* out, std::uint32_t* dw0, std::string& line);

  Device& dev_;
  ProtectionDomain pd_;
  const TargetOptions opts_;
  const std::uint32_t unconnected_cap_;  // admission.max_unconnected within the device's QPs
  std::vector<std::uint16_t> ports_;
  std::uint64_t genctr_ = 1;  // the discovery log's GENCTR: moves on with each change (guarded by mu_)
  std::vector<std::unique_ptr<WireListener>> listeners_;  // one per port, on the device's CM agent

  mutable std::mutex mu_;
  std::condition_variable cv_;
  SubsystemRegistry subsystems_;
  std::map<std::uint16_t, std::weak_ptr<Controller>> controllers_;
  std::map<TargetQueue*, std::unique_ptr<TargetQueue>> queues_;
  std::map<std::uint64_t, std::uint32_t> admitting_;  // queues being made, by host address
  std::uint64_t next_admitted_seq_ = 1;
  std::vector<TargetQueue*> closing_;
  int pinned_ = 0;  // disconnect_all() calls holding queue pointers
  bool stop_ = false;
  std::uint64_t clock_wake_ = 0;  // opts_.clock's subscription
  std::thread reaper_;

  // A CM request from `host` within AdmissionLimits: counted as being
  // admitted (admitting_) and "" returned; else the refusal, counted. A
  // queue evicted to make room is closed here.
  std::string admit(std::uint64_t host);
  void log(const std::string& line) const {
    if (opts_.log) opts_.log(line);
  }

  std::atomic<std::uint64_t> commands_{0};
  std::atomic<std::uint64_t> errors_{0};
  TargetStats refusals_;  // guarded by mu_: the refusal and reaping counts
};

}  // namespace srdma::nvmf
