#include "srdma/fmr_pool.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/pd_impl.h"

namespace srdma {
namespace {
constexpr std::size_t kCacheBuckets = 256;  // IB_FMR_HASH_SIZE
}  // namespace

std::size_t FmrPool::bucket_of(std::uint64_t first_page) {
  // Fibonacci hashing of the page address; the top 8 bits pick the bucket.
  return static_cast<std::size_t>((first_page * 0x9E3779B97F4A7C15ull) >> 56) & (kCacheBuckets - 1);
}

Result<std::unique_ptr<FmrPool>> FmrPool::create(ProtectionDomain& pd, FmrPoolParams params) {
  if (!pd.valid()) return make_error(EINVAL, "the protection domain is deallocated");
  if (params.pool_size == 0) return make_error(EINVAL, "an FMR pool needs pool_size >= 1");
  if (params.dirty_watermark == 0) return make_error(EINVAL, "an FMR pool needs dirty_watermark >= 1");
  const std::uint32_t device_max = pd.state_->device->hca->tables().max_map_per_fmr();
  std::uint32_t max_remaps = params.max_remaps == 0 ? device_max : params.max_remaps;
  if (max_remaps > device_max)
    return make_error(EINVAL, fmt::format("max_remaps {} above the device's max_map_per_fmr {}", max_remaps,
                                          device_max));
  const std::uint32_t pool_size = params.pool_size;
  std::unique_ptr<FmrPool> pool(new FmrPool(std::move(params), max_remaps));
  const FmrAttr attr{pool->params_.max_pages_per_fmr, max_remaps, pool->params_.page_shift};
  pool->fmrs_.reserve(pool_size);
  for (std::uint32_t i = 0; i < pool_size; ++i) {
    auto fmr = pd.alloc_fmr(pool->params_.access, attr);
    if (!fmr)  // the FMRs made so far are freed with the pool
      return make_error(fmr.error().code, fmt::format("FMR {} of {}: {}", i, pool_size, fmr.error().reason));
    auto f = std::make_unique<PoolFmr>();
    f->owner = pool.get();
    f->fmr_ = std::move(*fmr);
    pool->free_.push_back(f.get());
    f->list_pos = std::prev(pool->free_.end());
    pool->fmrs_.push_back(std::move(f));
  }
  pool->worker_ = std::thread([p = pool.get()] { p->worker_loop(); });
  return pool;
}

FmrPool::FmrPool(FmrPoolParams params, std::uint32_t max_remaps)
    : params_(std::move(params)), max_remaps_(max_remaps), cache_(kCacheBuckets) {}

FmrPool::~FmrPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  // Every mapped FMR, in use or not, in one unmap (one sync); the Fmr
  // handles then deallocate.
  std::vector<Fmr*> mapped;
  for (auto& f : fmrs_)
    if (f->fmr_.mapped()) mapped.push_back(&f->fmr_);
  (void)unmap_fmrs(mapped);
}

void FmrPool::list_remove(PoolFmr* f) {
  if (f->list == PoolFmr::List::kFree) free_.erase(f->list_pos);
  if (f->list == PoolFmr::List::kDirty) dirty_.erase(f->list_pos);
  f->list = PoolFmr::List::kInUse;
}

void FmrPool::cache_remove(PoolFmr* f) {
  if (!f->cached) return;
  cache_[bucket_of(f->pages.front())].erase(f->cache_pos);
  f->cached = false;
}

Result<PoolFmr*> FmrPool::map_phys(std::span<const std::uint64_t> pages, std::uint64_t iova) {
  if (pages.empty() || pages.size() > params_.max_pages_per_fmr)
    return make_error(EINVAL, fmt::format("{} pages for FMRs of 1..{} pages", pages.size(), params_.max_pages_per_fmr));
  // Refuse bad input before an FMR is taken off the free list.
  const std::uint64_t page_mask = (std::uint64_t{1} << params_.page_shift) - 1;
  if (iova & page_mask) return make_error(EINVAL, fmt::format("iova {:#x} is not page aligned", iova));
  for (std::uint64_t a : pages)
    if (a & page_mask) return make_error(EINVAL, fmt::format("page address {:#x} is not aligned", a));

  std::lock_guard lock(mu_);
  if (params_.cache) {
    for (PoolFmr* f : cache_[bucket_of(pages.front())]) {
      if (f->mapped_iova != iova || f->pages.size() != pages.size() ||
          !std::equal(pages.begin(), pages.end(), f->pages.begin()))
        continue;
      // Hit: the mapping is valid as it stands; no device operation.
      if (f->ref_count++ == 0) list_remove(f);
      ++stats_.cache_hits;
      ++stats_.maps;
      return f;
    }
  }
  if (free_.empty())
    return make_error(EAGAIN, fmt::format("all {} FMRs of the pool are in use or dirty", fmrs_.size()));
  PoolFmr* f = free_.front();
  list_remove(f);
  cache_remove(f);
  if (auto r = f->fmr_.map_phys(pages, iova); !r) {
    f->list = PoolFmr::List::kFree;
    free_.push_front(f);
    f->list_pos = free_.begin();
    return std::unexpected(r.error());
  }
  ++f->remap_count;
  f->ref_count = 1;
  f->mapped_iova = iova;
  if (params_.cache) {
    f->pages.assign(pages.begin(), pages.end());
    auto& bucket = cache_[bucket_of(pages.front())];
    bucket.push_front(f);
    f->cache_pos = bucket.begin();
    f->cached = true;
  }
  ++stats_.cache_misses;
  ++stats_.remaps;
  ++stats_.maps;
  return f;
}

