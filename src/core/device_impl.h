// The shared state behind a Device handle: the software HCA it drives, its
// poll-context workers and its CQ pool. Internal to src/core; each object
// kind has its own state header (pd_impl.h, cq_impl.h, qp_impl.h).
//
// Lifetime: a Device handle, each PD and each MR hold a shared_ptr to what
// they stand on (MR -> PD -> device), so a device is closed only after its
// last object is gone, and nothing dangles whatever order handles die in.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/cq_pool.h"
#include "core/work_queue.h"
#include "hca/soft_hca.h"
#include "srdma/device.h"

namespace srdma::detail {

struct DeviceImpl {
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
  std::atomic<bool> cq_dim{true};
  std::atomic<std::uint64_t> dm_bytes{0};  // device memory mapped (dm.cc), whole pages, <= kMaxDmSize  // adaptive moderation for processed CQs allocated from now on

  ~DeviceImpl();  // leaves the client registry
};

// Makes Device handles inside the core (client callbacks, assigned CQs).
struct ClientAccess {
  static Device handle(std::shared_ptr<DeviceImpl> s) { return Device(std::move(s)); }
};

// Creates the device's CQ pool (device_cq_pool.cc).
void init_cq_pool(DeviceImpl& dev);
// Tells the registered clients about a new device (client.cc).
void announce_device(const std::shared_ptr<DeviceImpl>& dev);
void forget_device(const DeviceImpl* dev);

}  // namespace srdma::detail
