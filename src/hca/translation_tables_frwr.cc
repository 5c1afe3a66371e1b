// Fast registration work requests (FRWR) on the device side: the MPT entry
// of an MR allocated with alloc_fast_reg_mr() is built and torn down by the
// transport engine in work-request order (REG_MR, LOCAL_INV, and the
// responder's half of SEND_WITH_INV) instead of by a control command.
//
// The life of such an entry (IBA 10.6.3.3, "Fast Registration"):
//   alloc_fast_reg_mr -> free (SW-owned, no translation)
//   fast_reg          -> valid (HW-owned, translates under the new key)
//   local_invalidate  -> free again (the key fails from then on)
//   dealloc_fast_reg_mr from any state.
// The MTTs are allocated once, for max_num_sg pages, so a registration on
// the data path allocates nothing.
#include <fmt/format.h>

#include "hca/delivery_scope.h"
#include "hca/translation_tables.h"
#include "srdma/access.h"

namespace srdma::hca {
namespace {
// The key byte (bits 7..0) is the only part of a key a consumer may change
// (ib_inc_rkey); bits 31..8 name the MPT slot and its allocation.
constexpr std::uint32_t kKeyByte = 0xff;

bool is_fast_reg(const MptFields& f) { return f.is_region() && (f.flags & MPT_FLAG_FAST_REG); }
}  // namespace

Result<std::uint32_t> TranslationTables::alloc_fast_reg_mr(std::uint32_t pdn, std::uint32_t max_num_sg) {
  if (max_num_sg == 0) return make_error(EINVAL, "max_num_sg must be at least 1");
  const std::uint64_t max_entries = std::uint64_t(profile_.num_mtt_segs) << profile_.log_mtts_per_seg;
  if (max_num_sg > max_entries)
    return make_error(EINVAL, fmt::format("max_num_sg {} beyond the MTT table's {} entries", max_num_sg, max_entries));
  std::lock_guard lock(mu_);
  if (!pd_alloc_.is_allocated(pdn)) return make_error(EINVAL, fmt::format("PD {} is not allocated", pdn));
  auto key = mpt_.alloc_key();
  if (!key) return std::unexpected(key.error());
  auto range = mtt_.alloc(max_num_sg, MttPool::kMain);
  if (!range) {
    (void)mpt_.free_key(*key);
    return std::unexpected(range.error());
  }
  // SW-owned: no translation until a REG_MR makes it valid. Length 0 and
  // no access on top, so even a status check gone wrong grants nothing.
  MptFields f;
  f.status = kMptStatusSw;
  f.flags = MPT_FLAG_REGION | MPT_FLAG_FAST_REG;
  f.key = *key;
  f.pd = pdn;
  f.mtt_count = max_num_sg;
  f.mtt_seg = range->first_seg;
  f.page_shift = 12;
  f.reserved = *key;
  mpt_.write(mpt_.index_of(*key), f);
  return *key;
}

Result<void> TranslationTables::dealloc_fast_reg_mr(std::uint32_t alloc_key) {
  std::lock_guard lock(mu_);
  const std::uint32_t index = mpt_.index_of(alloc_key);
  if (index < mpt_.reserved())
    return make_error(EINVAL, fmt::format("key {:#x} is not a fast-registration MR", alloc_key));
  MptFields f = mpt_.read(index);
  if (!is_fast_reg(f) || f.reserved != alloc_key)
    return make_error(EINVAL, fmt::format("key {:#x} is not a fast-registration MR", alloc_key));
  if (mr_windows_.contains(index))
    return make_error(EINVAL, fmt::format("MR {:#x} has memory windows bound to it (IBA 10.6.7.2.6)", f.key));
  // As dereg_mr: the entry first, then the cached translation.
  mpt_.write(index, MptFields{});
  tpt_.invalidate(index);
  quiesce_translations(f.key);  // stores translated before still landing finish first
  mtt_.free(MttRange{static_cast<std::uint32_t>(f.mtt_seg), mtt_order_for(f.mtt_count, mtt_.log_mtts_per_seg()),
                     MttPool::kMain});
  (void)mpt_.free_key(alloc_key);
  return {};
}

Result<void> TranslationTables::fast_reg(std::uint32_t key, std::uint32_t pdn, std::uint32_t access, std::uint64_t iova,
                               std::uint64_t length, std::uint8_t page_shift, std::span<const std::uint64_t> pages) {
  // The page list comes from a consumer's WR: check it as reg_mr does, so
  // translate() never walks MTTs the list does not cover.
  if (access & ~kMrAccessAll)
    return make_error(EINVAL, fmt::format("unknown access bits {:#x}", access & ~kMrAccessAll));
  if ((access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC)) && !(access & ACCESS_LOCAL_WRITE))
    return make_error(EINVAL, "remote write or atomic access requires LOCAL_WRITE (IBA 10.6.3.1)");
  if (page_shift < 12 || page_shift > 30)
    return make_error(EINVAL, fmt::format("page_shift {} outside 12..30", page_shift));
  if (length == 0 || pages.empty()) return make_error(EINVAL, "REG_MR of an unmapped MR (length 0)");
  const std::uint64_t page_mask = (std::uint64_t{1} << page_shift) - 1;
  const std::uint64_t first = iova & page_mask;
  if (length > ~std::uint64_t{0} - first) return make_error(EINVAL, "the region wraps");
  const std::uint64_t needed = (first + length + page_mask) >> page_shift;
  if (pages.size() != needed)
    return make_error(EINVAL, fmt::format("{} pages given for a region that spans {}", pages.size(), needed));
  for (std::uint64_t a : pages)
    if (a & page_mask) return make_error(EINVAL, fmt::format("page address {:#x} is not aligned", a));

