// A pool of FMRs with a mapping cache and batched invalidation (like the
// Linux RDMA core's fmr_pool.c, removed in Linux 5.8).
//
// WARNING -- what "unmap" means here. By default a pool unmap is LAZY: the
// FMR goes back to the free list with its mapping still VALID, and its rkey
// keeps working -- a peer can still read and write those pages -- until the
// FMR is remapped (after which the old key fails) or its dirty batch is
// flushed. With the cache on, that is the point: the next map of the same
// pages is free. It is also the hole that made Linux remove FMRs: after
// unmap the consumer may already reuse memory a peer can still reach.
// Set FmrPoolParams::synchronous_unmap for an unmap that invalidates (FMR
// unmap + translation-cache sync) before it returns; it costs one sync per
// unmap and there are no cache hits across an unmap (see bench/reg_bench.cc).
//
// Life of an FMR (lazy mode): map (a cache hit takes a free or dirty FMR
// already mapped over the same iova, length and pages, with no device
// operation; a miss remaps the head of the free list: ++remap_count) ->
// unmap: when its last user unmaps, it goes to the tail of the free list
// while remap_count < max_remaps, else to the dirty list. When the dirty
// list reaches dirty_watermark the pool's worker thread releases the whole
// batch: out of the cache, ONE unmap_fmrs (one sync), remap_count = 0, back
// to the free list, then flush_function.
//
// Thread safety: every call may be made from any thread (one mutex guards
// the lists, the cache and the counters; device operations of a miss run
// under it, the worker's batch unmap outside it).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "srdma/fmr.h"
#include "srdma/pd.h"
#include "srdma/status.h"

namespace srdma {

struct FmrPoolParams {
  std::uint32_t max_pages_per_fmr = 64;
  std::uint8_t page_shift = 12;
  std::uint32_t access = 0;          // AccessFlags of every FMR
  std::uint32_t pool_size = 32;      // FMRs allocated at create
  std::uint32_t dirty_watermark = 8; // dirty FMRs that start a batch release
  // Called on the worker thread after each batch release.
  std::function<void()> flush_function = nullptr;
  bool cache = true;
  // Unmap invalidates before it returns (see the warning above).
  bool synchronous_unmap = false;
  // Maps of an FMR between batch releases; 0 = the device's max_map_per_fmr
  // (as fmr_pool.c). Lower values make dirty batches come sooner.
  std::uint32_t max_remaps = 0;
};

struct FmrPoolStats {
  std::uint64_t maps = 0;          // successful map_phys calls
  std::uint64_t cache_hits = 0;    // maps served from the cache (no device operation)
  std::uint64_t cache_misses = 0;  // maps that remapped an FMR (cache on or off)
  std::uint64_t remaps = 0;        // map_phys_fmr calls on the device
  std::uint64_t unmaps = 0;        // successful unmap calls
  std::uint64_t flushes = 0;       // batch releases (each one sync)
  std::uint64_t fmrs_flushed = 0;  // FMRs released by those batches
  std::uint64_t sync_unmaps = 0;   // synchronous-mode unmaps (each one sync)
  // FMRs now: free, dirty, and held by users (or in a batch being released).
  std::uint32_t free = 0, dirty = 0, in_use = 0;
  double fmrs_per_flush() const { return flushes ? double(fmrs_flushed) / double(flushes) : 0.0; }
};

class FmrPool;

// One FMR of the pool as its user sees it between map_phys and unmap.
// Owned by the pool; valid until the matching unmap.
class PoolFmr {
 public:
  std::uint32_t lkey() const { return fmr_.lkey(); }
  std::uint32_t rkey() const { return fmr_.rkey(); }
  std::uint64_t iova() const { return fmr_.iova(); }
  std::uint64_t length() const { return fmr_.length(); }

