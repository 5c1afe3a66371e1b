#include "srdma/pd.h"

#include <fmt/format.h>

#include <vector>

#include "core/pd_impl.h"
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

// What reg_mr and rereg_mr check of a region, and its page list.
Result<std::vector<std::uint64_t>> region_pages(const detail::PdImpl& pd, void* addr, std::size_t length,
                                                std::uint32_t access, unsigned page_shift) {
  if (access & ~kMrAccessAll)
    return make_error(EINVAL, fmt::format("unknown access bits {:#x}", access & ~kMrAccessAll));
  // IBA 10.6.3.1 (ib_check_mr_access): remote write or atomic needs local write.
  if ((access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC)) && !(access & ACCESS_LOCAL_WRITE))
    return make_error(EINVAL, "remote write or atomic access requires LOCAL_WRITE");
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

  bool writable = access & (ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC);
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
