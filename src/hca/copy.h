// The engine's memory copy. glibc's memcpy on some machines (AMD EPYC with
// glibc 2.36) takes `rep movsb` for 4-64 KiB copies and runs far below the
// vector units' speed there. So copies from 256 bytes to 4 MiB use the
// vector loop (common/vector_copy.h) where the CPU has one; small and huge
// copies use memcpy (copy.cc says why).
#pragma once

#include <cstddef>
#include <cstring>
#include <span>

#include "srdma/translation.h"

namespace srdma::hca {

// Up to 32 bytes: two overlapping fixed-size moves (a small message's
// payload is copied without a call into libc); below 256 bytes memcpy.
void copy_bytes_large(void* dst, const void* src, std::size_t n);
// W <= n <= 2W: the first and the last W bytes, both read before either is
// written.
template <std::size_t W>
inline void copy_ends(unsigned char* d, const unsigned char* s, std::size_t n) {
  unsigned char head[W], tail[W];
  std::memcpy(head, s, W);
  std::memcpy(tail, s + n - W, W);
  std::memcpy(d, head, W);
  std::memcpy(d + n - W, tail, W);
}
inline void copy_small(void* dst, const void* src, std::size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (n >= 16) return copy_ends<16>(d, s, n);
  if (n >= 8) return copy_ends<8>(d, s, n);
  if (n >= 4) return copy_ends<4>(d, s, n);
  if (n >= 2) return copy_ends<2>(d, s, n);
  if (n == 1) *d = *s;
}
inline void copy_bytes(void* dst, const void* src, std::size_t n) {
  if (n <= 32) [[likely]] {
    copy_small(dst, src, n);
    return;
  }
  if (n < 256) {
    std::memcpy(dst, src, n);
    return;
  }
  copy_bytes_large(dst, src, n);
}

// "memcpy" or the vector loop's name: what copy_bytes uses for n bytes here.
const char* copy_routine_for(std::size_t n);

// Copies min(total of dst, total of src) bytes from the src pieces into the
// dst pieces, in order. Returns the bytes copied.
std::size_t copy_pieces_general(std::span<const MemPiece> dst, std::span<const MemPiece> src);
inline std::size_t copy_pieces(std::span<const MemPiece> dst, std::span<const MemPiece> src) {
  if (dst.size() == 1 && src.size() == 1) {  // the common case: one run each
    const std::size_t n = dst[0].length < src[0].length ? dst[0].length : src[0].length;
    copy_bytes(dst[0].addr, src[0].addr, n);
    return n;
  }
  return copy_pieces_general(dst, src);
}

}  // namespace srdma::hca
