// The shared state behind the core's owning handles. Internal to src/core.
//
// Lifetime: a Device handle, each PD and each MR hold a shared_ptr to what
// they stand on (MR -> PD -> device), so a device is closed only after its
// last object is gone, and nothing dangles whatever order handles die in.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hca/comp_channel.h"
#include "core/cq_dim.h"
#include "core/cq_pool.h"
#include "core/work_queue.h"
#include "hca/soft_hca.h"
#include "srdma/cq.h"
#include "srdma/device.h"
#include "srdma/poll_context.h"

namespace srdma::detail {

struct ChannelState;

struct DeviceState {
  std::string name;
  std::shared_ptr<hca::SoftHca> hca;

  // Workers for the WORKQUEUE (one per vector) and UNBOUND poll contexts,
  // started on first use.
  std::once_flag workers_once;
  std::vector<std::unique_ptr<core::WorkQueue>> vector_workers;
  std::unique_ptr<core::WorkQueue> unbound_worker;
  void start_workers();

  // The shared CQ pool, created with the device, freed before the workers
  // its CQs may use (members are destroyed in reverse order).
  std::unique_ptr<core::CqPool::Backend> pool_backend;
  std::unique_ptr<core::CqPool> cq_pool;
  std::atomic<bool> removed{false};
  std::atomic<bool> cq_dim{true};  // adaptive moderation for processed CQs allocated from now on

  ~DeviceState();  // leaves the client registry
};

struct PdState {
  std::shared_ptr<DeviceState> device;
  std::uint32_t pdn = 0;
  std::atomic<int> usecnt{0};      // live MRs (and later QPs)
  std::atomic<bool> dealloced{false};

  ~PdState() {
    if (!dealloced.load()) (void)device->hca->tables().dealloc_pd(pdn);
  }
};

struct CqState {
  // The owner's CQs keep the device open; the pool's CQs must not (the
  // device owns the pool), so for them `device` is null.
  std::shared_ptr<DeviceState> device;
  DeviceState* owner = nullptr;
  std::shared_ptr<hca::SoftHca> hca;
  std::shared_ptr<hca::Cq> cq;
  std::shared_ptr<ChannelState> channel;  // when bound to one
  bool destroyed = false;
  // alloc_cq CQs: how they are processed, and counters.
  PollContext ctx = PollContext::kDirect;
  bool processed = false;  // SOFTIRQ, WORKQUEUE or UNBOUND (the device polls)
  bool shared = false;     // owned by the CQ pool
  core::WorkQueue* worker = nullptr;  // WORKQUEUE / UNBOUND
  bool use_dim = false;               // adaptive moderation (Device::set_cq_dim)
  core::CqDim dim;                    // touched only by the CQ's handler
  std::atomic<std::uint64_t> completions{0};
  std::atomic<std::uint64_t> without_wr_cqe{0};
  std::atomic<std::uint64_t> unexpected_events{0};
};

struct ChannelState {
  std::unique_ptr<hca::CompChannel> channel;
};

// The QP's MR pool (mr_pool.h, like qp->rdma_mrs and qp->mrs_used).
struct MrPoolState {
  std::mutex mu;  // guards all, free_list, max_num_sg, type
  std::vector<std::unique_ptr<MemoryRegion>> all;  // every MR of the pool
  std::vector<MemoryRegion*> free_list;            // those not handed out
  std::uint32_t max_num_sg = 0;
  MrType type = MrType::kMemReg;
  std::atomic<int> used{0};  // handed out (mrs_used)
};

struct QpState {
  std::shared_ptr<PdState> pd;
  std::shared_ptr<hca::Qp> qp;
  CompletionQueue* send_cq = nullptr;
  CompletionQueue* recv_cq = nullptr;
  CqLease send_lease, recv_lease;  // QP_CREATE_ASSIGN_CQS: returned with the QP
  bool destroyed = false;
  MrPoolState mr_pool;  // destroyed with the QP, see mr_pool.h
};

// Makes MemoryRegions inside the core (alloc_mr, the MR pool).
struct MrAccess {
  static Result<MemoryRegion> alloc_mr(const std::shared_ptr<PdState>& pd, MrType type, std::uint32_t max_num_sg);
};

// Makes Device handles inside the core (client callbacks, assigned CQs).
struct ClientAccess {
  static Device handle(std::shared_ptr<DeviceState> s) { return Device(std::move(s)); }
};

// Creates the device's CQ pool (device_cq_pool.cc).
void init_cq_pool(DeviceState& dev);
// Tells the registered clients about a new device (client.cc).
void announce_device(const std::shared_ptr<DeviceState>& dev);
void forget_device(const DeviceState* dev);

// CQ creation, shared by Device and the pool. `keep` is the device's
// shared state for the owner's CQs, null for the pool's.
struct CqAccess {
  static Result<std::unique_ptr<CompletionQueue>> create_cq(DeviceState& dev, std::shared_ptr<DeviceState> keep,
                                                            const CqInit& init);
  static Result<std::unique_ptr<CompletionQueue>> alloc_cq(DeviceState& dev, std::shared_ptr<DeviceState> keep,
                                                           void* cq_context, std::uint32_t nr_cqe,
                                                           std::uint32_t comp_vector, PollContext ctx);
  static CqState& state(CompletionQueue& cq) { return *cq.state_; }
};

}  // namespace srdma::detail
