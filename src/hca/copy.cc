#include "hca/copy.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace srdma::hca {
namespace {

__attribute__((target("avx2"))) void copy_avx2(std::byte* d, const std::byte* s, std::size_t n) {
  // 128 bytes per iteration, unaligned loads and stores (cheap on AVX2 parts).
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
  if (n) std::memcpy(d, s, n);
}

const bool kHaveAvx2 = __builtin_cpu_supports("avx2");

}  // namespace

void copy_bytes(void* dst, const void* src, std::size_t n) {
  // Small copies: memcpy is best. Large: the vector loop.
  if (n >= 256 && kHaveAvx2)
    copy_avx2(static_cast<std::byte*>(dst), static_cast<const std::byte*>(src), n);
  else
    std::memcpy(dst, src, n);
}

std::size_t copy_pieces(std::span<const MemPiece> dst, std::span<const MemPiece> src) {
  std::size_t di = 0, si = 0, doff = 0, soff = 0, total = 0;
  while (di < dst.size() && si < src.size()) {
    std::size_t n = std::min(dst[di].length - doff, src[si].length - soff);
    copy_bytes(dst[di].addr + doff, src[si].addr + soff, n);
    total += n;
    doff += n;
    soff += n;
    if (doff == dst[di].length) ++di, doff = 0;
    if (soff == src[si].length) ++si, soff = 0;
  }
  return total;
}

}  // namespace srdma::hca
