// Memory windows (IBA 10.6.7) through the verbs core: type 1 and type 2
// binds, the data path through a window (window checks, then the region's),
// every bind refusal, deregistration and invalidation rules, remote
// invalidation, a hostile peer guessing and reusing window keys, and an
// invalidation racing a store translated before it (held deterministically
// at the window's MPT read).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <string>
#include <thread>

#include "frwr_fixture.h"
#include "hca/tpt_cache.h"
#include "srdma/mw.h"
#include "srdma/pd.h"

namespace srdma {
namespace {

using test::FrwrNode;
using test::kPage;

constexpr std::uint32_t kRw = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
constexpr std::uint32_t kRemoteRw = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;

// A target that binds windows over its buffer (an MR with MW_BIND over all
// 16 pages) and a peer that uses them, connected.
class Mw : public ::testing::Test {
 protected:
  void SetUp() override { test::connect(target, peer, test::kFrwrPath); }
  std::uint64_t at(std::size_t off) const { return target.buf.addr(off); }
  Wc bind1(MemoryWindow& mw, std::size_t off, std::uint64_t len, std::uint32_t access = kRemoteRw) {
    auto r = target.qp->bind_mw(mw, MwBindInfo{&bindable, at(off), len, access}, 5);
    if (!r) {
      ADD_FAILURE() << r.error().reason;
      return Wc{};
    }
    return test::poll_one(*target.cq);
  }
  SendWr bind2_wr(MemoryWindow& mw, std::uint32_t rkey, MemoryRegion* mr, std::uint64_t addr, std::uint64_t len,
                  std::uint32_t access = kRemoteRw) {
    SendWr w;
    w.wr_id = 6;
    w.opcode = WrOpcode::kBindMw;
    w.send_flags = SEND_SIGNALED;
    w.bind_mw = {&mw, rkey, MwBindInfo{mr, addr, len, access}};
    return w;
  }
  Wc bind2(QueuePair& qp, CompletionQueue& cq, MemoryWindow& mw, std::size_t off, std::uint64_t len,
           std::uint32_t access = kRemoteRw) {
    const std::uint32_t rkey = mw.next_rkey();
    auto r = qp.post_send(bind2_wr(mw, rkey, &bindable, at(off), len, access));
    if (!r) {
      ADD_FAILURE() << r.error().reason;
      return Wc{};
    }
    Wc wc = test::poll_one(cq);
    if (wc.status == WcStatus::kSuccess) mw.set_rkey(rkey);
    return wc;
  }
  Wc rdma(WrOpcode op, std::size_t local_off, std::uint32_t len, std::uint64_t raddr, std::uint32_t rkey) {
    return test::rdma(peer, local_off, len, op, raddr, rkey);
  }
  auto tr(std::uint32_t key, std::uint64_t iova, std::uint64_t len, std::uint32_t access, std::uint32_t qpn = 0) {
    return target.dev.translate(key, iova, len, access, target.pd.pd_num(), qpn);
  }

