// One NVMe-oF queue on the host (like nvme_rdma_queue): a QP whose CQ holds
// 4 x queue_size + 1 entries (REG_MR, SEND, LOCAL_INV and RECV per command,
// plus the drain), from the shared pool (SOFTIRQ, vector hint qid - 1, the
// admin queue on vector 0) or private; a request slot per queue entry, its
// command id being its index; the data of each command registered with FRWR
// from the QP's MR pool and invalidated by the target's SEND_WITH_INV (or
// a LOCAL_INV when it did not).
//
// With RegMode::kFmr the data is mapped through an FMR pool instead (one
// per queue, pool_size = queue size, dirty watermark size / 4, cache on, as
// SRP did): no invalidation per I/O, the key stays valid until the pool
// flushes -- the hole FRWR closes; the bench measures the difference.
//
// A request completes once its SEND has completed, its response has come,
// and its MR is free again (nvme-rdma's reference count). On close the QP
// goes to ERR, a drain receive and send are posted, and once they are back
// every request still outstanding completes with the close's errno: nothing
// submitted is ever lost.
// Thread safety: submit from any thread; completions run on the CQ's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "nvmf/block_io.h"
#include "nvmf/clock.h"
#include "nvmf/rdma_cm.h"
#include "nvmf/wire.h"
#include "srdma/cq_pool.h"
#include "srdma/device.h"
#include "srdma/fmr_pool.h"
#include "srdma/mr.h"
#include "srdma/qp.h"

namespace srdma::nvmf {

enum class RegMode : std::uint8_t { kFrwr, kFmr };

struct HostQueueConfig {
  std::uint16_t qid = 0;
  std::uint32_t size = 32;
  std::uint32_t max_io_size = 128 * 1024;
  bool pool_cqs = true;
  RegMode reg = RegMode::kFrwr;
  std::uint32_t path_mtu = 4096;
  std::chrono::milliseconds timeout{10000};
  std::shared_ptr<const Clock> clock = Clock::steady();  // times `timeout`
};

// A command and where its data is (the queue registers it per command).
struct HostCommand {
  NvmeCommand sqe;            // cid is filled in by the queue
  void* data = nullptr;
  std::uint32_t length = 0;   // bytes; 0: no data
  bool to_controller = false; // the target reads the data (writes, Connect)
  bool raw_dptr = false;       // no data: send sqe.dptr as given (tests, passthrough)
};

class HostQueue {
 public:
  // Called for every finished command, with the completion's DW0/DW1.
  using Done = void (*)(BlockIo& io, std::uint64_t result);

  HostQueue(Device& dev, ProtectionDomain& pd, const HostQueueConfig& cfg);
  ~HostQueue();  // closes (every request completes) and frees
  HostQueue(const HostQueue&) = delete;
  HostQueue& operator=(const HostQueue&) = delete;

  // Creates CQ, QP, MRs and buffers; connects through the CM to (addr, port).
  Result<void> connect(std::uint64_t target_addr, std::uint16_t port);

  // Posts `cmd`; `io` completes through io->done (and `result` through
  // *result_out when not null, written before done runs). EAGAIN when every
  // slot is taken; ENOTCONN when the queue is closed; EINVAL when the data
  // is longer than max_io_size.
  Result<void> submit(const HostCommand& cmd, BlockIo* io, std::uint64_t* result_out = nullptr);

  // Fails every outstanding command with `err` and disconnects. Idempotent
  // and non-blocking (any thread, completion callbacks included): the
  // failures are delivered once the drain is back.
  void close(int err);
  bool closed() const { return closed_.load(std::memory_order_acquire); }
  // True if a command is older than the timeout (the controller then fails
  // with ETIMEDOUT: HostController::fail closes every queue).
  bool check_timeouts(Clock::time_point now);

  std::uint16_t qid() const { return cfg_.qid; }
  std::uint32_t size() const { return cfg_.size; }
  CompletionQueue* cq() const { return cq_; }
  std::uint32_t outstanding() const { return outstanding_.load(std::memory_order_relaxed); }

 private:
  struct Request;
  struct ReqCqe {
    WrCqe cqe;
    Request* req;
  };
  struct Request {
    HostQueue* q = nullptr;
    std::uint16_t cid = 0;
    NvmeCommand* capsule = nullptr;  // in the queue's control buffer
    BlockIo* io = nullptr;
    std::uint64_t* result_out = nullptr;
    MemoryRegion* mr = nullptr;      // FRWR: while the data is registered
    PoolFmr* fmr = nullptr;          // FMR: while the data is mapped
    std::atomic<int> refs{0};        // SEND, response, invalidation outstanding
    NvmeStatus status;
    std::uint64_t result = 0;
    Clock::time_point deadline{};
    bool busy = false;               // guarded by the queue's mu_
    ReqCqe send_cqe, inv_cqe;
  };
  struct RecvSlot {
    HostQueue* q = nullptr;
    NvmeCompletion* rsp = nullptr;
    ReqCqe cqe;  // req unused
  };

  static void on_send(CompletionQueue&, const Wc& wc);
  static void on_recv(CompletionQueue&, const Wc& wc);
  static void on_inv(CompletionQueue&, const Wc& wc);
  static void on_drain(CompletionQueue&, const Wc& wc);
  void put_ref(Request& r);
  void finish(Request& r, int transport_error);
  bool post_recv(RecvSlot& s);
  void drain();
  void on_drain_complete();
  // Maps the data of `r` (either way); false if it cannot.
  bool map_fmr(Request& r, const HostCommand& cmd);

  Device& dev_;
  ProtectionDomain& pd_;
  const HostQueueConfig cfg_;
  std::shared_ptr<CmConnection> conn_;
  std::unique_ptr<CompletionQueue> private_cq_;
  CqLease lease_;  // pool entries, returned after qp_ is gone (member order)
  CompletionQueue* cq_ = nullptr;
  std::unique_ptr<QueuePair> qp_;
  std::vector<std::byte> ctrl_buf_;  // capsules and responses
  MemoryRegion ctrl_mr_;
  std::unique_ptr<FmrPool> fmr_pool_;
  std::unique_ptr<Request[]> reqs_;
  std::vector<RecvSlot> recvs_;

  std::mutex mu_;  // guards free_, the requests' busy bits, closing
  std::vector<std::uint16_t> free_;
  bool closing_ = false;
  int close_err_ = 0;
  std::atomic<bool> closed_{false};
  std::atomic<std::uint32_t> outstanding_{0};

  std::mutex drain_mu_;
  std::condition_variable drain_cv_;
  int drains_left_ = 0;
  bool drained_ = false;
  WrCqe drain_cqe_{&HostQueue::on_drain};
};

}  // namespace srdma::nvmf
