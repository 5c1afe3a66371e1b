// FMRs: every alloc/map/unmap/dealloc rule and error, the key counter and
// its period, lazy-cache invalidation by unmap, the FMR MTT region, a
// concurrent translator that must never see a torn mapping, and the
// security property that an unmapped rkey is dead on the wire.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "hca/keys.h"
#include "hca/soft_hca.h"
#include "connected_pair.h"
#include "srdma/access.h"
#include "srdma/device.h"
#include "srdma/fmr.h"
#include "test_profile.h"
#include "wait.h"

namespace srdma {
namespace {

constexpr std::uint32_t kRw = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;

// Page-aligned memory that frees itself.
struct Pages {
  explicit Pages(std::size_t count)
      : n(count), p(static_cast<std::uint8_t*>(std::aligned_alloc(4096, count * 4096))) {
    std::memset(p, 0, count * 4096);
  }
  ~Pages() { std::free(p); }
  std::uint64_t page(std::size_t i) const { return reinterpret_cast<std::uint64_t>(p) + i * 4096; }
  std::vector<std::uint64_t> list(std::size_t first, std::size_t count) const {
    std::vector<std::uint64_t> v;
    for (std::size_t i = 0; i < count; ++i) v.push_back(page(first + i));
    return v;
  }
  std::size_t n;
  std::uint8_t* p;
};

class FmrTest : public ::testing::Test {
 protected:
  Device dev_ = Device::open(test::small_profile()).value();
  ProtectionDomain pd_ = dev_.alloc_pd().value();
  Pages mem_{16};
  static constexpr std::uint64_t kIova = 0x7f0000000000;

