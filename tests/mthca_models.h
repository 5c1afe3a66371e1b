// Literal models of the kernel's mthca_alloc and mthca_buddy (linear bitmap
// scans, no misuse checks), to replay operation sequences against ours.
#pragma once

#include <cstdint>
#include <vector>

namespace srdma::test {

struct MthcaAllocModel {
  std::uint32_t last = 0, top = 0, max, mask;
  std::vector<bool> table;

  MthcaAllocModel(std::uint32_t num, std::uint32_t m, std::uint32_t reserved)
      : max(num), mask(m), table(num, false) {
    for (std::uint32_t i = 0; i < reserved; ++i) table[i] = true;
  }
  std::uint32_t find_next_zero(std::uint32_t from) const {
    for (std::uint32_t i = from; i < max; ++i)
      if (!table[i]) return i;
    return max;
  }
  // -1 (as u32) on failure, as the kernel returns.
  std::uint32_t alloc() {
    std::uint32_t obj = find_next_zero(last);
    if (obj >= max) {
      top = (top + max) & mask;
      obj = find_next_zero(0);
    }
    if (obj < max) {
      table[obj] = true;
      return obj | top;
    }
    return ~0u;
  }
  void free(std::uint32_t obj) {
    obj &= max - 1;
    table[obj] = false;
    last = obj < last ? obj : last;
    top = (top + max) & mask;
  }
};

struct MthcaBuddyModel {
  int max_order;
  std::vector<std::vector<bool>> bits;
  std::vector<int> num_free;

  explicit MthcaBuddyModel(int mo) : max_order(mo), bits(mo + 1), num_free(mo + 1, 0) {
    for (int o = 0; o <= mo; ++o) bits[o].assign(std::size_t{1} << (mo - o), false);
    bits[mo][0] = true;
    num_free[mo] = 1;
  }
  // -1 on failure.
  std::int64_t alloc(int order) {
    for (int o = order; o <= max_order; ++o) {
      if (!num_free[o]) continue;
      std::uint32_t m = 1u << (max_order - o);
      std::uint32_t seg = 0;
      while (seg < m && !bits[o][seg]) ++seg;
      if (seg >= m) continue;
      bits[o][seg] = false;
      --num_free[o];
      while (o > order) {
        --o;
        seg <<= 1;
        bits[o][seg ^ 1] = true;
        ++num_free[o];
      }
      return std::int64_t{seg} << order;
    }
    return -1;
  }
  void free(std::uint32_t seg, int order) {
    seg >>= order;
    while (order < max_order && bits[order][seg ^ 1]) {
      bits[order][seg ^ 1] = false;
      --num_free[order];
      seg >>= 1;
      ++order;
    }
    bits[order][seg] = true;
    ++num_free[order];
  }
};

}  // namespace srdma::test
