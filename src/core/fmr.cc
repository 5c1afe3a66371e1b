#include "srdma/fmr.h"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "core/pd_impl.h"

namespace srdma {

Fmr::Fmr(Fmr&& o) noexcept
    : pd_(std::move(o.pd_)),
      key_(o.key_),
      access_(o.access_),
      attr_(o.attr_),
      mapped_(std::exchange(o.mapped_, false)),
      maps_(o.maps_),
      iova_(o.iova_),
      length_(o.length_) {}

Fmr& Fmr::operator=(Fmr&& o) noexcept {
  if (this != &o) {
    release();
    pd_ = std::move(o.pd_);
    key_ = o.key_;
    access_ = o.access_;
    attr_ = o.attr_;
    mapped_ = std::exchange(o.mapped_, false);
    maps_ = o.maps_;
    iova_ = o.iova_;
    length_ = o.length_;
  }
  return *this;
}

Fmr::~Fmr() { release(); }

void Fmr::release() noexcept {
  if (!pd_) return;
  if (mapped_) (void)unmap();
  (void)dealloc();
}

std::uint32_t Fmr::pd_num() const { return pd_ ? pd_->pdn : 0; }

Result<void> Fmr::map_phys(std::span<const std::uint64_t> pages, std::uint64_t iova) {
  if (!pd_) return make_error(EINVAL, "the FMR is deallocated");
  auto key = pd_->device->hca->tables().map_phys_fmr(key_, pages, iova);
  if (!key) return std::unexpected(key.error());
  key_ = *key;
  mapped_ = true;
  ++maps_;
  iova_ = iova;
  length_ = std::uint64_t{pages.size()} << attr_.page_shift;
  return {};
}

Result<void> Fmr::unmap() {
  Fmr* self = this;
  return unmap_fmrs(std::span<Fmr* const>(&self, 1));
}

Result<void> Fmr::dealloc() {
  if (!pd_) return make_error(EINVAL, "the FMR is already deallocated");
  if (mapped_) return make_error(EBUSY, fmt::format("FMR {:#x} is mapped; unmap it first", key_));
  auto r = pd_->device->hca->tables().dealloc_fmr(key_);
  if (!r) return r;
  pd_->usecnt.fetch_sub(1);
  pd_.reset();
  return {};
}

Result<void> unmap_fmrs(std::span<Fmr* const> fmrs) {
  if (fmrs.empty()) return {};
  std::vector<std::uint32_t> keys;
  keys.reserve(fmrs.size());
  const detail::DeviceImpl* device = nullptr;
  for (std::size_t i = 0; i < fmrs.size(); ++i) {
    const Fmr* f = fmrs[i];
    if (f == nullptr || !f->pd_) return make_error(EINVAL, fmt::format("FMR {} of the list is not allocated", i));
    if (device == nullptr) device = f->pd_->device.get();
    // ib_unmap_fmr: one SYNC_TPT covers one device only.
    if (f->pd_->device.get() != device)
      return make_error(EINVAL, fmt::format("FMR {} of the list is on device '{}', the first on '{}'", i,
                                            f->pd_->device->name, device->name));
    keys.push_back(f->key_);
  }
  auto r = fmrs.front()->pd_->device->hca->tables().unmap_fmr(keys);
  if (!r) return r;
  for (Fmr* f : fmrs) {
    f->mapped_ = false;
    f->maps_ = 0;
  }
  return {};
}

}  // namespace srdma
