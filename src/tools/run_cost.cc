#include "tools/run_cost.h"

#include <sys/resource.h>

#include "srdma/device.h"

namespace srdma::tools {

VectorTotals& VectorTotals::operator+=(const VectorTotals& o) {
  interrupts += o.interrupts;
  wakeups += o.wakeups;
  completions += o.completions;
  return *this;
}

VectorTotals vector_totals(const Device& dev) {
  VectorTotals t;
  for (const auto& v : dev.comp_vector_stats()) {
    t.interrupts += v.events;
    t.wakeups += v.interrupts;
    t.completions += v.completions_handled;
  }
  return t;
}

double process_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto tv = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
}

}  // namespace srdma::tools
