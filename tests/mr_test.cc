// Memory verbs: device open and query, PDs, reg_mr / dereg_mr and their errors.
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "hca/delivery_scope.h"
#include "srdma/access.h"
#include "srdma/device.h"

namespace srdma {
namespace {

Profile tiny_profile() {
  Profile p;
  p.num_mpt = 16;          // 15 usable keys
  p.num_mtt_segs = 64;     // 512 entries
  p.fmr_reserved_mtt_segs = 16;
  p.num_pd = 4;
  p.num_qp = 16;
  p.num_cq = 16;
  return p;
}

TEST(Device, OpenRefusesAnUnrepairableProfile) {
  Profile p;
  p.reserved_pds = -3;
  auto d = Device::open(p);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, EINVAL);
}

TEST(Device, QueryReportsTheProfile) {
  auto dev = Device::open().value();
  DeviceAttr a = dev.query();
  EXPECT_EQ(a.max_map_per_fmr, 32767u);  // (1 << (32 - 17)) - 1
  EXPECT_EQ(a.max_mr, (1u << 17) - 1);
  EXPECT_EQ(a.max_qp, (1u << 16) - 2);
  EXPECT_EQ(a.num_comp_vectors, static_cast<std::uint32_t>(dev.profile().num_comp_vectors));
  EXPECT_TRUE(a.page_size_cap & 4096);
  Profile p;
  p.num_mpt = 1 << 24;
  EXPECT_EQ(Device::open(p)->query().max_map_per_fmr, 255u);  // Sinai-like: key byte only
}

TEST(Device, DefaultDeviceIsCheapToOpen) {
  // The tables are address space until touched: opening many default
  // devices must not need their full size in RAM.
  std::vector<Device> devs;
  for (int i = 0; i < 8; ++i) devs.push_back(Device::open().value());
  EXPECT_GT(devs[0].table_bytes(), std::size_t{64} << 20);
}

TEST(Pd, DeallocIsBusyWhileRegionsLive) {
  auto dev = Device::open(tiny_profile()).value();
  auto pd = dev.alloc_pd().value();
  std::vector<char> buf(4096);
  auto mr = pd.reg_mr(buf.data(), buf.size(), 0).value();
  EXPECT_EQ(pd.usecnt(), 1);
  auto busy = pd.dealloc();
  ASSERT_FALSE(busy);
  EXPECT_EQ(busy.error().code, EBUSY);
  ASSERT_TRUE(mr.dereg());
  EXPECT_EQ(mr.dereg().error().code, EINVAL);  // twice
  ASSERT_TRUE(pd.dealloc());
  EXPECT_EQ(pd.dealloc().error().code, EINVAL);
  EXPECT_EQ(pd.reg_mr(buf.data(), 1, 0).error().code, EINVAL);
}

TEST(Pd, TableExhaustionAndReuse) {
  auto dev = Device::open(tiny_profile()).value();
  std::vector<ProtectionDomain> pds;
  for (int i = 0; i < 3; ++i) pds.push_back(dev.alloc_pd().value());
  auto r = dev.alloc_pd();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ENOMEM);
  pds.pop_back();  // RAII frees the number
  EXPECT_TRUE(dev.alloc_pd());
}

TEST(Mr, AccessRulesAndArguments) {
  auto dev = Device::open(tiny_profile()).value();
  auto pd = dev.alloc_pd().value();
  std::vector<char> buf(8192);
  EXPECT_EQ(pd.reg_mr(buf.data(), 4096, ACCESS_REMOTE_WRITE).error().code, EINVAL);
  EXPECT_EQ(pd.reg_mr(buf.data(), 4096, ACCESS_REMOTE_ATOMIC | ACCESS_REMOTE_READ).error().code, EINVAL);
  EXPECT_EQ(pd.reg_mr(buf.data(), 4096, 1u << 7).error().code, EINVAL);
  EXPECT_EQ(pd.reg_mr(buf.data(), 0, 0).error().code, EINVAL);
  EXPECT_EQ(pd.reg_mr(buf.data(), 4096, 0, 11).error().code, EINVAL);
  EXPECT_EQ(pd.reg_mr(buf.data(), 4096, 0, 31).error().code, EINVAL);
  EXPECT_EQ(pd.reg_mr(reinterpret_cast<void*>(~std::uintptr_t{0} - 10), 100, 0).error().code, EINVAL);
  auto ok = pd.reg_mr(buf.data(), 4096, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC);
  ASSERT_TRUE(ok) << ok.error().to_string();
  EXPECT_EQ(ok->lkey(), ok->rkey());
  EXPECT_EQ(access_to_string(ok->access()), "LOCAL_WRITE|REMOTE_WRITE|REMOTE_ATOMIC");
}