Result<void> FmrPool::unmap(PoolFmr* f) {
  if (f == nullptr || f->owner != this) return make_error(EINVAL, "the FMR does not belong to this pool");
  std::lock_guard lock(mu_);
  if (f->ref_count == 0) return make_error(EINVAL, "the FMR is not mapped by anyone (unmapped twice?)");
  ++stats_.unmaps;
  if (--f->ref_count > 0) return {};
  if (params_.synchronous_unmap) {
    // The safe flavour: the keys stop working before we return.
    cache_remove(f);
    (void)f->fmr_.unmap();
    f->remap_count = 0;
    ++stats_.sync_unmaps;
    f->list = PoolFmr::List::kFree;
    free_.push_back(f);
    f->list_pos = std::prev(free_.end());
    return {};
  }
  // Lazy: the mapping (and its rkey) stays valid.
  if (f->remap_count < max_remaps_) {
    f->list = PoolFmr::List::kFree;
    free_.push_back(f);
    f->list_pos = std::prev(free_.end());
  } else {
    f->list = PoolFmr::List::kDirty;
    dirty_.push_back(f);
    f->list_pos = std::prev(dirty_.end());
    if (dirty_.size() >= params_.dirty_watermark) kick_worker();
  }
  return {};
}

void FmrPool::kick_worker() {  // REQUIRES: mu_ held
  ++requested_;
  work_cv_.notify_one();
}

void FmrPool::flush() {
  std::unique_lock lock(mu_);
  // Free FMRs whose mapping may still be valid join the dirty batch.
  for (auto it = free_.begin(); it != free_.end();) {
    PoolFmr* f = *it;
    it = std::next(it);
    if (f->remap_count == 0) continue;
    free_.erase(f->list_pos);
    f->list = PoolFmr::List::kDirty;
    dirty_.push_back(f);
    f->list_pos = std::prev(dirty_.end());
  }
  kick_worker();
  const std::uint64_t target = requested_;
  done_cv_.wait(lock, [&] { return done_ >= target || stop_; });
}

void FmrPool::worker_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || requested_ > done_; });
    if (stop_) return;
    release_batch(lock);
  }
}

void FmrPool::release_batch(std::unique_lock<std::mutex>& lock) {
  const std::uint64_t target = requested_;
  std::vector<PoolFmr*> batch(dirty_.begin(), dirty_.end());
  dirty_.clear();
  std::vector<Fmr*> handles;
  handles.reserve(batch.size());
  for (PoolFmr* f : batch) {
    cache_remove(f);
    f->list = PoolFmr::List::kFlushing;  // on no list: nobody else touches it
    handles.push_back(&f->fmr_);
  }
  // The device operation outside the pool's lock: maps and hits go on.
  lock.unlock();
  if (!handles.empty()) (void)unmap_fmrs(handles);  // ONE sync for the batch
  lock.lock();
  for (PoolFmr* f : batch) {
    f->remap_count = 0;
    f->list = PoolFmr::List::kFree;
    free_.push_back(f);
    f->list_pos = std::prev(free_.end());
  }
  if (!batch.empty()) {
    ++stats_.flushes;
    stats_.fmrs_flushed += batch.size();
  }
  done_ = target;
  done_cv_.notify_all();
  if (params_.flush_function) {
    lock.unlock();
    params_.flush_function();
    lock.lock();
  }
}

FmrPoolStats FmrPool::stats() const {
  std::lock_guard lock(mu_);
  FmrPoolStats s = stats_;
  s.free = static_cast<std::uint32_t>(free_.size());
  s.dirty = static_cast<std::uint32_t>(dirty_.size());
  s.in_use = static_cast<std::uint32_t>(fmrs_.size()) - s.free - s.dirty;
  return s;
}

}  // namespace srdma
