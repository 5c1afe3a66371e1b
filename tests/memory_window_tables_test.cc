// Memory windows in the translation tables themselves (no QP): the
// refusals the verbs core never lets through (a type 1 window bound as by
// a WR, a type 2 as by the verb, foreign keys), the region's window count,
// invalidation by key, by QP and by deallocation.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "hca/soft_hca.h"
#include "srdma/access.h"
#include "test_profile.h"

namespace srdma::hca {
namespace {

using MwType = TranslationTables::MwType;
using MwBind = TranslationTables::MwBind;

constexpr std::uint32_t kQpA = 0x123456, kQpB = 0x654321;
constexpr std::uint32_t kRemoteRw = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;

class MwTables : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = SoftHca::open(validate_profile(test::small_profile()).value()).value();
    pdn_ = t().alloc_pd().value();
    base_ = reinterpret_cast<std::uint64_t>(buf_.get());
    std::vector<std::uint64_t> pages;
    for (std::size_t i = 0; i < kBytes / 4096; ++i) pages.push_back(base_ + i * 4096);
    mr_ = t().reg_mr(MrAttr{pdn_, base_, kBytes, ACCESS_LOCAL_WRITE | kRemoteRw | ACCESS_MW_BIND, 12}, pages).value();
  }
  TranslationTables& t() { return dev_->tables(); }
  MwBind bind(std::uint32_t mw, std::uint64_t off, std::uint64_t len, bool verb, std::uint32_t access = kRemoteRw) {
    return MwBind{mw, (mw & ~0xffu) | ((mw + 1) & 0xffu), mr_, base_ + off, len, access, verb};
  }
  bool usable(std::uint32_t key, std::uint32_t qpn) const {
    return dev_->tables().translate(key, base_, 8, ACCESS_REMOTE_READ, pdn_, qpn).has_value();
  }

