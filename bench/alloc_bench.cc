// Allocator benchmarks: srdma's summary-tree allocators next to faithful
// C++ renditions of the kernel's linear-scan ones (mthca_alloc, mthca_buddy).
//
// Every benchmark measures one alloc + free pair on a prepared table. A pair
// leaves the table exactly as it found it (free merges back what alloc split;
// an index comes back to the same slot), so every iteration sees the same
// fragmentation. Ours and the baseline are driven through the identical
// operation sequence (same seed, lockstep, every result compared), so they sit
// in the identical state, and are measured in the same run.
//
// Scenarios:
//   Index allocator, 2^17 entries, mask 0xffffffff, 1 reserved:
//     empty        nothing allocated: the first free index is 1.
//     random_half  everything allocated, then a random half freed.
//     dense_low    everything allocated but the top 64 indices, with the
//                  search hint (`last`) at 1: mthca's find_next_zero_bit
//                  scans the whole table.
//   Buddy allocator, max_order 20 (2^20 segments), filled with allocations of
//   random order 0..4 until full, then:
//     random_half  a random half of the blocks freed (~50% occupancy,
//                  fragments everywhere: a scan finds a free block early).
//     dense_low    the lower half kept, 95% of the upper half's blocks freed
//                  at random (~52% occupancy): the first free block of every
//                  small order lies just past the middle of its bitmap.
//     nearly_full  the lower 7/8 kept, a random half of the top 1/8 freed
//                  (~94% occupancy): the first free block is 7/8 of the way.
//   Buddy churn, max_order 20: the steady state of a long-running table.
//     A long random sequence of allocations (orders 0..6, weighted towards
//     small ones) and frees of random live blocks holds occupancy at ~50%
//     (allocate while under half full, else free). With mthca's
//     lowest-address-first policy the low addresses pack and the free space
//     drifts upward. After the warm-up, one timed iteration replays a fixed
//     pre-generated batch of mixed operations (kChurnBatch allocations
//     interleaved with frees of blocks the batch allocated; every block is
//     freed by the end, so the table comes back to the identical state:
//     eager merging makes the free bitmaps a function of the allocated
//     set). Both allocators replay the same batch from the same state.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "alloc/buddy_allocator.h"
#include "alloc/index_allocator.h"

namespace {

using srdma::alloc::BuddyAllocator;
using srdma::alloc::IndexAllocator;

constexpr std::uint64_t kSeed = 0x5eed'0002;

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "alloc_bench: %s\n", msg.c_str());
  std::abort();
}

// ---------------------------------------------------------------------------
// Baselines: the kernel's allocators, linear bitmap scans, no misuse checks.

// find_first_bit / find_next_zero_bit of lib/find_bit.c: word-by-word scans.
std::size_t find_first_bit(const std::uint64_t* w, std::size_t nbits) {
  for (std::size_t i = 0; i * 64 < nbits; ++i)
    if (w[i] != 0) return std::min(i * 64 + static_cast<std::size_t>(std::countr_zero(w[i])), nbits);
  return nbits;
}
std::size_t find_next_zero_bit(const std::uint64_t* w, std::size_t nbits, std::size_t from) {
  if (from >= nbits) return nbits;
  std::size_t i = from / 64;
  std::uint64_t word = ~w[i] & (~std::uint64_t{0} << (from % 64));
  for (;;) {
    if (word != 0) return std::min(i * 64 + static_cast<std::size_t>(std::countr_zero(word)), nbits);
    if (++i * 64 >= nbits) return nbits;
    word = ~w[i];
  }
}
bool test_bit(const std::vector<std::uint64_t>& b, std::size_t i) { return (b[i / 64] >> (i % 64)) & 1; }
void set_bit(std::vector<std::uint64_t>& b, std::size_t i) { b[i / 64] |= std::uint64_t{1} << (i % 64); }
void clear_bit(std::vector<std::uint64_t>& b, std::size_t i) { b[i / 64] &= ~(std::uint64_t{1} << (i % 64)); }

