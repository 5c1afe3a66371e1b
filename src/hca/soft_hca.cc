#include "hca/soft_hca.h"

#include <atomic>
#include <new>

#include <fmt/format.h>

#include "hca/delivery_scope.h"
#include "hca/engine_timer.h"
#include "hca/inproc_link.h"
#include "srdma/access.h"

namespace srdma::hca {
namespace {
constexpr std::uint32_t kQpnMask = (1u << 24) - 1;  // QPNs and CQNs are 24 bits

// Device addresses: unique in the process, like LIDs on a subnet.
std::uint64_t next_address() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1);
}

Result<alloc::IndexAllocator> make_alloc(const char* table, std::int64_t num, std::uint32_t mask,
                                         std::int64_t reserved) {
  auto a = alloc::IndexAllocator::create(static_cast<std::uint32_t>(num), mask,
                                         static_cast<std::uint32_t>(reserved));
  if (!a) return make_error(a.error().code, fmt::format("{} table: {}", table, a.error().reason));
  return a;
}
}  // namespace

Result<std::shared_ptr<SoftHca>> SoftHca::open(const Profile& p) try {
  auto mpt = MptTable::create(static_cast<std::uint32_t>(p.num_mpt), static_cast<std::uint32_t>(p.reserved_mrws));
  if (!mpt) return std::unexpected(mpt.error());
  auto mtt = MttTable::create(static_cast<std::uint32_t>(p.num_mtt_segs), static_cast<int>(p.log_mtts_per_seg),
                              static_cast<std::uint32_t>(p.fmr_reserved_mtt_segs),
                              static_cast<std::uint32_t>(p.reserved_mtt_segs));
  if (!mtt) return std::unexpected(mtt.error());
  // PD numbers do not rotate; QPNs and CQNs rotate within 24 bits.
  auto pd = make_alloc("PD", p.num_pd, static_cast<std::uint32_t>(p.num_pd - 1), p.reserved_pds);
  if (!pd) return std::unexpected(pd.error());
  auto qp = make_alloc("QP", p.num_qp, kQpnMask, p.reserved_qps);
  if (!qp) return std::unexpected(qp.error());
  auto cq = make_alloc("CQ", p.num_cq, kQpnMask, p.reserved_cqs);
  if (!cq) return std::unexpected(cq.error());
  auto dev = std::shared_ptr<SoftHca>(
      new SoftHca(p, std::move(*mpt), std::move(*mtt), std::move(*pd), std::move(*qp), std::move(*cq)));
  InprocLink::instance().attach(dev->address_, dev);
  return dev;
} catch (const std::bad_alloc&) {
  return make_error(ENOMEM, "not enough address space for the device tables of this profile");
}

SoftHca::SoftHca(const Profile& p, MptTable mpt, MttTable mtt, alloc::IndexAllocator pd,
                 alloc::IndexAllocator qp, alloc::IndexAllocator cq)
    : profile_(p),
      mpt_(std::move(mpt)),
      mtt_(std::move(mtt)),
      pd_alloc_(std::move(pd)),
      qp_alloc_(std::move(qp)),
      cq_alloc_(std::move(cq)),
      address_(next_address()),
      link_(InprocLink::instance()) {}

Result<std::uint32_t> SoftHca::alloc_pd() {
  std::lock_guard lock(mu_);
  auto v = pd_alloc_.alloc();
  if (!v) return make_error(ENOMEM, "PD table exhausted: " + v.error().reason);
  return *v;
}

Result<void> SoftHca::dealloc_pd(std::uint32_t pdn) {
  std::lock_guard lock(mu_);
  auto r = pd_alloc_.free(pdn);
  if (!r) return make_error(EINVAL, fmt::format("PD {}: {}", pdn, r.error().reason));
  return {};
}

Result<std::uint32_t> SoftHca::reg_mr(const MrAttr& attr, std::span<const std::uint64_t> page_addrs) {
  // The narrow interface trusts nobody: the page list must cover the region
  // exactly, with aligned pages, or translate() could walk foreign MTTs.
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
  MptFields f;
  f.status = kMptStatusHw;
  f.flags = MPT_FLAG_REGION;
  f.access = static_cast<std::uint8_t>(attr.access);
  f.page_shift = attr.page_shift;
  f.key = *key;
  f.pd = attr.pdn;
  f.mtt_count = static_cast<std::uint32_t>(page_addrs.size());
  f.start = attr.iova;
  f.length = attr.length;
  f.mtt_seg = range->first_seg;
  mpt_.write(mpt_.index_of(*key), f);
  return *key;
}

Result<void> SoftHca::dereg_mr(std::uint32_t key) {
  std::lock_guard lock(mu_);
  std::uint32_t index = mpt_.index_of(key);
  MptFields f = mpt_.read(index);
  if (!f.is_region() || f.key != key || (f.flags & (MPT_FLAG_FMR | MPT_FLAG_FAST_REG)))
    return make_error(EINVAL, fmt::format("key {:#x} is not a registered memory region", key));
  // HW2SW_MPT: take the entry back, then drop it from the translation cache
  // (in this order: see tpt_cache.h).
  mpt_.write(index, MptFields{});
  tpt_.invalidate(index);
  // A store translated before this point may still be landing: wait for
  // it before the MTTs (and the key) can be handed to anyone else.
  quiesce_translations();
  mtt_.free(MttRange{static_cast<std::uint32_t>(f.mtt_seg), mtt_order_for(f.mtt_count, mtt_.log_mtts_per_seg()),
                     MttPool::kMain});
  (void)mpt_.free_key(key);
  return {};
}

MptFields SoftHca::lookup_mpt_miss(std::uint32_t index) const {
  // The line's version first, then the MPT: see tpt_cache.h for why this
  // order makes a fill that races with dereg_mr harmless.
  const TptCache::FillTicket ticket = tpt_.begin_fill(index);
  MptFields f = mpt_.read(index);
  TptCache::run_fill_hook(index);
  if (f.is_region() && f.status == kMptStatusHw) tpt_.fill(index, f, ticket);
  return f;
}

std::vector<TableUsage> SoftHca::table_usage() const {
  std::lock_guard lock(mu_);
  auto row = [](const char* name, const alloc::IndexAllocator& a) {
    return TableUsage{name, a.used(), a.reserved(), a.num()};
  };
  return {
      row("QP", qp_alloc_),
      row("CQ", cq_alloc_),
      TableUsage{"MPT", mpt_.used(), mpt_.reserved(), mpt_.num()},
      TableUsage{"MTT segments", mtt_.used_segs() - mtt_.reserved_segs(), mtt_.reserved_segs(), mtt_.num_segs()},
      row("PD", pd_alloc_),
  };
}

std::vector<BuddyUsage> SoftHca::buddy_usage() const {
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

std::size_t SoftHca::table_bytes() const {
  return mpt_.bytes() + mtt_.bytes() + pd_alloc_.bytes() + qp_alloc_.bytes() + cq_alloc_.bytes();
}

}  // namespace srdma::hca
