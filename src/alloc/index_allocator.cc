#include "alloc/index_allocator.h"

#include <algorithm>
#include <bit>

#include <fmt/format.h>

namespace srdma::alloc {

Result<IndexAllocator> IndexAllocator::create(std::uint32_t num, std::uint32_t mask,
                                              std::uint32_t reserved) {
  if (num == 0 || !std::has_single_bit(num) || num > kMaxNum)
    return make_error(EINVAL, fmt::format("num {} is not a power of two in 1..{}", num, kMaxNum));
  if (reserved > num)
    return make_error(EINVAL, fmt::format("reserved {} exceeds num {}", reserved, num));
  return IndexAllocator(num, mask, reserved);
}

IndexAllocator::IndexAllocator(std::uint32_t num, std::uint32_t mask, std::uint32_t reserved)
    : num_(num), mask_(mask), reserved_(reserved), free_(num), issued_(num) {
  free_.set_from(reserved);
}

std::unexpected<Error> IndexAllocator::alloc_error() const {
  return make_error(ENOMEM, fmt::format("all {} entries in use ({} reserved)", num_, reserved_));
}

bool IndexAllocator::is_allocated(std::uint32_t value) const {
  std::uint32_t obj = value & (num_ - 1);
  return obj >= reserved_ && !free_.test(obj) && issued_[obj] == value;
}

std::unexpected<Error> IndexAllocator::free_error(std::uint32_t value) const {
  std::uint32_t obj = value & (num_ - 1);
  if (obj < reserved_)
    return make_error(EINVAL, fmt::format("index {} is reserved", obj));
  if (free_.test(obj))
    return make_error(EINVAL, fmt::format("index {} is not allocated", obj));
  return make_error(EINVAL, fmt::format("value {:#x} has other high bits than the {:#x} allocated at index {}",
                                        value, issued_[obj], obj));
}

}  // namespace srdma::alloc