// mthca_alloc / mthca_free (drivers/infiniband/hw/mthca/mthca_allocator.c).
class MthcaAlloc {
 public:
  MthcaAlloc(std::uint32_t num, std::uint32_t mask, std::uint32_t reserved)
      : max_(num), mask_(mask), table_((num + 63) / 64, 0) {
    for (std::uint32_t i = 0; i < reserved; ++i) set_bit(table_, i);
  }
  // ~0u on failure, as the kernel returns -1.
  std::uint32_t alloc() {
    std::size_t obj = find_next_zero_bit(table_.data(), max_, last_);
    if (obj >= max_) {
      top_ = (top_ + max_) & mask_;
      obj = find_next_zero_bit(table_.data(), max_, 0);
    }
    if (obj >= max_) return ~0u;
    set_bit(table_, obj);
    return static_cast<std::uint32_t>(obj) | top_;
  }
  void free(std::uint32_t obj) {
    obj &= max_ - 1;
    clear_bit(table_, obj);
    last_ = std::min(last_, obj);
    top_ = (top_ + max_) & mask_;
  }

 private:
  std::uint32_t last_ = 0, top_ = 0, max_, mask_;
  std::vector<std::uint64_t> table_;  // set bit = in use
};

// mthca_buddy_alloc / mthca_buddy_free (drivers/infiniband/hw/mthca/mthca_mr.c).
class MthcaBuddy {
 public:
  explicit MthcaBuddy(int max_order) : max_order_(max_order), bits_(max_order + 1), num_free_(max_order + 1, 0) {
    for (int o = 0; o <= max_order; ++o) bits_[o].assign(((std::size_t{1} << (max_order - o)) + 63) / 64, 0);
    set_bit(bits_[max_order], 0);
    num_free_[max_order] = 1;
  }

  // The first segment, or -1 when no block of `order` or above is free.
  std::int64_t alloc(int order) {
    for (int o = order; o <= max_order_; ++o) {
      if (num_free_[o] == 0) continue;
      std::size_t m = std::size_t{1} << (max_order_ - o);
      std::size_t seg = find_first_bit(bits_[o].data(), m);
      if (seg >= m) continue;
      clear_bit(bits_[o], seg);
      --num_free_[o];
      while (o > order) {
        --o;
        seg <<= 1;
        set_bit(bits_[o], seg ^ 1);
        ++num_free_[o];
      }
      return static_cast<std::int64_t>(seg << order);
    }
    return -1;
  }

  void free(std::uint32_t seg, int order) {
    seg >>= order;
    while (order < max_order_ && test_bit(bits_[order], seg ^ 1)) {
      clear_bit(bits_[order], seg ^ 1);
      --num_free_[order];
      seg >>= 1;
      ++order;
    }
    set_bit(bits_[order], seg);
    ++num_free_[order];
  }

  std::uint32_t num_free(int order) const { return num_free_[order]; }

  // How many bitmap words alloc(order) reads before it finds its block.
  std::size_t words_scanned(int order) const {
    std::size_t words = 0;
    for (int o = order; o <= max_order_; ++o) {
      if (num_free_[o] == 0) continue;
      std::size_t m = std::size_t{1} << (max_order_ - o);
      std::size_t seg = find_first_bit(bits_[o].data(), m);
      if (seg < m) return words + seg / 64 + 1;
      words += (m + 63) / 64;
    }
    return words;
  }

 private:
  int max_order_;
  std::vector<std::vector<std::uint64_t>> bits_;  // set = free block of that order
  std::vector<std::uint32_t> num_free_;
};

// ---------------------------------------------------------------------------
// Index allocator.

constexpr std::uint32_t kIndexNum = 1u << 17;
constexpr std::uint32_t kIndexMask = 0xffffffffu;
constexpr std::uint32_t kIndexReserved = 1;

enum class IndexFill { kEmpty, kRandomHalf, kDenseLow };

struct IndexPair {
  IndexAllocator ours;
  MthcaAlloc mthca;
};

std::uint32_t alloc_both(IndexPair& p) {
  auto a = p.ours.alloc();
  std::uint32_t b = p.mthca.alloc();
  if ((a ? *a : ~0u) != b)
    die("index allocators disagree: srdma " + (a ? std::to_string(*a) : a.error().to_string()) +
        ", mthca " + std::to_string(b));
  return b;
}

void free_both(IndexPair& p, std::uint32_t v) {
  if (auto r = p.ours.free(v); !r) die("IndexAllocator::free(" + std::to_string(v) + "): " + r.error().to_string());
  p.mthca.free(v);
}

