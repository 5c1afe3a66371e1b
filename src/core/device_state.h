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
#include "core/work_queue.h"
#include "hca/soft_hca.h"
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
};

struct PdState {
  std::shared_ptr<DeviceState> device;
  std::uint32_t pdn = 0;
  std::atomic<int> usecnt{0};      // live MRs (and later QPs)
  std::atomic<bool> dealloced{false};

  ~PdState() {
    if (!dealloced.load()) (void)device->hca->dealloc_pd(pdn);
  }
};

struct CqState {
  std::shared_ptr<DeviceState> device;
  std::shared_ptr<hca::Cq> cq;
  std::shared_ptr<ChannelState> channel;  // when bound to one
  bool destroyed = false;
  // alloc_cq CQs: how they are processed, and counters.
  PollContext ctx = PollContext::kDirect;
  bool processed = false;  // SOFTIRQ, WORKQUEUE or UNBOUND (the device polls)
  bool shared = false;     // owned by the CQ pool
  core::WorkQueue* worker = nullptr;  // WORKQUEUE / UNBOUND
  std::atomic<std::uint64_t> completions{0};
  std::atomic<std::uint64_t> without_wr_cqe{0};
  std::atomic<std::uint64_t> unexpected_events{0};
};

struct ChannelState {
  std::unique_ptr<hca::CompChannel> channel;
};

struct QpState {
  std::shared_ptr<PdState> pd;
  std::shared_ptr<hca::Qp> qp;
  bool destroyed = false;
};

}  // namespace srdma::detail
