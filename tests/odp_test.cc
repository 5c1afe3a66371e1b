// On-demand paging: regions whose pages need not be mapped at
// registration, faulted in by each access (hca/page_fault.h); an access to
// a page that is unmapped or wrongly protected ends in a protection error
// completion, never a SIGSEGV. Implicit ODP and ibv_advise_mr's prefetch.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cstring>
#include <memory>

#include "connected_pair.h"
#include "srdma/access.h"
#include "srdma/pd.h"
#include "wait.h"

namespace srdma {
namespace {

using test::kPage;
using test::PairNode;

constexpr std::uint32_t kOdpAll = kAccessAll | ACCESS_ON_DEMAND;

// An anonymous mapping of `pages` pages, unmapped when it goes.
struct Mapping {
  std::byte* p = nullptr;
  std::size_t bytes = 0;
  explicit Mapping(std::size_t pages, int prot = PROT_READ | PROT_WRITE) : bytes(pages * kPage) {
    void* m = ::mmap(nullptr, bytes, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(m, MAP_FAILED);
    p = static_cast<std::byte*>(m);
  }
  ~Mapping() {
    if (p) ::munmap(p, bytes);
  }
  std::uint64_t addr(std::size_t off = 0) const { return reinterpret_cast<std::uint64_t>(p) + off; }
};

class Odp : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!a.dev.query().on_demand_paging) GTEST_SKIP() << "this kernel has no MADV_POPULATE_READ/WRITE";
    test::connect(a, b);
  }
  // Posts one signaled WR on a's QP and returns its completion.
  Wc post(WrOpcode op, Sge sge, std::uint64_t remote_addr = 0, std::uint32_t rkey = 0) {
    SendWr w = test::send_wr(0, sge, op);  // signaled
    w.remote_addr = remote_addr;
    w.rkey = rkey;
    w.compare_add = 1;
    return test::post_and_poll(a, w);
  }
  void post_recv_b(Sge sge) {
    RecvWr rw;
    rw.sg_list = &sge;
    rw.num_sge = 1;
    ASSERT_TRUE(b.qp->post_recv(rw));
  }
  PairNode a, b;
};