std::unique_ptr<IndexPair> build_index(IndexFill fill) {
  auto ours = IndexAllocator::create(kIndexNum, kIndexMask, kIndexReserved);
  if (!ours) die("IndexAllocator::create: " + ours.error().to_string());
  auto p = std::make_unique<IndexPair>(IndexPair{std::move(*ours), MthcaAlloc(kIndexNum, kIndexMask, kIndexReserved)});
  if (fill == IndexFill::kEmpty) return p;

  std::vector<std::uint32_t> vals;
  for (std::uint32_t i = kIndexReserved; i < kIndexNum; ++i) vals.push_back(alloc_both(*p));
  std::mt19937_64 rng(kSeed);
  if (fill == IndexFill::kRandomHalf) {
    std::shuffle(vals.begin(), vals.end(), rng);
    vals.resize(vals.size() / 2);
  } else {
    // Bring the hint down to 1 (free and retake index 1; neither raises
    // `last`), then free the top 64 indices.
    free_both(*p, vals.front());
    vals.front() = alloc_both(*p);
    vals.erase(vals.begin(), vals.end() - 64);
  }
  for (std::uint32_t v : vals) free_both(*p, v);
  // Sanity: both hand out the same values from here on.
  std::array<std::uint32_t, 8> got{};
  for (auto& g : got) g = alloc_both(*p);
  for (auto it = got.rbegin(); it != got.rend(); ++it) free_both(*p, *it);
  return p;
}

IndexPair& index_state(IndexFill fill) {
  static std::array<std::unique_ptr<IndexPair>, 3> cache;
  auto& slot = cache[static_cast<int>(fill)];
  if (!slot) slot = build_index(fill);
  return *slot;
}

void BM_IndexAllocFree_srdma(benchmark::State& st, IndexFill fill) {
  IndexAllocator& a = index_state(fill).ours;
  for (auto _ : st) {
    auto v = a.alloc();
    if (!v) [[unlikely]] {
      st.SkipWithError("alloc failed");
      break;
    }
    benchmark::DoNotOptimize(*v);
    if (!a.free(*v)) [[unlikely]] {
      st.SkipWithError("free failed");
      break;
    }
  }
  st.SetItemsProcessed(st.iterations());
  st.counters["used_frac"] = double(a.used()) / (kIndexNum - kIndexReserved);
}

void BM_IndexAllocFree_mthca(benchmark::State& st, IndexFill fill) {
  MthcaAlloc& a = index_state(fill).mthca;
  for (auto _ : st) {
    std::uint32_t v = a.alloc();
    benchmark::DoNotOptimize(v);
    a.free(v);
  }
  st.SetItemsProcessed(st.iterations());
}

// ---------------------------------------------------------------------------
// Buddy allocator.

constexpr int kBuddyMaxOrder = 20;
constexpr int kFillMaxOrder = 4;

enum class Frag { kRandomHalf, kDenseLow, kNearlyFull };

struct BuddyPair {
  BuddyAllocator ours;
  MthcaBuddy mthca;
  double occupancy = 0;
};

std::int64_t buddy_alloc_both(BuddyPair& p, int order) {
  auto a = p.ours.alloc(order);
  std::int64_t b = p.mthca.alloc(order);
  if ((a ? std::int64_t{*a} : -1) != b)
    die("buddy allocators disagree at order " + std::to_string(order) + ": srdma " +
        (a ? std::to_string(*a) : a.error().to_string()) + ", mthca " + std::to_string(b));
  return b;
}

void buddy_free_both(BuddyPair& p, std::uint32_t seg, int order) {
  if (auto r = p.ours.free(seg, order); !r)
    die("BuddyAllocator::free(" + std::to_string(seg) + ", " + std::to_string(order) + "): " + r.error().to_string());
  p.mthca.free(seg, order);
}

