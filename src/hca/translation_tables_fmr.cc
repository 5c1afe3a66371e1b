// FMRs on the software HCA: allocation, map_phys, unmap (one SYNC_TPT per
// list) and deallocation, following mem-free mthca's FMR semantics.
#include <bit>

#include <fmt/format.h>

#include "hca/delivery_scope.h"
#include "hca/translation_tables.h"
#include "srdma/access.h"

namespace srdma::hca {

std::uint32_t TranslationTables::max_map_per_fmr() const {
  const int log_mpt = std::countr_zero(mpt_.num());
  return static_cast<std::uint32_t>((std::uint64_t{1} << (32 - log_mpt)) - 1);
}

TranslationTables::FmrSlot* TranslationTables::find_fmr(std::uint32_t key, MptFields& f) {
  const std::uint32_t index = mpt_.index_of(key);
  auto it = fmrs_.find(index);
  if (it == fmrs_.end()) return nullptr;
  f = mpt_.read(index);
  // The current key only: an FMR's older keys name nothing any more.
  if (f.key != key) return nullptr;
  return &it->second;
}

Result<std::uint32_t> TranslationTables::alloc_fmr(std::uint32_t pdn, std::uint32_t access, const FmrLimits& limits) {
  if (access & ~kAccessAll) return make_error(EINVAL, fmt::format("unknown access bits {:#x}", access & ~kAccessAll));
  if (limits.page_shift < 12 || limits.page_shift >= 32)
    return make_error(EINVAL, fmt::format("FMR page_shift {} outside [12, 32)", limits.page_shift));
  // mthca (mem-free): max_pages * sizeof(u64) <= PAGE_SIZE, so that all of an
  // FMR's MTTs sit in one page of the table.
  if (limits.max_pages == 0 || limits.max_pages > kMaxFmrPages)
    return make_error(EINVAL, fmt::format("FMR max_pages {} outside 1..{} (all MTTs of an FMR in one 4 KiB page)",
                                          limits.max_pages, kMaxFmrPages));
  if (limits.max_maps == 0 || limits.max_maps > max_map_per_fmr())
    return make_error(EINVAL, fmt::format("FMR max_maps {} outside 1..max_map_per_fmr {}", limits.max_maps,
                                          max_map_per_fmr()));
  std::lock_guard lock(mu_);
  if (!pd_alloc_.is_allocated(pdn)) return make_error(EINVAL, fmt::format("PD {} is not allocated", pdn));
  auto key = mpt_.alloc_key();
  if (!key) return std::unexpected(key.error());
  // The FMR buddy, or the main one when the profile reserves no FMR region
  // (MttTable::alloc falls back by itself).
  auto range = mtt_.alloc(limits.max_pages, MttPool::kFmr);
  if (!range) {
    (void)mpt_.free_key(*key);
    return std::unexpected(range.error());
  }
  const std::uint32_t index = mpt_.index_of(*key);
  fmrs_.emplace(index, FmrSlot{*key, *range, limits});
  // As mthca_fmr_alloc: a hardware-owned MPT of length 0 (no access until
  // the first map).
  MptFields f;
  f.status = kMptStatusHw;
  f.flags = MPT_FLAG_REGION | MPT_FLAG_FMR;
  f.access = static_cast<std::uint8_t>(access);
  f.page_shift = limits.page_shift;
  f.key = *key;
  f.pd = pdn;
  f.mtt_seg = range->first_seg;
  mpt_.write(index, f);
  return *key;
}

Result<std::uint32_t> TranslationTables::map_phys_fmr(std::uint32_t key, std::span<const std::uint64_t> page_list,
                                            std::uint64_t iova) {
  std::lock_guard lock(mu_);
  MptFields f;
  FmrSlot* slot = find_fmr(key, f);
  if (!slot) return make_error(EINVAL, fmt::format("key {:#x} is not an FMR's current key", key));
  const FmrLimits& lim = slot->limits;
  // mthca_check_fmr: list_len > max_pages, unaligned iova, maps >= max_maps.
  if (page_list.empty() || page_list.size() > lim.max_pages)
    return make_error(EINVAL, fmt::format("{} pages for an FMR of 1..{} pages", page_list.size(), lim.max_pages));
  const std::uint64_t page_mask = (std::uint64_t{1} << lim.page_shift) - 1;
  if (iova & page_mask)
    return make_error(EINVAL, fmt::format("iova {:#x} is not aligned to the FMR's 2^{} pages", iova, lim.page_shift));
  const std::uint64_t length = std::uint64_t{page_list.size()} << lim.page_shift;
  if (iova + length - 1 < iova) return make_error(EINVAL, fmt::format("iova {:#x} + {} bytes wraps", iova, length));
  for (std::uint64_t a : page_list)
    if (a & page_mask) return make_error(EINVAL, fmt::format("page address {:#x} is not aligned", a));
  if (f.map_count >= lim.max_maps)
    return make_error(EINVAL, fmt::format("FMR {:#x} was mapped {} times since its last unmap (max_maps {})", key,
                                          f.map_count, lim.max_maps));

  // The new key: the counter above the index bits advances by one (hw index
  // + num_mpt, wrapping in 32 bits). Never reset on unmap (mthca commit
  // "Avoid recycling old FMR R_Keys too soon").
  const std::uint32_t new_key = hw_index_to_key(key_to_hw_index(key) + mpt_.num());
  const std::uint32_t index = mpt_.index_of(key);

  // 1. Software owns the entry; drop the index's cached translation now,
  //    before the MTTs under it change (a cache line is keyed by index, so
  //    it would otherwise also refuse the new key as a mismatch).
  f.status = kMptStatusSw;
  mpt_.write(index, f);
  tpt_.invalidate(index);
  //    Stores through the old key that are still landing finish first:
  //    they read the MTTs step 2 rewrites.
  quiesce_translations(key);
  // 2. The MTTs (relaxed stores; published by step 4's release).
  mtt_.write(mtt_.first_entry(slot->mtts), page_list);
  // 3. Key, start and length, still software-owned.
  f.flags = static_cast<std::uint8_t>((f.flags & ~MPT_FLAG_CONTIGUOUS) | contiguity_flag(page_list, f.page_shift));
  f.key = new_key;
  f.start = iova;
  f.length = length;
  f.mtt_count = static_cast<std::uint32_t>(page_list.size());
  f.map_count += 1;
  mpt_.write(index, f);
  // 4. Hand it to the device.
  f.status = kMptStatusHw;
  mpt_.write(index, f);
  return new_key;
}

Result<void> TranslationTables::unmap_fmr(std::span<const std::uint32_t> keys) {
  std::unique_lock lock(mu_);
  // Check the whole list first: either all are unmapped or none.
  for (std::uint32_t key : keys) {
    MptFields f;
    if (!find_fmr(key, f)) return make_error(EINVAL, fmt::format("key {:#x} is not an FMR's current key", key));
  }
  for (std::uint32_t key : keys) {
    const std::uint32_t index = mpt_.index_of(key);
    MptFields f = mpt_.read(index);
    f.status = kMptStatusSw;
    f.map_count = 0;  // the key counter in f.key stays where it is
    mpt_.write(index, f);
  }
  // Until here a cached translation of these keys still works (lazy, as on
  // the HCA); one SYNC_TPT for the whole list ends that.
  if (!keys.empty()) {
    sync_tpt();
    // ... and a store translated before it has landed when we return.
    lock.unlock();
    quiesce_translations(keys);
  }
  return {};
}

Result<void> TranslationTables::dealloc_fmr(std::uint32_t key) {
  std::lock_guard lock(mu_);
  MptFields f;
  FmrSlot* slot = find_fmr(key, f);
  if (!slot) return make_error(EINVAL, fmt::format("key {:#x} is not an FMR's current key", key));
  if (f.map_count > 0) return make_error(EBUSY, fmt::format("FMR {:#x} is mapped; unmap it first", key));
  const std::uint32_t index = mpt_.index_of(key);
  mpt_.write(index, MptFields{});
  tpt_.invalidate(index);
  quiesce_translations(key);
  mtt_.free(slot->mtts);
  (void)mpt_.free_key(slot->alloc_key);
  fmrs_.erase(index);
  return {};
}

}  // namespace srdma::hca
