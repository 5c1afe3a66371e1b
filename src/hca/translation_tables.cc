// The translation tables: PDs, memory regions, the MPT cache's miss path,
// and the tables' usage (FMRs and FRWR in translation_tables_fmr.cc and
// translation_tables_frwr.cc).
#include "hca/translation_tables.h"

#include <fmt/format.h>

#include "hca/delivery_scope.h"
#include "srdma/access.h"

namespace srdma::hca {

TranslationTables::TranslationTables(const Profile& profile, MptTable mpt, MttTable mtt, alloc::IndexAllocator pd)
    : profile_(profile), mpt_(std::move(mpt)), mtt_(std::move(mtt)), pd_alloc_(std::move(pd)) {}

bool TranslationTables::pd_allocated(std::uint32_t pdn) const {
  std::lock_guard lock(mu_);
  return pd_alloc_.is_allocated(pdn);
}

Result<std::uint32_t> TranslationTables::alloc_pd() {
  std::lock_guard lock(mu_);
  auto v = pd_alloc_.alloc();
  if (!v) return make_error(ENOMEM, "PD table exhausted: " + v.error().reason);
  return *v;
}

Result<void> TranslationTables::dealloc_pd(std::uint32_t pdn) {
  std::lock_guard lock(mu_);
  auto r = pd_alloc_.free(pdn);
  if (!r) return make_error(EINVAL, fmt::format("PD {}: {}", pdn, r.error().reason));
  return {};
}

namespace {

// The narrow interface trusts nobody: the page list must cover the region
// exactly, with aligned pages, or translate() could walk foreign MTTs.
Result<void> check_page_list(const MrAttr& attr, std::span<const std::uint64_t> page_addrs) {
  if (attr.length == 0) return make_error(EINVAL, "a memory region needs at least one byte");
  if (attr.page_shift < 12 || attr.page_shift > 30)
    return make_error(EINVAL, fmt::format("page_shift {} outside 12..30", attr.page_shift));
  const std::uint64_t page_mask = (std::uint64_t{1} << attr.page_shift) - 1;
  const std::uint64_t first = attr.iova & page_mask;
  if (attr.length > ~std::uint64_t{0} - first) return make_error(EINVAL, "the region wraps");
  const std::uint64_t needed = (first + attr.length + page_mask) >> attr.page_shift;
  if (page_addrs.size() != needed)
    return make_error(EINVAL, fmt::format("{} pages given for a region that spans {}", page_addrs.size(), needed));
  for (std::uint64_t a : page_addrs)
    if (a & page_mask) return make_error(EINVAL, fmt::format("page address {:#x} is not aligned", a));
  return {};
}

// A plain region's entry for `attr` (its key, MTT segment and status are
// the caller's).
MptFields region_entry(const MrAttr& attr, std::span<const std::uint64_t> page_addrs) {
  MptFields f;
  f.flags = MPT_FLAG_REGION | contiguity_flag(page_addrs, attr.page_shift);
  f.access = static_cast<std::uint8_t>(attr.access);
  f.page_shift = attr.page_shift;
  f.pd = attr.pdn;
  f.mtt_count = static_cast<std::uint32_t>(page_addrs.size());
  f.start = attr.iova;
  f.length = attr.length;
  return f;
}

}  // namespace

Result<std::uint32_t> TranslationTables::reg_mr(const MrAttr& attr, std::span<const std::uint64_t> page_addrs) {
  if (auto ok = check_page_list(attr, page_addrs); !ok) return std::unexpected(ok.error());
  std::lock_guard lock(mu_);
  if (!pd_alloc_.is_allocated(attr.pdn))
    return make_error(EINVAL, fmt::format("PD {} is not allocated", attr.pdn));
  auto key = mpt_.alloc_key();
  if (!key) return std::unexpected(key.error());
  auto range = mtt_.alloc(page_addrs.size(), MttPool::kMain);
  if (!range) {
    (void)mpt_.free_key(*key);
    return std::unexpected(range.error());
  }
  // Write the MTTs, then hand the MPT to the device: the seqlock's release
  // publishes the MTT stores with it.
  mtt_.write(mtt_.first_entry(*range), page_addrs);
  MptFields f = region_entry(attr, page_addrs);
  f.status = kMptStatusHw;
  f.key = *key;
  f.mtt_seg = range->first_seg;
  mpt_.write(mpt_.index_of(*key), f);
  return *key;
}

Result<std::uint32_t> TranslationTables::reg_phys_mr(const MrAttr& attr, std::uint64_t base) {
  // Length 0 is a region no access of a byte or more fits (mlx5 takes a
  // zero-length device-memory MR; pyverbs registers one).
  if (attr.access & ~(kMrAccessAll | ACCESS_ON_DEMAND))
    return make_error(EINVAL, fmt::format("unknown access bits {:#x}", attr.access));
  if (attr.length > 0 && attr.length - 1 > ~std::uint64_t{0} - base)
    return make_error(EINVAL, "the region runs past the address space");
  if (attr.length > 0 && attr.length - 1 > ~std::uint64_t{0} - attr.iova)
    return make_error(EINVAL, "the region's iova range wraps");
  std::lock_guard lock(mu_);
  if (!pd_alloc_.is_allocated(attr.pdn))
    return make_error(EINVAL, fmt::format("PD {} is not allocated", attr.pdn));
  auto key = mpt_.alloc_key();
  if (!key) return std::unexpected(key.error());
  MptFields f;
  f.status = kMptStatusHw;
  f.flags = MPT_FLAG_REGION | MPT_FLAG_PHYSICAL;
  f.access = static_cast<std::uint8_t>(attr.access);
  f.page_shift = 12;
  f.key = *key;
  f.pd = attr.pdn;
  f.start = attr.iova;
  f.length = attr.length;
  f.mtt_seg = base;
  mpt_.write(mpt_.index_of(*key), f);
  return *key;
}

bool TranslationTables::fault_in_translation(const Translation& t, std::uint32_t access) {
  const bool write = access & (ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC);
  bool ok = true;
  t.for_each_piece([&](MemPiece p) { ok = ok && fault_in(p.addr, p.length, write); });
  return ok;
}

Result<void> TranslationTables::prefetch(std::uint32_t key, std::uint64_t iova, std::uint64_t length,
                                         std::uint32_t access, std::uint32_t pdn, bool fault) const {
  const std::uint32_t index = mpt_.index_of(key);
  const MptFields f = index < mpt_.reserved() ? MptFields{} : mpt_.read(index);
  if (f.is_window()) return make_error(EINVAL, fmt::format("key {:#x} is a memory window's, not a region's", key));
  if (!f.is_region() || f.key != key || f.status != kMptStatusHw)
    return make_error(EFAULT, fmt::format("lkey {:#x} is not a valid memory region", key));
  if (f.pd != pdn) return make_error(EPERM, fmt::format("lkey {:#x} belongs to another protection domain", key));
  if (!(f.access & ACCESS_ON_DEMAND))
    return make_error(EINVAL, fmt::format("lkey {:#x} is not an on-demand paging region", key));
  if ((access & ~std::uint32_t{f.access}) != 0)
    return make_error(EPERM, fmt::format("lkey {:#x} does not grant {}", key, access_to_string(access)));
  if (length == 0) return {};
  if (iova < f.start || iova - f.start > f.length || length > f.length - (iova - f.start))
    return make_error(EFAULT, fmt::format("[{:#x}, +{}) is not inside lkey {:#x}'s region", iova, length, key));
  if (fault && !fault_in_translation(region_translation(f, iova, length), access))
    return make_error(EFAULT, fmt::format("[{:#x}, +{}) of lkey {:#x} cannot be faulted in", iova, length, key));
  return {};
}

Result<void> TranslationTables::rereg_mr(std::uint32_t key, const MrAttr& attr,
                                         std::span<const std::uint64_t> page_addrs) {
  if (auto ok = check_page_list(attr, page_addrs); !ok) return ok;
  std::unique_lock lock(mu_);
  const std::uint32_t index = mpt_.index_of(key);
  const MptFields old = index < mpt_.reserved() ? MptFields{} : mpt_.read(index);
  if (!old.is_region() || old.key != key || old.status != kMptStatusHw || (old.flags & (MPT_FLAG_FMR | MPT_FLAG_FAST_REG)))
    return make_error(EINVAL, fmt::format("key {:#x} is not a registered memory region", key));
  if (old.flags & MPT_FLAG_PHYSICAL)
    return make_error(EINVAL, fmt::format("key {:#x} is an implicit ODP or device-memory region: no pages to re-point", key));
  if (!pd_alloc_.is_allocated(attr.pdn)) return make_error(EINVAL, fmt::format("PD {} is not allocated", attr.pdn));
  // As for dereg: a bound window names this region (its PD, its bounds).
  if (mr_windows_.contains(index))
    return make_error(EINVAL, fmt::format("memory region {:#x} has memory windows bound to it", key));
  auto range = mtt_.alloc(page_addrs.size(), MttPool::kMain);
  if (!range) return std::unexpected(range.error());
  mtt_.write(mtt_.first_entry(*range), page_addrs);
  MptFields f = region_entry(attr, page_addrs);
  f.status = kMptStatusHw;
  f.key = key;
  f.mtt_seg = range->first_seg;
  // One entry replaces the other (the seqlock's release publishes the new
  // MTTs with it); the cached translation goes; then the old translations'
  // stores are waited for, as dereg_mr does, before their MTTs are reused.
  mpt_.write(index, f);
  tpt_.invalidate(index);
  lock.unlock();
  quiesce_translations(key);
  lock.lock();
  mtt_.free(MttRange{static_cast<std::uint32_t>(old.mtt_seg), mtt_order_for(old.mtt_count, mtt_.log_mtts_per_seg()),
                     MttPool::kMain});
  return {};
}

Result<void> TranslationTables::dereg_mr(std::uint32_t key) {
  std::unique_lock lock(mu_);
  std::uint32_t index = mpt_.index_of(key);
  MptFields f = mpt_.read(index);
  if (!f.is_region() || f.key != key || (f.flags & (MPT_FLAG_FMR | MPT_FLAG_FAST_REG)))
    return make_error(EINVAL, fmt::format("key {:#x} is not a registered memory region", key));
  // IBA 10.6.7.2.6 (rxe_dereg_mr: EINVAL): not while windows are bound to it.
  if (mr_windows_.contains(index))
    return make_error(EINVAL, fmt::format("memory region {:#x} has memory windows bound to it", key));
  // HW2SW_MPT: take the entry back, then drop it from the translation cache
  // (in this order: see tpt_cache.h).
  mpt_.write(index, MptFields{});
  tpt_.invalidate(index);
  // A store translated before this point may still be landing: wait for it
  // (without the lock; the index stays allocated, so nobody can take it)
  // before the MTTs and the key can be handed to anyone else.
  lock.unlock();
  quiesce_translations(key);
  lock.lock();
  if (!(f.flags & MPT_FLAG_PHYSICAL))  // a PHYSICAL entry's mtt_seg is an address, not MTTs
    mtt_.free(MttRange{static_cast<std::uint32_t>(f.mtt_seg), mtt_order_for(f.mtt_count, mtt_.log_mtts_per_seg()),
                       MttPool::kMain});
  (void)mpt_.free_key(key);
  return {};
}

MptFields TranslationTables::lookup_mpt_miss(std::uint32_t index) const {
  // The line's version first, then the MPT: see tpt_cache.h for why this
  // order makes a fill that races with dereg_mr harmless.
  const TptCache::FillTicket ticket = tpt_.begin_fill(index);
  MptFields f = mpt_.read(index);
  TptCache::run_fill_hook(index);
  if (f.is_region() && f.status == kMptStatusHw) tpt_.fill(index, f, ticket);
  return f;
}

std::vector<TableUsage> TranslationTables::table_usage() const {
  std::lock_guard lock(mu_);
  auto row = [](const char* name, const alloc::IndexAllocator& a) {
    return TableUsage{name, a.used(), a.reserved(), a.num()};
  };
  return {
      TableUsage{"MPT", mpt_.used(), mpt_.reserved(), mpt_.num()},
      TableUsage{"MTT segments", mtt_.used_segs() - mtt_.reserved_segs(), mtt_.reserved_segs(), mtt_.num_segs()},
      row("PD", pd_alloc_),
  };
}

std::vector<BuddyUsage> TranslationTables::buddy_usage() const {
  std::lock_guard lock(mu_);
  auto usage = [](const char* name, const alloc::BuddyAllocator& b) {
    BuddyUsage u{name, b.max_order(), {}};
    for (int o = 0; o <= b.max_order(); ++o) u.free_per_order.push_back(b.num_free(o));
    return u;
  };
  std::vector<BuddyUsage> out{usage("MTT", mtt_.main_buddy())};
  if (const auto* fmr = mtt_.fmr_buddy()) out.push_back(usage("FMR MTT", *fmr));
  return out;
}

std::size_t TranslationTables::table_bytes() const {
  return mpt_.bytes() + mtt_.bytes() + pd_alloc_.bytes();
}

}  // namespace srdma::hca
