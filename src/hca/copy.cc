#include "hca/copy.h"

#include "common/vector_copy.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
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

// The routine the CPU's features suggest: glibc's memcpy where the CPU says
// `rep movsb` is fast (FSRM: glibc then copies these sizes with it, or with
// wider vectors than ours), else the AVX2 loop, else memcpy.
CopyRoutine prior_routine() {
  if (cpu_has_fsrm()) return CopyRoutine::kMemcpy;
  return available(CopyRoutine::kVectorLoop) ? CopyRoutine::kVectorLoop : CopyRoutine::kMemcpy;
}

std::string features() {
  return fmt::format("fsrm {}, erms {}", cpu_has_fsrm() ? "yes" : "no", cpu_has_erms() ? "yes" : "no");
}

// The per-machine choice is made on the engine's own copies: a timing
// outside the engine, even one that imitates it, can mislead (a
// back-to-back loop favoured `rep movsb` on a host where the engine ran
// slower with it), and so can timing each copy alone: here the AVX2 loop
// timed alone looked 10-15% slower than memcpy, yet the engine ran level
// or faster with it (its stores drain while the engine goes on; a timed
// copy waits for them; docs/BENCHMARKS.md). So until the choice is made,
// the engine's copies of kSampleFrom bytes or more take turns among the
// candidates, kBlock copies in a row each, and a sample is the time from
// the start of one copy to the start of the next one of the same size in
// the same thread, per byte: the copy and what the engine does after it,
// the cost that the routine decides. The sampling starts after kWarmUp
// such copies (the first ones here ran in a start-up state that favoured
// memcpy by about 12%, against level later), and the blocks are kGap
// copies apart, so that they spread over a stretch of the run; the first
// kSkip copies of a block are not counted (the previous routine's cache
// state). When every candidate has kSamples, the one with the lowest
// median wins, and the prior keeps its place unless another is more than
// 3% faster: noise does not flip the choice between near-equal routines,
// and where the copies do not follow each other closely (waits between
// messages fill the intervals) the routines look alike and the prior
// stays. A median of interleaved samples shrugs off a preemption or a slow
// period, which hit one sample or all candidates alike. Copies outside the
// blocks, copies that find another thread sampling, and copies below
// kSampleFrom use the prior. About 2,100 copies of 4 KiB or more, once
// per process.
constexpr std::size_t kSampleFrom = 4096;
constexpr std::size_t kBlock = 8, kSkip = 2;
constexpr std::size_t kWarmUp = 1000, kGap = 100;
constexpr int kSamples = 5 * static_cast<int>(kBlock - kSkip);
constexpr std::size_t kCandidatesMax = std::size(kCopyRoutines);

struct Engine {
  std::mutex mu;  // guards choice (its `how` changes once, when the sampling ends)
  CopyChoice choice;
  CopyFn prior = copy_memcpy;
  // The sampling, by whoever holds `sampling`.
  std::atomic_flag sampling = ATOMIC_FLAG_INIT;
  CopyRoutine candidates[kCandidatesMax] = {};
  std::size_t n_candidates = 0;
  std::size_t seen = 0;  // copies of >= kSampleFrom bytes this far, sampled or not
  float ns_per_kib[kCandidatesMax][kSamples] = {};
  int count[kCandidatesMax] = {};
  std::size_t tries = 0;  // copies under the sampling flag so far
  // What decided, written into choice.how when the choice is read (guarded
  // by mu): formatting it at the decision would put a first use of fmt's
  // code, several microseconds, on the copy that decides.
  enum class Outcome { kNone, kTimed, kKept } outcome = Outcome::kNone;
};

// A thread's previous copy, if it was sampled: when it started, its size
// and routine, and whether the interval after it counts.
struct LastCopy {
  std::chrono::steady_clock::time_point start;
  std::size_t n = 0;  // 0: none, or not sampled
  std::size_t candidate = 0;
  bool counts = false;
};
thread_local LastCopy t_last;

// Copies that never follow each other in one thread (many threads taking
// turns, sizes always changing) never fill the samples: after this many
// copies under the sampling flag the prior stays.
constexpr std::size_t kGiveUpAfter = 20000;

