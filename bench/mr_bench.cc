// Memory-region benchmarks through the public API: registration and the
// device's translation (the lookup every data-path access makes).
//
//   RegDereg/pages:N        reg_mr + dereg of N 4 KiB pages of a buffer mapped
//                           once, outside the timed loop.
//   CheckMapping/pages:N    the /proc/self/maps check reg_mr runs first (part
//                           of RegDereg, measured alone to attribute it).
//   HcaRegDereg/pages:N     the device's share of RegDereg alone
//                           (SoftHca::reg_mr + dereg_mr: MPT key, MTT buddy,
//                           MTT writes, MPT publish, cache invalidate).
//   Translate/hit/bytes:N   translate() of one key again and again: every
//                           lookup hits the TPT cache. The result's pieces
//                           are walked (their lengths summed).
//   Translate/miss/bytes:N  512 regions (twice the cache's 256 direct-mapped
//                           lines) cycled in order: regions i and i+256 share
//                           a line, so every lookup misses and walks the MPT.
//   Translate/sync_then/bytes:N  sync_tpt() then translate() of one key: a
//                           miss, plus the cost of clearing all 256 lines.
//   SyncTpt                 sync_tpt() alone.
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/memory_map.h"
#include "hca/soft_hca.h"
#include "srdma/access.h"
#include "srdma/device.h"
#include "srdma/mr.h"
#include "srdma/pd.h"

namespace {

constexpr std::size_t kPage = 4096;
constexpr std::size_t kBufPages = 256;
constexpr int kMissRegions = 512;  // TptCache::kLines is 256
constexpr std::uint64_t kRegionBytes = 64 * 1024;

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "mr_bench: %s\n", msg.c_str());
  std::abort();
}

struct Env {
  srdma::Device dev;
  srdma::ProtectionDomain pd;
  std::byte* buf = nullptr;  // kBufPages pages, mapped and touched once
};

Env& env() {
  static Env* e = [] {
    auto* x = new Env;  // never freed: outlives every benchmark
    auto dev = srdma::Device::open(srdma::Profile{});
    if (!dev) die("Device::open: " + dev.error().to_string());
    x->dev = std::move(*dev);
    auto pd = x->dev.alloc_pd();
    if (!pd) die("alloc_pd: " + pd.error().to_string());
    x->pd = std::move(*pd);
    void* p = ::mmap(nullptr, kBufPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) die("mmap failed");
    std::memset(p, 0xab, kBufPages * kPage);
    x->buf = static_cast<std::byte*>(p);
    return x;
  }();
  return *e;
}

void BM_RegDereg(benchmark::State& st) {
  Env& e = env();
  const std::size_t len = static_cast<std::size_t>(st.range(0)) * kPage;
  for (auto _ : st) {
    auto mr = e.pd.reg_mr(e.buf, len, srdma::ACCESS_LOCAL_WRITE);
    if (!mr) [[unlikely]] {
      st.SkipWithError(("reg_mr: " + mr.error().to_string()).c_str());
      break;
    }
    benchmark::DoNotOptimize(mr->lkey());
    if (auto r = mr->dereg(); !r) [[unlikely]] {
      st.SkipWithError(("dereg: " + r.error().to_string()).c_str());
      break;
    }
  }
  st.SetItemsProcessed(st.iterations());
}

void BM_CheckMapping(benchmark::State& st) {
  Env& e = env();
  const std::size_t len = static_cast<std::size_t>(st.range(0)) * kPage;
  for (auto _ : st) {
    auto r = srdma::core::check_mapping(reinterpret_cast<std::uintptr_t>(e.buf), len, true);
    if (!r) [[unlikely]] {
      st.SkipWithError(r.error().to_string().c_str());
      break;
    }
  }
  st.SetItemsProcessed(st.iterations());
}

void BM_HcaRegDereg(benchmark::State& st) {
  Env& e = env();
  auto profile = srdma::validate_profile(srdma::Profile{});
  if (!profile) die("validate_profile: " + profile.error().to_string());
  auto hca = srdma::hca::SoftHca::open(*profile);
  if (!hca) die("SoftHca::open: " + hca.error().to_string());
  auto pdn = (*hca)->tables().alloc_pd();
  if (!pdn) die("alloc_pd: " + pdn.error().to_string());
  const std::size_t npages = static_cast<std::size_t>(st.range(0));
  const auto base = reinterpret_cast<std::uint64_t>(e.buf);
  std::vector<std::uint64_t> pages(npages);
  for (std::size_t i = 0; i < npages; ++i) pages[i] = base + i * kPage;
  const srdma::hca::MrAttr attr{*pdn, base, npages * kPage, srdma::ACCESS_LOCAL_WRITE, 12};
  for (auto _ : st) {
    auto key = (*hca)->tables().reg_mr(attr, pages);
    if (!key) [[unlikely]] {
      st.SkipWithError(("reg_mr: " + key.error().to_string()).c_str());
      break;
    }
    if (auto r = (*hca)->tables().dereg_mr(*key); !r) [[unlikely]] {
      st.SkipWithError(("dereg_mr: " + r.error().to_string()).c_str());
      break;
    }
  }
  st.SetItemsProcessed(st.iterations());
}

