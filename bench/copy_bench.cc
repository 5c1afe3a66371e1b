// Each copy routine the engine can choose (hca/copy.h), whatever it chose,
// at the sizes of the perf runs: a tight loop of back-to-back copies
// ("Loop") and one copy at a time between 8 KiB of other memory traffic
// ("Between"), the engine's pattern as near as a loop gets. Neither
// decides the engine's routine (it times its own copies; copy.cc says why):
// this shows how far the two patterns disagree on a machine.
#include <benchmark/benchmark.h>
#include <signal.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "hca/copy.h"

namespace srdma {
namespace {

struct Buffers {
  explicit Buffers(std::size_t n)
      : src(static_cast<unsigned char*>(std::aligned_alloc(4096, round(n)))),
        dst(static_cast<unsigned char*>(std::aligned_alloc(4096, round(n)))),
        other(static_cast<unsigned char*>(std::aligned_alloc(4096, 8192))) {
    std::memset(src, 1, round(n));
    std::memset(dst, 0, round(n));
    std::memset(other, 0, 8192);
  }
  ~Buffers() {
    std::free(src);
    std::free(dst);
    std::free(other);
  }
  static std::size_t round(std::size_t n) { return (n + 4095) / 4096 * 4096; }
  unsigned char *src, *dst, *other;
};

void BM_Loop(benchmark::State& state, hca::CopyRoutine r) {
  const auto n = static_cast<std::size_t>(state.range(0));
  Buffers b(n);
  for (auto _ : state) {
    hca::copy_with(r, b.dst, b.src, n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n));
  state.SetLabel(hca::copy_routine_name(r));
}

void BM_Between(benchmark::State& state, hca::CopyRoutine r) {
  const auto n = static_cast<std::size_t>(state.range(0));
  Buffers b(n);
  for (auto _ : state) {  // only the copy is timed (manual time)
    for (std::size_t j = 0; j < 8192; j += 64) b.other[j] = static_cast<unsigned char>(b.other[j] + 1);
    benchmark::ClobberMemory();
    const auto t0 = std::chrono::steady_clock::now();
    hca::copy_with(r, b.dst, b.src, n);
    benchmark::ClobberMemory();
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n));
  state.SetLabel(hca::copy_routine_name(r));
}

#define SRDMA_COPY_BENCH(name, routine)                                                      \
  BENCHMARK_CAPTURE(BM_Loop, name, hca::CopyRoutine::routine)->Arg(256)->Arg(4096)->Arg(65536)->Arg(1 << 20); \
  BENCHMARK_CAPTURE(BM_Between, name, hca::CopyRoutine::routine)->Arg(4096)->Arg(65536)->UseManualTime()

SRDMA_COPY_BENCH(vector_loop, kVectorLoop);
SRDMA_COPY_BENCH(movsb, kMovsb);
SRDMA_COPY_BENCH(memcpy, kMemcpy);

// Cross-memory attach, the one-copy route between processes that the
// same-host path could take instead of its ring's two copies: a
// process_vm_readv of n bytes from a forked child's memory (the pages
// resident, as a registered MR's are), 16 buffers round robin. Against
// BM_Loop/memcpy at the same n, it says whether one kernel copy beats two
// user ones on this machine (docs/BENCHMARKS.md: it did not).
void BM_ProcessVmReadv(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  Buffers b(16 * n);
  const pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  if (child < 0) {
    state.SkipWithError("fork failed");
    return;
  }
  std::size_t i = 0;
  for (auto _ : state) {
    const iovec local{b.dst + (i % 16) * n, n}, remote{b.src + (i % 16) * n, n};
    ++i;
    if (::process_vm_readv(child, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(n)) {
      state.SkipWithError("process_vm_readv failed (ptrace permission?)");
      break;
    }
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n));
}
BENCHMARK(BM_ProcessVmReadv)->Arg(4096)->Arg(65536)->Arg(1 << 20);

}  // namespace
}  // namespace srdma
