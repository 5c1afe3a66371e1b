// The copy rates bandwidth rows are compared with: glibc memcpy and the
// tool's own 32-byte vector loop (AVX2 where the CPU has it), measured on the
// same sizes in the same run.
#include <chrono>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "tools/perf.h"

namespace srdma::tools {
namespace {

// Portable fallback: 32-byte blocks the compiler vectorises.
void copy_blocks(void* dst, const void* src, std::size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  auto* s = static_cast<const unsigned char*>(src);
  while (n >= 32) {
    std::uint64_t b[4];
    std::memcpy(b, s, 32);
    std::memcpy(d, b, 32);
    d += 32;
    s += 32;
    n -= 32;
  }
  for (std::size_t i = 0; i < n; ++i) d[i] = s[i];
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void copy_avx2(void* dst, const void* src, std::size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  auto* s = static_cast<const unsigned char*>(src);
  if (n < 32) {
    if (n >= 16) {  // two overlapping 16-byte moves
      __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
      __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + n - 16));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d), a);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + n - 16), b);
    } else {
      for (std::size_t i = 0; i < n; ++i) d[i] = s[i];
    }
    return;
  }
  const std::size_t total = n;
  while (n >= 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 64));
    __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 96));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 32), b);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 64), c);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 96), e);
    s += 128;
    d += 128;
    n -= 128;
  }
  while (n >= 32) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
    s += 32;
    d += 32;
    n -= 32;
  }
  if (n) {  // the last 32 bytes, overlapping what is done (total >= 32)
    (void)total;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + n - 32),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + n - 32)));
  }
  _mm256_zeroupper();
}

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

void copy_memcpy(void* dst, const void* src, std::size_t n) { std::memcpy(dst, src, n); }

}  // namespace

void copy_vector_loop(void* dst, const void* src, std::size_t n) {
#if defined(__x86_64__)
  if (have_avx2()) return copy_avx2(dst, src, n);
#endif
  copy_blocks(dst, src, n);
}

const char* copy_vector_loop_name() {
#if defined(__x86_64__)
  if (have_avx2()) return "avx2";
#endif
  return "32-byte loop";
}

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