// kMissRegions registrations of the first 64 KiB of the buffer.
const std::vector<srdma::MemoryRegion>& regions() {
  static std::vector<srdma::MemoryRegion>* v = [] {
    Env& e = env();
    auto* out = new std::vector<srdma::MemoryRegion>;
    for (int i = 0; i < kMissRegions; ++i) {
      auto mr = e.pd.reg_mr(e.buf, kRegionBytes, srdma::ACCESS_LOCAL_WRITE | srdma::ACCESS_REMOTE_READ);
      if (!mr) die("reg_mr: " + mr.error().to_string());
      out->push_back(std::move(*mr));
    }
    return out;
  }();
  return *v;
}

std::uint64_t walk(const srdma::Translation& t) {
  std::uint64_t sum = 0;
  t.for_each_piece([&](srdma::MemPiece p) { sum += p.length; });
  return sum;
}

void tpt_counters(benchmark::State& st, const srdma::TptStats& before, const srdma::TptStats& after) {
  double lookups = double(after.hits - before.hits + after.misses - before.misses);
  if (lookups > 0) st.counters["miss_rate"] = double(after.misses - before.misses) / lookups;
}

enum class Mode { kHit, kMiss, kSyncThen };

void BM_Translate(benchmark::State& st, Mode mode) {
  Env& e = env();
  const auto& mrs = regions();
  const std::uint64_t len = static_cast<std::uint64_t>(st.range(0));
  const std::uint64_t iova = reinterpret_cast<std::uint64_t>(e.buf);
  const std::uint32_t pdn = e.pd.pd_num();
  std::vector<std::uint32_t> keys;
  for (const auto& mr : mrs) keys.push_back(mr.lkey());
  // Only thread 0 reads the counters: they are device-wide.
  srdma::TptStats before;
  if (st.thread_index() == 0) before = e.dev.tpt_stats();
  std::size_t i = 0;
  for (auto _ : st) {
    std::uint32_t key = keys[0];
    if (mode == Mode::kMiss) {
      key = keys[i];
      if (++i == keys.size()) i = 0;
    } else if (mode == Mode::kSyncThen) {
      e.dev.sync_tpt();
    }
    auto t = e.dev.translate(key, iova, len, srdma::ACCESS_LOCAL_WRITE, pdn);
    if (!t) [[unlikely]] {
      st.SkipWithError(std::string(srdma::refusal_name(t.error())).c_str());
      break;
    }
    benchmark::DoNotOptimize(walk(*t));
  }
  st.SetItemsProcessed(st.iterations());
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * len));
  if (st.thread_index() == 0) tpt_counters(st, before, e.dev.tpt_stats());
}

void BM_SyncTpt(benchmark::State& st) {
  Env& e = env();
  for (auto _ : st) e.dev.sync_tpt();
  st.SetItemsProcessed(st.iterations());
}

BENCHMARK(BM_RegDereg)->Name("RegDereg")->ArgName("pages")->Arg(1)->Arg(32)->Arg(256);
BENCHMARK(BM_CheckMapping)->Name("CheckMapping")->ArgName("pages")->Arg(1)->Arg(256);
BENCHMARK(BM_HcaRegDereg)->Name("HcaRegDereg")->ArgName("pages")->Arg(1)->Arg(32)->Arg(256);
BENCHMARK_CAPTURE(BM_Translate, hit, Mode::kHit)->Name("Translate/hit")->ArgName("bytes")->Arg(64)->Arg(64 << 10);
BENCHMARK_CAPTURE(BM_Translate, miss, Mode::kMiss)->Name("Translate/miss")->ArgName("bytes")->Arg(64)->Arg(64 << 10);
BENCHMARK_CAPTURE(BM_Translate, sync_then, Mode::kSyncThen)
    ->Name("Translate/sync_then")
    ->ArgName("bytes")
    ->Arg(64)
    ->Arg(64 << 10);
// Two threads translating at once (lock-free path; shows shared-line contention).
BENCHMARK_CAPTURE(BM_Translate, hit_mt, Mode::kHit)
    ->Name("Translate/hit")
    ->ArgName("bytes")
    ->Arg(64)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Translate, miss_mt, Mode::kMiss)
    ->Name("Translate/miss")
    ->ArgName("bytes")
    ->Arg(64)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK(BM_SyncTpt)->Name("SyncTpt");

}  // namespace