  FrwrNode target, peer;
  MemoryRegion bindable = target.pd.reg_mr(target.buf.data(), target.buf.size(), kRw | ACCESS_MW_BIND).value();
};

TEST_F(Mw, Type1BindWriteReadRebindAndUnbind) {
  MemoryWindow mw = target.pd.alloc_mw(MwType::kType1).value();
  const std::uint32_t alloc_key = mw.rkey();
  EXPECT_EQ(tr(alloc_key, at(0), 8, ACCESS_REMOTE_READ).error(), Refusal::kNotHwOwned) << "unbound";
  Wc b = bind1(mw, 2 * kPage, 2 * kPage);
  ASSERT_EQ(b.status, WcStatus::kSuccess) << wc_status_str(b.status);
  EXPECT_EQ(b.opcode, WcOpcode::kBindMw);
  EXPECT_EQ(b.wr_id, 5u);
  EXPECT_EQ(mw.rkey(), (alloc_key & ~0xffu) | ((alloc_key + 1) & 0xffu)) << "the key byte advances";
  EXPECT_EQ(target.dev.translate(bindable.lkey(), at(0), 8, 0, target.pd.pd_num()).has_value(), true);

  for (std::size_t i = 0; i < 2 * kPage; ++i) peer.buf[i] = static_cast<std::uint8_t>(i * 7 + 1);
  ASSERT_EQ(rdma(WrOpcode::kRdmaWrite, 0, 2 * kPage, at(2 * kPage), mw.rkey()).status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(target.buf.data() + 2 * kPage, peer.buf.data(), 2 * kPage), 0);
  EXPECT_EQ(target.buf[2 * kPage - 1], 0) << "nothing before the window";
  EXPECT_EQ(target.buf[4 * kPage], 0) << "nothing after it";
  ASSERT_EQ(rdma(WrOpcode::kRdmaRead, 4 * kPage, 100, at(3 * kPage), mw.rkey()).status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(peer.buf.data() + 4 * kPage, peer.buf.data() + kPage, 100), 0);

  // A rebind moves the window and kills the old key.
  const std::uint32_t first = mw.rkey();
  ASSERT_EQ(bind1(mw, 8 * kPage, kPage, ACCESS_REMOTE_READ).status, WcStatus::kSuccess);
  EXPECT_NE(mw.rkey(), first);
  EXPECT_EQ(tr(first, at(2 * kPage), 8, ACCESS_REMOTE_READ).error(), Refusal::kKeyMismatch);
  EXPECT_TRUE(tr(mw.rkey(), at(8 * kPage), kPage, ACCESS_REMOTE_READ));
  EXPECT_EQ(tr(mw.rkey(), at(8 * kPage), 8, ACCESS_REMOTE_WRITE).error(), Refusal::kAccessDenied);
  // Unbind: length 0, no MR.
  ASSERT_TRUE(target.qp->bind_mw(mw, MwBindInfo{}, 7));
  EXPECT_EQ(test::poll_one(*target.cq).status, WcStatus::kSuccess);
  EXPECT_EQ(tr(mw.rkey(), at(8 * kPage), 8, ACCESS_REMOTE_READ).error(), Refusal::kNotHwOwned);
  EXPECT_TRUE(mw.dealloc());
  EXPECT_TRUE(bindable.dereg()) << "no window bound any more";
}

TEST_F(Mw, WindowChecksThenTheRegionsPerByte) {
  MemoryWindow mw = target.pd.alloc_mw(MwType::kType1).value();
  ASSERT_EQ(bind1(mw, kPage + 10, 100, ACCESS_REMOTE_READ).status, WcStatus::kSuccess);
  const std::uint32_t k = mw.rkey();
  EXPECT_TRUE(tr(k, at(kPage + 10), 100, ACCESS_REMOTE_READ));
  EXPECT_EQ(tr(k, at(kPage + 9), 2, ACCESS_REMOTE_READ).error(), Refusal::kOutOfBounds);
  EXPECT_EQ(tr(k, at(kPage + 109), 2, ACCESS_REMOTE_READ).error(), Refusal::kOutOfBounds);
  EXPECT_EQ(tr(k, at(kPage + 10), ~std::uint64_t{0}, ACCESS_REMOTE_READ).error(), Refusal::kOutOfBounds);
  // An R_Key only: no local access through a window.
  EXPECT_EQ(tr(k, at(kPage + 10), 8, 0).error(), Refusal::kAccessDenied);
  EXPECT_EQ(tr(k, at(kPage + 10), 8, ACCESS_LOCAL_WRITE).error(), Refusal::kAccessDenied);
  EXPECT_EQ(tr(k, at(kPage + 10), 8, ACCESS_REMOTE_ATOMIC).error(), Refusal::kAccessDenied);
  EXPECT_EQ(target.dev.translate(k, at(kPage + 10), 8, ACCESS_REMOTE_READ, target.pd.pd_num() + 1).error(),
            Refusal::kPdMismatch);
  auto pieces = tr(k, at(kPage + 10), 100, ACCESS_REMOTE_READ)->pieces();
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].addr, reinterpret_cast<std::byte*>(target.buf.data() + kPage + 10));
  // A local use of the window key is a local protection error.
  Sge s{at(kPage + 10), 8, k};
  EXPECT_EQ(test::rdma(*target.qp, *target.cq, s, WrOpcode::kRdmaWrite, peer.addr(), peer.mr.rkey()).status,
            WcStatus::kLocProtErr);
}

TEST_F(Mw, WriteOutsideTheWindowIsARemoteAccessErrorAndTouchesNothing) {
  MemoryWindow mw = target.pd.alloc_mw(MwType::kType1).value();
  ASSERT_EQ(bind1(mw, 4 * kPage, kPage).status, WcStatus::kSuccess);
  std::memset(peer.buf.data(), 0xab, 2 * kPage);
  // Straddles the window's end: one byte past it.
  EXPECT_EQ(rdma(WrOpcode::kRdmaWrite, 0, 16, at(5 * kPage - 8), mw.rkey()).status, WcStatus::kRemAccessErr);
  for (std::size_t i = 0; i < target.buf.size(); ++i) ASSERT_EQ(target.buf[i], 0) << "byte " << i << " written";
  EXPECT_EQ(target.qp->state(), QpState::kErr) << "class C: the responder's QP ends too";
}

TEST_F(Mw, ReadOutsideTheWindowIsARemoteAccessError) {
  MemoryWindow mw = target.pd.alloc_mw(MwType::kType1).value();
  ASSERT_EQ(bind1(mw, 4 * kPage, kPage, ACCESS_REMOTE_READ).status, WcStatus::kSuccess);
  EXPECT_EQ(rdma(WrOpcode::kRdmaRead, 0, 8, at(4 * kPage - 1), mw.rkey()).status, WcStatus::kRemAccessErr);
}

TEST_F(Mw, AtomicNeedsTheWindowsAtomicRight) {
  MemoryWindow mw = target.pd.alloc_mw(MwType::kType1).value();
  ASSERT_EQ(bind1(mw, 0, kPage, kRemoteRw | ACCESS_REMOTE_ATOMIC).status, WcStatus::kSuccess);
  SendWr w;
  Sge s{peer.buf.addr(), 8, peer.mr.lkey()};
  w.opcode = WrOpcode::kAtomicFetchAndAdd;
  w.sg_list = &s;
  w.num_sge = 1;
  w.remote_addr = at(64);
  w.rkey = mw.rkey();
  w.compare_add = 5;
  w.send_flags = SEND_SIGNALED;
  ASSERT_TRUE(peer.qp->post_send(w));
  EXPECT_EQ(test::poll_one(*peer.cq).status, WcStatus::kSuccess);
  std::uint64_t v;
  std::memcpy(&v, target.buf.data() + 64, 8);
  EXPECT_EQ(v, 5u);
  // A window that grants no atomic: refused at the translation.
  ASSERT_EQ(bind1(mw, 0, kPage, kRemoteRw).status, WcStatus::kSuccess);
  EXPECT_EQ(tr(mw.rkey(), at(64), 8, ACCESS_REMOTE_ATOMIC).error(), Refusal::kAccessDenied);
}

