#include "srdma/pd.h"

#include <fmt/format.h>

#include <vector>

#include "core/dm_impl.h"
#include "core/pd_impl.h"
#include "hca/page_fault.h"
#include "core/memory_map.h"
#include "srdma/access.h"

namespace srdma {

std::uint32_t ProtectionDomain::pd_num() const { return state_ ? state_->pdn : 0; }
int ProtectionDomain::usecnt() const { return state_ ? state_->usecnt.load() : 0; }

Result<void> ProtectionDomain::dealloc() {
  if (!state_) return make_error(EINVAL, "the protection domain is already deallocated");
  if (int n = state_->usecnt.load(); n > 0)
    return make_error(EBUSY, fmt::format("PD {} is still used by {} memory region(s) or QP(s)", state_->pdn, n));
  auto r = state_->device->hca->tables().dealloc_pd(state_->pdn);
  if (!r) return r;
  state_->dealloced = true;
  state_.reset();
  return {};
}

namespace {

// A user region's access bits (reg_mr, rereg_mr, the implicit ODP region).
Result<void> check_region_access(std::uint32_t access) {
  constexpr std::uint32_t known = kMrAccessAll | ACCESS_ON_DEMAND;
  if (access & ~known) return make_error(EINVAL, fmt::format("unknown access bits {:#x}", access & ~known));
  // IBA 10.6.3.1 (ib_check_mr_access): remote write or atomic needs local write.
  if ((access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC)) && !(access & ACCESS_LOCAL_WRITE))
    return make_error(EINVAL, "remote write or atomic access requires LOCAL_WRITE");
  if ((access & ACCESS_ON_DEMAND) && !hca::fault_in_available())
    return make_error(EOPNOTSUPP, "on-demand paging needs MADV_POPULATE_READ/WRITE (Linux 5.14)");
  return {};
}

// What reg_mr and rereg_mr check of a region, and its page list.
Result<std::vector<std::uint64_t>> region_pages(const detail::PdImpl& pd, void* addr, std::size_t length,
                                                std::uint32_t access, unsigned page_shift) {
  if (auto ok = check_region_access(access); !ok) return std::unexpected(ok.error());
  if (length == 0) return make_error(EINVAL, "a memory region needs at least one byte");
  if (page_shift < 12 || page_shift > 30)
    return make_error(EINVAL, fmt::format("page_shift {} outside 12..30", page_shift));
  const auto start = reinterpret_cast<std::uintptr_t>(addr);
  if (start + length < start) return make_error(EINVAL, "the range wraps around the address space");

  const std::uint64_t page_size = std::uint64_t{1} << page_shift;
  const std::uint64_t first_page = start & ~(page_size - 1);
  const std::uint64_t npages = ((start + length - 1) >> page_shift) - (start >> page_shift) + 1;
  const auto& p = pd.device->hca->profile();
  const std::uint64_t max_entries = std::uint64_t(p.num_mtt_segs) << p.log_mtts_per_seg;
  if (npages > max_entries)
    return make_error(ENOMEM, fmt::format("MTT table: {} pages exceed its {} entries", npages, max_entries));

  // An ODP region's pages are faulted in by each access (translate()), so
  // they need not be mapped now.
  bool writable = access & (ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC);
  if (!(access & ACCESS_ON_DEMAND))
    if (auto ok = core::check_mapping(start, length, writable); !ok) return std::unexpected(ok.error());

  std::vector<std::uint64_t> pages(npages);
  for (std::uint64_t i = 0; i < npages; ++i) pages[i] = first_page + (i << page_shift);
  return pages;
}

}  // namespace

Result<MemoryRegion> ProtectionDomain::reg_mr(void* addr, std::size_t length, std::uint32_t access,
                                              unsigned page_shift) {
  if (!state_) return make_error(EINVAL, "the protection domain is deallocated");
  auto pages = region_pages(*state_, addr, length, access, page_shift);
  if (!pages) return std::unexpected(pages.error());
  hca::MrAttr attr{state_->pdn, reinterpret_cast<std::uintptr_t>(addr), length, access,
                   static_cast<std::uint8_t>(page_shift)};
  auto key = state_->device->hca->tables().reg_mr(attr, *pages);
  if (!key) return std::unexpected(key.error());
  state_->usecnt.fetch_add(1);
  return MemoryRegion(state_, *key, addr, length, access);
}

Result<MemoryRegion> ProtectionDomain::reg_implicit_odp_mr(std::uint32_t access) {
  if (!state_) return make_error(EINVAL, "the protection domain is deallocated");
  access |= ACCESS_ON_DEMAND;
  if (auto ok = check_region_access(access); !ok) return std::unexpected(ok.error());
  // One PHYSICAL entry: iova 0 is address 0, the whole address space.
  hca::MrAttr attr{state_->pdn, 0, ~std::uint64_t{0}, access, 12};
  auto key = state_->device->hca->tables().reg_phys_mr(attr, 0);
  if (!key) return std::unexpected(key.error());
  state_->usecnt.fetch_add(1);
  return MemoryRegion(state_, *key, nullptr, SIZE_MAX, access);
}

