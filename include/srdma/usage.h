// Occupancy of a device's resource tables, for `srdma info` and monitoring.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace srdma {

// One table's occupancy.
struct TableUsage {
  std::string name;
  std::uint64_t used = 0;  // handed out, reserved entries excluded
  std::uint64_t reserved = 0;
  std::uint64_t total = 0;
};

// One MTT buddy's free blocks per order.
struct BuddyUsage {
  std::string name;
  int max_order = 0;
  std::vector<std::uint32_t> free_per_order;
};

// One CQ as the device holds it: what per-QP CQs cost against the shared
// pool (Device::cq_usage).
struct CqUsage {
  std::uint32_t cqn = 0;
  std::uint32_t comp_vector = 0;
  std::uint32_t cqe = 0;            // the size asked for (what overrun is checked against)
  std::uint64_t cqe_capacity = 0;   // entries its ring holds: cqe rounded up to a power of two
  std::uint64_t cqe_bytes = 0;      // bytes of one ring entry
  std::uint64_t state_bytes = 0;    // its objects besides the ring (device and verbs core)
  int qps = 0;                      // QP attachments (send and receive CQ count once each)
  bool shared = false;              // one of the device's CQ pool
  std::uint32_t cqe_used = 0;       // pool CQs: entries leased; other CQs: cqe (all its owner's)
};

}  // namespace srdma