  static constexpr std::size_t kBytes = 4 * 4096;
  struct Free {
    void operator()(std::uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<std::uint8_t, Free> buf_{static_cast<std::uint8_t*>(std::aligned_alloc(4096, kBytes))};
  std::shared_ptr<SoftHca> dev_;
  std::uint32_t pdn_ = 0;
  std::uint64_t base_ = 0;
  std::uint32_t mr_ = 0;
};

TEST_F(MwTables, AllocRefusesAnUnknownPdOrType) {
  EXPECT_EQ(t().alloc_mw(pdn_ + 7, MwType::kType1).error().code, EINVAL);
  EXPECT_EQ(t().alloc_mw(pdn_, static_cast<MwType>(3)).error().code, EINVAL);
  EXPECT_EQ(t().dealloc_mw(mr_).error().code, EINVAL) << "a region is no window";
  const std::uint32_t mw = t().alloc_mw(pdn_, MwType::kType1).value();
  EXPECT_TRUE(t().dealloc_mw(mw));
  EXPECT_EQ(t().dealloc_mw(mw).error().code, EINVAL) << "twice";
}

TEST_F(MwTables, BindRefusalsTheCoreNeverPostsStillFail) {
  const std::uint32_t w1 = t().alloc_mw(pdn_, MwType::kType1).value();
  const std::uint32_t w2 = t().alloc_mw(pdn_, MwType::kType2).value();
  EXPECT_FALSE(t().bind_mw(bind(w1, 0, 64, /*verb=*/false), pdn_, kQpA)) << "type 1 through a WR";
  EXPECT_FALSE(t().bind_mw(bind(w2, 0, 64, /*verb=*/true), pdn_, kQpA)) << "type 2 through the verb";
  EXPECT_FALSE(t().bind_mw(bind(w1, 0, 64, true, kRemoteRw | ACCESS_LOCAL_WRITE), pdn_, kQpA)) << "local access";
  EXPECT_FALSE(t().bind_mw(bind(w1, 0, 64, true, 1u << 7), pdn_, kQpA)) << "unknown bit";
  EXPECT_FALSE(t().bind_mw(bind(mr_, 0, 64, true), pdn_, kQpA)) << "a region's key as the window";
  EXPECT_FALSE(t().bind_mw(bind(w1, 0, 64, true), pdn_ + 1, kQpA)) << "a QP of another PD";
  MwBind stale_mr = bind(w1, 0, 64, true);
  stale_mr.mr_key ^= 1;
  EXPECT_FALSE(t().bind_mw(stale_mr, pdn_, kQpA)) << "a stale region key";
  MwBind wrap = bind(w1, 8, ~std::uint64_t{0}, true);
  EXPECT_FALSE(t().bind_mw(wrap, pdn_, kQpA)) << "a length that wraps";
  EXPECT_EQ(t().windows_bound_to(mr_), 0u);
  EXPECT_FALSE(usable(w1, 0));
  EXPECT_FALSE(usable(w2, kQpA));
}

TEST_F(MwTables, RegionCountsItsWindowsAndADestroyedQpFreesItsType2Ones) {
  const std::uint32_t w1 = t().alloc_mw(pdn_, MwType::kType1).value();
  const std::uint32_t a = t().alloc_mw(pdn_, MwType::kType2).value();
  const std::uint32_t b = t().alloc_mw(pdn_, MwType::kType2).value();
  const MwBind b1 = bind(w1, 0, 4096, true), ba = bind(a, 4096, 64, false), bb = bind(b, 8192, 64, false);
  ASSERT_TRUE(t().bind_mw(b1, pdn_, kQpA));
  ASSERT_TRUE(t().bind_mw(ba, pdn_, kQpA));
  ASSERT_TRUE(t().bind_mw(bb, pdn_, kQpB));
  EXPECT_EQ(t().windows_bound_to(mr_), 3u);
  EXPECT_EQ(t().dereg_mr(mr_).error().code, EINVAL);
  EXPECT_TRUE(dev_->tables().translate(ba.new_rkey, base_ + 4096, 8, ACCESS_REMOTE_READ, pdn_, kQpA));
  EXPECT_EQ(dev_->tables().translate(ba.new_rkey, base_ + 4096, 8, ACCESS_REMOTE_READ, pdn_, kQpB).error(),
            Refusal::kQpMismatch);
  // A remote invalidation through another QP, a type 1 key, a stale key,
  // another PD: refused, nothing changes.
  EXPECT_FALSE(t().local_invalidate(ba.new_rkey, pdn_, kQpB));
  EXPECT_FALSE(t().local_invalidate(b1.new_rkey, pdn_));
  EXPECT_FALSE(t().local_invalidate(ba.new_rkey ^ 0x80, pdn_));
  EXPECT_FALSE(t().local_invalidate(ba.new_rkey, pdn_ + 1));
  EXPECT_EQ(t().windows_bound_to(mr_), 3u);
  // QP A is destroyed: its type 2 window goes, B's and the type 1 stay.
  t().invalidate_windows_of_qp(kQpA);
  EXPECT_EQ(t().windows_bound_to(mr_), 2u);
  EXPECT_EQ(dev_->tables().translate(ba.new_rkey, base_ + 4096, 8, ACCESS_REMOTE_READ, pdn_, kQpA).error(),
            Refusal::kNotHwOwned);
  EXPECT_TRUE(dev_->tables().translate(bb.new_rkey, base_ + 8192, 8, ACCESS_REMOTE_READ, pdn_, kQpB));
  EXPECT_TRUE(dev_->tables().translate(b1.new_rkey, base_, 8, ACCESS_REMOTE_READ, pdn_, kQpB));
  // The freed window binds again (under a new key byte); B's is invalidated
  // remotely through its QP; the type 1 is unbound by a zero-length bind.
  MwBind again = bind(a, 0, 64, false);
  again.new_rkey = (ba.new_rkey & ~0xffu) | ((ba.new_rkey + 1) & 0xffu);
  EXPECT_TRUE(t().bind_mw(again, pdn_, kQpB));
  EXPECT_TRUE(t().local_invalidate(again.new_rkey, pdn_, kQpB));
  EXPECT_TRUE(t().local_invalidate(again.new_rkey, pdn_, kQpB)) << "a free window: nothing to do";
  EXPECT_TRUE(t().local_invalidate(bb.new_rkey, pdn_, kQpB));
  MwBind unbind{w1, (b1.new_rkey & ~0xffu) | ((b1.new_rkey + 1) & 0xffu), 0, 0, 0, 0, true};
  EXPECT_TRUE(t().bind_mw(unbind, pdn_, kQpA));
  EXPECT_EQ(t().windows_bound_to(mr_), 0u);
  EXPECT_TRUE(t().dereg_mr(mr_));
  for (std::uint32_t k : {w1, a, b}) EXPECT_TRUE(t().dealloc_mw(k));
}

// An atomic checks its address (an offset, for a zero-based window) for
// 8-byte alignment before it translates: the byte the offset names must be
// aligned too, or the 8 bytes could straddle a page.
TEST_F(MwTables, ZeroBasedAtomicWindowMustStartAligned) {
  const std::uint32_t w = t().alloc_mw(pdn_, MwType::kType2).value();
  const std::uint32_t zb_atomic = ACCESS_REMOTE_ATOMIC | ACCESS_ZERO_BASED;
  EXPECT_FALSE(t().bind_mw(bind(w, 4096 - 4, 64, false, zb_atomic), pdn_, kQpA));
  MwBind ok = bind(w, 4096 - 8, 64, false, zb_atomic);
  ASSERT_TRUE(t().bind_mw(ok, pdn_, kQpA));
  auto tr = dev_->tables().translate(ok.new_rkey, 0, 8, ACCESS_REMOTE_ATOMIC, pdn_, kQpA);
  ASSERT_TRUE(tr);
  EXPECT_EQ(tr->pieces().front().addr, reinterpret_cast<std::byte*>(base_ + 4096 - 8));
  EXPECT_FALSE(dev_->tables().translate(ok.new_rkey, 4, 8, ACCESS_REMOTE_ATOMIC, pdn_, kQpA));
  EXPECT_TRUE(t().dealloc_mw(w));
}

}  // namespace
}  // namespace srdma::hca
