// The per-device shared CQ pool, for C++ users: a lease on CQ entries that
// returns them when it goes out of scope (see Device::cq_pool_get).
#pragma once

#include <cstdint>
#include <memory>

#include "srdma/poll_context.h"

namespace srdma {

class CompletionQueue;
class Device;

namespace detail {
struct DeviceImpl;
}

// One pool CQ, for `srdma info` and monitoring.
struct PoolCqStats {
  std::uint32_t id = 0;  // creation order in the pool
  std::uint32_t vector = 0;
  PollContext ctx = PollContext::kSoftirq;
  std::uint32_t cqe = 0;
  std::uint32_t cqe_used = 0;
  int qps = 0;                        // QP attachments (send CQ and receive CQ count once each)
  std::uint64_t completions = 0;      // dispatched to wr_cqe->done
  std::uint64_t interrupts = 0;       // completion events
  double completions_per_interrupt = 0;
};

// nr_cqe entries reserved on a pool CQ; put back on destruction.
// Move-only. The device must outlive the lease.
class CqLease {
 public:
  CqLease() = default;
  CqLease(CqLease&& o) noexcept { *this = std::move(o); }
  CqLease& operator=(CqLease&& o) noexcept;
  CqLease(const CqLease&) = delete;
  CqLease& operator=(const CqLease&) = delete;
  ~CqLease() { release(); }

  CompletionQueue* cq() const { return cq_; }
  std::uint32_t nr_cqe() const { return nr_cqe_; }
  // Returns the entries now (idempotent).
  void release();

 private:
  friend class Device;
  CqLease(detail::DeviceImpl* dev, CompletionQueue* cq, std::uint32_t nr) : dev_(dev), cq_(cq), nr_cqe_(nr) {}
  detail::DeviceImpl* dev_ = nullptr;
  CompletionQueue* cq_ = nullptr;
  std::uint32_t nr_cqe_ = 0;
};

}  // namespace srdma
