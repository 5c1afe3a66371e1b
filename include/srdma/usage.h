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

}  // namespace srdma
