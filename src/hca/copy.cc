#include "hca/copy.h"

#include "common/vector_copy.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

namespace srdma::hca {
namespace {

using CopyFn = void (*)(void*, const void*, std::size_t);

// Beyond 4 MiB always glibc's memcpy: its non-temporal stores spare the
// cache a buffer it would not hold anyway.
constexpr std::size_t kChosenBelow = std::size_t{4} << 20;

void copy_memcpy(void* dst, const void* src, std::size_t n) { std::memcpy(dst, src, n); }

CopyFn routine_fn(CopyRoutine r) {
  switch (r) {
    case CopyRoutine::kVectorLoop:
      return vector_copy;
    case CopyRoutine::kMovsb:
      return movsb_copy;
    case CopyRoutine::kMemcpy:
      return copy_memcpy;
  }
  return copy_memcpy;
}

bool available(CopyRoutine r) {
  switch (r) {
    case CopyRoutine::kVectorLoop:
      return vector_copy_accelerated();  // the portable loop is no reason to leave memcpy
    case CopyRoutine::kMovsb:
#if defined(__x86_64__)
      return cpu_has_erms();  // without ERMS `rep movsb` is a byte loop
#else
      return false;
#endif
    case CopyRoutine::kMemcpy:
      return true;
  }
  return false;
}

// The per-machine choice. The prior comes from the CPU's features: glibc's
// memcpy where the CPU says `rep movsb` is fast (FSRM: glibc then copies
// these sizes with it, or with wider vectors than ours), else the AVX2
// loop, else memcpy. Then each available candidate is timed the way the
// engine copies a 64 KiB RDMA WRITE: one source and one destination buffer,
// page-aligned like registered memory, and between two copies other memory
// traffic (the engine's translation, WQE and CQE lines; here 8 KiB of
// scratch), each copy timed alone, not a back-to-back loop, which favoured
// `rep movsb` on a host where the engine ran slower with it
// (docs/BENCHMARKS.md). Candidates take turns in each round; each keeps its
// fastest round (the machine is shared: a slow round is someone else's). A
// candidate displaces the prior only if it is more than 5% faster, so noise
// does not flip the choice between near-equal routines. About 0.5 ms, once.
CopyChoice calibrate() {
  CopyChoice c;
  const bool fsrm = cpu_has_fsrm();
  c.routine = fsrm                                  ? CopyRoutine::kMemcpy
              : available(CopyRoutine::kVectorLoop) ? CopyRoutine::kVectorLoop
                                                    : CopyRoutine::kMemcpy;
  constexpr std::size_t kSize = 64 * 1024, kScratch = 8 * 1024;
  constexpr int kCopies = 4, kRounds = 16;
  auto* src = static_cast<unsigned char*>(std::aligned_alloc(4096, kSize));
  auto* dst = static_cast<unsigned char*>(std::aligned_alloc(4096, kSize));
  auto* scratch = static_cast<unsigned char*>(std::aligned_alloc(4096, kScratch));
  if (src == nullptr || dst == nullptr || scratch == nullptr) {
    std::free(src);
    std::free(dst);
    std::free(scratch);
    c.how = fmt::format("CPU features (fsrm {}); no timing: out of memory", fsrm ? "yes" : "no");
    return c;
  }
  std::memset(src, 0x5a, kSize);
  std::memset(dst, 0, kSize);
  std::memset(scratch, 0, kScratch);
  using clock = std::chrono::steady_clock;
  double best_ns[std::size(kCopyRoutines)] = {};
  for (int round = 0; round < kRounds; ++round) {
    for (std::size_t i = 0; i < std::size(kCopyRoutines); ++i) {
      if (!available(kCopyRoutines[i])) continue;
      CopyFn volatile fn_ptr = routine_fn(kCopyRoutines[i]);
      CopyFn fn = fn_ptr;  // opaque: the copies stay
      if (round == 0) fn(dst, src, kSize);  // warm this routine's code and the lines
      double ns = 0;
      for (int k = 0; k < kCopies; ++k) {
        for (std::size_t j = 0; j < kScratch; j += 64) scratch[j] = static_cast<unsigned char>(scratch[j] + 1);
        asm volatile("" ::: "memory");
        const auto t0 = clock::now();
        fn(dst, src, kSize);
        asm volatile("" ::: "memory");
        ns += std::chrono::duration<double, std::nano>(clock::now() - t0).count();
      }
      if (best_ns[i] == 0 || ns < best_ns[i]) best_ns[i] = ns;
    }
  }
  std::free(src);
  std::free(dst);
  std::free(scratch);
  auto gb_s = [&](std::size_t i) { return best_ns[i] > 0 ? kSize * double{kCopies} / best_ns[i] : 0.0; };
  const auto prior = static_cast<std::size_t>(c.routine);
  std::size_t pick = prior;
  for (std::size_t i = 0; i < std::size(kCopyRoutines); ++i)
    if (gb_s(i) > 1.05 * gb_s(prior) && gb_s(i) > gb_s(pick)) pick = i;
  c.routine = kCopyRoutines[pick];
  c.how = fmt::format("per machine: fsrm {}, prior {}; timed 64 KiB copies:", fsrm ? "yes" : "no",
                      copy_routine_name(kCopyRoutines[prior]));
  for (std::size_t i = 0; i < std::size(kCopyRoutines); ++i)
    if (best_ns[i] > 0) c.how += fmt::format(" {} {:.1f}", copy_routine_name(kCopyRoutines[i]), gb_s(i));
  c.how += " GB/s";
  return c;
}

std::atomic<CopyFn> g_copy{nullptr};

// The first copy of 256 bytes or more: choose, publish, copy.
[[gnu::noinline, gnu::cold]] void first_copy(void* dst, const void* src, std::size_t n) {
  CopyFn fn = routine_fn(engine_copy_choice().routine);
  fn(dst, src, n);
}

}  // namespace

const char* copy_routine_name(CopyRoutine r) {
  switch (r) {
    case CopyRoutine::kVectorLoop:
      return vector_copy_name();
    case CopyRoutine::kMovsb:
      return "movsb";
    case CopyRoutine::kMemcpy:
      return "memcpy";
  }
  return "memcpy";
}

void copy_with(CopyRoutine r, void* dst, const void* src, std::size_t n) { routine_fn(r)(dst, src, n); }

CopyChoice choose_copy_routine(const char* env) {
  const std::string_view v = env ? env : "";
  std::string warning;
  if (!v.empty() && v != "auto") {
    for (CopyRoutine r : kCopyRoutines) {
      const std::string_view name = r == CopyRoutine::kVectorLoop ? "avx2" : copy_routine_name(r);
      if (v != name) continue;
      if (r == CopyRoutine::kVectorLoop && !vector_copy_accelerated()) {
        warning = "SRDMA_COPY=avx2 but this CPU has no AVX2";
        break;
      }
      // rep movsb runs without ERMS too, slowly; forcing it is allowed.
      return CopyChoice{r, fmt::format("SRDMA_COPY={}", v), {}};
    }
    if (warning.empty()) warning = fmt::format("SRDMA_COPY={} is not one of avx2, movsb, memcpy, auto", v);
    warning += "; choosing per machine";
  }
  CopyChoice c = calibrate();
  c.warning = std::move(warning);
  return c;
}

const CopyChoice& engine_copy_choice() {
  static const CopyChoice choice = [] {
    CopyChoice c = choose_copy_routine(std::getenv("SRDMA_COPY"));
    if (!c.warning.empty()) std::fprintf(stderr, "srdma: warning: %s\n", c.warning.c_str());
    g_copy.store(routine_fn(c.routine), std::memory_order_release);
    return c;
  }();
  return choice;
}

void copy_bytes_large(void* dst, const void* src, std::size_t n) {
  if (n >= kChosenBelow) [[unlikely]]
    return std::memcpy(dst, src, n), void();
  CopyFn fn = g_copy.load(std::memory_order_acquire);
  if (fn == nullptr) [[unlikely]]
    return first_copy(dst, src, n);
  fn(dst, src, n);
}

const char* copy_routine_for(std::size_t n) {
  if (n <= 32) return "inline";
  if (n < 256 || n >= kChosenBelow) return "memcpy";
  return copy_routine_name(engine_copy_choice().routine);
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