std::unique_ptr<BuddyPair> build_buddy(Frag frag) {
  auto ours = BuddyAllocator::create(kBuddyMaxOrder);
  if (!ours) die("BuddyAllocator::create: " + ours.error().to_string());
  auto p = std::make_unique<BuddyPair>(BuddyPair{std::move(*ours), MthcaBuddy(kBuddyMaxOrder)});

  struct Block {
    std::uint32_t seg;
    int order;
  };
  std::vector<Block> live;
  std::mt19937_64 rng(kSeed);
  std::uniform_int_distribution<int> pick_order(0, kFillMaxOrder);
  // Fill until even an order-0 block does not fit (orders that no longer fit
  // are drawn again).
  for (;;) {
    int order = pick_order(rng);
    std::int64_t seg = buddy_alloc_both(*p, order);
    if (seg >= 0) {
      live.push_back({static_cast<std::uint32_t>(seg), order});
    } else if (order == 0) {
      break;
    }
  }

  const std::uint32_t n = std::uint32_t{1} << kBuddyMaxOrder;
  std::vector<Block> to_free;
  std::bernoulli_distribution free95(0.95), free50(0.5);
  switch (frag) {
    case Frag::kRandomHalf:
      std::shuffle(live.begin(), live.end(), rng);
      to_free.assign(live.begin(), live.begin() + static_cast<std::ptrdiff_t>(live.size() / 2));
      break;
    case Frag::kDenseLow:
      for (const Block& b : live)
        if (b.seg >= n / 2 && free95(rng)) to_free.push_back(b);
      std::shuffle(to_free.begin(), to_free.end(), rng);
      break;
    case Frag::kNearlyFull:
      for (const Block& b : live)
        if (b.seg >= n / 8 * 7 && free50(rng)) to_free.push_back(b);
      std::shuffle(to_free.begin(), to_free.end(), rng);
      break;
  }
  for (const Block& b : to_free) buddy_free_both(*p, b.seg, b.order);

  for (int o = 0; o <= kBuddyMaxOrder; ++o)
    if (p->ours.num_free(o) != p->mthca.num_free(o))
      die("buddy allocators disagree on num_free(" + std::to_string(o) + ")");
  p->occupancy = 1.0 - double(p->ours.free_segments()) / n;

  // Sanity: the first allocations after fragmenting land on the same segments.
  std::vector<Block> probe;
  for (int order : {0, 3, 6, 0, 1, 2, 3, 4, 5, 6, 0, 0}) {
    std::int64_t seg = buddy_alloc_both(*p, order);
    if (seg < 0) die("probe allocation of order " + std::to_string(order) + " failed");
    probe.push_back({static_cast<std::uint32_t>(seg), order});
  }
  for (auto it = probe.rbegin(); it != probe.rend(); ++it) buddy_free_both(*p, it->seg, it->order);
  return p;
}

BuddyPair& buddy_state(Frag frag) {
  static std::array<std::unique_ptr<BuddyPair>, 3> cache;
  auto& slot = cache[static_cast<int>(frag)];
  if (!slot) slot = build_buddy(frag);
  return *slot;
}

void buddy_counters(benchmark::State& st, BuddyPair& p, int order) {
  // Where the block alloc(order) takes lies, and how far mthca scans for it.
  std::int64_t seg = buddy_alloc_both(p, order);
  buddy_free_both(p, static_cast<std::uint32_t>(seg), order);
  st.counters["seg_frac"] = double(seg) / double(std::uint32_t{1} << kBuddyMaxOrder);
  st.counters["scan_words"] = double(p.mthca.words_scanned(order));
  st.counters["occupancy"] = p.occupancy;
}

void BM_Buddy_srdma(benchmark::State& st, Frag frag, int order) {
  BuddyPair& p = buddy_state(frag);
  BuddyAllocator& b = p.ours;
  for (auto _ : st) {
    auto seg = b.alloc(order);
    if (!seg) [[unlikely]] {
      st.SkipWithError("alloc failed");
      break;
    }
    benchmark::DoNotOptimize(*seg);
    if (!b.free(*seg, order)) [[unlikely]] {
      st.SkipWithError("free failed");
      break;
    }
  }
  st.SetItemsProcessed(st.iterations());
  buddy_counters(st, p, order);
}

void BM_Buddy_mthca(benchmark::State& st, Frag frag, int order) {
  BuddyPair& p = buddy_state(frag);
  MthcaBuddy& b = p.mthca;
  for (auto _ : st) {
    std::int64_t seg = b.alloc(order);
    benchmark::DoNotOptimize(seg);
    b.free(static_cast<std::uint32_t>(seg), order);
  }
  st.SetItemsProcessed(st.iterations());
  buddy_counters(st, p, order);
}

// ---------------------------------------------------------------------------
// Buddy churn: steady state under random allocations and frees.

constexpr int kChurnMaxOrder = 6;
constexpr std::array<int, kChurnMaxOrder + 1> kChurnWeights = {40, 20, 15, 10, 7, 5, 3};
constexpr std::uint64_t kChurnWarmupOps = 3'000'000;  // after the first fill to 50%
constexpr int kChurnBatch = 256;                      // allocations per timed batch

