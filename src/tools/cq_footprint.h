// What a set of CQs costs: how many, the entries their rings really hold
// against the entries their users asked for, and their memory. The measure
// of per-QP CQs against the shared pool when a target serves many queues
// (cq-pool-bench, blk bench).
#pragma once

#include <cstdint>
#include <span>

#include "srdma/device.h"
#include "srdma/usage.h"

namespace srdma::tools {

struct CqFootprint {
  std::uint64_t cqs = 0;
  // What the CQs' sizes really hold: each ring's entries, its cqe rounded
  // up to a power of two (as mthca rounds a CQ's buffer).
  std::uint64_t entries_reserved = 0;
  // What their users asked for: a private CQ's cqe, a pool CQ's leased entries.
  std::uint64_t entries_used = 0;
  // entries_reserved x bytes per entry, plus each CQ's own state.
  std::uint64_t memory_bytes = 0;

  CqFootprint& operator+=(const CqFootprint& o);
  friend CqFootprint operator+(CqFootprint a, const CqFootprint& b) { return a += b; }
  friend bool operator==(const CqFootprint&, const CqFootprint&) = default;
};

// The footprint of these CQs (Device::cq_usage rows).
CqFootprint cq_footprint(std::span<const CqUsage> cqs);
// Of every CQ the device holds now: its owners' and its pool's.
CqFootprint cq_footprint(const Device& dev);

}  // namespace srdma::tools
