#include "hca/copy.h"

#include "common/vector_copy.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>

namespace srdma::hca {
namespace {

// Size classes by powers of four from 1 KiB: <1K, <4K, <16K, <64K, <256K,
// <1M, <4M, the rest.
constexpr int kClasses = 8;
int size_class(std::size_t n) {
  if (n < 1024) return 0;
  int c = (std::bit_width(n) - 11) / 2 + 1;  // 1K..4K -> 1, 4K..16K -> 2 ...
  return std::min(c, kClasses - 1);
}

// Which routine each size class uses, decided once by timing both on this
// machine: glibc's memcpy is excellent on some CPUs and, where it picks
// `rep movsb` for mid sizes, several times slower than the vector loop on
// others.
struct CopyPlan {
  std::array<bool, kClasses> use_vector_loop{};  // the vector loop, else memcpy

  CopyPlan() {
    constexpr std::size_t kMax = 8 << 20;
    void* mem = ::mmap(nullptr, 2 * kMax, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return;
    auto* src = static_cast<std::byte*>(mem);
    auto* dst = src + kMax;
    std::memset(mem, 1, 2 * kMax);
    for (int c = 0; c < kClasses; ++c) {
      const std::size_t n = std::size_t{1536} << (2 * c);  // the middle of the class
      const std::size_t size = std::min(n, kMax);
      auto best = [&](auto&& copy) {
        auto fastest = std::chrono::nanoseconds::max();
        const int reps = size >= (1 << 20) ? 3 : 20;
        for (int r = 0; r < reps; ++r) {
          auto t0 = std::chrono::steady_clock::now();
          copy(dst, src, size);
          std::atomic_signal_fence(std::memory_order_seq_cst);
          fastest = std::min(fastest, std::chrono::steady_clock::now() - t0);
        }
        return fastest;
      };
      auto t_memcpy = best([](std::byte* d, const std::byte* s, std::size_t k) { std::memcpy(d, s, k); });
      auto t_vector = best([](std::byte* d, const std::byte* s, std::size_t k) { vector_copy(d, s, k); });
      use_vector_loop[c] = t_vector < t_memcpy;
    }
    ::munmap(mem, 2 * kMax);
  }
};

const CopyPlan& plan() {
  static const CopyPlan p;
  return p;
}

}  // namespace

void copy_bytes_large(void* dst, const void* src, std::size_t n) {
  if (plan().use_vector_loop[size_class(n)])
    vector_copy(dst, src, n);
  else
    std::memcpy(dst, src, n);
}

const char* copy_routine_for(std::size_t n) {
  return n >= 256 && plan().use_vector_loop[size_class(n)] ? vector_copy_name() : "memcpy";
}

std::size_t copy_pieces_general(std::span<const MemPiece> dst, std::span<const MemPiece> src) {
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