Engine& engine() {
  static Engine e;
  return e;
}

std::atomic<CopyFn> g_copy{nullptr};

void publish(Engine& e, CopyRoutine chosen, Engine::Outcome outcome) {
  {
    std::lock_guard lock(e.mu);
    e.choice.routine = chosen;
    e.choice.deciding = false;
    e.outcome = outcome;
  }
  g_copy.store(routine_fn(chosen), std::memory_order_release);
}

// A candidate's median, ns per KiB, once decide() has sorted its samples.
double median_of(const Engine& e, std::size_t i) { return e.ns_per_kib[i][kSamples / 2]; }

// The description of a decision, once (REQUIRES: e.mu held). The prior is
// what sampling started from: always the CPU features' choice.
void describe_outcome(Engine& e) {
  switch (e.outcome) {
    case Engine::Outcome::kNone:
      return;
    case Engine::Outcome::kTimed:
      e.choice.how = fmt::format(
          "per machine: {}, prior {}; chosen on the engine's own copies of >= 4 KiB, median per copy cycle",
          features(), copy_routine_name(prior_routine()));
      for (std::size_t i = 0; i < e.n_candidates; ++i)
        e.choice.how += fmt::format(" {} {:.1f}", copy_routine_name(e.candidates[i]),
                                    median_of(e, i) > 0 ? 1024 / median_of(e, i) : 0.0);
      e.choice.how += " GB/s";
      break;
    case Engine::Outcome::kKept:
      e.choice.how = fmt::format(
          "per machine: {}, prior {}; kept: the engine's copies of >= 4 KiB did not follow each other "
          "closely enough to be timed",
          features(), copy_routine_name(prior_routine()));
      break;
  }
  e.outcome = Engine::Outcome::kNone;
}

void decide(Engine& e) {
  std::size_t prior = 0, pick = 0;
  for (std::size_t i = 0; i < e.n_candidates; ++i) {
    std::sort(e.ns_per_kib[i], e.ns_per_kib[i] + kSamples);
    if (e.candidates[i] == e.choice.routine) prior = i;
  }
  pick = prior;
  for (std::size_t i = 0; i < e.n_candidates; ++i)
    if (median_of(e, i) * 1.03 < median_of(e, prior) && median_of(e, i) < median_of(e, pick)) pick = i;
  publish(e, e.candidates[pick], Engine::Outcome::kTimed);
}

void sampling_copy(void* dst, const void* src, std::size_t n) {
  Engine& e = engine();
  if (n < kSampleFrom) return e.prior(dst, src, n);
  if (e.sampling.test_and_set(std::memory_order_acquire)) {
    t_last.n = 0;  // the next interval would hold this copy too
    return e.prior(dst, src, n);
  }
  if (g_copy.load(std::memory_order_relaxed) != sampling_copy) {  // decided meanwhile
    e.sampling.clear(std::memory_order_release);
    return routine_fn(engine_copy_choice().routine)(dst, src, n);
  }
  const std::size_t seen = e.seen;
  const std::size_t period = kBlock + kGap;
  const bool sampled = seen >= kWarmUp && (seen - kWarmUp) % period < kBlock;
  // The clock is read only where an interval ends or starts: most copies
  // while deciding are neither, and a clock read per copy would cost the
  // run more than the sampling does.
  const bool closes = t_last.n == n && t_last.counts;
  const auto now = closes || sampled ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  if (closes) {
    const std::size_t c = t_last.candidate;
    if (e.count[c] < kSamples)
      e.ns_per_kib[c][e.count[c]++] = static_cast<float>(
          std::chrono::duration<double, std::nano>(now - t_last.start).count() * 1024 / static_cast<double>(n));
  }
  bool full = true;
  for (std::size_t j = 0; j < e.n_candidates; ++j) full = full && e.count[j] == kSamples;
  if (full || ++e.tries > kGiveUpAfter) {
    if (full)
      decide(e);
    else
      publish(e, e.choice.routine, Engine::Outcome::kKept);
    t_last.n = 0;
    e.sampling.clear(std::memory_order_release);
    return routine_fn(engine_copy_choice().routine)(dst, src, n);
  }
  ++e.seen;
  if (!sampled) {
    t_last.n = 0;
    e.sampling.clear(std::memory_order_release);
    return e.prior(dst, src, n);
  }
  const std::size_t block = (seen - kWarmUp) / period, at = (seen - kWarmUp) % period;
  const std::size_t i = block % e.n_candidates;
  routine_fn(e.candidates[i])(dst, src, n);
  t_last = LastCopy{now, n, i, at >= kSkip};
  e.sampling.clear(std::memory_order_release);
}