TEST(Mr, UnmappedOrReadOnlyMemoryIsEfault) {
  auto dev = Device::open(tiny_profile()).value();
  auto pd = dev.alloc_pd().value();
  const long page = ::sysconf(_SC_PAGESIZE);
  auto* mem = static_cast<char*>(::mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(mem, MAP_FAILED);
  ASSERT_EQ(::mprotect(mem + page, page, PROT_READ), 0);
  ASSERT_EQ(::munmap(mem + 2 * page, page), 0);

  EXPECT_TRUE(pd.reg_mr(mem + page, page, ACCESS_REMOTE_READ));  // read-only is fine for reads
  auto ro = pd.reg_mr(mem + page, page, ACCESS_LOCAL_WRITE);
  ASSERT_FALSE(ro);
  EXPECT_EQ(ro.error().code, EFAULT);
  auto straddle = pd.reg_mr(mem, 2 * page, ACCESS_LOCAL_WRITE);  // second page read-only
  EXPECT_EQ(straddle.error().code, EFAULT);
  auto hole = pd.reg_mr(mem + page, 2 * page, 0);  // runs into the unmapped page
  ASSERT_FALSE(hole);
  EXPECT_EQ(hole.error().code, EFAULT);
  EXPECT_EQ(pd.reg_mr(nullptr, 64, 0).error().code, EFAULT);
  ::munmap(mem, 2 * page);
}

TEST(Mr, ExhaustedTablesAreEnomemNamingTheTable) {
  auto dev = Device::open(tiny_profile()).value();
  auto pd = dev.alloc_pd().value();
  std::vector<char> buf(4096 * 600);
  // 48 main MTT segments = 384 entries: a 600-page region cannot fit.
  auto big = pd.reg_mr(buf.data(), buf.size(), 0);
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code, ENOMEM);
  EXPECT_NE(big.error().reason.find("MTT"), std::string::npos) << big.error().reason;
  // MPT: 15 keys.
  std::vector<MemoryRegion> mrs;
  for (int i = 0; i < 15; ++i) mrs.push_back(pd.reg_mr(buf.data(), 64, 0).value());
  auto none = pd.reg_mr(buf.data(), 64, 0);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ENOMEM);
  EXPECT_NE(none.error().reason.find("MPT"), std::string::npos) << none.error().reason;
  // A failed registration leaks nothing: free one, and one fits again.
  mrs.pop_back();
  EXPECT_TRUE(pd.reg_mr(buf.data(), 64, 0));
  auto usage = dev.table_usage();
  EXPECT_EQ(usage[2].name, "MPT");
  EXPECT_EQ(usage[2].used, 14u);
}

TEST(Mr, MovesTransferOwnership) {
  auto dev = Device::open(tiny_profile()).value();
  auto pd = dev.alloc_pd().value();
  std::vector<char> buf(4096);
  MemoryRegion a = pd.reg_mr(buf.data(), 4096, 0).value();
  const auto key = a.lkey();
  MemoryRegion b = std::move(a);
  EXPECT_FALSE(a.valid());
  EXPECT_TRUE(b.valid());
  EXPECT_TRUE(dev.translate(key, reinterpret_cast<std::uint64_t>(buf.data()), 1, 0, pd.pd_num()));
  b = MemoryRegion{};  // deregisters
  EXPECT_FALSE(dev.translate(key, reinterpret_cast<std::uint64_t>(buf.data()), 1, 0, pd.pd_num()));
  EXPECT_EQ(pd.usecnt(), 0);
}

TEST(Mr, ReregKeepsTheKeysAndMovesTranslationPdAndAccess) {
  auto dev = Device::open(tiny_profile()).value();
  auto pd = dev.alloc_pd().value();
  auto pd2 = dev.alloc_pd().value();
  std::vector<char> a(8192), b(8192);
  const auto at = [](std::vector<char>& v, std::size_t off = 0) { return reinterpret_cast<std::uint64_t>(v.data()) + off; };
  MemoryRegion mr = pd.reg_mr(a.data(), 4096, ACCESS_LOCAL_WRITE).value();
  const std::uint32_t key = mr.lkey();
  // New pages and access, same PD: the key stays; the old pages stop.
  ASSERT_TRUE(pd.rereg_mr(mr, b.data(), 8192, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE));
  EXPECT_EQ(mr.lkey(), key);
  EXPECT_EQ(mr.rkey(), key);
  EXPECT_EQ(mr.addr(), b.data());
  EXPECT_EQ(mr.length(), 8192u);
  EXPECT_FALSE(dev.translate(key, at(a), 1, 0, pd.pd_num())) << "the old pages still translate";
  EXPECT_TRUE(dev.translate(key, at(b, 8191), 1, ACCESS_REMOTE_WRITE, pd.pd_num()));
  // Another PD: the old one loses it (and its use count), the new one gains it.
  ASSERT_TRUE(pd2.rereg_mr(mr, b.data(), 8192, ACCESS_LOCAL_WRITE));
  EXPECT_EQ(mr.lkey(), key);
  EXPECT_EQ(pd.usecnt(), 0);
  EXPECT_EQ(pd2.usecnt(), 1);
  EXPECT_FALSE(dev.translate(key, at(b), 1, 0, pd.pd_num())) << "the old PD still reaches it";
  EXPECT_TRUE(dev.translate(key, at(b), 1, 0, pd2.pd_num()));
  EXPECT_FALSE(dev.translate(key, at(b), 1, ACCESS_REMOTE_WRITE, pd2.pd_num())) << "the old access survived";
  // Refusals leave it as it was.
  EXPECT_EQ(pd.rereg_mr(mr, b.data(), 4096, ACCESS_REMOTE_WRITE).error().code, EINVAL);  // no LOCAL_WRITE
  EXPECT_EQ(pd.rereg_mr(mr, b.data(), 0, 0).error().code, EINVAL);
  EXPECT_EQ(pd.rereg_mr(mr, nullptr, 4096, 0).error().code, EFAULT);
  EXPECT_EQ(mr.addr(), b.data());
  EXPECT_TRUE(dev.translate(key, at(b), 1, 0, pd2.pd_num()));
  EXPECT_EQ(pd2.usecnt(), 1);
  MemoryRegion empty;
  EXPECT_EQ(pd.rereg_mr(empty, b.data(), 4096, 0).error().code, EINVAL);
  ASSERT_TRUE(mr.dereg());
  EXPECT_EQ(pd2.usecnt(), 0);
  EXPECT_FALSE(dev.translate(key, at(b), 1, 0, pd2.pd_num()));
}

