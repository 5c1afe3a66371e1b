// The storage of a CQ: cells of one CQE each, a power-of-two count of them,
// indexed by position (the count of CQEs ever reserved) modulo capacity.
//
// A cell's seq says which position it holds: pos + 1 once the CQE of that
// position is written (the producer's release store publishes it), any
// other value while it is not. Positions only grow (63 bits: centuries at
// any rate this device reaches), so a value left from an earlier lap never
// matches. Each cell fills a cache line, so two producers writing adjacent
// positions do not share one.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <memory>

#include "srdma/wc.h"

namespace srdma::hca {

struct CqRing {
  struct alignas(64) Cell {
    std::atomic<std::uint64_t> seq{0};
    Wc wc;
  };
  // Set in the tail while a resize moves the CQEs: pushes wait.
  static constexpr std::uint64_t kFrozen = std::uint64_t{1} << 63;

  // REQUIRES: min_entries <= 2^31 (the device's max_cqe is far below).
  explicit CqRing(std::uint32_t min_entries)
      : capacity(std::bit_ceil(std::max<std::uint32_t>(min_entries, 1))), cells(new Cell[capacity]) {}

  Cell& at(std::uint64_t pos) { return cells[pos & (capacity - 1)]; }

  const std::uint64_t capacity;
  const std::unique_ptr<Cell[]> cells;
};

}  // namespace srdma::hca
