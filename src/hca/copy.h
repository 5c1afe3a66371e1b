// The engine's memory copy. Below 256 bytes inline, each byte stored once
// (copy_once_small); from 256 bytes to 4 MiB one routine chosen once per process
// for this machine (copy.cc): the AVX2 loop (common/vector_copy.h), `rep
// movsb` or glibc's memcpy, none of which is fastest on every CPU; beyond
// 4 MiB memcpy, whose non-temporal stores spare the cache. SRDMA_COPY=
// avx2|movsb|memcpy|auto in the environment forces the routine (auto: the
// per-machine choice).
#pragma once

#include <cstddef>
#include <cstring>
#include <span>
#include <string>

#include "srdma/translation.h"

namespace srdma::hca {

void copy_bytes_large(void* dst, const void* src, std::size_t n);

// Below 256 bytes every destination byte is stored exactly once: 32-byte
// blocks, then one move each of 16, 8, 4, 2 and 1 as the length needs (no
// call into libc, no overlapping moves). A placement is seen by a consumer
// that polls the destination and may write it as soon as it sees the data
// (riostream's ping-pong polls a buffer's last byte and then writes it);
// the overlapping moves of memcpy and of a head-and-tail copy store some
// bytes twice, and the second store undid the consumer's write. `move<W>`
// moves W bytes (tests count what it stores).
struct FixedMove {
  template <std::size_t W>
  void operator()(unsigned char* d, const unsigned char* s) const {
    std::memcpy(d, s, W);
  }
};
template <class Move = FixedMove>
inline void copy_once_small(void* dst, const void* src, std::size_t n, Move move = {}) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  // One move for a power of two up to 32 (the common small payloads).
  switch (n) {
    case 0: return;
    case 1: return move.template operator()<1>(d, s);
    case 2: return move.template operator()<2>(d, s);
    case 4: return move.template operator()<4>(d, s);
    case 8: return move.template operator()<8>(d, s);
    case 16: return move.template operator()<16>(d, s);
    case 32: return move.template operator()<32>(d, s);
    default: break;
  }
  for (; n >= 32; n -= 32, d += 32, s += 32) move.template operator()<32>(d, s);
  if (n & 16) move.template operator()<16>(d, s), d += 16, s += 16;
  if (n & 8) move.template operator()<8>(d, s), d += 8, s += 8;
  if (n & 4) move.template operator()<4>(d, s), d += 4, s += 4;
  if (n & 2) move.template operator()<2>(d, s), d += 2, s += 2;
  if (n & 1) move.template operator()<1>(d, s);
}
inline void copy_bytes(void* dst, const void* src, std::size_t n) {
  if (n < 256) [[likely]] {
    copy_once_small(dst, src, n);
    return;
  }
  copy_bytes_large(dst, src, n);
}

// The routines the engine can copy 256 B - 4 MiB with.
enum class CopyRoutine : unsigned char { kVectorLoop, kMovsb, kMemcpy };
inline constexpr CopyRoutine kCopyRoutines[] = {CopyRoutine::kVectorLoop, CopyRoutine::kMovsb, CopyRoutine::kMemcpy};
// "avx2" (or "32-byte loop" without AVX2), "movsb", "memcpy".
const char* copy_routine_name(CopyRoutine r);
// Copies n bytes with routine r, whatever the engine uses (tests, benchmarks).
void copy_with(CopyRoutine r, void* dst, const void* src, std::size_t n);

// How the routine was chosen.
struct CopyChoice {
  CopyRoutine routine = CopyRoutine::kVectorLoop;  // while deciding: the prior, used meanwhile
  bool deciding = false;  // per machine, and the engine's copies have not yet decided
  std::string how;        // "SRDMA_COPY=movsb", or the CPU features and what the timing measured
  std::string warning;    // non-empty when SRDMA_COPY had a value we do not take
};
// The choice for an SRDMA_COPY value. A routine's name forces it. nullptr,
// "" or "auto": per machine, a prior from the CPU's features (deciding),
// then the engine's own first copies of 4 KiB or more take turns among the
// candidates, timed, and the fastest (median) stays for the process
// (copy.cc). An unknown value, or "avx2" on a CPU without AVX2, falls back
// to the per-machine choice with a warning. The engine calls this once, when
// the first device opens or at its first copy of 256 bytes or more if that
// comes first, with getenv("SRDMA_COPY"), and prints the warning to stderr.
CopyChoice choose_copy_routine(const char* env);
// The engine's choice so far (read from the environment now if no copy has
// done it yet).
CopyChoice engine_copy_choice();
// Reads SRDMA_COPY and publishes the routine (or the sampling) now, if no
// copy has: a device does it when it opens, so that its first WRITE does
// not pay for it (tens of microseconds of first-time code).
void prepare_engine_copy();

// "memcpy", "inline" or the chosen routine's name: what copy_bytes uses for
// n bytes in this process.
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