Result<void> ProtectionDomain::advise_mr(MrAdvice advice, std::span<const Sge> sges) const {
  if (!state_) return make_error(EINVAL, "the protection domain is deallocated");
  if (sges.empty()) return make_error(EINVAL, "an empty scatter/gather list");
  const std::uint32_t access = advice == MrAdvice::kPrefetchWrite ? std::uint32_t{ACCESS_LOCAL_WRITE} : 0u;
  const bool fault = advice != MrAdvice::kPrefetchNoFault;
  for (const Sge& s : sges)
    if (auto r = state_->device->hca->tables().prefetch(s.lkey, s.addr, s.length, access, state_->pdn, fault); !r)
      return r;
  return {};
}

Result<MemoryRegion> ProtectionDomain::reg_dm_mr(DeviceMemory& dm, std::uint64_t offset, std::size_t length,
                                                 std::uint32_t access) {
  if (!state_) return make_error(EINVAL, "the protection domain is deallocated");
  if (!dm.state_) return make_error(EINVAL, "the device memory is freed");
  if (dm.state_->device != state_->device) return make_error(EINVAL, "the device memory is another device's");
  if (access & (ACCESS_ON_DEMAND | ACCESS_MW_BIND))
    return make_error(EINVAL, "device memory is always present and takes no windows (no ON_DEMAND, MW_BIND)");
  if (auto ok = check_region_access(access); !ok) return std::unexpected(ok.error());
  if (offset > dm.state_->length || length > dm.state_->length - offset)
    return make_error(EINVAL, fmt::format("[{}, +{}) is not inside the {}-byte device memory", offset, length,
                                          dm.state_->length));
  // Zero-based: iova 0 is the DM's byte `offset`.
  hca::MrAttr attr{state_->pdn, 0, length, access, 12};
  auto key = state_->device->hca->tables().reg_phys_mr(
      attr, reinterpret_cast<std::uintptr_t>(dm.state_->base) + offset);
  if (!key) return std::unexpected(key.error());
  state_->usecnt.fetch_add(1);
  dm.state_->usecnt.fetch_add(1);
  MemoryRegion mr(state_, *key, nullptr, length, access);
  mr.dm_ = dm.state_;
  return mr;
}

Result<void> ProtectionDomain::rereg_mr(MemoryRegion& mr, void* addr, std::size_t length, std::uint32_t access,
                                        unsigned page_shift) {
  if (!state_) return make_error(EINVAL, "the protection domain is deallocated");
  if (!mr.pd_ || mr.type_ != MrType::kUser) return make_error(EINVAL, "rereg_mr takes a registered user MR");
  if (mr.pd_->device != state_->device) return make_error(EINVAL, "the MR and the PD are on different devices");
  auto pages = region_pages(*state_, addr, length, access, page_shift);
  if (!pages) return std::unexpected(pages.error());
  hca::MrAttr attr{state_->pdn, reinterpret_cast<std::uintptr_t>(addr), length, access,
                   static_cast<std::uint8_t>(page_shift)};
  if (auto r = state_->device->hca->tables().rereg_mr(mr.key_, attr, *pages); !r) return r;
  if (mr.pd_ != state_) {
    state_->usecnt.fetch_add(1);
    mr.pd_->usecnt.fetch_sub(1);
    mr.pd_ = state_;
  }
  mr.addr_ = addr;
  mr.length_ = length;
  mr.access_ = access;
  return {};
}

Result<MemoryRegion> ProtectionDomain::alloc_mr(MrType type, std::uint32_t max_num_sg) {
  if (!state_) return make_error(EINVAL, "the protection domain is deallocated");
  return detail::MrAccess::alloc_mr(state_, type, max_num_sg);
}

namespace detail {

Result<MemoryRegion> MrAccess::alloc_mr(const std::shared_ptr<PdImpl>& pd, MrType type, std::uint32_t max_num_sg) {
  if (type != MrType::kMemReg) return make_error(EINVAL, "alloc_mr makes kMemReg MRs only (reg_mr makes user ones)");
  auto key = pd->device->hca->tables().alloc_fast_reg_mr(pd->pdn, max_num_sg);
  if (!key) return std::unexpected(key.error());
  pd->usecnt.fetch_add(1);
  MemoryRegion mr(pd, *key, nullptr, 0, 0);
  mr.type_ = MrType::kMemReg;
  mr.alloc_key_ = *key;
  mr.max_num_sg_ = max_num_sg;
  mr.pages_.reserve(max_num_sg);
  return mr;
}

}  // namespace detail

Result<Fmr> ProtectionDomain::alloc_fmr(std::uint32_t access, const FmrAttr& attr) {
  if (!state_) return make_error(EINVAL, "the protection domain is deallocated");
  if (access & ~kAccessAll)
    return make_error(EINVAL, fmt::format("unknown access bits {:#x}", access & ~kAccessAll));
  // IBA 10.6.3.1, as for reg_mr.
  if ((access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC)) && !(access & ACCESS_LOCAL_WRITE))
    return make_error(EINVAL, "remote write or atomic access requires LOCAL_WRITE");
  auto key = state_->device->hca->tables().alloc_fmr(
      state_->pdn, access, hca::TranslationTables::FmrLimits{attr.max_pages, attr.max_maps, attr.page_shift});
  if (!key) return std::unexpected(key.error());
  state_->usecnt.fetch_add(1);
  return Fmr(state_, *key, access, attr);
}

}  // namespace srdma