  Fmr alloc(std::uint32_t max_pages = 8, std::uint32_t max_maps = 16) {
    return pd_.alloc_fmr(kRw, FmrAttr{max_pages, max_maps, 12}).value();
  }
  std::expected<Translation, Refusal> tr(std::uint32_t key, std::uint64_t iova, std::uint64_t len,
                                         std::uint32_t access = 0) {
    return dev_.translate(key, iova, len, access, pd_.pd_num());
  }
};

int code(const Result<void>& r) { return r ? 0 : r.error().code; }
template <class T>
int code(const Result<T>& r) {
  if (r) return 0;
  EXPECT_FALSE(r.error().reason.empty()) << "every error carries a reason";
  return r.error().code;
}

TEST_F(FmrTest, AllocRejectsBadAttributes) {
  const std::uint32_t max_maps = dev_.query().max_map_per_fmr;
  EXPECT_EQ(max_maps, (1u << (32 - 10)) - 1) << "2^10 MPTs: a 22-bit key counter";
  EXPECT_EQ(code(pd_.alloc_fmr(kRw, {8, 1, 11})), EINVAL) << "page_shift below 12";
  EXPECT_EQ(code(pd_.alloc_fmr(kRw, {8, 1, 32})), EINVAL) << "page_shift 32";
  EXPECT_EQ(code(pd_.alloc_fmr(kRw, {8, 1, 31})), 0);
  EXPECT_EQ(code(pd_.alloc_fmr(kRw, {0, 1, 12})), EINVAL) << "no pages";
  EXPECT_EQ(code(pd_.alloc_fmr(kRw, {513, 1, 12})), EINVAL) << "513 MTTs do not fit one 4 KiB page";
  EXPECT_EQ(code(pd_.alloc_fmr(kRw, {512, 1, 12})), 0);
  EXPECT_EQ(code(pd_.alloc_fmr(kRw, {8, 0, 12})), EINVAL) << "max_maps 0";
  EXPECT_EQ(code(pd_.alloc_fmr(kRw, {8, max_maps + 1, 12})), EINVAL) << "beyond max_map_per_fmr";
  EXPECT_EQ(code(pd_.alloc_fmr(kRw, {8, max_maps, 12})), 0);
  EXPECT_EQ(code(pd_.alloc_fmr(1u << 7, {8, 1, 12})), EINVAL) << "unknown access bit";
  EXPECT_EQ(code(pd_.alloc_fmr(ACCESS_REMOTE_WRITE, {8, 1, 12})), EINVAL) << "remote write without local write";
  EXPECT_EQ(pd_.usecnt(), 0) << "the FMRs above died with their handles";
}

TEST_F(FmrTest, NoAccessUntilMapped) {
  Fmr f = alloc();
  EXPECT_EQ(pd_.usecnt(), 1);
  EXPECT_FALSE(f.mapped());
  auto t = tr(f.rkey(), 0, 1);
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error(), Refusal::kOutOfBounds) << "length 0 until the first map";
  EXPECT_EQ(code(pd_.dealloc()), EBUSY);
  ASSERT_TRUE(f.dealloc());
  EXPECT_EQ(pd_.usecnt(), 0);
  EXPECT_EQ(code(f.dealloc()), EINVAL);
  EXPECT_EQ(code(f.map_phys(mem_.list(0, 1), kIova)), EINVAL) << "deallocated";
}

TEST_F(FmrTest, MapTranslatesExactlyThePageList) {
  Fmr f = alloc();
  // Pages out of order: the MTTs, not the addresses, define the layout.
  const std::vector<std::uint64_t> pages = {mem_.page(5), mem_.page(2), mem_.page(9)};
  ASSERT_TRUE(f.map_phys(pages, kIova));
  EXPECT_TRUE(f.mapped());
  EXPECT_EQ(f.length(), 3u * 4096);
  auto t = tr(f.rkey(), kIova + 4096 + 10, 100, ACCESS_REMOTE_WRITE);
  ASSERT_TRUE(t);
  ASSERT_EQ(t->pieces().size(), 1u);
  EXPECT_EQ(t->pieces()[0].addr, reinterpret_cast<std::byte*>(mem_.page(2) + 10));
  auto across = tr(f.rkey(), kIova + 4096 - 8, 16).value().pieces();
  ASSERT_EQ(across.size(), 2u);
  EXPECT_EQ(across[0].addr, reinterpret_cast<std::byte*>(mem_.page(5) + 4088));
  EXPECT_EQ(across[1].addr, reinterpret_cast<std::byte*>(mem_.page(2)));
  EXPECT_EQ(tr(f.rkey(), kIova + 3 * 4096 - 1, 2).error(), Refusal::kOutOfBounds);
  EXPECT_EQ(tr(f.rkey(), kIova - 1, 1).error(), Refusal::kOutOfBounds);
  EXPECT_EQ(tr(f.rkey(), kIova, 1, ACCESS_REMOTE_ATOMIC).error(), Refusal::kAccessDenied);
  EXPECT_EQ(dev_.translate(f.rkey(), kIova, 1, 0, pd_.pd_num() + 1).error(), Refusal::kPdMismatch);
}

TEST_F(FmrTest, ARemapTranslatesItsOwnLayoutWhetherThePagesFollowEachOtherOrNot) {
  // Pages that follow each other translate as one piece, from the page the
  // access starts in; a remap onto scattered pages must not keep that.
  Fmr f = alloc();
  ASSERT_TRUE(f.map_phys(mem_.list(0, 4), kIova));
  auto whole = tr(f.rkey(), kIova + 10, 4 * 4096 - 10).value().pieces();
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].addr, reinterpret_cast<std::byte*>(mem_.page(0) + 10));
  EXPECT_EQ(whole[0].length, 4u * 4096 - 10);
  auto inner = tr(f.rkey(), kIova + 4096 + 8, 4096).value().pieces();
  ASSERT_EQ(inner.size(), 1u);
  EXPECT_EQ(inner[0].addr, reinterpret_cast<std::byte*>(mem_.page(1) + 8));
  ASSERT_TRUE(f.unmap());
  const std::vector<std::uint64_t> scattered = {mem_.page(5), mem_.page(2), mem_.page(9)};
  ASSERT_TRUE(f.map_phys(scattered, kIova));
  auto spread = tr(f.rkey(), kIova, 3 * 4096).value().pieces();
  ASSERT_EQ(spread.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(spread[i].addr, reinterpret_cast<std::byte*>(scattered[i])) << i;
    EXPECT_EQ(spread[i].length, 4096u) << i;
  }
  ASSERT_TRUE(f.map_phys(mem_.list(6, 2), kIova)) << "a remap without an unmap, back to following pages";
  auto again = tr(f.rkey(), kIova + 100, 2 * 4096 - 100).value().pieces();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].addr, reinterpret_cast<std::byte*>(mem_.page(6) + 100));
}

