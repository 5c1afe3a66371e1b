#include "common/cpu_affinity.h"

#include <sched.h>

namespace srdma {
namespace {

bool allowed(cpu_set_t& set) {
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0;
}

}  // namespace

int allowed_cpu_count() {
  cpu_set_t set;
  return allowed(set) ? CPU_COUNT(&set) : 0;
}

int nth_allowed_cpu(int n) {
  cpu_set_t set;
  if (n < 0 || !allowed(set)) return -1;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set) && n-- == 0) return cpu;
  return -1;
}

bool pin_thread(pthread_t thread, int cpu) {
  if (cpu < 0 || cpu >= CPU_SETSIZE) return false;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return pthread_setaffinity_np(thread, sizeof one, &one) == 0;
}

}  // namespace srdma
