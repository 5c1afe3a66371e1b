// The per-device shared CQ pool (like ib_cq_pool_get / ib_cq_pool_put of the
// Linux RDMA core), with the kernel's semantics except where it is weak:
//
//   - n = min(num_comp_vectors, online CPUs); n == 0 is EINVAL, not a
//     division by zero.
//   - vector = hint mod n; a negative hint means round robin per device
//     (the first such call gets vector 0), not a counter shared by all
//     devices.
//   - Selection is truly least used: among the pool's CQs of that poll
//     context on that vector with room (cqe - cqe_used >= nr_cqe), the one
//     with the smallest cqe_used; ties go to the CQ created first. (The
//     kernel takes the first fit.)
//   - A miss grows the pool by one CQ per vector, in vector order, each of
//     min(max_cqe, max(nr_cqe, 4096)) entries (IB_MAX_SHARED_CQ_SZ) --
//     exactly once even when several threads miss at the same moment.
//   - nr_cqe == 0 or > max_cqe is EINVAL (the kernel would loop); DIRECT is
//     EINVAL; a put of more than is reserved, or of a CQ that is not a pool
//     CQ, is EINVAL with nothing changed.
//   - trim() frees every pool CQ with nothing reserved (the kernel never
//     shrinks).
//   - Pool CQs refuse destroy and resize (EOPNOTSUPP): they are shared.
//
// The pool is policy only: it creates and frees CQs through a Backend, so
// the same code runs against a device and inside `srdma sim cq-pool`.
// Pool CQs are numbered 0, 1, 2 ... in creation order; a number is never
// reused.
// Thread safety: every call may be made from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "srdma/poll_context.h"
#include "srdma/status.h"

namespace srdma::core {

inline constexpr std::uint32_t kMinSharedCqSize = 4096;  // IB_MAX_SHARED_CQ_SZ

// One pool CQ as the pool sees it.
struct PoolCq {
  std::uint32_t id = 0;  // creation order
  std::uint32_t vector = 0;
  PollContext ctx = PollContext::kSoftirq;
  std::uint32_t cqe = 0;
  std::uint32_t cqe_used = 0;
  void* handle = nullptr;  // the backend's CQ
};

class CqPool {
 public:
  class Backend {
   public:
    virtual ~Backend() = default;
    // A CQ of `cqe` entries on `vector` processed in `ctx`.
    virtual Result<void*> create_cq(std::uint32_t cqe, std::uint32_t vector, PollContext ctx) = 0;
    virtual void destroy_cq(void* handle) = 0;
  };

  // num_vectors and cpus as the device reports them; max_cqe its limit.
  CqPool(Backend& backend, std::uint32_t num_vectors, std::uint32_t cpus, std::uint32_t max_cqe);
  ~CqPool();  // frees every pool CQ (the device is going away)

  // Reserves nr_cqe entries on a pool CQ; returns a snapshot of it.
  Result<PoolCq> get(std::uint32_t nr_cqe, int comp_vector_hint, PollContext ctx);
  // Returns nr_cqe entries of CQ `id`; a snapshot after the put.
  Result<PoolCq> put(std::uint32_t id, std::uint32_t nr_cqe);
  // The same, naming the CQ by its backend handle.
  Result<PoolCq> put_handle(const void* handle, std::uint32_t nr_cqe);
  // Frees every pool CQ with cqe_used == 0; how many.
  std::size_t trim();

  // What a pool CQ answers to destroy and resize: EOPNOTSUPP (EINVAL for an
  // id that is not a pool CQ).
  Result<void> destroy(std::uint32_t id) const;
  Result<void> resize(std::uint32_t id, std::uint32_t cqe) const;

  // Every pool CQ, in creation order.
  std::vector<PoolCq> snapshot() const;

 private:
  // REQUIRES mu_. The least-used CQ with room, or null.
  PoolCq* select_locked(std::uint32_t vector, PollContext ctx, std::uint32_t nr_cqe);
  PoolCq* find_locked(std::uint32_t id);
  const PoolCq* find_locked(std::uint32_t id) const;
  Result<PoolCq> put_locked(PoolCq* cq, std::uint32_t nr_cqe);

  Backend& backend_;
  const std::uint32_t n_;  // min(num_vectors, cpus)
  const std::uint32_t max_cqe_;
  std::mutex grow_mu_;  // serialises growth: one miss grows, the others re-check
  mutable std::mutex mu_;  // guards cqs_, next_id_, rr_
  std::vector<std::unique_ptr<PoolCq>> cqs_;  // creation order
  std::uint32_t next_id_ = 0;
  std::uint32_t rr_ = 0;  // round robin for negative hints, per pool
};

}  // namespace srdma::core