TEST_F(FmrTest, MapRejectsBadListsAndTooManyMaps) {
  Fmr f = alloc(4, 3);
  EXPECT_EQ(code(f.map_phys(mem_.list(0, 5), kIova)), EINVAL) << "list_len > max_pages";
  EXPECT_EQ(code(f.map_phys({}, kIova)), EINVAL) << "empty list";
  EXPECT_EQ(code(f.map_phys(mem_.list(0, 1), kIova + 512)), EINVAL) << "iova not page aligned";
  EXPECT_EQ(code(f.map_phys(std::vector<std::uint64_t>{mem_.page(0) + 8}, kIova)), EINVAL) << "page not aligned";
  EXPECT_EQ(code(f.map_phys(mem_.list(0, 2), ~std::uint64_t{0} & ~std::uint64_t{4095})), EINVAL) << "wraps";
  EXPECT_FALSE(f.mapped()) << "refused maps change nothing";
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(f.map_phys(mem_.list(i, 1), kIova)) << i;
  EXPECT_EQ(f.map_count(), 3u);
  const std::uint32_t key = f.rkey();
  EXPECT_EQ(code(f.map_phys(mem_.list(0, 1), kIova)), EINVAL) << "maps >= max_maps";
  EXPECT_EQ(f.rkey(), key);
  EXPECT_TRUE(tr(key, kIova, 8)) << "a refused map leaves the mapping alone";
  ASSERT_TRUE(f.unmap());
  EXPECT_EQ(f.map_count(), 0u);
  EXPECT_TRUE(f.map_phys(mem_.list(0, 1), kIova)) << "unmap resets the map count";
}

TEST_F(FmrTest, KeyAdvancesInTheHighHwIndexBitsAndNeverResets) {
  Fmr f = alloc(8, 4);
  const std::uint32_t num_mpt = 1u << 10;
  std::uint32_t key = f.rkey();
  std::set<std::uint32_t> seen{key};
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(f.map_phys(mem_.list(i, 1), kIova));
      const std::uint32_t k = f.rkey();
      EXPECT_EQ(hca::key_to_hw_index(k), hca::key_to_hw_index(key) + num_mpt) << "old key + num_mpt (hw index)";
      EXPECT_EQ(hca::key_to_hw_index(k) & (num_mpt - 1), hca::key_to_hw_index(key) & (num_mpt - 1))
          << "same MPT index";
      EXPECT_TRUE(seen.insert(k).second) << "a key repeated";
      // The previous key dies with the remap, at once.
      EXPECT_EQ(tr(key, kIova, 8).error(), Refusal::kKeyMismatch);
      EXPECT_TRUE(tr(k, kIova, 8));
      key = k;
    }
    ASSERT_TRUE(f.unmap());
    EXPECT_EQ(f.rkey(), key) << "unmap does not reset the counter (mthca 0bfe151cc404)";
  }
}