TEST_F(Mw, Type2BindByWorkRequestLocalInvalidateAndRebind) {
  MemoryWindow mw = target.pd.alloc_mw(MwType::kType2).value();
  const std::uint32_t alloc_key = mw.rkey();
  Wc b = bind2(*target.qp, *target.cq, mw, 0, 2 * kPage);
  ASSERT_EQ(b.status, WcStatus::kSuccess) << wc_status_str(b.status);
  EXPECT_EQ(b.opcode, WcOpcode::kBindMw);
  EXPECT_NE(mw.rkey(), alloc_key);
  const std::uint32_t qpn = target.qp->qp_num();
  EXPECT_TRUE(tr(mw.rkey(), at(0), 8, ACCESS_REMOTE_WRITE, qpn));
  EXPECT_EQ(tr(mw.rkey(), at(0), 8, ACCESS_REMOTE_WRITE, qpn ^ 1).error(), Refusal::kQpMismatch) << "type 2B";
  std::memcpy(peer.buf.data(), "window2", 7);
  ASSERT_EQ(rdma(WrOpcode::kRdmaWrite, 0, 7, at(kPage), mw.rkey()).status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(target.buf.data() + kPage, "window2", 7), 0);

  // A valid type 2 window is not bound again (o10-37.2.30) ...
  // (checked on a fresh pair below); LOCAL_INV frees it.
  ASSERT_TRUE(target.qp->post_send(test::inv_wr(mw.rkey(), 8)));
  Wc inv = test::poll_one(*target.cq);
  ASSERT_EQ(inv.status, WcStatus::kSuccess) << wc_status_str(inv.status);
  EXPECT_EQ(inv.opcode, WcOpcode::kLocalInv);
  EXPECT_EQ(tr(mw.rkey(), at(0), 8, ACCESS_REMOTE_WRITE, qpn).error(), Refusal::kNotHwOwned);
  const std::uint32_t old = mw.rkey();
  ASSERT_EQ(bind2(*target.qp, *target.cq, mw, 8 * kPage, kPage, ACCESS_REMOTE_READ | ACCESS_ZERO_BASED).status,
            WcStatus::kSuccess);
  EXPECT_EQ(tr(old, at(0), 8, ACCESS_REMOTE_READ, qpn).error(), Refusal::kKeyMismatch);
  // Zero-based: the peer addresses offsets 0 .. length.
  target.buf[8 * kPage + 100] = 0x5c;
  ASSERT_EQ(rdma(WrOpcode::kRdmaRead, 0, 1, 100, mw.rkey()).status, WcStatus::kSuccess);
  EXPECT_EQ(peer.buf[0], 0x5c);
  EXPECT_EQ(tr(mw.rkey(), kPage - 1, 2, ACCESS_REMOTE_READ, qpn).error(), Refusal::kOutOfBounds);
  EXPECT_EQ(tr(mw.rkey(), at(8 * kPage), 1, ACCESS_REMOTE_READ, qpn).error(), Refusal::kOutOfBounds)
      << "a zero-based window's addresses are offsets, not virtual addresses";
}

TEST_F(Mw, SendWithInvalidateFromThePeerFreesAType2Window) {
  MemoryWindow mw = target.pd.alloc_mw(MwType::kType2).value();
  ASSERT_EQ(bind2(*target.qp, *target.cq, mw, 0, kPage).status, WcStatus::kSuccess);
  Sge rs{target.buf.addr(10 * kPage), 64, target.mr.lkey()};
  RecvWr rw;
  rw.wr_id = 51;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ASSERT_TRUE(target.qp->post_recv(rw));
  Sge ss{peer.buf.addr(), 4, peer.mr.lkey()};
  SendWr sw;
  sw.opcode = WrOpcode::kSendWithInv;
  sw.sg_list = &ss;
  sw.num_sge = 1;
  sw.invalidate_rkey = mw.rkey();
  sw.send_flags = SEND_SIGNALED;
  ASSERT_TRUE(peer.qp->post_send(sw));
  EXPECT_EQ(test::poll_one(*peer.cq).status, WcStatus::kSuccess);
  Wc r = test::poll_one(*target.cq);
  ASSERT_EQ(r.status, WcStatus::kSuccess) << wc_status_str(r.status);
  EXPECT_TRUE(r.wc_flags & WC_WITH_INVALIDATE);
  EXPECT_EQ(r.invalidated_rkey, mw.rkey());
  EXPECT_EQ(rdma(WrOpcode::kRdmaRead, 0, 8, at(0), mw.rkey()).status, WcStatus::kRemAccessErr);
}

TEST_F(Mw, SendWithInvalidateOfAType1WindowIsAnInvalidRequest) {
  MemoryWindow mw = target.pd.alloc_mw(MwType::kType1).value();
  ASSERT_EQ(bind1(mw, 0, kPage).status, WcStatus::kSuccess);
  Sge rs{target.buf.addr(10 * kPage), 64, target.mr.lkey()};
  RecvWr rw;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ASSERT_TRUE(target.qp->post_recv(rw));
  Sge ss{peer.buf.addr(), 4, peer.mr.lkey()};
  SendWr sw;
  sw.opcode = WrOpcode::kSendWithInv;
  sw.sg_list = &ss;
  sw.num_sge = 1;
  sw.invalidate_rkey = mw.rkey();
  sw.send_flags = SEND_SIGNALED;
  ASSERT_TRUE(peer.qp->post_send(sw));
  EXPECT_EQ(test::poll_one(*peer.cq).status, WcStatus::kRemInvReqErr);
  EXPECT_EQ(test::poll_one(*target.cq).status, WcStatus::kMemMgmtOpErr);
  EXPECT_TRUE(tr(mw.rkey(), at(0), 8, ACCESS_REMOTE_READ)) << "a type 1 window is not invalidated (o10-37.2.26)";
}