TEST(Mr, ReregUnderConcurrentTranslationNeverReachesTheOldPages) {
  // One thread re-points the region between two buffers while others
  // translate through its key: every translation lands inside the buffer
  // the key named at some moment, and after the last rereg only the last.
  auto dev = Device::open().value();
  auto pd = dev.alloc_pd().value();
  std::vector<char> a(16384), b(16384);
  const auto a0 = reinterpret_cast<std::uint64_t>(a.data()), b0 = reinterpret_cast<std::uint64_t>(b.data());
  MemoryRegion mr = pd.reg_mr(a.data(), a.size(), ACCESS_LOCAL_WRITE).value();
  const std::uint32_t key = mr.lkey();
  std::atomic<bool> stop{false};
  std::atomic<int> stray{0}, hits{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t)
    readers.emplace_back([&] {
      while (!stop.load()) {
        for (std::uint64_t base : {a0, b0}) {
          // As the data path: translate and use inside a window, which the
          // rereg waits for before the old MTTs can be reused.
          hca::TranslationWindow window(key);
          auto tr = dev.translate(key, base + 100, 64, ACCESS_LOCAL_WRITE, pd.pd_num());
          if (!tr) continue;
          hits.fetch_add(1);
          tr->for_each_piece([&](MemPiece piece) {
            const auto p = reinterpret_cast<std::uint64_t>(piece.addr);
            if (p != base + 100 || piece.length != 64) stray.fetch_add(1);
          });
        }
      }
    });
  for (int i = 0; i < 2000; ++i) {
    std::vector<char>& to = i % 2 ? a : b;
    ASSERT_TRUE(pd.rereg_mr(mr, to.data(), to.size(), ACCESS_LOCAL_WRITE));
  }
  stop = true;
  for (auto& r : readers) r.join();
  EXPECT_EQ(stray.load(), 0);
  EXPECT_GT(hits.load(), 0);
  // The last rereg pointed it at a (i = 1999 is odd).
  EXPECT_TRUE(dev.translate(key, a0, 1, 0, pd.pd_num()));
  EXPECT_FALSE(dev.translate(key, b0, 1, 0, pd.pd_num()));
}

TEST(Mr, ObjectsOutliveTheirHandlesSafely) {
  // The device and PD handles die first; the region keeps them alive.
  std::vector<char> buf(4096);
  MemoryRegion mr;
  {
    auto dev = Device::open(tiny_profile()).value();
    auto pd = dev.alloc_pd().value();
    mr = pd.reg_mr(buf.data(), 4096, 0).value();
  }
  EXPECT_TRUE(mr.valid());
  EXPECT_TRUE(mr.dereg());
}

TEST(Mr, ConcurrentRegistrationFromManyThreads) {
  auto dev = Device::open().value();
  auto pd = dev.alloc_pd().value();
  std::vector<char> buf(1 << 20);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        std::size_t len = 4096 * (1 + (i * 7 + t) % 32);
        auto mr = pd.reg_mr(buf.data() + t * 4096, len, ACCESS_LOCAL_WRITE);
        if (!mr || !dev.translate(mr->lkey(), reinterpret_cast<std::uint64_t>(buf.data()) + t * 4096, len,
                                  ACCESS_LOCAL_WRITE, pd.pd_num()))
          ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(pd.usecnt(), 0);
  EXPECT_EQ(dev.table_usage()[2].used, 0u);
  EXPECT_EQ(dev.table_usage()[3].used, 0u);
}

}  // namespace
}  // namespace srdma
