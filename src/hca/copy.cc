#include "hca/copy.h"

#include "common/vector_copy.h"

#include <algorithm>
#include <cstring>

namespace srdma::hca {
namespace {

// Which routine a copy of n >= 256 bytes uses. Up to 4 MiB the vector loop:
// glibc's memcpy picks `rep movsb` for these sizes, which wins a tight
// loop of back-to-back copies (what a startup timing would measure) yet
// runs at 0.51-0.57 of the best copy rate inside the engine, against
// 0.69-0.78 for the vector loop (srdma perf write_bw -s 65536, alternating
// binaries; docs/BENCHMARKS.md). Beyond 4 MiB glibc's non-temporal stores,
// which spare the cache a buffer it would not hold anyway.
constexpr std::size_t kVectorLoopBelow = std::size_t{4} << 20;
bool use_vector_loop(std::size_t n) { return n < kVectorLoopBelow && vector_copy_accelerated(); }

}  // namespace

void copy_bytes_large(void* dst, const void* src, std::size_t n) {
  if (use_vector_loop(n))
    vector_copy(dst, src, n);
  else
    std::memcpy(dst, src, n);
}

const char* copy_routine_for(std::size_t n) {
  return n >= 256 && use_vector_loop(n) ? vector_copy_name() : "memcpy";
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