TEST_F(Mw, RegionWithBoundWindowsIsNotDeregisteredAndDeallocUnbinds) {
  MemoryWindow w1 = target.pd.alloc_mw(MwType::kType1).value();
  MemoryWindow w2 = target.pd.alloc_mw(MwType::kType2).value();
  ASSERT_EQ(bind1(w1, 0, kPage).status, WcStatus::kSuccess);
  ASSERT_EQ(bind2(*target.qp, *target.cq, w2, kPage, kPage).status, WcStatus::kSuccess);
  auto r = bindable.dereg();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EINVAL) << "rxe_dereg_mr's answer";
  EXPECT_TRUE(tr(w1.rkey(), at(0), 8, ACCESS_REMOTE_READ)) << "a refused dereg changes nothing";
  EXPECT_TRUE(target.pd.dealloc().error().code == EBUSY) << "windows hold their PD";
  // Deallocating a bound window invalidates it.
  const std::uint32_t k1 = w1.rkey();
  ASSERT_TRUE(w1.dealloc());
  EXPECT_FALSE(tr(k1, at(0), 8, ACCESS_REMOTE_READ));
  EXPECT_FALSE(bindable.dereg()) << "w2 is still bound";
  ASSERT_TRUE(w2.dealloc());
  EXPECT_TRUE(bindable.dereg());
  EXPECT_FALSE(w2.dealloc()) << "twice";
}

TEST_F(Mw, FastRegMrWithBoundWindowsIsNotInvalidatedOrFreed) {
  MemoryRegion frmr = target.pd.alloc_mr(MrType::kMemReg, 4).value();
  ASSERT_EQ(test::map_and_register(*target.qp, *target.cq, frmr, target.buf, 0, 2 * kPage, kRw | ACCESS_MW_BIND)
                .status,
            WcStatus::kSuccess);
  MemoryWindow mw = target.pd.alloc_mw(MwType::kType1).value();
  auto b = target.qp->bind_mw(mw, MwBindInfo{&frmr, frmr.iova(), kPage, kRemoteRw}, 9);
  ASSERT_TRUE(b);
  ASSERT_EQ(test::poll_one(*target.cq).status, WcStatus::kSuccess);
  std::memcpy(peer.buf.data(), "frwr+mw", 7);
  ASSERT_EQ(rdma(WrOpcode::kRdmaWrite, 0, 7, frmr.iova() + 8, mw.rkey()).status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(target.buf.data() + 8, "frwr+mw", 7), 0);
  EXPECT_FALSE(frmr.dereg());
  ASSERT_TRUE(target.qp->post_send(test::inv_wr(frmr.rkey(), 10)));
  EXPECT_EQ(test::poll_one(*target.cq).status, WcStatus::kMemMgmtOpErr) << "rxe_invalidate_mr: MR has MWs bound";
  ASSERT_TRUE(mw.dealloc());
  EXPECT_TRUE(frmr.dereg());
}