// The counter has 32 - log2(num_mpt) bits, so a key of one mapping returns
// exactly 2^(32 - log2 num_mpt) maps later, never sooner.
TEST(FmrKeys, StaleKeyReturnsOnlyAfterTheCounterPeriod) {
  Profile p = test::small_profile();
  p.num_mpt = 1 << 20;  // a 12-bit counter: period 4096
  Device dev = Device::open(p).value();
  ProtectionDomain pd = dev.alloc_pd().value();
  const std::uint32_t period = 1u << 12;
  EXPECT_EQ(dev.query().max_map_per_fmr, period - 1);
  Fmr f = pd.alloc_fmr(kRw, FmrAttr{1, period - 1, 12}).value();
  Pages mem(1);
  std::set<std::uint32_t> keys{f.rkey()};
  const std::uint32_t first = f.rkey();
  for (std::uint32_t i = 1; i < period; ++i) {
    ASSERT_TRUE(f.map_phys(mem.list(0, 1), 0));
    ASSERT_TRUE(f.unmap());
    ASSERT_TRUE(keys.insert(f.rkey()).second) << "key repeated after " << i << " maps";
  }
  ASSERT_TRUE(f.map_phys(mem.list(0, 1), 0));
  EXPECT_EQ(f.rkey(), first) << "the counter wrapped after exactly 2^12 maps";
}

TEST_F(FmrTest, UnmapKillsOldKeysEvenWhenCached) {
  Fmr f = alloc();
  ASSERT_TRUE(f.map_phys(mem_.list(0, 2), kIova));
  const std::uint32_t key = f.rkey();
  ASSERT_TRUE(tr(key, kIova, 8));
  const auto before = dev_.tpt_stats();
  ASSERT_TRUE(tr(key, kIova, 8));
  EXPECT_EQ(dev_.tpt_stats().hits, before.hits + 1) << "the mapping is in the translation cache";
  ASSERT_TRUE(f.unmap());
  EXPECT_EQ(dev_.tpt_stats().syncs, before.syncs + 1) << "unmap is one SYNC_TPT";
  EXPECT_FALSE(f.mapped());
  auto t = tr(key, kIova, 8);
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error(), Refusal::kNotHwOwned);
  EXPECT_TRUE(f.unmap()) << "unmapping an unmapped FMR is harmless";
}

TEST_F(FmrTest, UnmapListIsOneSyncAndOneDevice) {
  std::vector<Fmr> fmrs;
  std::vector<Fmr*> list;
  for (int i = 0; i < 8; ++i) {
    fmrs.push_back(alloc());
    ASSERT_TRUE(fmrs.back().map_phys(mem_.list(i, 1), kIova + i * 4096));
  }
  for (auto& f : fmrs) {
    list.push_back(&f);
    ASSERT_TRUE(tr(f.rkey(), f.iova(), 8));
  }
  // A list spanning two devices is refused as a whole.
  Device other = Device::open(test::small_profile(), "srdma1").value();
  ProtectionDomain other_pd = other.alloc_pd().value();
  Fmr foreign = other_pd.alloc_fmr(kRw, {1, 1, 12}).value();
  std::vector<Fmr*> mixed = list;
  mixed.push_back(&foreign);
  EXPECT_EQ(code(unmap_fmrs(mixed)), EINVAL);
  std::vector<Fmr*> with_null = {list[0], nullptr};
  EXPECT_EQ(code(unmap_fmrs(with_null)), EINVAL);
  for (auto& f : fmrs) EXPECT_TRUE(f.mapped() && tr(f.rkey(), f.iova(), 8)) << "nothing was unmapped";

  const auto syncs = dev_.tpt_stats().syncs;
  ASSERT_TRUE(unmap_fmrs(list));
  EXPECT_EQ(dev_.tpt_stats().syncs, syncs + 1) << "ONE sync for the whole list";
  for (auto& f : fmrs) {
    EXPECT_FALSE(f.mapped());
    EXPECT_FALSE(tr(f.rkey(), f.iova(), 8));
  }
  EXPECT_TRUE(unmap_fmrs({})) << "an empty list is nothing to do";
}

