// Fast registration work requests (FRWR): alloc_mr, map_mr_sg, inc_rkey,
// REG_MR / LOCAL_INV / SEND_WITH_INV in QP order, the per-QP MR pool, and
// REG/INV cycles on many QPs at once.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "frwr_fixture.h"

namespace srdma {
namespace {

using test::kPage;
using test::FrwrNode;
using test::poll_one;

constexpr std::uint32_t kRw = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;

std::vector<std::uint64_t> pages_of(const MemoryRegion& mr) {
  return {mr.page_list().begin(), mr.page_list().end()};
}

TEST(FrwrAllocMr, StartsFreeAndItsKeyFails) {
  FrwrNode target, peer;
  test::connect(target, peer, test::kFrwrPath);
  auto mr = target.pd.alloc_mr(MrType::kMemReg, 4);
  ASSERT_TRUE(mr) << mr.error().reason;
  EXPECT_EQ(mr->type(), MrType::kMemReg);
  EXPECT_EQ(mr->max_num_sg(), 4u);
  EXPECT_EQ(target.pd.usecnt(), 3);  // the user MR, the QP, this one
  Wc wc = test::rdma(peer, 0, 8, WrOpcode::kRdmaWrite, target.buf.addr(), mr->rkey());
  EXPECT_EQ(wc.status, WcStatus::kRemAccessErr);
  EXPECT_EQ(target.pd.alloc_mr(MrType::kUser, 4).error().code, EINVAL);
  EXPECT_EQ(target.pd.alloc_mr(MrType::kMemReg, 0).error().code, EINVAL);
  EXPECT_EQ(target.pd.alloc_mr(MrType::kMemReg, 1u << 30).error().code, EINVAL);
  ASSERT_TRUE(mr->dereg());
  EXPECT_EQ(target.pd.usecnt(), 2);
}

TEST(FrwrAllocMr, LocalUseOfAFreeKeyIsALocalProtectionError) {
  FrwrNode a, b;
  test::connect(a, b, test::kFrwrPath);
  auto mr = a.pd.alloc_mr(MrType::kMemReg, 4).value();
  Wc wc = test::rdma(*a.qp, *a.cq, Sge{a.buf.addr(), 8, mr.lkey()}, WrOpcode::kRdmaWrite, b.buf.addr(), b.mr.rkey());
  EXPECT_EQ(wc.status, WcStatus::kLocProtErr);
}

class MapMrSg : public ::testing::Test {
 protected:
  FrwrNode n;
  test::PageBuf mem{16 * kPage};
  MemoryRegion mr = n.pd.alloc_mr(MrType::kMemReg, 8).value();
  std::uint64_t base = mem.addr();
  Result<int> map(std::vector<Sge> sg, std::uint32_t page_size = kPage, std::uint32_t* off = nullptr) {
    return mr.map_mr_sg(sg, page_size, off);
  }
};

TEST_F(MapMrSg, FirstElementMayStartAtAnOffset) {
  ASSERT_EQ(map({{base + 100, 3 * kPage, 0}}).value(), 1);
  EXPECT_EQ(mr.iova(), base + 100);
  EXPECT_EQ(mr.length(), 3 * kPage);
  EXPECT_EQ(pages_of(mr), (std::vector<std::uint64_t>{base, base + kPage, base + 2 * kPage, base + 3 * kPage}));
}

TEST_F(MapMrSg, SgOffsetSkipsIntoTheFirstElement) {
  std::uint32_t off = 200;
  ASSERT_EQ(map({{base + 100, kPage, 0}}, kPage, &off).value(), 1);
  EXPECT_EQ(mr.iova(), base + 300);
  EXPECT_EQ(mr.length(), kPage - 200);
  EXPECT_EQ(off, 0u);
  off = kPage;
  EXPECT_EQ(map({{base, kPage, 0}}, kPage, &off).error().code, EINVAL);
}

TEST_F(MapMrSg, MiddleAlignedAndLastShort) {
  ASSERT_EQ(map({{base + 100, kPage - 100, 0}, {base + 8 * kPage, kPage, 0}, {base + 4 * kPage, 10, 0}}).value(), 3);
  EXPECT_EQ(mr.iova(), base + 100);
  EXPECT_EQ(mr.length(), kPage - 100 + kPage + 10);
  EXPECT_EQ(pages_of(mr), (std::vector<std::uint64_t>{base, base + 8 * kPage, base + 4 * kPage}));
}

TEST_F(MapMrSg, UnalignedMiddleElementStopsTheMapping) {
  EXPECT_EQ(map({{base, kPage, 0}, {base + 3 * kPage + 8, kPage, 0}, {base + 6 * kPage, kPage, 0}}).value(), 1);
  EXPECT_EQ(mr.length(), kPage);
  EXPECT_EQ(pages_of(mr).size(), 1u);
  // An element after a short one must continue it exactly.
  EXPECT_EQ(map({{base, 100, 0}, {base + kPage, 100, 0}}).value(), 1);
  EXPECT_EQ(mr.length(), 100u);
}

TEST_F(MapMrSg, ContiguousElementsMerge) {
  ASSERT_EQ(map({{base + 100, 200, 0}, {base + 300, 5000, 0}}).value(), 2);
  EXPECT_EQ(mr.length(), 5200u);
  EXPECT_EQ(pages_of(mr), (std::vector<std::uint64_t>{base, base + kPage}));
}

TEST_F(MapMrSg, PageSizeMustBeAPowerOfTwoOfAtLeast4K) {
  for (std::uint32_t ps : {0u, 1000u, 2048u, 3u * 4096u, 1u << 31})
    EXPECT_EQ(map({{base, kPage, 0}}, ps).error().code, EINVAL) << ps;
  const std::uint64_t base8k = (base + 2 * kPage - 1) & ~std::uint64_t{2 * kPage - 1};
  ASSERT_EQ(map({{base8k, 2 * kPage, 0}}, 2 * kPage).value(), 1);
  EXPECT_EQ(mr.page_size(), 2 * kPage);
  EXPECT_EQ(pages_of(mr).size(), 1u);
  EXPECT_EQ(map({}).error().code, EINVAL);
  EXPECT_EQ(n.mr.map_mr_sg(std::vector<Sge>{{base, kPage, 0}}, kPage).error().code, EINVAL) << "a user MR";
}

TEST_F(MapMrSg, StopsWhenMaxNumSgPagesAreFull) {
  std::vector<Sge> sg;
  for (int i = 0; i < 10; ++i) sg.push_back({base + i * kPage, kPage, 0});
  EXPECT_EQ(map(sg).value(), 8);
  EXPECT_EQ(mr.length(), 8 * kPage);
  // Full inside an element: it is mapped in part and sg_offset says where.
  std::uint32_t off = 0;
  EXPECT_EQ(map({{base, 5 * kPage, 0}, {base + 8 * kPage, 5 * kPage, 0}}, kPage, &off).value(), 1);
  EXPECT_EQ(off, 3 * kPage);
  EXPECT_EQ(mr.length(), 8 * kPage);
}

TEST(FrwrKeys, IncRkeyChangesOnlyTheKeyByte) {
  FrwrNode n;
  auto mr = n.pd.alloc_mr(MrType::kMemReg, 1).value();
  const std::uint32_t k0 = mr.rkey();
  for (int i = 1; i <= 300; ++i) {
    mr.inc_rkey();
    EXPECT_EQ(mr.rkey() & ~0xffu, k0 & ~0xffu);
    EXPECT_EQ(mr.rkey() & 0xffu, (k0 + i) & 0xffu);
    EXPECT_EQ(mr.lkey(), mr.rkey());
  }
}

class Frwr : public ::testing::Test {
 protected:
  void SetUp() override { test::connect(target, peer, test::kFrwrPath); }
  FrwrNode target, peer;
  MemoryRegion frmr = target.pd.alloc_mr(MrType::kMemReg, 8).value();
};

TEST_F(Frwr, RegMrThenThePeerWritesAndReadsThroughThePageList) {
  // Two pages far apart, seen by the peer as one contiguous range.
  std::vector<Sge> sg{{target.buf.addr(1 * kPage), kPage, 0}, {target.buf.addr(9 * kPage), kPage, 0}};
  frmr.inc_rkey();
  ASSERT_EQ(frmr.map_mr_sg(sg, kPage).value(), 2);
  ASSERT_TRUE(target.qp->post_send(test::reg_wr(frmr, kRw, 11)));
  Wc reg = poll_one(*target.cq);
  ASSERT_EQ(reg.status, WcStatus::kSuccess) << wc_status_str(reg.status);
  EXPECT_EQ(reg.opcode, WcOpcode::kRegMr);
  EXPECT_EQ(reg.wr_id, 11u);
  for (std::size_t i = 0; i < 2 * kPage; ++i) peer.buf.data()[i] = static_cast<std::uint8_t>(i % 251);
  Wc w = test::rdma(peer, 0, 2 * kPage, WrOpcode::kRdmaWrite, frmr.iova(), frmr.rkey());
  ASSERT_EQ(w.status, WcStatus::kSuccess) << wc_status_str(w.status);
  EXPECT_EQ(std::memcmp(target.buf.data() + kPage, peer.buf.data(), kPage), 0);
  EXPECT_EQ(std::memcmp(target.buf.data() + 9 * kPage, peer.buf.data() + kPage, kPage), 0);
  EXPECT_EQ(target.buf.data()[2 * kPage], 0) << "nothing between the pages";
  Wc r = test::rdma(peer, 4 * kPage, 2 * kPage, WrOpcode::kRdmaRead, frmr.iova(), frmr.rkey());
  ASSERT_EQ(r.status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(peer.buf.data() + 4 * kPage, peer.buf.data(), 2 * kPage), 0);
}

TEST_F(Frwr, RegMrOnAValidMrIsAnErrorCompletionAndFlushesTheRest) {
  ASSERT_EQ(test::map_and_register(*target.qp, *target.cq, frmr, target.buf, 0, kPage, kRw).status,
            WcStatus::kSuccess);
  // Again, without invalidating: IBA 10.6.3.3, the MR is not free.
  SendWr again = test::reg_wr(frmr, kRw, 21);
  Sge ss{target.buf.addr(), 8, target.mr.lkey()};
  SendWr write;
  write.wr_id = 22;
  write.opcode = WrOpcode::kRdmaWrite;
  write.sg_list = &ss;
  write.num_sge = 1;
  write.remote_addr = peer.buf.addr();
  write.rkey = peer.mr.rkey();
  again.next = &write;
  ASSERT_TRUE(target.qp->post_send(again));
  Wc e = poll_one(*target.cq);
  EXPECT_EQ(e.wr_id, 21u);
  EXPECT_EQ(e.status, WcStatus::kMemMgmtOpErr);
  EXPECT_EQ(e.opcode, WcOpcode::kRegMr);
  EXPECT_EQ(wc_status_str(e.status), "memory management operation error");
  Wc f = poll_one(*target.cq);
  EXPECT_EQ(f.wr_id, 22u);
  EXPECT_EQ(f.status, WcStatus::kWrFlushErr);
  EXPECT_EQ(target.qp->state(), QpState::kErr);
}

TEST_F(Frwr, RegMrOfAnotherPdsMrOrWithBadAccessFails) {
  ProtectionDomain pd2 = target.dev.alloc_pd().value();
  auto foreign = pd2.alloc_mr(MrType::kMemReg, 2).value();
  Sge sg{target.buf.addr(), kPage, 0};
  ASSERT_EQ(foreign.map_mr_sg(std::span<const Sge>(&sg, 1), kPage).value(), 1);
  ASSERT_TRUE(target.qp->post_send(test::reg_wr(foreign, kRw, 31)));
  EXPECT_EQ(poll_one(*target.cq).status, WcStatus::kMemMgmtOpErr);
  EXPECT_EQ(target.qp->state(), QpState::kErr);
}

TEST_F(Frwr, RemoteWriteWithoutLocalWriteIsRefused) {
  Wc wc = test::map_and_register(*target.qp, *target.cq, frmr, target.buf, 0, kPage, ACCESS_REMOTE_WRITE);
  EXPECT_EQ(wc.status, WcStatus::kMemMgmtOpErr);
}

TEST_F(Frwr, TooManyPagesForTheMrIsRefusedAtMapTime) {
  auto small = target.pd.alloc_mr(MrType::kMemReg, 1).value();
  Sge sg{target.buf.addr(), 2 * kPage, 0};
  std::uint32_t off = 0;
  EXPECT_EQ(small.map_mr_sg(std::span<const Sge>(&sg, 1), kPage, &off).value(), 0);
  EXPECT_EQ(off, kPage);
}

TEST_F(Frwr, LocalInvThenTheKeyFails) {
  ASSERT_EQ(test::map_and_register(*target.qp, *target.cq, frmr, target.buf, 0, kPage, kRw).status,
            WcStatus::kSuccess);
  ASSERT_EQ(test::rdma(peer, 0, 8, WrOpcode::kRdmaWrite, frmr.iova(), frmr.rkey()).status, WcStatus::kSuccess);
  ASSERT_TRUE(target.qp->post_send(test::inv_wr(frmr.rkey(), 41)));
  Wc inv = poll_one(*target.cq);
  EXPECT_EQ(inv.status, WcStatus::kSuccess);
  EXPECT_EQ(inv.opcode, WcOpcode::kLocalInv);
  EXPECT_EQ(test::rdma(peer, 0, 8, WrOpcode::kRdmaWrite, frmr.iova(), frmr.rkey()).status, WcStatus::kRemAccessErr);
}

TEST_F(Frwr, LocalInvWithAStaleKeyIsAnError) {
  ASSERT_EQ(test::map_and_register(*target.qp, *target.cq, frmr, target.buf, 0, kPage, kRw).status,
            WcStatus::kSuccess);
  ASSERT_TRUE(target.qp->post_send(test::inv_wr(frmr.rkey() ^ 1, 42)));
  EXPECT_EQ(poll_one(*target.cq).status, WcStatus::kMemMgmtOpErr);
}

TEST_F(Frwr, ReRegistrationOverScatteredPagesAfterFollowingOnesPlacesEachPage) {
  // First over two pages that follow each other (one piece per access),
  // then, after LOCAL_INV, over two far apart: nothing of the first
  // layout survives into the second (a second page written next to the
  // first would be a store outside the new registration).
  for (std::size_t second : {std::size_t{1}, std::size_t{9}}) {
    std::vector<Sge> sg{{target.buf.addr(0), kPage, 0}, {target.buf.addr(second * kPage), kPage, 0}};
    frmr.inc_rkey();
    ASSERT_EQ(frmr.map_mr_sg(sg, kPage).value(), 2);
    ASSERT_TRUE(target.qp->post_send(test::reg_wr(frmr, kRw, 51)));
    ASSERT_EQ(poll_one(*target.cq).status, WcStatus::kSuccess);
    std::memset(target.buf.data(), 0, 10 * kPage);
    for (std::size_t i = 0; i < 2 * kPage; ++i) peer.buf.data()[i] = static_cast<std::uint8_t>(second + i % 251);
    ASSERT_EQ(test::rdma(peer, 0, 2 * kPage, WrOpcode::kRdmaWrite, frmr.iova(), frmr.rkey()).status,
              WcStatus::kSuccess);
    EXPECT_EQ(std::memcmp(target.buf.data(), peer.buf.data(), kPage), 0) << second;
    EXPECT_EQ(std::memcmp(target.buf.data() + second * kPage, peer.buf.data() + kPage, kPage), 0) << second;
    if (second != 1) EXPECT_EQ(target.buf.data()[kPage], 0) << "the page after the first is not registered";
    ASSERT_TRUE(target.qp->post_send(test::inv_wr(frmr.rkey())));
    ASSERT_EQ(poll_one(*target.cq).status, WcStatus::kSuccess);
  }
}

TEST_F(Frwr, ReRegistrationAfterInvalidationWorksUnderTheNextKey) {
  for (int round = 0; round < 300; ++round) {  // more than 256: the key byte wraps
    frmr.inc_rkey();
    ASSERT_EQ(test::map_and_register(*target.qp, *target.cq, frmr, target.buf, (round % 4) * kPage, 64, kRw).status,
              WcStatus::kSuccess);
    peer.buf.data()[0] = static_cast<std::uint8_t>(round);
    ASSERT_EQ(test::rdma(peer, 0, 1, WrOpcode::kRdmaWrite, frmr.iova(), frmr.rkey()).status, WcStatus::kSuccess);
    ASSERT_EQ(target.buf.data()[(round % 4) * kPage], static_cast<std::uint8_t>(round));
    ASSERT_TRUE(target.qp->post_send(test::inv_wr(frmr.rkey())));
    ASSERT_EQ(poll_one(*target.cq).status, WcStatus::kSuccess);
  }
}

TEST_F(Frwr, SendWithInvCarriesTheKeyAndInvalidatesIt) {
  ASSERT_EQ(test::map_and_register(*target.qp, *target.cq, frmr, target.buf, 0, kPage, kRw).status,
            WcStatus::kSuccess);
  Sge rs{target.buf.addr(8 * kPage), 64, target.mr.lkey()};
  RecvWr rw;
  rw.wr_id = 51;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ASSERT_TRUE(target.qp->post_recv(rw));
  std::memcpy(peer.buf.data(), "done", 4);
  Sge ss{peer.buf.addr(), 4, peer.mr.lkey()};
  SendWr sw;
  sw.wr_id = 52;
  sw.opcode = WrOpcode::kSendWithInv;
  sw.sg_list = &ss;
  sw.num_sge = 1;
  sw.invalidate_rkey = frmr.rkey();
  sw.send_flags = SEND_SIGNALED;
  ASSERT_TRUE(peer.qp->post_send(sw));
  EXPECT_EQ(poll_one(*peer.cq).status, WcStatus::kSuccess);
  Wc r = poll_one(*target.cq);
  EXPECT_EQ(r.status, WcStatus::kSuccess);
  EXPECT_EQ(r.opcode, WcOpcode::kRecv);
  EXPECT_EQ(r.byte_len, 4u);
  EXPECT_TRUE(r.wc_flags & WC_WITH_INVALIDATE);
  EXPECT_FALSE(r.wc_flags & WC_WITH_IMM);
  EXPECT_EQ(r.invalidated_rkey, frmr.rkey());
  EXPECT_EQ(std::memcmp(target.buf.data() + 8 * kPage, "done", 4), 0);
  EXPECT_EQ(test::rdma(peer, 0, 8, WrOpcode::kRdmaRead, frmr.iova(), frmr.rkey()).status, WcStatus::kRemAccessErr);
}

TEST_F(Frwr, SendWithInvOfAKeyThatIsNoFastRegMrIsAnInvalidRequest) {
  Sge rs{target.buf.addr(8 * kPage), 64, target.mr.lkey()};
  RecvWr rw;
  rw.wr_id = 61;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ASSERT_TRUE(target.qp->post_recv(rw));
  Sge ss{peer.buf.addr(), 4, peer.mr.lkey()};
  SendWr sw;
  sw.opcode = WrOpcode::kSendWithInv;
  sw.sg_list = &ss;
  sw.num_sge = 1;
  sw.invalidate_rkey = target.mr.rkey();  // a user MR: not invalidatable
  sw.send_flags = SEND_SIGNALED;
  ASSERT_TRUE(peer.qp->post_send(sw));
  EXPECT_EQ(poll_one(*peer.cq).status, WcStatus::kRemInvReqErr);
  Wc r = poll_one(*target.cq);
  EXPECT_EQ(r.status, WcStatus::kMemMgmtOpErr);
  EXPECT_EQ(r.invalidated_rkey, target.mr.rkey());
  // The user MR still works: the device refused to touch it.
  EXPECT_EQ(target.qp->state(), QpState::kErr);
}

TEST_F(Frwr, RegMrCompletesBeforeTheSendPostedAfterIt) {
  Sge rs{peer.buf.addr(), 64, peer.mr.lkey()};
  RecvWr rw;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ASSERT_TRUE(peer.qp->post_recv(rw));
  Sge sg{target.buf.addr(), kPage, 0};
  frmr.inc_rkey();
  ASSERT_EQ(frmr.map_mr_sg(std::span<const Sge>(&sg, 1), kPage).value(), 1);
  SendWr reg = test::reg_wr(frmr, kRw, 71);
  Sge ss{target.buf.addr(), 4, target.mr.lkey()};
  SendWr send;
  send.wr_id = 72;
  send.opcode = WrOpcode::kSend;
  send.sg_list = &ss;
  send.num_sge = 1;
  send.send_flags = SEND_SIGNALED;
  reg.next = &send;
  ASSERT_TRUE(target.qp->post_send(reg));
  // The MR object may be re-mapped right away: the WQE has its own copy.
  Sge other{target.buf.addr(5 * kPage), kPage, 0};
  ASSERT_EQ(frmr.map_mr_sg(std::span<const Sge>(&other, 1), kPage).value(), 1);
  Wc first = poll_one(*target.cq), second = poll_one(*target.cq);
  EXPECT_EQ(first.wr_id, 71u);
  EXPECT_EQ(first.opcode, WcOpcode::kRegMr);
  EXPECT_EQ(second.wr_id, 72u);
  EXPECT_EQ(second.opcode, WcOpcode::kSend);
  EXPECT_EQ(poll_one(*peer.cq).status, WcStatus::kSuccess);
  peer.buf.data()[0] = 0x5A;
  ASSERT_EQ(test::rdma(peer, 0, 1, WrOpcode::kRdmaWrite, target.buf.addr(), frmr.rkey()).status, WcStatus::kSuccess);
  EXPECT_EQ(target.buf.data()[0], 0x5A) << "the registration posted, not the later mapping";
  EXPECT_EQ(target.buf.data()[5 * kPage], 0);
}

TEST_F(Frwr, LocalInvCompletesAfterEarlierUnsignaledWrites) {
  ASSERT_EQ(test::map_and_register(*target.qp, *target.cq, frmr, target.buf, 0, kPage, kRw).status,
            WcStatus::kSuccess);
  Sge ss{target.buf.addr(), 8, target.mr.lkey()};
  std::vector<SendWr> wrs(4);
  for (int i = 0; i < 3; ++i) {
    wrs[i].wr_id = 80 + i;
    wrs[i].opcode = WrOpcode::kRdmaWrite;
    wrs[i].sg_list = &ss;
    wrs[i].num_sge = 1;
    wrs[i].remote_addr = peer.buf.addr();
    wrs[i].rkey = peer.mr.rkey();
    wrs[i].next = &wrs[i + 1];
  }
  wrs[3] = test::inv_wr(frmr.rkey(), 83, SEND_SIGNALED | SEND_FENCE);
  ASSERT_TRUE(target.qp->post_send(wrs[0]));
  Wc inv = poll_one(*target.cq);
  EXPECT_EQ(inv.wr_id, 83u);
  EXPECT_EQ(inv.status, WcStatus::kSuccess);
  Wc none;
  EXPECT_EQ(target.cq->poll(std::span<Wc>(&none, 1)), 0);
}

TEST_F(Frwr, RegMrBehindAnRnrSendExecutesOnce) {
  // The SEND meets no receive (RNR NAK) and is sent again later; the REG_MR
  // behind it must not run a second time (it would find the MR valid).
  Sge ss{target.buf.addr(), 4, target.mr.lkey()};
  SendWr send;
  send.wr_id = 91;
  send.opcode = WrOpcode::kSend;
  send.sg_list = &ss;
  send.num_sge = 1;
  send.send_flags = SEND_SIGNALED;
  Sge sg{target.buf.addr(), kPage, 0};
  ASSERT_EQ(frmr.map_mr_sg(std::span<const Sge>(&sg, 1), kPage).value(), 1);
  SendWr reg = test::reg_wr(frmr, kRw, 92);
  send.next = &reg;
  ASSERT_TRUE(target.qp->post_send(send));
  // Let the SEND be NAKed and sent again at least twice: each resend walks
  // past the executed REG_MR.
  ASSERT_TRUE(test::eventually([&] { return target.qp->counters().rnr_retries >= 2; }));
  Sge rs{peer.buf.addr(), 64, peer.mr.lkey()};
  RecvWr rw;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ASSERT_TRUE(peer.qp->post_recv(rw));
  Wc a = poll_one(*target.cq), b = poll_one(*target.cq);
  EXPECT_EQ(a.wr_id, 91u);
  EXPECT_EQ(a.status, WcStatus::kSuccess) << wc_status_str(a.status);
  EXPECT_EQ(b.wr_id, 92u);
  EXPECT_EQ(b.status, WcStatus::kSuccess) << wc_status_str(b.status);
}

TEST_F(Frwr, PostErrors) {
  SendWr bad = test::reg_wr(frmr, kRw);
  bad.mr = nullptr;
  EXPECT_EQ(target.qp->post_send(bad).error().code, EINVAL);
  bad.mr = &target.mr;  // a user MR
  EXPECT_EQ(target.qp->post_send(bad).error().code, EINVAL);
}

TEST(FrwrPool, GetPutExhaustionAndDestroy) {
  FrwrNode target, peer;
  test::connect(target, peer, test::kFrwrPath);
  ASSERT_TRUE(mr_pool_init(*target.qp, 4, MrType::kMemReg, 16));
  EXPECT_EQ(mr_pool_init(*target.qp, 4, MrType::kMemReg, 16).error().code, EBUSY);
  EXPECT_EQ(mr_pool_size(*target.qp), 4);
  EXPECT_EQ(target.pd.usecnt(), 6);
  std::vector<MemoryRegion*> out;
  for (int i = 0; i < 4; ++i) {
    MemoryRegion* mr = mr_pool_get(*target.qp);
    ASSERT_NE(mr, nullptr);
    EXPECT_EQ(mr->type(), MrType::kMemReg);
    EXPECT_EQ(mr->max_num_sg(), 16u);
    out.push_back(mr);
  }
  EXPECT_EQ(mr_pool_get(*target.qp), nullptr) << "exhausted";
  EXPECT_EQ(mr_pool_used(*target.qp), 4);
  EXPECT_EQ(mr_pool_destroy(*target.qp).error().code, EBUSY);
  // A pool MR registers and works like any other.
  Wc wc = test::map_and_register(*target.qp, *target.cq, *out[0], target.buf, 0, kPage, kRw);
  ASSERT_EQ(wc.status, WcStatus::kSuccess);
  ASSERT_EQ(test::rdma(peer, 0, 8, WrOpcode::kRdmaWrite, out[0]->iova(), out[0]->rkey()).status, WcStatus::kSuccess);
  ASSERT_TRUE(mr_pool_put(*target.qp, out[0]));
  EXPECT_EQ(mr_pool_put(*target.qp, out[0]).error().code, EINVAL) << "double put";
  EXPECT_EQ(mr_pool_put(*target.qp, &target.mr).error().code, EINVAL) << "not from the pool";
  EXPECT_EQ(mr_pool_get(*target.qp), out[0]);
  for (MemoryRegion* mr : out) ASSERT_TRUE(mr_pool_put(*target.qp, mr));
  EXPECT_EQ(mr_pool_used(*target.qp), 0);
  ASSERT_TRUE(mr_pool_destroy(*target.qp));
  EXPECT_EQ(mr_pool_size(*target.qp), 0);
  EXPECT_EQ(target.pd.usecnt(), 2);
  EXPECT_EQ(mr_pool_init(*target.qp, 0, MrType::kMemReg, 16).error().code, EINVAL);
  ASSERT_TRUE(mr_pool_init(*target.qp, 2, MrType::kMemReg, 16)) << "a new pool after destroy";
}

TEST(FrwrPool, ThreadsShareOnePool) {
  FrwrNode n;
  ASSERT_TRUE(mr_pool_init(*n.qp, 8, MrType::kMemReg, 4));
  std::atomic<int> got{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        MemoryRegion* mr = mr_pool_get(*n.qp);
        if (!mr) continue;
        got.fetch_add(1);
        EXPECT_TRUE(mr_pool_put(*n.qp, mr));
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_GT(got.load(), 0);
  EXPECT_EQ(mr_pool_used(*n.qp), 0);
}

TEST(FrwrConcurrency, RegInvCyclesOnManyQpsWhilePeersWrite) {
  // One target device and one peer device; each thread has its own QP pair
  // and its own FRWR MR over its own slice of the target's memory.
  FrwrNode target, peer;
  constexpr int kThreads = 4;
  constexpr int kRounds = 300;
  struct Lane {
    std::unique_ptr<CompletionQueue> tcq, pcq;
    std::unique_ptr<QueuePair> tqp, pqp;
    MemoryRegion frmr;
  };
  std::vector<Lane> lanes(kThreads);
  for (auto& l : lanes) {
    l.tcq = target.dev.create_cq(CqInit{.cqe = 256}).value();
    l.pcq = peer.dev.create_cq(CqInit{.cqe = 256}).value();
    l.tqp = target.pd.create_qp(QpInitAttr{l.tcq.get(), l.tcq.get(), QpCaps{32, 32, 2, 2, 0}, false, nullptr}).value();
    l.pqp = peer.pd.create_qp(QpInitAttr{l.pcq.get(), l.pcq.get(), QpCaps{32, 32, 2, 2, 0}, false, nullptr}).value();
    test::connect_qps(*l.tqp, target.dev, *l.pqp, peer.dev, test::kFrwrPath);
    l.frmr = target.pd.alloc_mr(MrType::kMemReg, 2).value();
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      Lane& l = lanes[t];
      const std::size_t slice = static_cast<std::size_t>(t) * 2 * kPage;
      for (int i = 0; i < kRounds && failures.load() == 0; ++i) {
        l.frmr.inc_rkey();
        Wc reg = test::map_and_register(*l.tqp, *l.tcq, l.frmr, target.buf, slice + 64, kPage, kRw);
        if (reg.status != WcStatus::kSuccess) failures.fetch_add(1);
        const auto v = static_cast<std::uint8_t>(t * 50 + i);
        // The peer writes a byte through the fresh key and reads it back.
        std::uint8_t* src = peer.buf.data() + slice;
        src[0] = v;
        Wc w = test::rdma(*l.pqp, *l.pcq, Sge{peer.buf.addr(slice), 1, peer.mr.lkey()}, WrOpcode::kRdmaWrite,
                          l.frmr.iova() + 100, l.frmr.rkey());
        Wc r = test::rdma(*l.pqp, *l.pcq, Sge{peer.buf.addr(slice + 1), 1, peer.mr.lkey()}, WrOpcode::kRdmaRead,
                          l.frmr.iova() + 100, l.frmr.rkey());
        if (w.status != WcStatus::kSuccess || r.status != WcStatus::kSuccess || src[1] != v ||
            target.buf.data()[slice + 164] != v)
          failures.fetch_add(1);
        if (!l.tqp->post_send(test::inv_wr(l.frmr.rkey()))) failures.fetch_add(1);
        if (test::poll_one(*l.tcq).status != WcStatus::kSuccess) failures.fetch_add(1);
      }
    });
  for (auto& th : ts) th.join();
  EXPECT_EQ(failures.load(), 0);
  // Every lane's last key is invalid now.
  for (auto& l : lanes) {
    Wc wc = test::rdma(*l.pqp, *l.pcq, Sge{peer.buf.addr(), 1, peer.mr.lkey()}, WrOpcode::kRdmaWrite, l.frmr.iova(),
                       l.frmr.rkey());
    EXPECT_EQ(wc.status, WcStatus::kRemAccessErr);
  }
}

}  // namespace
}  // namespace srdma