// Every way a bind breaks a rule: completes with kMwBindErr, binds nothing,
// and (a local error) ends the QP. Each case on a fresh pair.
TEST(MwBindRefusals, EachRuleCompletesWithMwBindErr) {
  // What a case made that must outlive its post (MRs, PDs).
  struct Keep {
    std::deque<ProtectionDomain> pds;
    std::deque<MemoryRegion> mrs;
  };
  struct Case {
    const char* rule;
    std::function<Result<void>(test::FrwrNode&, MemoryWindow&, MemoryRegion&, Keep&)> post;
    MwType type;
    bool first_bind_stays = false;  // the case's first bind succeeded and stays valid
  };
  auto wr2 = [](MemoryWindow& mw, std::uint32_t rkey, MemoryRegion* mr, std::uint64_t addr, std::uint64_t len,
                std::uint32_t access) {
    SendWr w;
    w.opcode = WrOpcode::kBindMw;
    w.send_flags = SEND_SIGNALED;
    w.bind_mw = {&mw, rkey, MwBindInfo{mr, addr, len, access}};
    return w;
  };
  auto verb = [](test::FrwrNode& n, MemoryWindow& mw, MemoryRegion* mr, std::uint64_t addr, std::uint64_t len,
                 std::uint32_t access) -> Result<void> {
    auto r = n.qp->bind_mw(mw, MwBindInfo{mr, addr, len, access});
    if (!r) return std::unexpected(r.error());
    return {};
  };
  const std::vector<Case> cases = {
      {"C10-73: the region has no MW_BIND",
       [&](test::FrwrNode& n, MemoryWindow& mw, MemoryRegion&, Keep&) {
         return verb(n, mw, &n.mr, n.addr(), 64, kRemoteRw);
       },
       MwType::kType1},
      {"C10-75: the window reaches past the region",
       [&](test::FrwrNode& n, MemoryWindow& mw, MemoryRegion& m, Keep&) {
         return verb(n, mw, &m, n.addr(15 * kPage), 2 * kPage, kRemoteRw);
       },
       MwType::kType1},
      {"C10-75: the window starts before the region",
       [&](test::FrwrNode& n, MemoryWindow& mw, MemoryRegion& m, Keep&) {
         return verb(n, mw, &m, n.addr() - 1, 8, ACCESS_REMOTE_READ);
       },
       MwType::kType1},
      {"o10-36.2.2: a zero-based type 1 window",
       [&](test::FrwrNode& n, MemoryWindow& mw, MemoryRegion& m, Keep&) {
         return verb(n, mw, &m, n.addr(), 8, ACCESS_REMOTE_READ | ACCESS_ZERO_BASED);
       },
       MwType::kType1},
      {"o10-37.2.30: a type 2 window bound while valid",
       [&](test::FrwrNode& n, MemoryWindow& mw, MemoryRegion& m, Keep&) -> Result<void> {
         if (auto r = n.qp->post_send(wr2(mw, mw.next_rkey(), &m, n.addr(), 64, kRemoteRw)); !r) return r;
         if (test::poll_one(*n.cq).status != WcStatus::kSuccess) return make_error(EIO, "first bind failed");
         const std::uint32_t again = ((mw.rkey() + 2) & 0xffu) | (mw.rkey() & ~0xffu);
         return n.qp->post_send(wr2(mw, again, &m, n.addr(), 64, kRemoteRw));
       },
       MwType::kType2, true},
      {"o10-37.2.40: a type 2 window bound with length 0",
       [&](test::FrwrNode& n, MemoryWindow& mw, MemoryRegion&, Keep&) {
         return n.qp->post_send(wr2(mw, mw.next_rkey(), nullptr, 0, 0, 0));
       },
       MwType::kType2},
      {"the rkey names another MPT index",
       [&](test::FrwrNode& n, MemoryWindow& mw, MemoryRegion& m, Keep&) {
         return n.qp->post_send(wr2(mw, mw.rkey() ^ 0x100, &m, n.addr(), 64, kRemoteRw));
       },
       MwType::kType2},
      {"the region is a free fast-registration MR",
       [&](test::FrwrNode& n, MemoryWindow& mw, MemoryRegion&, Keep& keep) -> Result<void> {
         MemoryRegion& frmr = keep.mrs.emplace_back(n.pd.alloc_mr(MrType::kMemReg, 2).value());
         return n.qp->post_send(wr2(mw, mw.next_rkey(), &frmr, 0, 64, kRemoteRw));
       },
       MwType::kType2},
      {"C10-72: the region is of another PD",
       [&](test::FrwrNode& n, MemoryWindow& mw, MemoryRegion&, Keep& keep) -> Result<void> {
         ProtectionDomain& other = keep.pds.emplace_back(n.dev.alloc_pd().value());
         MemoryRegion& foreign = keep.mrs.emplace_back(other.reg_mr(n.buf.data(), kPage, kRw | ACCESS_MW_BIND).value());
         return n.qp->post_send(wr2(mw, mw.next_rkey(), &foreign, n.addr(), 64, kRemoteRw));
       },
       MwType::kType2},
      {"C10-74: remote write on a region without local write",
       [&](test::FrwrNode& n, MemoryWindow& mw, MemoryRegion&, Keep& keep) -> Result<void> {
         MemoryRegion& ro =
             keep.mrs.emplace_back(n.pd.reg_mr(n.buf.data(), kPage, ACCESS_REMOTE_READ | ACCESS_MW_BIND).value());
         return verb(n, mw, &ro, n.addr(), 64, ACCESS_REMOTE_WRITE);
       },
       MwType::kType1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.rule);
    test::FrwrNode target, peer;
    test::connect(target, peer, test::kFrwrPath);
    MemoryRegion m = target.pd.reg_mr(target.buf.data(), target.buf.size(), kRw | ACCESS_MW_BIND).value();
    MemoryWindow mw = target.pd.alloc_mw(c.type).value();
    Keep keep;
    const std::uint32_t key_before = mw.rkey();
    auto posted = c.post(target, mw, m, keep);
    ASSERT_TRUE(posted) << posted.error().reason;
    Wc wc = test::poll_one(*target.cq);
    EXPECT_EQ(wc.status, WcStatus::kMwBindErr) << wc_status_str(wc.status);
    EXPECT_EQ(wc.opcode, WcOpcode::kBindMw);
    EXPECT_EQ(target.qp->state(), QpState::kErr);
    if (c.first_bind_stays) {
      EXPECT_TRUE(target.dev.translate(mw.next_rkey(), target.addr(), 8, ACCESS_REMOTE_READ, target.pd.pd_num(),
                                       target.qp->qp_num()))
          << "the refused bind changed the valid window";
      ASSERT_TRUE(mw.dealloc());
    }
    for (std::uint32_t k : {key_before, mw.rkey(), mw.next_rkey(), ((mw.rkey() + 2) & 0xffu) | (mw.rkey() & ~0xffu)})
      for (std::uint32_t q : {0u, target.qp->qp_num()})
        EXPECT_FALSE(target.dev.translate(k, target.addr(), 8, ACCESS_REMOTE_READ, target.pd.pd_num(), q));
    EXPECT_TRUE(m.dereg()) << "a refused bind leaves no window on the region";
  }
}