  std::lock_guard lock(mu_);
  const std::uint32_t index = mpt_.index_of(key);
  if (index < mpt_.reserved()) return make_error(EINVAL, fmt::format("key {:#x}: reserved MPT index", key));
  MptFields f = mpt_.read(index);
  if (!is_fast_reg(f)) return make_error(EINVAL, fmt::format("key {:#x} is not a fast-registration MR", key));
  if ((f.key & ~kKeyByte) != (key & ~kKeyByte))
    return make_error(EINVAL, fmt::format("key {:#x} does not name MR {:#x} (only the key byte may change)", key, f.key));
  if (f.pd != pdn) return make_error(EINVAL, fmt::format("the MR is in PD {}, the QP in PD {}", f.pd, pdn));
  // IBA 10.6.3.3: Fast Register of an MR that is not in the free state is a
  // memory management operation error.
  if (f.status != kMptStatusSw) return make_error(EINVAL, fmt::format("MR {:#x} is valid, not free", f.key));
  if (pages.size() > f.mtt_count)
    return make_error(EINVAL, fmt::format("{} pages beyond the MR's max_num_sg {}", pages.size(), f.mtt_count));
  // MTTs first (the entry is SW-owned: nothing translates through them),
  // then publish the entry as HW-owned: the seqlock's release orders the
  // MTT stores before it.
  mtt_.write(std::uint64_t{f.mtt_seg} << mtt_.log_mtts_per_seg(), pages);
  f.status = kMptStatusHw;
  f.key = key;
  f.access = static_cast<std::uint8_t>(access);
  f.page_shift = page_shift;
  f.flags = static_cast<std::uint8_t>((f.flags & ~MPT_FLAG_CONTIGUOUS) | contiguity_flag(pages, page_shift));
  f.start = iova;
  f.length = length;
  ++f.map_count;
  mpt_.write(index, f);
  // The line was dropped when the MR was last invalidated; dropping it
  // again keeps a fill that raced with that invalidation from surviving.
  tpt_.invalidate(index);
  return {};
}

Result<void> TranslationTables::local_invalidate(std::uint32_t key, std::uint32_t pdn, std::uint32_t remote_qpn) {
  std::unique_lock lock(mu_);
  const std::uint32_t index = mpt_.index_of(key);
  if (index < mpt_.reserved()) return make_error(EINVAL, fmt::format("key {:#x}: reserved MPT index", key));
  MptFields f = mpt_.read(index);
  if (f.is_window()) return invalidate_window_locked(index, f, key, pdn, remote_qpn);
  if (!is_fast_reg(f)) return make_error(EINVAL, fmt::format("key {:#x} is not a fast-registration MR", key));
  if (f.key != key) return make_error(EINVAL, fmt::format("key {:#x} is stale: the MR's key is {:#x}", key, f.key));
  if (f.pd != pdn) return make_error(EINVAL, fmt::format("the MR is in PD {}, the QP in PD {}", f.pd, pdn));
  if (mr_windows_.contains(index))
    return make_error(EINVAL, fmt::format("MR {:#x} has memory windows bound to it (rxe_invalidate_mr)", key));
  if (f.status == kMptStatusSw) return {};
  // Back to SW first, then drop the cached translation (the order dereg_mr
  // uses, see tpt_cache.h): from here on the key fails everywhere.
  f.status = kMptStatusSw;
  f.access = 0;
  f.length = 0;
  mpt_.write(index, f);
  tpt_.invalidate(index);
  lock.unlock();  // the wait needs no lock: the key fails for everyone now
  // A store through the key translated before this point has landed when
  // the invalidation completes (the WR's CQE, or the SEND_WITH_INV's
  // receive completion, comes after this returns).
  quiesce_translations(key);
  return {};
}

}  // namespace srdma::hca
