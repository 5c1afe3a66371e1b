#include "srdma/mr.h"

#include <bit>
#include <utility>

#include <fmt/format.h>

#include "core/dm_impl.h"
#include "core/pd_impl.h"

namespace srdma {

MemoryRegion::MemoryRegion(MemoryRegion&& o) noexcept
    : pd_(std::move(o.pd_)),
      dm_(std::move(o.dm_)),
      key_(o.key_),
      addr_(o.addr_),
      length_(o.length_),
      access_(o.access_),
      type_(o.type_),
      alloc_key_(o.alloc_key_),
      max_num_sg_(o.max_num_sg_),
      page_shift_(o.page_shift_),
      iova_(o.iova_),
      pages_(std::move(o.pages_)) {}

MemoryRegion& MemoryRegion::operator=(MemoryRegion&& o) noexcept {
  if (this != &o) {
    (void)dereg();
    pd_ = std::move(o.pd_);
    dm_ = std::move(o.dm_);
    key_ = o.key_;
    addr_ = o.addr_;
    length_ = o.length_;
    access_ = o.access_;
    type_ = o.type_;
    alloc_key_ = o.alloc_key_;
    max_num_sg_ = o.max_num_sg_;
    page_shift_ = o.page_shift_;
    iova_ = o.iova_;
    pages_ = std::move(o.pages_);
  }
  return *this;
}

MemoryRegion::~MemoryRegion() { (void)dereg(); }

std::uint32_t MemoryRegion::pd_num() const { return pd_ ? pd_->pdn : 0; }

Result<void> MemoryRegion::dereg() {
  if (!pd_) return make_error(EINVAL, "the memory region is not registered");
  // A fast-registration MR is freed by the key the device allocated: the
  // consumer's key may have moved on (inc_rkey) whether or not a REG_MR
  // installed it.
  auto r = type_ == MrType::kMemReg ? pd_->device->hca->tables().dealloc_fast_reg_mr(alloc_key_)
                                    : pd_->device->hca->tables().dereg_mr(key_);
  if (!r) return r;
  pd_->usecnt.fetch_sub(1);
  pd_.reset();
  if (dm_) {
    dm_->usecnt.fetch_sub(1);
    dm_.reset();
  }
  return {};
}

Result<int> MemoryRegion::map_mr_sg(std::span<const Sge> sg, std::uint32_t page_size, std::uint32_t* sg_offset) {
  if (!pd_) return make_error(EINVAL, "the memory region is not registered");
  if (type_ != MrType::kMemReg) return make_error(EINVAL, "map_mr_sg needs an MR from alloc_mr(kMemReg)");
  if (!std::has_single_bit(page_size) || page_size < 4096 || page_size > (1u << 30))
    return make_error(EINVAL, fmt::format("page_size {} is not a power of two in 4 KiB..1 GiB", page_size));
  if (sg.empty()) return make_error(EINVAL, "an empty scatter/gather list");
  const std::uint32_t first_off = sg_offset ? *sg_offset : 0;
  if (first_off >= sg[0].length)
    return make_error(EINVAL, fmt::format("sg_offset {} is not inside the first element ({} bytes)", first_off,
                                          sg[0].length));

  const std::uint64_t ps = page_size;
  const std::uint64_t mask = ps - 1;
  pages_.clear();
  page_shift_ = static_cast<unsigned>(std::countr_zero(page_size));
  iova_ = sg[0].addr + first_off;
  std::uint64_t mapped = 0;    // bytes
  std::uint64_t last_end = 0;  // one past the previous element
  std::uint32_t stop_offset = 0;
  std::size_t i = 0;
  for (; i < sg.size(); ++i) {
    const std::uint64_t start = sg[i].addr + (i == 0 ? first_off : 0);
    const std::uint64_t len = sg[i].length - (i == 0 ? first_off : 0);
    if (len == 0) break;  // nothing to map, and nothing after it can follow on
    const std::uint64_t end = start + len;
    std::uint64_t page = start & ~mask;
    if (i > 0 && ((last_end & mask) != 0 || page != start)) {
      // A gap inside a page cannot be described by a page list: only an
      // element that continues the previous one exactly may follow an
      // unaligned end or start unaligned itself. Its first (partial) page
      // is the previous element's last one.
      if (start != last_end) break;
      page += ps;
    }
    bool full = false;
    for (; page < end; page += ps) {
      if (pages_.size() == max_num_sg_) {
        full = true;
        break;
      }
      pages_.push_back(page);
    }
    if (full) {
      // The pages ran out inside this element: its part up to `page` is
      // mapped; the caller continues from there with another MR.
      if (page > start) {
        mapped += page - start;
        stop_offset = static_cast<std::uint32_t>(page - sg[i].addr);
      } else {
        stop_offset = i == 0 ? first_off : 0;
      }
      break;
    }
    mapped += len;
    last_end = end;
  }
  length_ = mapped;
  addr_ = reinterpret_cast<void*>(iova_);
  if (sg_offset) *sg_offset = stop_offset;
  return static_cast<int>(i);
}

}  // namespace srdma
