#include "common/vector_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace srdma {
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

// CPUID.(EAX=7,ECX=0): EBX bit 9 is ERMS, EDX bit 4 is FSRM.
struct Leaf7 {
  unsigned ebx = 0, edx = 0;
};
const Leaf7& leaf7() {
  static const Leaf7 l = [] {
    Leaf7 r;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) r = Leaf7{b, d};
    return r;
  }();
  return l;
}
#endif

}  // namespace

void vector_copy(void* dst, const void* src, std::size_t n) {
#if defined(__x86_64__)
  if (have_avx2()) return copy_avx2(dst, src, n);
#endif
  copy_blocks(dst, src, n);
}

bool vector_copy_accelerated() {
#if defined(__x86_64__)
  return have_avx2();
#else
  return false;
#endif
}

void movsb_copy(void* dst, const void* src, std::size_t n) {
#if defined(__x86_64__)
  asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
#else
  std::memcpy(dst, src, n);
#endif
}

bool cpu_has_erms() {
#if defined(__x86_64__)
  return (leaf7().ebx >> 9) & 1;
#else
  return false;
#endif
}

bool cpu_has_fsrm() {
#if defined(__x86_64__)
  return (leaf7().edx >> 4) & 1;
#else
  return false;
#endif
}

const char* vector_copy_name() {
#if defined(__x86_64__)
  if (have_avx2()) return "avx2";
#endif
  return "32-byte loop";
}

}  // namespace srdma
