#include "hca/mpt_table.h"

#include <fmt/format.h>

#include "hca/keys.h"

namespace srdma::hca {

Result<MptTable> MptTable::create(std::uint32_t num, std::uint32_t reserved, alloc::TopRotation rotation) {
  // MPT keys rotate through all 32 bits (mask ~0), as in mthca.
  auto a = alloc::IndexAllocator::create(num, ~0u, reserved, rotation);
  if (!a) return make_error(a.error().code, "MPT table: " + a.error().reason);
  return MptTable(std::move(*a));
}

MptTable::MptTable(alloc::IndexAllocator a)
    : alloc_(std::move(a)), index_mask_(alloc_.num() - 1), entries_(alloc_.num()) {}

Result<std::uint32_t> MptTable::alloc_key() {
  auto v = alloc_.alloc();
  if (!v) return make_error(ENOMEM, "MPT table exhausted: " + v.error().reason);
  return hw_index_to_key(*v);
}

Result<void> MptTable::free_key(std::uint32_t key) {
  auto r = alloc_.free(key_to_hw_index(key));
  if (!r) return make_error(EINVAL, fmt::format("key {:#x}: {}", key, r.error().reason));
  return {};
}

}  // namespace srdma::hca