TEST_F(Mw, PostTimeRefusals) {
  MemoryWindow t1 = target.pd.alloc_mw(MwType::kType1).value();
  MemoryWindow t2 = target.pd.alloc_mw(MwType::kType2).value();
  const std::uint32_t t1_key = t1.rkey();
  // A type 1 window is not bound by a WR, a type 2 not by the verb.
  auto r = target.qp->post_send(bind2_wr(t1, t1.next_rkey(), &bindable, at(0), 64));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EINVAL);
  auto v = target.qp->bind_mw(t2, MwBindInfo{&bindable, at(0), 64, kRemoteRw});
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code, EINVAL);
  // An address or length without an MR; unknown access bits; an MR of
  // another PD than the window (verbs.h's EPERM).
  EXPECT_EQ(target.qp->bind_mw(t1, MwBindInfo{nullptr, at(0), 64, kRemoteRw}).error().code, EINVAL);
  EXPECT_EQ(target.qp->post_send(bind2_wr(t2, t2.next_rkey(), nullptr, 0, 64)).error().code, EINVAL);
  EXPECT_EQ(target.qp->post_send(bind2_wr(t2, t2.next_rkey(), &bindable, at(0), 64, ACCESS_LOCAL_WRITE))
                .error()
                .code,
            EINVAL);
  ProtectionDomain other = target.dev.alloc_pd().value();
  MemoryRegion foreign = other.reg_mr(target.buf.data(), kPage, kRw | ACCESS_MW_BIND).value();
  EXPECT_EQ(target.qp->bind_mw(t1, MwBindInfo{&foreign, at(0), 64, kRemoteRw}).error().code, EPERM);
  SendWr inl = bind2_wr(t2, t2.next_rkey(), &bindable, at(0), 64);
  inl.send_flags |= SEND_INLINE;
  EXPECT_EQ(target.qp->post_send(inl).error().code, EINVAL);
  // A deallocated window.
  MemoryWindow gone = target.pd.alloc_mw(MwType::kType1).value();
  ASSERT_TRUE(gone.dealloc());
  EXPECT_EQ(target.qp->bind_mw(gone, MwBindInfo{&bindable, at(0), 64, kRemoteRw}).error().code, EINVAL);
  EXPECT_EQ(target.pd.alloc_mw(static_cast<MwType>(3)).error().code, EINVAL);
  EXPECT_EQ(t1.rkey(), t1_key) << "refusals leave the key alone";
  EXPECT_EQ(target.qp->state(), QpState::kRts) << "nothing was posted";
}

TEST(MwQpState, BindIsRefusedBeforeRtsAndAUdQpHasNoBind) {
  test::FrwrNode n;
  MemoryRegion m = n.pd.reg_mr(n.buf.data(), kPage, kRw | ACCESS_MW_BIND).value();
  MemoryWindow mw = n.pd.alloc_mw(MwType::kType1).value();
  EXPECT_EQ(n.qp->bind_mw(mw, MwBindInfo{&m, n.addr(), 64, kRemoteRw}).error().code, EINVAL) << "RESET";
  auto ud = n.pd.create_qp(QpInitAttr{.send_cq = n.cq.get(), .recv_cq = n.cq.get(), .cap = QpCaps{8, 8, 1, 1, 0},
                                      .qp_type = QpType::kUd})
                .value();
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qkey = 0x1234;
  ASSERT_TRUE(ud->modify(a, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_QKEY));
  a.qp_state = QpState::kRtr;
  ASSERT_TRUE(ud->modify(a, QP_STATE));
  a.qp_state = QpState::kRts;
  ASSERT_TRUE(ud->modify(a, QP_STATE | QP_SQ_PSN));
  auto r = ud->bind_mw(mw, MwBindInfo{&m, n.addr(), 64, kRemoteRw});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EINVAL) << "BIND_MW's row: RC and UC only";
}

// Type 2B: the window is usable only through the QP that bound it; a type
// 1 window through any QP of its PD. Destroying the QP frees its windows.
TEST(MwQpAssociation, Type2OnlyThroughItsQpType1ThroughAny) {
  test::FrwrNode target, peer, peer2;
  test::connect(target, peer, test::kFrwrPath);
  auto qp2 = target.pd.create_qp(QpInitAttr{target.cq.get(), target.cq.get(), {64, 64, 4, 4, 64}, false, nullptr})
                 .value();
  test::connect_qps(*qp2, target.dev, *peer2.qp, peer2.dev, test::kFrwrPath);
  MemoryRegion m = target.pd.reg_mr(target.buf.data(), target.buf.size(), kRw | ACCESS_MW_BIND).value();
  MemoryWindow t1 = target.pd.alloc_mw(MwType::kType1).value();
  MemoryWindow t2 = target.pd.alloc_mw(MwType::kType2).value();
  ASSERT_TRUE(target.qp->bind_mw(t1, MwBindInfo{&m, target.addr(0), kPage, kRemoteRw}));
  ASSERT_EQ(test::poll_one(*target.cq).status, WcStatus::kSuccess);
  SendWr w;
  w.opcode = WrOpcode::kBindMw;
  w.send_flags = SEND_SIGNALED;
  w.bind_mw = {&t2, t2.next_rkey(), MwBindInfo{&m, target.addr(kPage), kPage, kRemoteRw}};
  ASSERT_TRUE(qp2->post_send(w));  // bound through qp2
  ASSERT_EQ(test::poll_one(*target.cq).status, WcStatus::kSuccess);
  t2.set_rkey(w.bind_mw.rkey);
  // Type 1 through both QPs.
  EXPECT_EQ(test::rdma(peer, 0, 8, WrOpcode::kRdmaWrite, target.addr(0), t1.rkey()).status, WcStatus::kSuccess);
  EXPECT_EQ(test::rdma(peer2, 0, 8, WrOpcode::kRdmaWrite, target.addr(8), t1.rkey()).status, WcStatus::kSuccess);
  // Type 2 through qp2 only.
  EXPECT_EQ(test::rdma(peer2, 0, 8, WrOpcode::kRdmaWrite, target.addr(kPage), t2.rkey()).status,
            WcStatus::kSuccess);
  EXPECT_EQ(test::rdma(peer, 0, 8, WrOpcode::kRdmaWrite, target.addr(kPage), t2.rkey()).status,
            WcStatus::kRemAccessErr);
  // Destroying qp2 invalidates t2 (its QPN may come back on a new QP) ...
  const std::uint32_t qpn2 = qp2->qp_num();
  qp2.reset();
  EXPECT_EQ(target.dev.translate(t2.rkey(), target.addr(kPage), 8, ACCESS_REMOTE_READ, target.pd.pd_num(), qpn2)
                .error(),
            Refusal::kNotHwOwned);
  // ... so the region is free of it.
  ASSERT_TRUE(t1.dealloc());
  EXPECT_TRUE(m.dereg());
}

