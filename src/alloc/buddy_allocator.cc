#include "alloc/buddy_allocator.h"

#include <fmt/format.h>

namespace srdma::alloc {

Result<BuddyAllocator> BuddyAllocator::create(int max_order) {
  if (max_order < 0 || max_order > kMaxOrder)
    return make_error(EINVAL, fmt::format("max_order {} outside 0..{}", max_order, kMaxOrder));
  return BuddyAllocator(max_order);
}

BuddyAllocator::BuddyAllocator(int max_order)
    : max_order_(max_order),
      num_free_(static_cast<std::size_t>(max_order) + 1, 0),
      alloc_order_(std::size_t{1} << max_order) {
  bits_.reserve(static_cast<std::size_t>(max_order) + 1);
  for (int o = 0; o <= max_order; ++o) bits_.emplace_back(std::size_t{1} << (max_order - o));
  mark_free(max_order, 0);
}

std::unexpected<Error> BuddyAllocator::alloc_error(int order) const {
  if (order < 0 || order > max_order_)
    return make_error(EINVAL, fmt::format("order {} outside 0..{}", order, max_order_));
  return make_error(ENOMEM, fmt::format("no free block of order {} or above (max_order {})", order,
                                        max_order_));
}

Result<void> BuddyAllocator::check_block(std::uint32_t seg, int order) const {
  if (order < 0 || order > max_order_)
    return make_error(EINVAL, fmt::format("order {} outside 0..{}", order, max_order_));
  if (seg >= num_segments())
    return make_error(EINVAL, fmt::format("segment {} beyond the table of {}", seg, num_segments()));
  if (seg & ((std::uint32_t{1} << order) - 1))
    return make_error(EINVAL, fmt::format("segment {} is not aligned to order {}", seg, order));
  return {};
}

std::unexpected<Error> BuddyAllocator::free_error(std::uint32_t seg, int order) const {
  if (auto ok = check_block(seg, order); !ok) return std::unexpected(std::move(ok.error()));
  int got = alloc_order_[seg] - 1;
  if (got < 0) return make_error(EINVAL, fmt::format("segment {} is not allocated", seg));
  return make_error(EINVAL, fmt::format("segment {} was allocated with order {}, not {}", seg, got, order));
}

Result<void> BuddyAllocator::reserve(std::uint32_t seg, int order) {
  if (auto ok = check_block(seg, order); !ok) return ok;
  // A wholly free aligned block is always inside one free block of its own
  // order or above (frees merge eagerly): find that one.
  int o = order;
  while (o <= max_order_ && !bits_[o].test(seg >> o)) ++o;
  if (o > max_order_)
    return make_error(EBUSY, fmt::format("block {} of order {} is not wholly free", seg, order));
  mark_used(o, seg >> o);
  while (o > order) {  // split towards seg, freeing the other halves
    --o;
    mark_free(o, (seg >> o) ^ 1);
  }
  alloc_order_[seg] = static_cast<std::uint8_t>(order + 1);
  return {};
}

std::uint64_t BuddyAllocator::free_segments() const {
  std::uint64_t n = 0;
  for (int o = 0; o <= max_order_; ++o) n += std::uint64_t{num_free_[o]} << o;
  return n;
}

int BuddyAllocator::allocated_order(std::uint32_t seg) const {
  return seg < num_segments() ? alloc_order_[seg] - 1 : -1;
}

std::size_t BuddyAllocator::bytes() const {
  std::size_t n = alloc_order_.bytes();
  for (const auto& b : bits_) n += b.bytes();
  return n;
}

}  // namespace srdma::alloc
