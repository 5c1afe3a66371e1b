#include "tools/cq_footprint.h"

namespace srdma::tools {

CqFootprint& CqFootprint::operator+=(const CqFootprint& o) {
  cqs += o.cqs;
  entries_reserved += o.entries_reserved;
  entries_used += o.entries_used;
  memory_bytes += o.memory_bytes;
  return *this;
}

CqFootprint cq_footprint(std::span<const CqUsage> cqs) {
  CqFootprint f;
  for (const CqUsage& u : cqs) {
    ++f.cqs;
    f.entries_reserved += u.cqe_capacity;
    f.entries_used += u.cqe_used;
    f.memory_bytes += u.cqe_capacity * u.cqe_bytes + u.state_bytes;
  }
  return f;
}

CqFootprint cq_footprint(const Device& dev) {
  const auto rows = dev.cq_usage();
  return cq_footprint(std::span<const CqUsage>(rows));
}

}  // namespace srdma::tools
