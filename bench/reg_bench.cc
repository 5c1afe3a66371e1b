// Registration costs through the public API: a full memory registration
// against an FMR remap and the FMR pool, for 1, 8, 32 and 256 pages of 4 KiB.
// Every benchmark reports `per_reg`: the time of one registration (one
// map + its share of the unmap).
//
//   RegMr/pages:N         ProtectionDomain::reg_mr + dereg of N pages of a
//                         page-aligned buffer (includes reg_mr's
//                         /proc/self/maps check, as every reg_mr pays it).
//   FmrMapUnmap/pages:N   map_phys of 32 FMRs, then ONE unmap_fmrs of the 32
//                         (one sync); per_reg = iteration / 32.
//   PoolHit/pages:N       FmrPool map_phys + unmap of the same pages at the
//                         same iova: a cache hit, no device operation (lazy
//                         unmap: the key stays valid).
//   PoolMiss/pages:N      a new iova every time: a remap on each map; pool of
//                         64 FMRs, max_remaps 32, dirty_watermark 16, so the
//                         worker's batch releases (one sync each) run in the
//                         background; `eagain` counts maps that found no free
//                         FMR and retried.
//   PoolSyncUnmap/pages:N synchronous_unmap: map (a miss: nothing survives an
//                         unmap) + an unmap that syncs before returning.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "srdma/access.h"
#include "srdma/device.h"
#include "srdma/fmr.h"
#include "srdma/fmr_pool.h"
#include "srdma/pd.h"

namespace {

constexpr std::size_t kPage = 4096;
constexpr std::size_t kBufPages = 256;
constexpr int kBatch = 32;  // FMRs per unmap_fmrs
constexpr std::uint32_t kAccess = srdma::ACCESS_LOCAL_WRITE | srdma::ACCESS_REMOTE_WRITE | srdma::ACCESS_REMOTE_READ;

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "reg_bench: %s\n", msg.c_str());
  std::abort();
}

struct Env {
  srdma::Device dev;
  srdma::ProtectionDomain pd;
  std::byte* buf = nullptr;  // kBufPages pages, touched once
  std::vector<std::uint64_t> pages;
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
    x->buf = static_cast<std::byte*>(std::aligned_alloc(kPage, kBufPages * kPage));
    for (std::size_t i = 0; i < kBufPages; ++i) {
      x->buf[i * kPage] = std::byte{1};
      x->pages.push_back(reinterpret_cast<std::uint64_t>(x->buf) + i * kPage);
    }
    return x;
  }();
  return *e;
}

void per_reg(benchmark::State& state, double regs_per_iteration) {
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * regs_per_iteration));
  state.counters["per_reg"] = benchmark::Counter(
      regs_per_iteration, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void RegMr(benchmark::State& state) {
  Env& e = env();
  const auto n = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    auto mr = e.pd.reg_mr(e.buf, n * kPage, kAccess);
    if (!mr) die("reg_mr: " + mr.error().to_string());
    if (auto r = mr->dereg(); !r) die("dereg: " + r.error().to_string());
  }
  per_reg(state, 1);
}

void FmrMapUnmap(benchmark::State& state) {
  Env& e = env();
  const auto n = static_cast<std::uint32_t>(state.range(0));
  const std::uint32_t max_maps = e.dev.query().max_map_per_fmr;
  std::vector<srdma::Fmr> fmrs;
  std::vector<srdma::Fmr*> list;
  for (int i = 0; i < kBatch; ++i) {
    auto f = e.pd.alloc_fmr(kAccess, srdma::FmrAttr{n, max_maps, 12});
    if (!f) die("alloc_fmr: " + f.error().to_string());
    fmrs.push_back(std::move(*f));
  }
  for (auto& f : fmrs) list.push_back(&f);
  const std::span<const std::uint64_t> pages(e.pages.data(), n);
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i)
      if (auto r = fmrs[i].map_phys(pages, std::uint64_t(i + 1) << 32); !r) die("map_phys: " + r.error().to_string());
    if (auto r = srdma::unmap_fmrs(list); !r) die("unmap_fmrs: " + r.error().to_string());
  }
  per_reg(state, kBatch);
}

std::unique_ptr<srdma::FmrPool> make_pool(std::uint32_t pages, srdma::FmrPoolParams p) {
  p.max_pages_per_fmr = pages;
  p.access = kAccess;
  auto pool = srdma::FmrPool::create(env().pd, std::move(p));
  if (!pool) die("FmrPool::create: " + pool.error().to_string());
  return std::move(*pool);
}

void PoolHit(benchmark::State& state) {
  Env& e = env();
  const auto n = static_cast<std::uint32_t>(state.range(0));
  auto pool = make_pool(n, {.pool_size = 32, .dirty_watermark = 8});
  const std::span<const std::uint64_t> pages(e.pages.data(), n);
  for (auto _ : state) {
    auto f = pool->map_phys(pages, 1ull << 32);
    if (!f) die("pool map_phys: " + f.error().to_string());
    if (auto r = pool->unmap(*f); !r) die("pool unmap: " + r.error().to_string());
  }
  per_reg(state, 1);
  const auto s = pool->stats();
  state.counters["hit_ratio"] = double(s.cache_hits) / double(s.maps);
}

void PoolMiss(benchmark::State& state) {
  Env& e = env();
  const auto n = static_cast<std::uint32_t>(state.range(0));
  auto pool = make_pool(n, {.pool_size = 64, .dirty_watermark = 16, .max_remaps = 32});
  const std::span<const std::uint64_t> pages(e.pages.data(), n);
  std::uint64_t iova = 0, eagain = 0;
  for (auto _ : state) {
    iova += std::uint64_t{1} << 32;
    auto f = pool->map_phys(pages, iova);
    while (!f && f.error().code == EAGAIN) {  // the worker's batch is on its way
      ++eagain;
      std::this_thread::yield();
      f = pool->map_phys(pages, iova);
    }
    if (!f) die("pool map_phys: " + f.error().to_string());
    if (auto r = pool->unmap(*f); !r) die("pool unmap: " + r.error().to_string());
  }
  per_reg(state, 1);
  const auto s = pool->stats();
  state.counters["eagain"] = double(eagain);
  state.counters["flushes"] = double(s.flushes);
  state.counters["fmrs_per_flush"] = s.fmrs_per_flush();
}

void PoolSyncUnmap(benchmark::State& state) {
  Env& e = env();
  const auto n = static_cast<std::uint32_t>(state.range(0));
  auto pool = make_pool(n, {.pool_size = 32, .dirty_watermark = 8, .synchronous_unmap = true});
  const std::span<const std::uint64_t> pages(e.pages.data(), n);
  for (auto _ : state) {
    auto f = pool->map_phys(pages, 1ull << 32);
    if (!f) die("pool map_phys: " + f.error().to_string());
    if (auto r = pool->unmap(*f); !r) die("pool unmap: " + r.error().to_string());
  }
  per_reg(state, 1);
}

#define SIZES ArgName("pages")->Arg(1)->Arg(8)->Arg(32)->Arg(256)
BENCHMARK(RegMr)->SIZES;
BENCHMARK(FmrMapUnmap)->SIZES;
BENCHMARK(PoolHit)->SIZES;
BENCHMARK(PoolMiss)->SIZES;
BENCHMARK(PoolSyncUnmap)->SIZES;

}  // namespace
