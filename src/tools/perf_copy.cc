// The copy rates bandwidth rows are compared with: glibc memcpy and the
// tool's own 32-byte vector loop (AVX2 where the CPU has it), measured on the
// same sizes in the same run.
#include <chrono>
#include <cstdint>
#include <cstring>

#include "common/vector_copy.h"
#include "tools/perf.h"

namespace srdma::tools {
namespace {

void copy_memcpy(void* dst, const void* src, std::size_t n) { std::memcpy(dst, src, n); }

}  // namespace

void copy_vector_loop(void* dst, const void* src, std::size_t n) { vector_copy(dst, src, n); }

const char* copy_vector_loop_name() { return vector_copy_name(); }

double measure_copy(bool vector_loop, void* dst, const void* src, std::size_t n, double budget_ms) {
  using clock = std::chrono::steady_clock;
  void (*volatile fn_ptr)(void*, const void*, std::size_t) = vector_loop ? copy_vector_loop : copy_memcpy;
  auto* fn = fn_ptr;  // an opaque call: the copies cannot be elided
  // Batches of about 1 MiB (at least one copy); the best batch counts.
  const std::size_t reps = n >= (1u << 20) ? 1 : (1u << 20) / n;
  fn(dst, src, n);  // warm the buffers
  const auto budget = std::chrono::duration<double, std::milli>(budget_ms);
  const auto start = clock::now();
  double best = 0;
  int batches = 0;
  do {
    const auto t0 = clock::now();
    for (std::size_t i = 0; i < reps; ++i) {
      fn(dst, src, n);
      asm volatile("" ::: "memory");
    }
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    if (s > 0) {
      const double mib_s = static_cast<double>(n) * static_cast<double>(reps) / s / (1 << 20);
      if (mib_s > best) best = mib_s;
    }
    ++batches;
  } while (clock::now() - start < budget || batches < 3);
  return best;
}

}  // namespace srdma::tools