 private:
  friend class FmrPool;
  enum class List : std::uint8_t { kFree, kDirty, kInUse, kFlushing };
  const FmrPool* owner = nullptr;
  Fmr fmr_;
  std::uint32_t ref_count = 0;
  std::uint32_t remap_count = 0;
  List list = List::kFree;
  std::list<PoolFmr*>::iterator list_pos;   // in free_ or dirty_ (kFree/kDirty)
  bool cached = false;
  std::list<PoolFmr*>::iterator cache_pos;  // in its cache bucket when cached
  std::vector<std::uint64_t> pages;         // the cached mapping
  std::uint64_t mapped_iova = 0;
};

class FmrPool {
 public:
  // Allocates pool_size FMRs of max_pages_per_fmr pages in `pd` and starts
  // the worker. EINVAL: pool_size 0, dirty_watermark 0, max_remaps above
  // the device's max_map_per_fmr, or FMR limits alloc_fmr refuses; ENOMEM
  // when the device runs out of MPTs or FMR MTTs.
  static Result<std::unique_ptr<FmrPool>> create(ProtectionDomain& pd, FmrPoolParams params);
  // Stops the worker, unmaps every FMR (one sync) and frees them. FMRs still
  // mapped by users are unmapped too (their keys stop working).
  ~FmrPool();
  FmrPool(const FmrPool&) = delete;
  FmrPool& operator=(const FmrPool&) = delete;

  // Maps `pages` at `iova` (like ib_fmr_pool_map_phys). EINVAL: no pages or
  // more than max_pages_per_fmr, or what map_phys refuses (alignment);
  // EAGAIN when no FMR is free (all in use or dirty and waiting for the
  // worker). The result stays valid, and its keys work, until unmap.
  Result<PoolFmr*> map_phys(std::span<const std::uint64_t> pages, std::uint64_t iova);
  // Drops one reference (like ib_fmr_pool_unmap). Lazy by default -- the
  // keys may keep working until a flush, see the warning at the top;
  // with synchronous_unmap the last reference's unmap invalidates before
  // returning. EINVAL for a foreign or unreferenced FMR.
  Result<void> unmap(PoolFmr* fmr);
  // Invalidates every FMR nobody holds whose mapping may still be valid
  // (free ones that were mapped, dirty ones), in one batch on the worker,
  // and waits for it (like ib_flush_fmr_pool). Afterwards no key the pool
  // handed out before the call translates, except those still in use.
  void flush();

  FmrPoolStats stats() const;
  const FmrPoolParams& params() const { return params_; }
  std::uint32_t max_remaps() const { return max_remaps_; }

 private:
  FmrPool(FmrPoolParams params, std::uint32_t max_remaps);
  void worker_loop();
  void release_batch(std::unique_lock<std::mutex>& lock);
  static std::size_t bucket_of(std::uint64_t first_page);
  void cache_remove(PoolFmr* f);
  void list_remove(PoolFmr* f);
  void kick_worker();

  const FmrPoolParams params_;
  const std::uint32_t max_remaps_;
  std::vector<std::unique_ptr<PoolFmr>> fmrs_;  // fixed after create

  // Invariants: an FMR is on exactly one of free_ (ref_count 0, reusable),
  // dirty_ (ref_count 0, remap_count == max_remaps, waiting for a batch),
  // in use (ref_count > 0, on no list) or flushing (taken by the worker, on
  // no list and in no cache bucket). A cached FMR's mapping is valid.
  mutable std::mutex mu_;  // guards everything below and the PoolFmrs' fields
  std::list<PoolFmr*> free_;
  std::list<PoolFmr*> dirty_;
  std::vector<std::list<PoolFmr*>> cache_;  // 256 buckets by first page
  FmrPoolStats stats_;
  std::condition_variable work_cv_;  // worker waits for requested_ > done_ or stop_
  std::condition_variable done_cv_;  // flush() waits for done_
  std::uint64_t requested_ = 0;      // batch generations asked for
  std::uint64_t done_ = 0;           // generations the worker has completed
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace srdma