TEST_F(FmrTest, DeallocIsBusyWhileMappedAndDestructorCleansUp) {
  const auto mpt_used = [&] { return dev_.table_usage()[2].used; };
  const auto base = mpt_used();
  {
    Fmr f = alloc();
    EXPECT_EQ(mpt_used(), base + 1);
    ASSERT_TRUE(f.map_phys(mem_.list(0, 1), kIova));
    EXPECT_EQ(code(f.dealloc()), EBUSY);
    EXPECT_TRUE(f.valid());
    Fmr moved = std::move(f);
    EXPECT_FALSE(f.valid());
    EXPECT_TRUE(moved.mapped());
    // moved dies mapped: the destructor unmaps and deallocates.
  }
  EXPECT_EQ(mpt_used(), base);
  EXPECT_EQ(pd_.usecnt(), 0);
  Fmr g = alloc();
  ASSERT_TRUE(g.map_phys(mem_.list(0, 1), kIova));
  ASSERT_TRUE(g.unmap());
  EXPECT_TRUE(g.dealloc());
  EXPECT_EQ(mpt_used(), base);
}

// The buddy's free counts per order, by buddy name.
std::vector<std::uint32_t> free_counts(const std::vector<BuddyUsage>& u, const std::string& name) {
  for (const auto& b : u)
    if (b.name == name) return b.free_per_order;
  return {};
}

TEST_F(FmrTest, MttsComeFromTheFmrRegion) {
  const auto before = dev_.buddy_usage();
  Fmr f = alloc(512, 1);
  const auto after = dev_.buddy_usage();
  EXPECT_EQ(free_counts(after, "MTT"), free_counts(before, "MTT")) << "the main buddy is untouched";
  EXPECT_NE(free_counts(after, "FMR MTT"), free_counts(before, "FMR MTT")) << "the FMR buddy gave the MTTs";
  ASSERT_TRUE(f.dealloc());
  EXPECT_EQ(free_counts(dev_.buddy_usage(), "FMR MTT"), free_counts(before, "FMR MTT"));
}

// At the device level: a profile that reserves no FMR region (as mthca
// without the reservation) puts FMR MTTs in the main buddy; dereg_mr never
// takes an FMR key.
TEST(FmrHca, NoReservationFallsBackToTheMainBuddyAndDeregMrRefusesFmrs) {
  Profile p = validate_profile(test::small_profile()).value();
  p.fmr_reserved_mtt_segs = 0;
  auto dev = hca::SoftHca::open(p).value();
  const std::uint32_t pdn = dev->tables().alloc_pd().value();
  auto usage = dev->buddy_usage();
  ASSERT_EQ(usage.size(), 1u) << "no FMR buddy";
  const auto before = usage[0].free_per_order;
  const std::uint32_t key = dev->tables().alloc_fmr(pdn, kRw, {64, 4, 12}).value();
  EXPECT_NE(dev->buddy_usage()[0].free_per_order, before);
  EXPECT_EQ(dev->tables().dereg_mr(key).error().code, EINVAL) << "an FMR is not a memory region to dereg";
  alignas(4096) static std::uint8_t page[4096];
  const std::uint64_t pages[] = {reinterpret_cast<std::uint64_t>(page)};
  const std::uint32_t k2 = dev->tables().map_phys_fmr(key, pages, 0).value();
  EXPECT_EQ(dev->tables().map_phys_fmr(key, pages, 0).error().code, EINVAL) << "a stale key names no FMR";
  EXPECT_EQ(dev->tables().dealloc_fmr(k2).error().code, EBUSY);
  EXPECT_EQ(dev->tables().dereg_mr(k2).error().code, EINVAL);
  const std::uint32_t keys[] = {k2};
  ASSERT_TRUE(dev->tables().unmap_fmr(keys));
  ASSERT_TRUE(dev->tables().dealloc_fmr(k2));
  EXPECT_EQ(dev->buddy_usage()[0].free_per_order, before);
  EXPECT_EQ(dev->tables().dealloc_fmr(k2).error().code, EINVAL);
}

