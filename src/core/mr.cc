#include "srdma/mr.h"

#include <utility>

#include "core/device_state.h"

namespace srdma {

MemoryRegion::MemoryRegion(MemoryRegion&& o) noexcept
    : pd_(std::move(o.pd_)), key_(o.key_), addr_(o.addr_), length_(o.length_), access_(o.access_) {}

MemoryRegion& MemoryRegion::operator=(MemoryRegion&& o) noexcept {
  if (this != &o) {
    (void)dereg();
    pd_ = std::move(o.pd_);
    key_ = o.key_;
    addr_ = o.addr_;
    length_ = o.length_;
    access_ = o.access_;
  }
  return *this;
}

MemoryRegion::~MemoryRegion() { (void)dereg(); }

std::uint32_t MemoryRegion::pd_num() const { return pd_ ? pd_->pdn : 0; }

Result<void> MemoryRegion::dereg() {
  if (!pd_) return make_error(EINVAL, "the memory region is not registered");
  auto r = pd_->device->hca->dereg_mr(key_);
  if (!r) return r;
  pd_->usecnt.fetch_sub(1);
  pd_.reset();
  return {};
}

}  // namespace srdma