// The first copy of 256 bytes or more: read SRDMA_COPY, publish the routine
// (or the sampling), copy.
[[gnu::noinline, gnu::cold]] void first_copy(void* dst, const void* src, std::size_t n) {
  (void)engine_copy_choice();
  g_copy.load(std::memory_order_acquire)(dst, src, n);
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
      return CopyChoice{r, false, fmt::format("SRDMA_COPY={}", v), {}};
    }
    if (warning.empty()) warning = fmt::format("SRDMA_COPY={} is not one of avx2, movsb, memcpy, auto", v);
    warning += "; choosing per machine";
  }
  CopyChoice c;
  c.routine = prior_routine();
  c.how = fmt::format("per machine: {}, prior {}; choosing on the engine's own copies of >= 4 KiB", features(),
                      copy_routine_name(c.routine));
  c.deciding = true;
  c.warning = std::move(warning);
  return c;
}

CopyChoice engine_copy_choice() {
  Engine& e = engine();
  static const bool once = [&] {
    CopyChoice c = choose_copy_routine(std::getenv("SRDMA_COPY"));
    if (!c.warning.empty()) std::fprintf(stderr, "srdma: warning: %s\n", c.warning.c_str());
    e.prior = routine_fn(c.routine);
    // Not raw `rep movsb`: glibc's memcpy takes it itself for these sizes
    // where the CPU has ERMS or FSRM, with its own thresholds and alignment,
    // and in the engine it never beat memcpy here (docs/BENCHMARKS.md);
    // SRDMA_COPY=movsb still forces it.
    for (CopyRoutine r : kCopyRoutines)
      if (available(r) && r != CopyRoutine::kMovsb) e.candidates[e.n_candidates++] = r;
    const bool sample = c.deciding && e.n_candidates > 1;
    if (c.deciding && !sample)
      c.how = fmt::format("per machine: {}; {}, the only candidate here", features(), copy_routine_name(c.routine));
    if (!sample) c.deciding = false;
    {
      std::lock_guard lock(e.mu);
      e.choice = std::move(c);
    }
    g_copy.store(sample ? sampling_copy : e.prior, std::memory_order_release);
    return true;
  }();
  (void)once;
  std::lock_guard lock(e.mu);
  describe_outcome(e);
  return e.choice;
}

void prepare_engine_copy() { (void)engine_copy_choice(); }

void copy_bytes_large(void* dst, const void* src, std::size_t n) {
  if (n >= kChosenBelow) [[unlikely]]
    return std::memcpy(dst, src, n), void();
  // The routine gets whole 32-byte blocks, the rest goes once each
  // (copy_once_small): the vector loop then stores no byte twice, nor does
  // rep movsb; glibc's memcpy still overlaps some of its own stores.
  const std::size_t blocks = n & ~std::size_t{31};
  CopyFn fn = g_copy.load(std::memory_order_acquire);
  if (fn == nullptr) [[unlikely]]
    first_copy(dst, src, blocks);
  else
    fn(dst, src, blocks);
  copy_once_small(static_cast<unsigned char*>(dst) + blocks, static_cast<const unsigned char*>(src) + blocks,
                  n - blocks);
}

const char* copy_routine_for(std::size_t n) {
  if (n < 256) return "inline";
  if (n >= kChosenBelow) return "memcpy";
  return copy_routine_name(engine_copy_choice().routine);  // the prior while deciding
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