struct ChurnOp {
  bool alloc;
  std::uint8_t order;
  std::uint16_t slot;  // which of the batch's allocations
};

struct ChurnState {
  std::unique_ptr<BuddyPair> pair;
  std::vector<ChurnOp> batch;
  std::array<std::uint32_t, kBuddyMaxOrder + 1> num_free{};
  std::uint64_t warmup_ops = 0;
};

std::unique_ptr<ChurnState> build_churn() {
  auto ours = BuddyAllocator::create(kBuddyMaxOrder);
  if (!ours) die("BuddyAllocator::create: " + ours.error().to_string());
  auto st = std::make_unique<ChurnState>();
  st->pair = std::make_unique<BuddyPair>(BuddyPair{std::move(*ours), MthcaBuddy(kBuddyMaxOrder)});
  BuddyPair& p = *st->pair;

  struct Block {
    std::uint32_t seg;
    int order;
  };
  std::vector<Block> live;
  std::mt19937_64 rng(kSeed + 1);
  std::discrete_distribution<int> pick_order(kChurnWeights.begin(), kChurnWeights.end());
  const std::uint64_t n = std::uint64_t{1} << kBuddyMaxOrder;
  std::uint64_t used = 0;
  bool filled = false;
  std::uint64_t ops = 0;
  // Lockstep: every result of ours is compared with mthca's.
  while (!filled || ops < kChurnWarmupOps) {
    if (used < n / 2) {
      int order = pick_order(rng);
      std::int64_t seg = buddy_alloc_both(p, order);
      if (seg < 0) die("churn: allocation failed at occupancy " + std::to_string(double(used) / n));
      live.push_back({static_cast<std::uint32_t>(seg), order});
      used += std::uint64_t{1} << order;
    } else {
      filled = true;
      std::size_t i = std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng);
      buddy_free_both(p, live[i].seg, live[i].order);
      used -= std::uint64_t{1} << live[i].order;
      live[i] = live.back();
      live.pop_back();
    }
    if (filled) ++ops;
  }
  st->warmup_ops = ops;
  p.occupancy = 1.0 - double(p.ours.free_segments()) / n;
  for (int o = 0; o <= kBuddyMaxOrder; ++o) {
    if (p.ours.num_free(o) != p.mthca.num_free(o)) die("churn: num_free disagrees");
    st->num_free[o] = p.ours.num_free(o);
  }

  // The timed batch: allocations interleaved with frees of the batch's own
  // blocks, all freed by the end.
  std::bernoulli_distribution coin(0.5);
  std::vector<std::uint16_t> batch_live;
  int allocs_left = kChurnBatch;
  std::uint16_t next_slot = 0;
  while (allocs_left > 0 || !batch_live.empty()) {
    if (allocs_left > 0 && (batch_live.empty() || coin(rng))) {
      st->batch.push_back({true, static_cast<std::uint8_t>(pick_order(rng)), next_slot});
      batch_live.push_back(next_slot++);
      --allocs_left;
    } else {
      std::size_t i = std::uniform_int_distribution<std::size_t>(0, batch_live.size() - 1)(rng);
      st->batch.push_back({false, 0, batch_live[i]});
      batch_live[i] = batch_live.back();
      batch_live.pop_back();
    }
  }
  // Sanity: one replay in lockstep.
  std::array<std::uint32_t, kChurnBatch> segs{};
  std::array<int, kChurnBatch> orders{};
  for (const ChurnOp& op : st->batch) {
    if (op.alloc) {
      std::int64_t seg = buddy_alloc_both(p, op.order);
      if (seg < 0) die("churn batch: allocation failed");
      segs[op.slot] = static_cast<std::uint32_t>(seg);
      orders[op.slot] = op.order;
    } else {
      buddy_free_both(p, segs[op.slot], orders[op.slot]);
    }
  }
  for (int o = 0; o <= kBuddyMaxOrder; ++o)
    if (p.ours.num_free(o) != st->num_free[o] || p.mthca.num_free(o) != st->num_free[o])
      die("churn batch: the state did not come back");
  return st;
}

ChurnState& churn_state() {
  static std::unique_ptr<ChurnState> st = build_churn();
  return *st;
}

