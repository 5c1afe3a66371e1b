// A host controller that survives the loss of its target, as nvme-cli's
// --reconnect-delay and --ctrl-loss-tmo offer it (nvme-rdma's reconnect
// work): when the connection goes (the target restarts, its queues close,
// keep-alive expires), the controller is torn down and connected again
// every reconnect_delay until it comes back or ctrl_loss_tmo has passed
// since the loss.
//
// I/O is never lost and never answered twice: an I/O that fails because
// the connection went away, and one submitted while it is away, waits; it
// is submitted again on the new controller once one is up. Only when the
// loss timeout ends do the waiting I/Os complete, with transport_error
// ENOTCONN, and later submits fail at once. An I/O the old target may have
// executed before it went is executed again: reads and writes of the same
// data are idempotent, which is what the block layer also relies on.
//
// Thread-safe. Completions run on the controllers' completion threads (or
// on the reconnect thread, for the I/Os that time out).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "nvmf/rdma_host.h"

namespace srdma::nvmf {

struct ReconnectOptions {
  std::chrono::milliseconds reconnect_delay{10'000};  // nvme-cli's default
  std::chrono::milliseconds ctrl_loss_tmo{600'000};   // nvme-cli's default
};

class ReconnectingHost {
 public:
  // The first connect is not retried: its error is returned. `dev` must
  // outlive the host; opts.clock times the delays (tests: a ManualClock).
  static Result<std::unique_ptr<ReconnectingHost>> connect(Device& dev, std::uint64_t target_addr,
                                                          std::uint16_t port, const HostOptions& opts,
                                                          const ReconnectOptions& r);
  // Every waiting I/O completes (ENOTCONN), then the controller goes.
  ~ReconnectingHost();
  ReconnectingHost(const ReconnectingHost&) = delete;
  ReconnectingHost& operator=(const ReconnectingHost&) = delete;

  // As HostController::submit (EINVAL for a bad I/O, EAGAIN when the queue
  // is full), except that a lost connection makes the I/O wait instead of
  // failing; ENOTCONN once the loss timeout has ended.
  Result<void> submit(BlockIo& io, std::uint32_t queue);

  std::uint32_t io_queues() const { return io_queues_; }
  // Of the first connect (a target that comes back must serve the same).
  const NamespaceInfo* find_namespace(std::uint32_t nsid) const;
  std::uint64_t reconnects() const;
  bool connected() const;
  // The current controller's CQs (none while reconnecting).
  std::vector<CompletionQueue*> cqs() const;
  // Ended: the loss timeout passed without a reconnect.
  bool lost() const;

 private:
  struct Waiting {
    BlockIo* io;
    std::uint32_t queue;
  };
  // What the caller set in a BlockIo we submitted for it, restored before
  // its callback runs.
  struct Owned {
    ReconnectingHost* host;
    const HostController* ctrl;  // the controller it went to
    void (*done)(BlockIo&);
    void* context;
    std::uint32_t queue;
  };

  ReconnectingHost(Device& dev, std::uint64_t addr, std::uint16_t port, const HostOptions& opts,
                   const ReconnectOptions& r);
  static void on_done(BlockIo& io);
  void reconnect_loop();
  // An I/O whose connection went away waits (false: no more waiting, the
  // host is lost or stopping). `from` is the controller that failed it.
  bool park(BlockIo& io, std::uint32_t queue, const HostController* from);
  // REQUIRES mu_ (released meanwhile): submits what waits, or fails it.
  void resubmit_waiting(std::unique_lock<std::mutex>& lock);
  void mark_down();  // REQUIRES mu_
  static bool connection_lost(const BlockIo& io);

  Device& dev_;
  const std::uint64_t addr_;
  const std::uint16_t port_;
  const HostOptions opts_;
  const ReconnectOptions ropts_;
  std::uint32_t io_queues_ = 0;
  std::vector<NamespaceInfo> namespaces_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<HostController> ctrl_;  // null while reconnecting
  bool down_ = false;                      // the connection is lost (ctrl_ being replaced)
  Clock::time_point lost_at_{};            // when down_ was set: the loss timeout counts from it
  bool lost_ = false;                      // the loss timeout ended
  bool stop_ = false;
  std::deque<Waiting> waiting_;
  std::atomic<bool> parked_{false};  // waiting_ is not empty (read without mu_)
  std::uint64_t reconnects_ = 0;
  std::uint64_t clock_wake_ = 0;
  std::thread thread_;
};

}  // namespace srdma::nvmf
