// A per-QP pool of fast-registration MRs (like ib_mr_pool_init / get / put /
// destroy and qp->mrs_used): a ULP allocates, once, as many MRs as it can
// have registrations outstanding on the QP, and takes one per I/O.
//
//   mr_pool_init(qp, queue_depth, MrType::kMemReg, max_pages);
//   MemoryRegion* mr = mr_pool_get(qp);      // null when all are out
//   ... map_mr_sg, REG_MR, the I/O, LOCAL_INV or the peer's SEND_WITH_INV ...
//   mr_pool_put(qp, mr);                     // after the invalidation completed
//
// The MRs belong to the QP's PD. A put MR is handed out again as it is: the
// pool does not invalidate, that is the ULP's work request (FRWR's point:
// the ULP knows when the peer's access has ended).
//
// Lifetime: the pool lives inside the QueuePair. mr_pool_destroy refuses
// while MRs are handed out; destroying the QP frees every MR of its pool,
// handed out or not (their keys stop working; pointers to them dangle), so
// put them back first, as ib_destroy_qp expects mrs_used == 0.
// Thread safety: all functions may be called from any thread at once.
#pragma once

#include <cstdint>

#include "srdma/mr.h"
#include "srdma/qp.h"
#include "srdma/status.h"

namespace srdma {

// Allocates `nr` MRs of `type` (kMemReg) with room for `max_num_sg` pages in
// the QP's PD. EINVAL: nr < 1, a type other than kMemReg, bad max_num_sg;
// EBUSY: the QP already has a pool; ENOMEM from the device (nothing is kept).
Result<void> mr_pool_init(QueuePair& qp, int nr, MrType type, std::uint32_t max_num_sg);
// A free MR of the pool, or null when every one is handed out.
MemoryRegion* mr_pool_get(QueuePair& qp);
// Gives `mr` back. EINVAL if it is not handed out from this QP's pool.
Result<void> mr_pool_put(QueuePair& qp, MemoryRegion* mr);
// Frees the pool's MRs. EBUSY (nothing freed) while some are handed out.
Result<void> mr_pool_destroy(QueuePair& qp);
// MRs handed out (qp->mrs_used) and the pool's size.
int mr_pool_used(const QueuePair& qp);
int mr_pool_size(const QueuePair& qp);

}  // namespace srdma
