// A CQ's shared state (the device CQ, its poll context and counters), a
// completion channel's, and CQ creation shared by Device and the CQ pool.
// Internal to src/core.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/cq_dim.h"
#include "core/device_impl.h"
#include "core/work_queue.h"
#include "hca/comp_channel.h"
#include "srdma/cq.h"
#include "srdma/poll_context.h"

namespace srdma::detail {

struct ChannelImpl;

struct CqImpl {
  // The owner's CQs keep the device open; the pool's CQs must not (the
  // device owns the pool), so for them `device` is null.
  std::shared_ptr<DeviceImpl> device;
  DeviceImpl* owner = nullptr;
  std::shared_ptr<hca::SoftHca> hca;
  std::shared_ptr<hca::Cq> cq;
  std::shared_ptr<ChannelImpl> channel;  // when bound to one
  bool destroyed = false;
  bool polled_link = false;  // the device's wire is received by polling (poll() drives it)
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

// A completion channel's device half.
struct ChannelImpl {
  std::unique_ptr<hca::CompChannel> channel;
  // Whose link a consumer blocking on the channel stops receiving for.
  std::shared_ptr<hca::SoftHca> hca;
};

// CQ creation, shared by Device and the pool. `keep` is the device's
// shared state for the owner's CQs, null for the pool's.
struct CqAccess {
  static Result<std::unique_ptr<CompletionQueue>> create_cq(DeviceImpl& dev, std::shared_ptr<DeviceImpl> keep,
                                                            const CqInit& init);
  static Result<std::unique_ptr<CompletionQueue>> alloc_cq(DeviceImpl& dev, std::shared_ptr<DeviceImpl> keep,
                                                           void* cq_context, std::uint32_t nr_cqe,
                                                           std::uint32_t comp_vector, PollContext ctx);
  static CqImpl& state(CompletionQueue& cq) { return *cq.state_; }
};

}  // namespace srdma::detail