// A type 2 window is remotely invalidated only through the QP it is bound
// to: a peer of another QP of the same PD that names its key gets NAK
// Invalid Request and the window stays.
TEST(MwQpAssociation, SendWithInvalidateThroughAnotherQpIsRefused) {
  test::FrwrNode target, peer, peer2;
  test::connect(target, peer, test::kFrwrPath);
  auto qp2 = target.pd.create_qp(QpInitAttr{target.cq.get(), target.cq.get(), {64, 64, 4, 4, 64}, false, nullptr})
                 .value();
  test::connect_qps(*qp2, target.dev, *peer2.qp, peer2.dev, test::kFrwrPath);
  MemoryRegion m = target.pd.reg_mr(target.buf.data(), target.buf.size(), kRw | ACCESS_MW_BIND).value();
  MemoryWindow t2 = target.pd.alloc_mw(MwType::kType2).value();
  SendWr w;
  w.opcode = WrOpcode::kBindMw;
  w.send_flags = SEND_SIGNALED;
  w.bind_mw = {&t2, t2.next_rkey(), MwBindInfo{&m, target.addr(0), kPage, kRemoteRw}};
  ASSERT_TRUE(target.qp->post_send(w));
  ASSERT_EQ(test::poll_one(*target.cq).status, WcStatus::kSuccess);
  Sge rs{target.buf.addr(10 * kPage), 64, target.mr.lkey()};
  RecvWr rw;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ASSERT_TRUE(qp2->post_recv(rw));
  Sge ss{peer2.buf.addr(), 4, peer2.mr.lkey()};
  SendWr sw;
  sw.opcode = WrOpcode::kSendWithInv;
  sw.sg_list = &ss;
  sw.num_sge = 1;
  sw.invalidate_rkey = w.bind_mw.rkey;
  sw.send_flags = SEND_SIGNALED;
  ASSERT_TRUE(peer2.qp->post_send(sw));
  EXPECT_EQ(test::poll_one(*peer2.cq).status, WcStatus::kRemInvReqErr);
  EXPECT_EQ(test::poll_one(*target.cq).status, WcStatus::kMemMgmtOpErr);
  EXPECT_TRUE(target.dev.translate(w.bind_mw.rkey, target.addr(0), 8, ACCESS_REMOTE_READ, target.pd.pd_num(),
                                   target.qp->qp_num()))
      << "still bound";
}

// A hostile peer: it knows one window key and guesses its neighbours
// (every other key byte, the next MPT indices), and replays keys of
// windows that were unbound, rebound or deallocated and allocated again.
TEST_F(Mw, HostilePeerGuessingOrReusingWindowKeysGetsNothing) {
  MemoryWindow mw = target.pd.alloc_mw(MwType::kType1).value();
  ASSERT_EQ(bind1(mw, 0, 4 * kPage).status, WcStatus::kSuccess);
  const std::uint32_t k = mw.rkey();
  int granted = 0;
  for (std::uint32_t b = 0; b < 256; ++b) {
    const std::uint32_t guess = (k & ~0xffu) | b;
    if (tr(guess, at(0), 8, ACCESS_REMOTE_WRITE)) ++granted;
  }
  EXPECT_EQ(granted, 1) << "only the exact key";
  for (std::uint32_t d = 1; d < 64; ++d) {
    EXPECT_FALSE(tr(k + (d << 8), at(0), 8, ACCESS_REMOTE_WRITE));
    EXPECT_FALSE(tr(k - (d << 8), at(0), 8, ACCESS_REMOTE_WRITE));
  }
  // Stale keys: after a rebind, after dealloc and a new alloc of the slot.
  std::vector<std::uint32_t> stale{k};
  ASSERT_EQ(bind1(mw, 0, 4 * kPage).status, WcStatus::kSuccess);
  stale.push_back(mw.rkey());
  ASSERT_TRUE(mw.dealloc());
  for (int i = 0; i < 32; ++i) {
    MemoryWindow again = target.pd.alloc_mw(MwType::kType1).value();
    ASSERT_EQ(bind1(again, 0, 4 * kPage).status, WcStatus::kSuccess);
    for (std::uint32_t s : stale) ASSERT_NE(again.rkey(), s) << "a stale key came back";
    stale.push_back(again.rkey());
    ASSERT_TRUE(again.dealloc());
  }
  MemoryWindow live = target.pd.alloc_mw(MwType::kType1).value();
  ASSERT_EQ(bind1(live, 0, 4 * kPage).status, WcStatus::kSuccess);
  for (std::uint32_t s : stale) EXPECT_FALSE(tr(s, at(0), 8, ACCESS_REMOTE_WRITE)) << std::hex << s;
  // On the wire: a stale key is a remote access error and writes nothing.
  std::memset(peer.buf.data(), 0xee, 64);
  EXPECT_EQ(rdma(WrOpcode::kRdmaWrite, 0, 64, at(0), stale.front()).status, WcStatus::kRemAccessErr);
  for (std::size_t i = 0; i < 4 * kPage; ++i) ASSERT_EQ(target.buf[i], 0) << "byte " << i;
}

