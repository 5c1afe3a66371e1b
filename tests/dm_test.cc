// Device memory (srdma/dm.h): allocation within max_dm_size, word-aligned
// bounded copies, EBUSY while a region is on it, and zero-based regions on
// it as lkey and rkey in SEND, WRITE, READ and atomics.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "connected_pair.h"
#include "srdma/access.h"
#include "srdma/dm.h"
#include "srdma/pd.h"
#include "wait.h"

namespace srdma {
namespace {

using test::PairNode;

int code_of(const Result<void>& r) { return r ? 0 : r.error().code; }

TEST(DeviceMemory, AllocationStaysWithinMaxDmSize) {
  PairNode n;
  EXPECT_EQ(n.dev.query().max_dm_size, kMaxDmSize);
  EXPECT_EQ(n.dev.alloc_dm(0).error().code, EINVAL);
  EXPECT_EQ(n.dev.alloc_dm(kMaxDmSize + 1).error().code, EINVAL);
  EXPECT_EQ(n.dev.alloc_dm(64, 13).error().code, EINVAL) << "alignment beyond a page";
  DeviceMemory half = n.dev.alloc_dm(kMaxDmSize / 2).value();
  DeviceMemory rest = n.dev.alloc_dm(kMaxDmSize / 2).value();
  EXPECT_EQ(n.dev.alloc_dm(4).error().code, ENOMEM) << "the device's memory is used up";
  ASSERT_TRUE(rest.free());
  EXPECT_TRUE(n.dev.alloc_dm(4));
  EXPECT_EQ(code_of(rest.free()), EINVAL) << "freed twice";
}

TEST(DeviceMemory, CopiesAreWordAlignedAndBounded) {
  PairNode n;
  DeviceMemory dm = n.dev.alloc_dm(100).value();
  const char in[12] = "hello, dm!!";
  char out[12] = {};
  ASSERT_TRUE(dm.copy_to(88, in, 12));
  ASSERT_TRUE(dm.copy_from(out, 88, 12));
  EXPECT_STREQ(out, in);
  EXPECT_EQ(code_of(dm.copy_to(3, in, 4)), EINVAL);
  EXPECT_EQ(code_of(dm.copy_to(4, in, 3)), EINVAL);
  EXPECT_EQ(code_of(dm.copy_from(out, 3, 4)), EINVAL);
  EXPECT_EQ(code_of(dm.copy_to(96, in, 8)), EFAULT);
  EXPECT_EQ(code_of(dm.copy_from(out, 104, 4)), EFAULT);
  EXPECT_EQ(code_of(dm.copy_from(out, ~std::uint64_t{3}, 4)), EFAULT) << "an offset that would wrap";
  EXPECT_TRUE(dm.copy_to(100, in, 0));
}

TEST(DeviceMemory, FreeIsRefusedWhileARegionIsOnIt) {
  PairNode n;
  DeviceMemory dm = n.dev.alloc_dm(4096).value();
  EXPECT_EQ(n.pd.reg_dm_mr(dm, 4000, 100, ACCESS_LOCAL_WRITE).error().code, EINVAL) << "beyond the buffer";
  EXPECT_EQ(n.pd.reg_dm_mr(dm, 0, 64, ACCESS_REMOTE_WRITE).error().code, EINVAL) << "remote write, no local write";
  EXPECT_EQ(n.pd.reg_dm_mr(dm, 0, 64, ACCESS_LOCAL_WRITE | ACCESS_ON_DEMAND).error().code, EINVAL);
  MemoryRegion mr = n.pd.reg_dm_mr(dm, 0, 4096, ACCESS_LOCAL_WRITE).value();
  EXPECT_EQ(mr.addr(), nullptr) << "zero-based";
  EXPECT_EQ(dm.usecnt(), 1);
  EXPECT_EQ(code_of(dm.free()), EBUSY);
  ASSERT_TRUE(mr.dereg());
  EXPECT_TRUE(dm.free());
  PairNode other;
  DeviceMemory theirs = other.dev.alloc_dm(64).value();
  EXPECT_EQ(n.pd.reg_dm_mr(theirs, 0, 64, 0).error().code, EINVAL) << "another device's memory";
}

class DmTraffic : public ::testing::Test {
 protected:
  void SetUp() override {
    test::connect(a, b);
    dm = b.dev.alloc_dm(8192).value();
    // Zero-based from byte 1024 of the buffer: iova 0 is dm byte 1024.
    mr = b.pd.reg_dm_mr(dm, 1024, 4096, kAccessAll).value();
  }
  Wc post(WrOpcode op, Sge sge, std::uint64_t remote_addr, std::uint32_t rkey, std::uint64_t add = 0) {
    SendWr w = test::send_wr(0, sge, op);  // signaled
    w.remote_addr = remote_addr;
    w.rkey = rkey;
    w.compare_add = add;
    return test::post_and_poll(a, w);
  }
  PairNode a, b;
  DeviceMemory dm;
  MemoryRegion mr;
};

TEST_F(DmTraffic, WriteAndReadUseOffsetsFromTheRegionsStart) {
  std::memset(a.buf.data(), 0xa5, 256);
  ASSERT_EQ(post(WrOpcode::kRdmaWrite, Sge{a.addr(0), 256, a.mr.lkey()}, 16, mr.rkey()).status, WcStatus::kSuccess);
  std::vector<unsigned char> got(256);
  ASSERT_TRUE(dm.copy_from(got.data(), 1024 + 16, 256));
  EXPECT_EQ(got[0], 0xa5);
  EXPECT_EQ(got[255], 0xa5);
  std::uint32_t before = 0;
  ASSERT_TRUE(dm.copy_from(&before, 1024 + 12, 4));
  EXPECT_EQ(before, 0u) << "nothing before iova 16 was written";
  const std::uint32_t word = 0x01020304;
  ASSERT_TRUE(dm.copy_to(1024 + 4092, &word, 4));
  ASSERT_EQ(post(WrOpcode::kRdmaRead, Sge{a.addr(512), 4, a.mr.lkey()}, 4092, mr.rkey()).status, WcStatus::kSuccess);
  std::uint32_t read = 0;
  std::memcpy(&read, a.buf.data() + 512, 4);
  EXPECT_EQ(read, word);
  // iova 4096 is past the region's end, whatever the buffer holds there.
  EXPECT_EQ(post(WrOpcode::kRdmaRead, Sge{a.addr(0), 4, a.mr.lkey()}, 4094, mr.rkey()).status,
            WcStatus::kRemAccessErr);
}

TEST_F(DmTraffic, AtomicsAndSendsThroughTheDmKeys) {
  ASSERT_EQ(post(WrOpcode::kAtomicFetchAndAdd, Sge{a.addr(0), 8, a.mr.lkey()}, 8, mr.rkey(), 5).status,
            WcStatus::kSuccess);
  ASSERT_EQ(post(WrOpcode::kAtomicFetchAndAdd, Sge{a.addr(0), 8, a.mr.lkey()}, 8, mr.rkey(), 5).status,
            WcStatus::kSuccess);
  std::uint64_t v = 0;
  ASSERT_TRUE(dm.copy_from(&v, 1024 + 8, 8));
  EXPECT_EQ(v, 10u);
  std::memcpy(&v, a.buf.data(), 8);
  EXPECT_EQ(v, 5u) << "the second add saw the first";
  // b sends from device memory (its lkey) into a's receive buffer.
  const char msg[8] = "dm send";
  ASSERT_TRUE(dm.copy_to(1024 + 64, msg, 8));
  Sge rs{a.addr(1024), 8, a.mr.lkey()};
  RecvWr rw;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ASSERT_TRUE(a.qp->post_recv(rw));
  Sge ss{64, 8, mr.lkey()};
  SendWr sw;
  sw.sg_list = &ss;
  sw.num_sge = 1;
  sw.send_flags = SEND_SIGNALED;
  ASSERT_TRUE(b.qp->post_send(sw));
  EXPECT_EQ(test::poll_one(*b.cq).status, WcStatus::kSuccess);
  EXPECT_EQ(test::poll_one(*a.cq).status, WcStatus::kSuccess);
  EXPECT_STREQ(reinterpret_cast<const char*>(a.buf.data() + 1024), msg);
}

TEST_F(DmTraffic, AnAtomicOnAnUnalignedDeviceAddressIsRefused) {
  // iova 0 of this region is dm byte 4: 8-aligned as an iova, not in memory.
  MemoryRegion odd = b.pd.reg_dm_mr(dm, 4, 64, kAccessAll).value();
  EXPECT_EQ(post(WrOpcode::kAtomicFetchAndAdd, Sge{a.addr(0), 8, a.mr.lkey()}, 0, odd.rkey(), 1).status,
            WcStatus::kRemAccessErr);
}

}  // namespace
}  // namespace srdma