// A translator racing map/unmap must only ever see whole mappings: the key,
// start and length of one generation, and MTTs of that same generation.
// Generation g maps pages whose index encodes g at iova(g); the reader also
// tries the NEXT key (predictable: hw index + num_mpt), so it races the
// MPT's publication itself.
TEST(FmrConcurrency, TranslateNeverSeesATornMapping) {
  Device dev = Device::open(test::small_profile()).value();
  ProtectionDomain pd = dev.alloc_pd().value();
  constexpr std::uint32_t kMaxPages = 16, kGens = 64;
  Pages mem(kGens);  // page g "belongs" to generation g % kGens
  Fmr f = pd.alloc_fmr(kRw, FmrAttr{kMaxPages, 4, 12}).value();
  const std::uint32_t num_mpt = 1u << 10;
  auto iova_of = [](std::uint64_t g) { return (g % kGens + 1) << 24; };
  auto len_of = [](std::uint64_t g) { return std::uint64_t{g % kMaxPages + 1}; };  // pages
  auto gen_of_page = [&](std::uint64_t addr) { return (addr - mem.page(0)) / 4096; };

  std::atomic<std::uint64_t> published{0};  // generation << 32 | key, once mapped
  std::atomic<std::uint64_t> retiring{0};   // generations <  this may be torn down
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> checked{0}, next_key_hits{0};
  std::atomic<int> failures{0};

  auto check = [&](std::uint32_t key, std::uint64_t g) {
    const std::uint64_t len = len_of(g) * 4096;
    auto t = dev.translate(key, iova_of(g), len, ACCESS_REMOTE_WRITE, pd.pd_num());
    if (!t) return false;
    std::vector<MemPiece> pieces = t->pieces();
    std::atomic_thread_fence(std::memory_order_acquire);
    if (retiring.load(std::memory_order_relaxed) > g) return true;  // torn down meanwhile: no verdict
    std::uint64_t total = 0;
    for (const MemPiece& p : pieces) {
      for (std::uint64_t off = 0; off < p.length; off += 4096)
        if (gen_of_page(reinterpret_cast<std::uint64_t>(p.addr) + off) != g % kGens) failures.fetch_add(1);
      total += p.length;
    }
    if (total != len) failures.fetch_add(1);
    // Another generation's bounds must not hold for this key.
    if (dev.translate(key, iova_of(g + 1), 1, 0, pd.pd_num())) failures.fetch_add(1);
    checked.fetch_add(1, std::memory_order_relaxed);
    return true;
  };
  std::thread reader([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      const std::uint64_t pub = published.load(std::memory_order_acquire);
      const auto key = static_cast<std::uint32_t>(pub);
      const std::uint64_t g = pub >> 32;
      check(key, g);
      const std::uint32_t next = hca::hw_index_to_key(hca::key_to_hw_index(key) + num_mpt);
      if (check(next, g + 1)) next_key_hits.fetch_add(1, std::memory_order_relaxed);
    }
  });

  // retiring = g: the MTTs of generations before g may be rewritten from
  // now on (the fence orders that store before the next map's MTT stores;
  // the reader's acquire fence after its MTT loads pairs with it).
  // At least 20000 generations, and on until the reader has judged enough
  // translations of both kinds (a loaded machine may starve it at first).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto enough = [&](std::uint64_t g) {
    return g > 20000 && ((checked.load(std::memory_order_relaxed) >= 2000 &&
                          next_key_hits.load(std::memory_order_relaxed) >= 20) ||
                         std::chrono::steady_clock::now() > give_up);
  };
  for (std::uint64_t g = 1; !enough(g); ++g) {
    retiring.store(g, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    std::vector<std::uint64_t> pages(len_of(g), mem.page(g % kGens));
    if (!f.map_phys(pages, iova_of(g))) {
      ADD_FAILURE() << "map " << g;
      break;
    }
    published.store(g << 32 | f.rkey(), std::memory_order_release);
    if (g % 3 == 0 && !f.unmap()) {  // remap without unmap two times out of three
      ADD_FAILURE() << "unmap " << g;
      break;
    }
  }
  stop = true;
  reader.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GE(checked.load(), 2000u);
  EXPECT_GE(next_key_hits.load(), 20u) << "the reader never caught a map's publication";
  RecordProperty("checked", static_cast<int>(checked.load()));
  RecordProperty("next_key_hits", static_cast<int>(next_key_hits.load()));
}