TEST_F(Odp, RegionOverMemoryMappedAfterRegistrationCarriesTraffic) {
  // An address range with nothing accessible in it. Reserved (PROT_NONE)
  // rather than unmapped: another thread's mmap could land in a range given
  // back, and MAP_FIXED below would then clobber it.
  void* r = ::mmap(nullptr, 4 * kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(r, MAP_FAILED);
  auto* hole = static_cast<std::byte*>(r);
  EXPECT_EQ(a.pd.reg_mr(hole, 4 * kPage, kAccessAll).error().code, EFAULT) << "without ON_DEMAND it must be mapped";
  MemoryRegion odp = a.pd.reg_mr(hole, 4 * kPage, kOdpAll).value();
  // Mapped only now, at the registered address.
  void* m = ::mmap(hole, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  ASSERT_EQ(m, static_cast<void*>(hole));
  std::memset(hole + kPage, 0x3c, 100);
  post_recv_b(Sge{b.addr(0), 100, b.mr.lkey()});
  EXPECT_EQ(post(WrOpcode::kSend, Sge{reinterpret_cast<std::uint64_t>(hole) + kPage, 100, odp.lkey()}).status,
            WcStatus::kSuccess);
  EXPECT_EQ(test::poll_one(*b.cq).status, WcStatus::kSuccess);
  EXPECT_EQ(b.buf[99], 0x3c);
  // And as the target of the peer's WRITE (b writes into a's ODP region).
  std::memset(b.buf.data() + kPage, 0x5a, 2 * kPage);
  Sge s{b.addr(kPage), static_cast<std::uint32_t>(2 * kPage), b.mr.lkey()};
  SendWr w;
  w.opcode = WrOpcode::kRdmaWrite;
  w.sg_list = &s;
  w.num_sge = 1;
  w.send_flags = SEND_SIGNALED;
  w.remote_addr = reinterpret_cast<std::uint64_t>(hole) + 100;  // across a page boundary
  w.rkey = odp.rkey();
  ASSERT_TRUE(b.qp->post_send(w));
  EXPECT_EQ(test::poll_one(*b.cq).status, WcStatus::kSuccess);
  EXPECT_EQ(static_cast<unsigned char>(hole[100]), 0x5a);
  EXPECT_EQ(static_cast<unsigned char>(hole[100 + 2 * kPage - 1]), 0x5a);
  ASSERT_TRUE(odp.dereg());
  ::munmap(hole, 4 * kPage);
}

// Each case on a fresh pair: an error completion moves the QP to ERROR.
TEST_F(Odp, UnmappedLocalSendSourceIsALocalProtectionError) {
  Mapping m(2);
  MemoryRegion odp = a.pd.reg_mr(m.p, 2 * kPage, kOdpAll).value();
  ASSERT_EQ(::munmap(m.p + kPage, kPage), 0);
  post_recv_b(Sge{b.addr(0), 64, b.mr.lkey()});
  EXPECT_EQ(post(WrOpcode::kSend, Sge{m.addr(kPage - 8), 16, odp.lkey()}).status, WcStatus::kLocProtErr);
}

TEST_F(Odp, UnmappedLocalWriteSourceIsALocalProtectionError) {
  Mapping m(2);
  MemoryRegion odp = a.pd.reg_mr(m.p, 2 * kPage, kOdpAll).value();
  ASSERT_EQ(::munmap(m.p + kPage, kPage), 0);
  EXPECT_EQ(post(WrOpcode::kRdmaWrite, Sge{m.addr(kPage), 8, odp.lkey()}, b.addr(0), b.mr.rkey()).status,
            WcStatus::kLocProtErr);
}

TEST_F(Odp, UnmappedRemoteWriteTargetIsARemoteAccessError) {
  Mapping m(2);
  MemoryRegion odp = b.pd.reg_mr(m.p, 2 * kPage, kOdpAll).value();
  ASSERT_EQ(::munmap(m.p + kPage, kPage), 0);
  EXPECT_EQ(post(WrOpcode::kRdmaWrite, Sge{a.addr(0), 64, a.mr.lkey()}, m.addr(kPage - 32), odp.rkey()).status,
            WcStatus::kRemAccessErr);
}

TEST_F(Odp, ReadOnlyRemoteWriteTargetIsARemoteAccessError) {
  Mapping m(1, PROT_READ);
  MemoryRegion odp = b.pd.reg_mr(m.p, kPage, kOdpAll).value();  // writable by its rights, not by its page
  EXPECT_EQ(post(WrOpcode::kRdmaWrite, Sge{a.addr(0), 64, a.mr.lkey()}, m.addr(0), odp.rkey()).status,
            WcStatus::kRemAccessErr);
}

TEST_F(Odp, UnmappedRemoteReadSourceIsARemoteAccessError) {
  Mapping m(2);
  MemoryRegion odp = b.pd.reg_mr(m.p, 2 * kPage, kOdpAll).value();
  ASSERT_EQ(::mprotect(m.p, kPage, PROT_NONE), 0);
  EXPECT_EQ(post(WrOpcode::kRdmaRead, Sge{a.addr(0), 64, a.mr.lkey()}, m.addr(0), odp.rkey()).status,
            WcStatus::kRemAccessErr);
}

TEST_F(Odp, UnmappedAtomicTargetIsARemoteAccessErrorAndAMappedOneIsAtomic) {
  Mapping m(2);
  MemoryRegion odp = b.pd.reg_mr(m.p, 2 * kPage, kOdpAll).value();
  EXPECT_EQ(post(WrOpcode::kAtomicFetchAndAdd, Sge{a.addr(0), 8, a.mr.lkey()}, m.addr(8), odp.rkey()).status,
            WcStatus::kSuccess);
  std::uint64_t v;
  std::memcpy(&v, m.p + 8, 8);
  EXPECT_EQ(v, 1u);
  ASSERT_EQ(::munmap(m.p + kPage, kPage), 0);
  EXPECT_EQ(post(WrOpcode::kAtomicFetchAndAdd, Sge{a.addr(0), 8, a.mr.lkey()}, m.addr(kPage), odp.rkey()).status,
            WcStatus::kRemAccessErr);
}

TEST_F(Odp, ImplicitKeyReachesTwoSeparateBuffersAndNothingOutsideItsPd) {
  MemoryRegion implicit = b.pd.reg_implicit_odp_mr(ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE).value();
  EXPECT_EQ(implicit.addr(), nullptr);
  EXPECT_EQ(implicit.length(), SIZE_MAX);
  test::PageBuf one(kPage), two(3 * kPage);
  std::memset(a.buf.data(), 0x11, 64);
  EXPECT_EQ(post(WrOpcode::kRdmaWrite, Sge{a.addr(0), 64, a.mr.lkey()}, one.addr(0), implicit.rkey()).status,
            WcStatus::kSuccess);
  std::memset(a.buf.data() + 64, 0x22, 64);
  EXPECT_EQ(post(WrOpcode::kRdmaWrite, Sge{a.addr(64), 64, a.mr.lkey()}, two.addr(2 * kPage), implicit.rkey()).status,
            WcStatus::kSuccess);
  EXPECT_EQ(one[63], 0x11);
  EXPECT_EQ(two[2 * kPage + 63], 0x22);
  // No READ right: the rights still apply.
  EXPECT_EQ(b.dev.translate(implicit.rkey(), one.addr(0), 8, ACCESS_REMOTE_READ, b.pd.pd_num()).error(),
            Refusal::kAccessDenied);
  // Another PD's QP cannot use it.
  ProtectionDomain other = b.dev.alloc_pd().value();
  EXPECT_EQ(b.dev.translate(implicit.rkey(), one.addr(0), 8, ACCESS_REMOTE_WRITE, other.pd_num()).error(),
            Refusal::kPdMismatch);
  // Address 0 is in its range but no page is there.
  EXPECT_EQ(b.dev.translate(implicit.rkey(), 0, 8, ACCESS_REMOTE_WRITE, b.pd.pd_num()).error(), Refusal::kPageFault);
  EXPECT_EQ(post(WrOpcode::kRdmaWrite, Sge{a.addr(0), 8, a.mr.lkey()}, 8, implicit.rkey()).status,
            WcStatus::kRemAccessErr);
}

TEST_F(Odp, ImplicitKeyAsALocalSource) {
  MemoryRegion implicit = a.pd.reg_implicit_odp_mr(0).value();
  test::PageBuf src(kPage);
  std::memset(src.data(), 0x77, 32);
  post_recv_b(Sge{b.addr(0), 32, b.mr.lkey()});
  EXPECT_EQ(post(WrOpcode::kSend, Sge{src.addr(0), 32, implicit.lkey()}).status, WcStatus::kSuccess);
  EXPECT_EQ(test::poll_one(*b.cq).status, WcStatus::kSuccess);
  EXPECT_EQ(b.buf[31], 0x77);
}

TEST(OdpRegistration, RefusalsKeepTheirCodes) {
  PairNode n;
  if (!n.dev.query().on_demand_paging) GTEST_SKIP();
  EXPECT_EQ(n.pd.reg_implicit_odp_mr(ACCESS_REMOTE_WRITE).error().code, EINVAL) << "remote write needs local write";
  EXPECT_EQ(n.pd.reg_implicit_odp_mr(1u << 20).error().code, EINVAL);
  EXPECT_EQ(n.pd.reg_mr(nullptr, SIZE_MAX, kAccessAll).error().code, ENOMEM) << "without ODP: pages for every address";
}

using Advice = ProtectionDomain::MrAdvice;

TEST(OdpAdvise, PrefetchChecksEverySge) {
  PairNode n;
  if (!n.dev.query().on_demand_paging) GTEST_SKIP();
  Mapping m(4);
  MemoryRegion odp = n.pd.reg_mr(m.p, 4 * kPage, kOdpAll).value();
  MemoryRegion ro = n.pd.reg_mr(m.p, 4 * kPage, ACCESS_ON_DEMAND).value();
  const Sge good{m.addr(0), static_cast<std::uint32_t>(4 * kPage), odp.lkey()};
  EXPECT_TRUE(n.pd.advise_mr(Advice::kPrefetch, std::span(&good, 1)));
  EXPECT_TRUE(n.pd.advise_mr(Advice::kPrefetchWrite, std::span(&good, 1)));
  EXPECT_TRUE(n.pd.advise_mr(Advice::kPrefetchNoFault, std::span(&good, 1)));
  auto code = [&](Advice a, Sge s) {
    auto r = n.pd.advise_mr(a, std::span(&s, 1));
    return r ? 0 : r.error().code;
  };
  EXPECT_EQ(n.pd.advise_mr(Advice::kPrefetch, {}).error().code, EINVAL);
  EXPECT_EQ(code(Advice::kPrefetch, Sge{n.addr(0), 8, n.mr.lkey()}), EINVAL) << "not an ODP region";
  EXPECT_EQ(code(Advice::kPrefetch, Sge{m.addr(0), 8, odp.lkey() ^ 1}), EFAULT) << "a stale key";
  EXPECT_EQ(code(Advice::kPrefetch, Sge{m.addr(4 * kPage - 4), 8, odp.lkey()}), EFAULT) << "beyond the region";
  EXPECT_EQ(code(Advice::kPrefetchWrite, Sge{m.addr(0), 8, ro.lkey()}), EPERM) << "no LOCAL_WRITE";
  EXPECT_EQ(code(Advice::kPrefetch, Sge{m.addr(0), 8, ro.lkey()}), 0);
  ProtectionDomain other = n.dev.alloc_pd().value();
  const Sge foreign{m.addr(0), 8, odp.lkey()};
  EXPECT_EQ(other.advise_mr(Advice::kPrefetch, std::span(&foreign, 1)).error().code, EPERM);
  // A page gone: the prefetch cannot fault it in; NO_FAULT does not try.
  ASSERT_EQ(::munmap(m.p + 2 * kPage, kPage), 0);
  EXPECT_EQ(code(Advice::kPrefetch, Sge{m.addr(2 * kPage), 8, odp.lkey()}), EFAULT);
  EXPECT_EQ(code(Advice::kPrefetchNoFault, Sge{m.addr(2 * kPage), 8, odp.lkey()}), 0);
  EXPECT_EQ(code(Advice::kPrefetch, Sge{m.addr(3 * kPage), 8, odp.lkey()}), 0) << "the pages around it are fine";
}

}  // namespace
}  // namespace srdma
