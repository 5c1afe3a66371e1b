// The NVMe-oF RDMA host (like nvme-rdma): one controller = an admin queue
// plus I/O queues on one subsystem of one target, and an asynchronous block
// API on top.
//
// connect() brings a controller up as the Linux host does: admin queue
// (Fabrics Connect, dynamic controller), CAP, CC.EN = 1, wait for
// CSTS.RDY, Identify Controller, the active namespace list and each
// namespace, then the I/O queues (Connect with the cntlid).
// A keeper thread sends Keep Alive every KATO / 2 and fails a controller
// whose command outlived the I/O timeout: every queue closes and every
// outstanding I/O completes with ETIMEDOUT. A controller that failed stays
// failed (no reconnect): later submits get ENOTCONN.
// Thread safety: submit from any thread; callbacks run on completion threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nvmf/block_io.h"
#include "nvmf/host_queue.h"
#include "nvmf/wire.h"
#include "srdma/device.h"

namespace srdma::nvmf {

struct HostOptions {
  std::string subnqn;
  // Empty: this machine's (host_identity.h: /etc/nvme/hostnqn, else one
  // derived from /etc/machine-id).
  std::string hostnqn;
  // DH-HMAC-CHAP (nvme connect --dhchap-secret / --dhchap-ctrl-secret), in
  // nvme-cli's DHHC-1 text form. With a secret the host authenticates each
  // queue whose Connect response asks for it; with a controller secret too
  // it requires the target to ask, and to prove itself (bidirectional).
  std::string dhchap_secret;
  std::string dhchap_ctrl_secret;
  std::uint32_t nr_io_queues = 0;  // 0: one per online CPU
  std::uint32_t queue_size = 128;  // I/O queues
  std::uint32_t admin_queue_size = 32;
  bool pool_cqs = true;            // false: one private CQ per queue
  RegMode reg = RegMode::kFrwr;    // how the data of each I/O is registered
  std::uint32_t max_io_size = 128 * 1024;
  std::uint32_t path_mtu = 4096;   // every queue's, the target's side too (the CM request carries it)
  std::chrono::milliseconds io_timeout{10000};
  std::uint32_t kato_ms = 5000;    // 0: no keep alive
  std::uint32_t keep_alive_interval_ms = 0;  // 0: KATO / 2, as Linux's host
  // Times Keep Alive and io_timeout (tests: a ManualClock; the keeper then
  // also notices a lost admin queue only when the clock moves).
  std::shared_ptr<Clock> clock = Clock::steady();
};

struct NamespaceInfo {
  std::uint32_t nsid = 0;
  std::uint32_t block_size = 0;
  std::uint64_t num_blocks = 0;
};

class HostController {
 public:
  // `dev` must outlive the controller.
  static Result<std::unique_ptr<HostController>> connect(Device& dev, std::uint64_t target_addr,
                                                         std::uint16_t port, const HostOptions& opts);
  // Disconnects: every outstanding I/O completes (ENOTCONN) first.
  ~HostController();

  // Submits on I/O queue `queue` (0-based, < io_queues()). EINVAL for an
  // unknown namespace, a range beyond it, a zero or too long transfer, a
  // missing buffer or callback; EAGAIN when the queue is full; ENOTCONN
  // once the controller failed. On success io.done runs exactly once.
  Result<void> submit(BlockIo& io, std::uint32_t queue);

  // Passthrough (like the NVMe passthru ioctl): `cmd` on queue `qid` (0:
  // admin, 1..io_queues(): I/O); the queue fills in the command id and,
  // for data, the keyed SGL. io.done runs once; *result gets DW0 | DW1 << 32.
  Result<void> submit_command(const HostCommand& cmd, std::uint32_t qid, BlockIo& io, std::uint64_t* result = nullptr);

  std::uint32_t io_queues() const { return static_cast<std::uint32_t>(io_.size()); }
  std::uint32_t queue_size() const { return opts_.queue_size; }
  std::uint16_t cntlid() const { return cntlid_; }
  const std::vector<NamespaceInfo>& namespaces() const { return namespaces_; }
  const NamespaceInfo* find_namespace(std::uint32_t nsid) const;
  const IdentifyController& identify() const { return id_; }
  // Get Log Page on the admin queue (a discovery controller's log is LID
  // kLogPageDiscovery): `length` bytes from `offset`, dword multiples.
  Result<std::vector<std::byte>> get_log_page(std::uint8_t lid, std::uint64_t offset, std::uint32_t length);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Closes every queue with `err` (every outstanding I/O completes with it).
  void fail(int err);
  // The CQs this controller's queues use (distinct ones; pool CQs are shared
  // with other controllers).
  std::vector<CompletionQueue*> cqs() const;

 private:
  HostController(Device& dev, ProtectionDomain pd, const HostOptions& opts);
  // A synchronous admin command; the NVMe status or a transport error.
  Result<std::uint64_t> admin(const HostCommand& cmd);
  Result<void> fabrics_connect(HostQueue& q, std::uint16_t cntlid);
  // One command on `q`, waited for: its DW0, or the NVMe status / transport error.
  Result<std::uint64_t> run(HostQueue& q, const HostCommand& cmd, std::string_view what);
  // DH-HMAC-CHAP on `q` after its Connect asked for it.
  Result<void> authenticate(HostQueue& q);
  Result<void> bring_up(std::uint64_t target_addr, std::uint16_t port);
  void keeper_loop(Clock::time_point started);

  Device& dev_;
  ProtectionDomain pd_;
  const HostOptions opts_;
  std::unique_ptr<HostQueue> admin_;
  std::vector<std::unique_ptr<HostQueue>> io_;
  std::uint16_t cntlid_ = 0;
  std::uint16_t next_t_id_ = 1;  // DH-HMAC-CHAP transaction IDs, per controller
  IdentifyController id_;
  std::vector<NamespaceInfo> namespaces_;
  std::atomic<bool> failed_{false};

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::uint64_t clock_wake_ = 0;  // opts_.clock's subscription
  std::thread keeper_;
};

}  // namespace srdma::nvmf
