#include "alloc/index_allocator.h"

#include <algorithm>
#include <bit>
#include <span>

#include <fmt/format.h>

#include "common/secure_random.h"

namespace srdma::alloc {

Result<IndexAllocator> IndexAllocator::create(std::uint32_t num, std::uint32_t mask,
                                              std::uint32_t reserved, TopRotation rotation) {
  if (num == 0 || !std::has_single_bit(num) || num > kMaxNum)
    return make_error(EINVAL, fmt::format("num {} is not a power of two in 1..{}", num, kMaxNum));
  if (reserved > num)
    return make_error(EINVAL, fmt::format("reserved {} exceeds num {}", reserved, num));
  return IndexAllocator(num, mask, reserved, rotation);
}

IndexAllocator::IndexAllocator(std::uint32_t num, std::uint32_t mask, std::uint32_t reserved, TopRotation rotation)
    : num_(num), mask_(mask), reserved_(reserved), free_(num), issued_(num) {
  free_.set_from(reserved);
  if (rotation.mode != TopRotation::Mode::kRandom) return;
  // The tops are the multiples of num inside mask: (mask + 1) / num of
  // them (mask + 1 being 2^32 for ~0). A mask without bits above the
  // index (PD numbers) leaves nothing to randomise.
  periods_ = std::max<std::uint64_t>(1, (std::uint64_t{mask} + 1) / num);
  if (periods_ < 2) return;
  random_ = true;
  seeded_ = rotation.seed.has_value();
  rng_state_ = rotation.seed.value_or(0);
  top_ = static_cast<std::uint32_t>((std::uint64_t{num_} * (next_random() % periods_)) & mask_);
}

std::uint32_t IndexAllocator::next_random() {
  if (seeded_) {
    // splitmix64: replayable, and every seed gives a full-period stream.
    std::uint64_t z = (rng_state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<std::uint32_t>((z ^ (z >> 31)) >> 32);
  }
  if (pool_left_ == 0) {
    secure_random_bytes(std::as_writable_bytes(std::span(pool_)));
    pool_left_ = static_cast<std::uint32_t>(pool_.size());
  }
  return pool_[--pool_left_];
}

void IndexAllocator::advance_top_randomly() {
  const std::uint64_t step = 1 + next_random() % (periods_ - 1);  // never 0: the top always moves
  top_ = static_cast<std::uint32_t>((top_ + std::uint64_t{num_} * step) & mask_);
}

Result<std::uint32_t> IndexAllocator::alloc_random() {
  // mthca's search (lowest free at or after `last`), with a top that moved
  // since the last value handed out.
  std::size_t obj = free_.find_next_set(last_);
  if (obj == SummaryBitmap::npos) obj = free_.find_first_set();
  advance_top_randomly();
  if (obj == SummaryBitmap::npos) return alloc_error();
  std::uint32_t value = static_cast<std::uint32_t>(obj) | top_;
  // The steps since this slot's last value may add up to a whole turn:
  // one more makes the old key or QPN fail for certain.
  if (value == issued_[obj]) {
    advance_top_randomly();
    value = static_cast<std::uint32_t>(obj) | top_;
  }
  free_.clear(obj);
  ++used_;
  issued_[obj] = value;
  return value;
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
