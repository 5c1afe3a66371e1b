// A peer's RDMA WRITE and READ with every kind of key that must not work:
// each ends in a remote access error completion, the target's memory byte
// for byte unchanged (and for a READ, nothing leaked into the peer's
// buffer), the peer's QP in error, the process alive.
#include <gtest/gtest.h>

#include "frwr_fixture.h"

namespace srdma {
namespace {

using test::kPage;

class FrwrSecurity : public ::testing::Test {
 protected:
  static constexpr std::size_t kOff = 2 * kPage + 64;   // the MR starts inside page 2
  static constexpr std::uint32_t kLen = 3 * kPage;      // and spans 4 pages
  static constexpr std::uint32_t kRw = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;

  void SetUp() override {
    test::connect(target, peer, test::kFrwrPath);
    for (std::size_t i = 0; i < target.buf.size(); ++i) target.buf.data()[i] = static_cast<std::uint8_t>(i * 7);
    std::memset(peer.buf.data(), 0xAB, peer.buf.size());
  }

  // A valid FRWR registration of the target's [kOff, kOff + kLen).
  void register_frwr(std::uint32_t access = kRw) {
    frmr.inc_rkey();
    Wc wc = test::map_and_register(*target.qp, *target.cq, frmr, target.buf, kOff, kLen, access);
    ASSERT_EQ(wc.status, WcStatus::kSuccess) << wc_status_str(wc.status);
    ASSERT_EQ(wc.opcode, WcOpcode::kRegMr);
  }
  void local_inv() {
    ASSERT_TRUE(target.qp->post_send(test::inv_wr(frmr.rkey(), 2)));
    Wc wc = test::poll_one(*target.cq);
    ASSERT_EQ(wc.status, WcStatus::kSuccess) << wc_status_str(wc.status);
    ASSERT_EQ(wc.opcode, WcOpcode::kLocalInv);
  }

  // The peer's access of `len` bytes at `raddr` with `rkey` must be refused.
  void expect_refused(WrOpcode op, std::uint64_t raddr, std::uint32_t rkey, std::uint32_t len = 256) {
    const auto target_before = target.buf.snapshot();
    const auto peer_before = peer.buf.snapshot();
    Wc wc = test::rdma(peer, 0, len, op, raddr, rkey);
    EXPECT_EQ(wc.status, WcStatus::kRemAccessErr) << wc_status_str(wc.status);
    EXPECT_EQ(wc.wr_id, 77u);
    EXPECT_TRUE(target.buf.snapshot() == target_before) << "the target's memory changed";
    EXPECT_TRUE(peer.buf.snapshot() == peer_before) << "a refused READ delivered bytes";
    EXPECT_EQ(peer.qp->state(), QpState::kErr);
    EXPECT_EQ(target.qp->state(), QpState::kErr);  // a class C error ends the responder's QP too
  }
  std::uint64_t iova() const { return frmr.iova(); }