// Holds the first thread whose translation misses on `index` between its
// MPT read and what follows, until released (a window's entry is never
// cached, so every translation through it passes here). A translation
// through a window reads its entry twice: translate() to find a window
// there, through_window() for the checks that decide; the gate holds the
// second.
struct MptReadGate {
  static inline std::atomic<std::uint32_t> index{~0u};
  static inline std::atomic<int> pass{0};  // reads of `index` let through first
  static inline std::atomic<bool> reached{false};
  static inline std::atomic<bool> released{false};
  static void hook(std::uint32_t i) {
    if (i != index.load() || pass.fetch_sub(1) > 0 || reached.exchange(true)) return;
    while (!released.load()) std::this_thread::yield();
  }
  explicit MptReadGate(std::uint32_t i) {
    index = i;
    pass = 1;
    reached = false;
    released = false;
    hca::TptCache::set_fill_hook_for_test(&MptReadGate::hook);
  }
  ~MptReadGate() {
    released = true;
    hca::TptCache::set_fill_hook_for_test(nullptr);
  }
  void wait_reached() const {
    while (!reached.load()) std::this_thread::yield();
  }
};

std::uint32_t mpt_index(const Device& dev, std::uint32_t key) {
  return ((key << 24) | (key >> 8)) & static_cast<std::uint32_t>(dev.profile().num_mpt - 1);
}

// An invalidation racing a WRITE through the window: the responder has
// read the window's entry (the key was valid) and is held before its store.
// LOCAL_INV must not complete before that store landed; a READ after the
// invalidation's completion is refused.
TEST_F(Mw, LocalInvalidateWaitsForAStoreTranslatedBeforeIt) {
  MemoryWindow mw = target.pd.alloc_mw(MwType::kType2).value();
  ASSERT_EQ(bind2(*target.qp, *target.cq, mw, 0, kPage).status, WcStatus::kSuccess);
  const std::uint32_t key = mw.rkey();
  const std::uint64_t payload = 0x0123456789abcdefull;
  std::memcpy(peer.buf.data(), &payload, 8);
  MptReadGate gate(mpt_index(target.dev, key));
  auto writer = std::async(std::launch::async, [&] {
    return rdma(WrOpcode::kRdmaWrite, 0, 8, at(256), key).status;
  });
  gate.wait_reached();  // the window's entry read, nothing stored yet
  std::uint64_t seen_at_completion = 0;
  auto invalidator = std::async(std::launch::async, [&] {
    if (!target.qp->post_send(test::inv_wr(key, 12))) return WcStatus::kGeneralErr;
    Wc wc = test::poll_one(*target.cq);
    std::memcpy(&seen_at_completion, target.buf.data() + 256, 8);
    return wc.status;
  });
  // The invalidation has taken the key away ...
  while (tr(key, at(256), 8, ACCESS_REMOTE_WRITE, target.qp->qp_num())) std::this_thread::yield();
  // ... and the held store goes on.
  MptReadGate::released = true;
  EXPECT_EQ(writer.get(), WcStatus::kSuccess) << "translated before the invalidation";
  ASSERT_EQ(invalidator.get(), WcStatus::kSuccess);
  EXPECT_EQ(seen_at_completion, payload) << "LOCAL_INV completed before the store through its key landed";
  EXPECT_EQ(rdma(WrOpcode::kRdmaRead, 8, 8, at(256), key).status, WcStatus::kRemAccessErr);
}

// The same race with an RDMA READ held after reading the window's entry:
// the invalidation waits for the held translation (no deadlock with the
// tables' lock it holds), the READ translated before it is answered with
// the window's bytes, and a READ after the invalidation's completion fails.
// (Where the READ's bytes are copied after the responder's window closed,
// they are read access the peer had a moment before, never a store: see
// DESIGN "An invalidation waits for the stores translated before it".)
TEST_F(Mw, LocalInvalidateRacingAHeldReadThroughTheWindow) {
  MemoryWindow mw = target.pd.alloc_mw(MwType::kType2).value();
  ASSERT_EQ(bind2(*target.qp, *target.cq, mw, 0, kPage, ACCESS_REMOTE_READ).status, WcStatus::kSuccess);
  const std::uint32_t key = mw.rkey();
  std::memcpy(target.buf.data() + 512, "read-before-invalidate", 22);
  MptReadGate gate(mpt_index(target.dev, key));
  auto reader = std::async(std::launch::async, [&] {
    return rdma(WrOpcode::kRdmaRead, 1024, 22, at(512), key).status;
  });
  gate.wait_reached();  // the READ has read the window's (valid) entry
  auto invalidator = std::async(std::launch::async, [&] {
    if (!target.qp->post_send(test::inv_wr(key, 13))) return WcStatus::kGeneralErr;
    return test::poll_one(*target.cq).status;
  });
  while (tr(key, at(512), 8, ACCESS_REMOTE_READ, target.qp->qp_num())) std::this_thread::yield();
  MptReadGate::released = true;
  EXPECT_EQ(reader.get(), WcStatus::kSuccess) << "translated before the invalidation";
  EXPECT_EQ(std::memcmp(peer.buf.data() + 1024, "read-before-invalidate", 22), 0);
  ASSERT_EQ(invalidator.get(), WcStatus::kSuccess);
  EXPECT_EQ(rdma(WrOpcode::kRdmaRead, 2048, 8, at(512), key).status, WcStatus::kRemAccessErr);
  EXPECT_EQ(peer.buf[2048], 0) << "the refused READ brought nothing";
}

}  // namespace
}  // namespace srdma
