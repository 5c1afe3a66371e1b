// What a run cost: the process's CPU time and a device's completion-vector
// counts. blk bench measures its modes with them; srdma nvmf target logs
// them when it stops (the other side of an across-process comparison).
#pragma once

#include <cstdint>

namespace srdma {
class Device;
}

namespace srdma::tools {

// An interrupt is a completion event (an EQE): on hardware each raises one,
// as in the cq-pool-bench; the vector threads' wake-ups, which batch the
// events that piled up while they were busy, are counted beside them.
struct VectorTotals {
  std::uint64_t interrupts = 0, wakeups = 0, completions = 0;
  VectorTotals& operator+=(const VectorTotals& o);
};
VectorTotals vector_totals(const Device& dev);

// User plus system CPU seconds of this process so far.
double process_cpu_seconds();

}  // namespace srdma::tools