  test::FrwrNode target, peer;
  MemoryRegion frmr = target.pd.alloc_mr(MrType::kMemReg, 8).value();
};

// --- an FRWR key after LOCAL_INV ---
TEST_F(FrwrSecurity, WriteAfterLocalInv) {
  register_frwr();
  local_inv();
  expect_refused(WrOpcode::kRdmaWrite, iova(), frmr.rkey());
}
TEST_F(FrwrSecurity, ReadAfterLocalInv) {
  register_frwr();
  local_inv();
  expect_refused(WrOpcode::kRdmaRead, iova(), frmr.rkey());
}

// --- an FRWR key after the peer's SEND_WITH_INV ---
class FrwrSecuritySendInv : public FrwrSecurity {
 protected:
  void send_with_inv() {
    register_frwr();
    Sge rs{target.buf.addr(12 * kPage), 64, target.mr.lkey()};
    RecvWr rw;
    rw.wr_id = 5;
    rw.sg_list = &rs;
    rw.num_sge = 1;
    ASSERT_TRUE(target.qp->post_recv(rw));
    Sge ss{peer.buf.addr(), 16, peer.mr.lkey()};
    SendWr sw;
    sw.wr_id = 6;
    sw.opcode = WrOpcode::kSendWithInv;
    sw.sg_list = &ss;
    sw.num_sge = 1;
    sw.invalidate_rkey = frmr.rkey();
    sw.send_flags = SEND_SIGNALED;
    ASSERT_TRUE(peer.qp->post_send(sw));
    ASSERT_EQ(test::poll_one(*peer.cq).status, WcStatus::kSuccess);
    Wc r = test::poll_one(*target.cq);
    ASSERT_EQ(r.status, WcStatus::kSuccess);
    ASSERT_TRUE(r.wc_flags & WC_WITH_INVALIDATE);
    ASSERT_EQ(r.invalidated_rkey, frmr.rkey());
  }
};
TEST_F(FrwrSecuritySendInv, WriteAfterSendWithInv) {
  send_with_inv();
  expect_refused(WrOpcode::kRdmaWrite, iova(), frmr.rkey());
}
TEST_F(FrwrSecuritySendInv, ReadAfterSendWithInv) {
  send_with_inv();
  expect_refused(WrOpcode::kRdmaRead, iova(), frmr.rkey());
}

// --- a key whose key byte is stale: the MR is valid again, under a new key ---
class FrwrSecurityStale : public FrwrSecurity {
 protected:
  std::uint32_t reregister() {
    register_frwr();
    const std::uint32_t old = frmr.rkey();
    local_inv();
    register_frwr();  // inc_rkey: same MR, same memory, next key byte
    EXPECT_NE(frmr.rkey(), old);
    EXPECT_EQ(frmr.rkey() & ~0xffu, old & ~0xffu);
    return old;
  }
};
TEST_F(FrwrSecurityStale, WriteWithStaleKeyByte) { expect_refused(WrOpcode::kRdmaWrite, iova(), reregister()); }
TEST_F(FrwrSecurityStale, ReadWithStaleKeyByte) { expect_refused(WrOpcode::kRdmaRead, iova(), reregister()); }

// --- another PD's key: valid, covering the very memory, but not the QP's PD ---
class FrwrSecurityOtherPd : public FrwrSecurity {
 protected:
  ProtectionDomain pd2 = target.dev.alloc_pd().value();
  MemoryRegion other = pd2.reg_mr(target.buf.data(), target.buf.size(), kAccessAll).value();
};
TEST_F(FrwrSecurityOtherPd, WriteWithAnotherPdsKey) {
  expect_refused(WrOpcode::kRdmaWrite, target.buf.addr(kOff), other.rkey());
}
TEST_F(FrwrSecurityOtherPd, ReadWithAnotherPdsKey) {
  expect_refused(WrOpcode::kRdmaRead, target.buf.addr(kOff), other.rkey());
}

// --- a range past the end of a valid FRWR registration ---
TEST_F(FrwrSecurity, WritePastTheEnd) {
  register_frwr();
  expect_refused(WrOpcode::kRdmaWrite, iova() + kLen - 8, frmr.rkey(), 16);
}
TEST_F(FrwrSecurity, ReadPastTheEnd) {
  register_frwr();
  expect_refused(WrOpcode::kRdmaRead, iova() + kLen - 8, frmr.rkey(), 16);
}

// --- a valid key without the access right the operation needs ---
TEST_F(FrwrSecurity, WriteWithoutRemoteWrite) {
  register_frwr(ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ);
  expect_refused(WrOpcode::kRdmaWrite, iova(), frmr.rkey());
}
TEST_F(FrwrSecurity, ReadWithoutRemoteRead) {
  register_frwr(ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE);
  expect_refused(WrOpcode::kRdmaRead, iova(), frmr.rkey());
}

// --- the positive control: the same fixture's valid key works ---
TEST_F(FrwrSecurity, ValidKeyWritesAndReads) {
  register_frwr();
  Wc w = test::rdma(peer, 0, 256, WrOpcode::kRdmaWrite, iova() + 100, frmr.rkey());
  ASSERT_EQ(w.status, WcStatus::kSuccess) << wc_status_str(w.status);
  EXPECT_EQ(target.buf.data()[kOff + 100], 0xAB);
  EXPECT_EQ(target.buf.data()[kOff + 355], 0xAB);
  Wc r = test::rdma(peer, kPage, 16, WrOpcode::kRdmaRead, iova() + 100, frmr.rkey());
  ASSERT_EQ(r.status, WcStatus::kSuccess);
  EXPECT_EQ(peer.buf.data()[kPage], 0xAB);
}

}  // namespace
}  // namespace srdma