// Two devices with a connected RC QP pair, through the public API
// (connected_pair.h): a CQ of 64 and a QP of 16 WRs each. The target maps an
// FMR over its memory; the initiator's buffer is an MR.
using test::PairNode;
const PairNode::Options kPeer{.cq = {.cqe = 64}, .caps = {16, 16, 2, 2, 64}};

const RcConnection kPath{.access = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ};

using test::poll_one;

// The RDMA the initiator posts against the target's FMR; its completion.
Wc rdma(PairNode& initiator, WrOpcode op, const MemoryRegion& local, std::uint64_t remote_addr, std::uint32_t rkey,
        std::uint32_t len) {
  Sge sge{reinterpret_cast<std::uint64_t>(local.addr()), len, local.lkey()};
  SendWr w;
  w.wr_id = 7;
  w.opcode = op;
  w.sg_list = &sge;
  w.num_sge = 1;
  w.send_flags = SEND_SIGNALED;
  w.remote_addr = remote_addr;
  w.rkey = rkey;
  EXPECT_TRUE(initiator.qp->post_send(w));
  return poll_one(*initiator.cq);
}

// The one property FMR consumers need from unmap: once it returns, the
// peer's old rkey is dead for RDMA WRITE and READ alike (IBA 9.7.5.1.x:
// an invalid R_Key is a remote access error, class C: the QP goes to ERR).
TEST(FmrSecurity, PeerWriteAndReadWithUnmappedKeyFail) {
  Pages target(4);
  constexpr std::uint64_t kIova = 0x10000000;
  for (WrOpcode op : {WrOpcode::kRdmaWrite, WrOpcode::kRdmaRead}) {
    SCOPED_TRACE(op == WrOpcode::kRdmaWrite ? "RDMA WRITE" : "RDMA READ");
    PairNode a(kPeer), b(kPeer);  // a fresh QP pair for each opcode
    test::connect(a, b, kPath);
    std::memset(target.p, 0x5a, 4 * 4096);
    std::vector<std::uint8_t> local(8192, 0xc3);
    MemoryRegion mr = a.pd.reg_mr(local.data(), local.size(), ACCESS_LOCAL_WRITE).value();
    Fmr fmr = b.pd.alloc_fmr(kRw, FmrAttr{4, 8, 12}).value();
    ASSERT_TRUE(fmr.map_phys(target.list(0, 4), kIova));
    const std::uint32_t old_rkey = fmr.rkey();
    // Mapped, the key works.
    Wc ok = rdma(a, op, mr, kIova + 100, old_rkey, 64);
    ASSERT_EQ(ok.status, WcStatus::kSuccess);
    EXPECT_EQ(op == WrOpcode::kRdmaRead ? local[0] : target.p[100], op == WrOpcode::kRdmaRead ? 0x5a : 0xc3);
    std::fill(local.begin(), local.end(), std::uint8_t{0xc3});
    const std::vector<std::uint8_t> pristine(target.p, target.p + 4 * 4096);
    ASSERT_TRUE(fmr.unmap());  // the sync happens inside

    Wc wc = rdma(a, op, mr, kIova + 100, old_rkey, 4096);
    EXPECT_EQ(wc.status, WcStatus::kRemAccessErr);
    EXPECT_EQ(a.qp->state(), QpState::kErr);
    EXPECT_EQ(std::memcmp(target.p, pristine.data(), pristine.size()), 0) << "target memory changed";
    if (op == WrOpcode::kRdmaRead) {
      EXPECT_TRUE(std::all_of(local.begin(), local.end(), [](std::uint8_t c) { return c == 0xc3; }))
          << "nothing came back through a dead key";
    }
  }
}

}  // namespace
}  // namespace srdma