void churn_counters(benchmark::State& st, ChurnState& c) {
  BuddyPair& p = *c.pair;
  for (int o = 0; o <= kBuddyMaxOrder; ++o)
    if (p.ours.num_free(o) != c.num_free[o] || p.mthca.num_free(o) != c.num_free[o])
      st.SkipWithError("the batch did not restore the state");
  const double ops = double(c.batch.size());
  st.SetItemsProcessed(st.iterations() * static_cast<std::int64_t>(c.batch.size()));
  st.counters["per_op"] = benchmark::Counter(ops, benchmark::Counter::kIsIterationInvariantRate |
                                                      benchmark::Counter::kInvert);
  st.counters["occupancy"] = p.occupancy;
  st.counters["warmup_ops"] = double(c.warmup_ops);
  // How far the linear scan goes for a fresh block of order 0, 3, 6 in this
  // state, and where the order-0 block lies.
  st.counters["scan_words_o0"] = double(p.mthca.words_scanned(0));
  st.counters["scan_words_o3"] = double(p.mthca.words_scanned(3));
  st.counters["scan_words_o6"] = double(p.mthca.words_scanned(6));
  auto seg = p.ours.alloc(0);
  if (seg) {
    st.counters["seg_frac_o0"] = double(*seg) / double(std::uint32_t{1} << kBuddyMaxOrder);
    (void)p.ours.free(*seg, 0);
  }
}

void BM_Churn_srdma(benchmark::State& st) {
  ChurnState& c = churn_state();
  BuddyAllocator& b = c.pair->ours;
  std::array<std::uint32_t, kChurnBatch> segs{};
  std::array<int, kChurnBatch> orders{};
  for (auto _ : st) {
    for (const ChurnOp& op : c.batch) {
      if (op.alloc) {
        auto seg = b.alloc(op.order);
        if (!seg) [[unlikely]] die("churn: alloc failed");
        segs[op.slot] = *seg;
        orders[op.slot] = op.order;
      } else if (!b.free(segs[op.slot], orders[op.slot])) [[unlikely]] {
        die("churn: free failed");
      }
    }
    benchmark::ClobberMemory();
  }
  churn_counters(st, c);
}

void BM_Churn_mthca(benchmark::State& st) {
  ChurnState& c = churn_state();
  MthcaBuddy& b = c.pair->mthca;
  std::array<std::uint32_t, kChurnBatch> segs{};
  std::array<int, kChurnBatch> orders{};
  for (auto _ : st) {
    for (const ChurnOp& op : c.batch) {
      if (op.alloc) {
        std::int64_t seg = b.alloc(op.order);
        if (seg < 0) [[unlikely]] die("churn: mthca alloc failed");
        segs[op.slot] = static_cast<std::uint32_t>(seg);
        orders[op.slot] = op.order;
      } else {
        b.free(segs[op.slot], orders[op.slot]);
      }
    }
    benchmark::ClobberMemory();
  }
  churn_counters(st, c);
}

// Registered side by side: each srdma benchmark next to its baseline.
const bool registered = [] {
  const std::pair<const char*, IndexFill> index_fills[] = {
      {"empty", IndexFill::kEmpty}, {"random_half", IndexFill::kRandomHalf}, {"dense_low", IndexFill::kDenseLow}};
  for (auto [name, fill] : index_fills) {
    benchmark::RegisterBenchmark((std::string("IndexAllocFree/") + name + "/srdma").c_str(),
                                 BM_IndexAllocFree_srdma, fill);
    benchmark::RegisterBenchmark((std::string("IndexAllocFree/") + name + "/mthca_linear").c_str(),
                                 BM_IndexAllocFree_mthca, fill);
  }
  const std::pair<const char*, Frag> frags[] = {
      {"random_half", Frag::kRandomHalf}, {"dense_low", Frag::kDenseLow}, {"nearly_full", Frag::kNearlyFull}};
  for (auto [name, frag] : frags) {
    for (int order : {0, 3, 6}) {
      std::string base = std::string("BuddyAllocFree/") + name + "/order:" + std::to_string(order);
      benchmark::RegisterBenchmark((base + "/srdma").c_str(), BM_Buddy_srdma, frag, order);
      benchmark::RegisterBenchmark((base + "/mthca_linear").c_str(), BM_Buddy_mthca, frag, order);
    }
  }
  benchmark::RegisterBenchmark("BuddyChurn/steady_half/srdma", BM_Churn_srdma);
  benchmark::RegisterBenchmark("BuddyChurn/steady_half/mthca_linear", BM_Churn_mthca);
  return true;
}();

}  // namespace
