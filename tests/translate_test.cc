// translate(): every refusal, the zero-length rule, the cache and its
// invalidation, and concurrency with registration.
#include <sys/mman.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "srdma/access.h"
#include "srdma/device.h"
#include "test_profile.h"

namespace srdma {
namespace {

using test::small_profile;

class TranslateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = Device::open(small_profile()).value();
    pd_ = dev_.alloc_pd().value();
    buf_.resize(5 * 4096);
    base_ = reinterpret_cast<std::uint64_t>(buf_.data());
  }
  Device dev_;
  ProtectionDomain pd_;
  std::vector<std::uint8_t> buf_;
  std::uint64_t base_ = 0;
};

TEST_F(TranslateTest, CoversExactlyTheBytesAsked) {
  auto mr = pd_.reg_mr(buf_.data() + 10, 3 * 4096, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ).value();
  auto t = dev_.translate(mr.lkey(), base_ + 10, 3 * 4096, ACCESS_LOCAL_WRITE, pd_.pd_num());
  ASSERT_TRUE(t);
  auto pieces = t->pieces();
  ASSERT_EQ(pieces.size(), 1u);  // contiguous pages merge into one run
  EXPECT_EQ(pieces[0].addr, reinterpret_cast<std::byte*>(buf_.data() + 10));
  EXPECT_EQ(pieces[0].length, 3u * 4096);
  auto mid = dev_.translate(mr.lkey(), base_ + 5000, 100, 0, pd_.pd_num()).value();
  ASSERT_EQ(mid.pieces().size(), 1u);
  EXPECT_EQ(mid.pieces()[0].addr, reinterpret_cast<std::byte*>(buf_.data() + 5000));
}

TEST_F(TranslateTest, EachRefusalHasItsReason) {
  auto mr = pd_.reg_mr(buf_.data(), 4096, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ).value();
  const auto key = mr.rkey(), pdn = pd_.pd_num();
  auto refusal = [&](std::uint32_t k, std::uint64_t va, std::uint64_t len, std::uint32_t acc, std::uint32_t pd) {
    auto t = dev_.translate(k, va, len, acc, pd);
    EXPECT_FALSE(t);
    return t ? Refusal{} : t.error();
  };
  EXPECT_EQ(refusal(key + 0x100, base_, 8, 0, pdn), Refusal::kUnknownIndex);  // next index: empty
  EXPECT_EQ(refusal(key & 0xff, base_, 8, 0, pdn), Refusal::kUnknownIndex);   // reserved index 0
  EXPECT_EQ(refusal(key ^ 0x01, base_, 8, 0, pdn), Refusal::kKeyMismatch);
  EXPECT_EQ(refusal(key, base_, 8, 0, pdn + 1), Refusal::kPdMismatch);
  EXPECT_EQ(refusal(key, base_, 8, ACCESS_REMOTE_WRITE, pdn), Refusal::kAccessDenied);
  EXPECT_EQ(refusal(key, base_, 8, ACCESS_REMOTE_ATOMIC, pdn), Refusal::kAccessDenied);
  EXPECT_EQ(refusal(key, base_ - 1, 8, 0, pdn), Refusal::kOutOfBounds);
  EXPECT_EQ(refusal(key, base_ + 4089, 8, 0, pdn), Refusal::kOutOfBounds);
  EXPECT_EQ(refusal(key, base_ + 4096, 1, 0, pdn), Refusal::kOutOfBounds);
  EXPECT_EQ(refusal(key, base_ + 8, ~std::uint64_t{0}, 0, pdn), Refusal::kOutOfBounds);  // wraps
  EXPECT_TRUE(dev_.translate(key, base_ + 4088, 8, ACCESS_REMOTE_READ, pdn));
  for (auto r : {Refusal::kUnknownIndex, Refusal::kKeyMismatch, Refusal::kNotHwOwned, Refusal::kPdMismatch,
                 Refusal::kAccessDenied, Refusal::kOutOfBounds}) {
    EXPECT_FALSE(refusal_name(r).empty());
    EXPECT_FALSE(refusal_reason(r).empty());
  }
}

TEST_F(TranslateTest, ZeroLengthIsNeverRefusedAndTouchesNothing) {
  auto t = dev_.translate(0xdeadbeef, 0, 0, ACCESS_REMOTE_WRITE, 12345);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->length(), 0u);
  EXPECT_TRUE(t->pieces().empty());
}

TEST_F(TranslateTest, StaleKeyFailsAfterDeregEvenWhenCached) {
  auto mr = pd_.reg_mr(buf_.data(), 4096, ACCESS_LOCAL_WRITE).value();
  const auto key = mr.lkey();
  ASSERT_TRUE(dev_.translate(key, base_, 8, 0, pd_.pd_num()));
  ASSERT_TRUE(dev_.translate(key, base_, 8, 0, pd_.pd_num()));  // now cached
  EXPECT_GE(dev_.tpt_stats().hits, 1u);
  ASSERT_TRUE(mr.dereg());
  EXPECT_EQ(dev_.translate(key, base_, 8, 0, pd_.pd_num()).error(), Refusal::kUnknownIndex);
  // The slot is reused with the next key byte: the old key stays dead.
  auto again = pd_.reg_mr(buf_.data(), 4096, ACCESS_LOCAL_WRITE).value();
  EXPECT_EQ((again.lkey() >> 8) & 1023, (key >> 8) & 1023) << "same MPT index";
  EXPECT_NE(again.lkey(), key);
  EXPECT_EQ(dev_.translate(key, base_, 8, 0, pd_.pd_num()).error(), Refusal::kKeyMismatch);
  EXPECT_TRUE(dev_.translate(again.lkey(), base_, 8, 0, pd_.pd_num()));
}

// The key's top bits move by a random step on every use of a slot (never
// back to the slot's last key); over 300 uses a step may, rarely, land on
// an older key (a random walk over 2^22 tops: a repeat in about 1% of
// runs), so the test allows a few repeats and no immediate one.
TEST_F(TranslateTest, KeysRotateOnEveryReuseOfASlot) {
  std::vector<std::uint32_t> keys;
  for (int i = 0; i < 300; ++i) {
    auto mr = pd_.reg_mr(buf_.data(), 64, 0).value();
    if (!keys.empty()) {
      ASSERT_NE(mr.lkey(), keys.back()) << "a slot's next key is never its last";
    }
    keys.push_back(mr.lkey());
  }  // each dereg'd at the end of its iteration
  std::sort(keys.begin(), keys.end());
  const auto distinct = static_cast<std::size_t>(std::unique(keys.begin(), keys.end()) - keys.begin());
  EXPECT_GE(distinct, 296u) << "the keys of 300 reuses spread over the tops";
}

TEST_F(TranslateTest, SyncTptDropsTheCache) {
  auto mr = pd_.reg_mr(buf_.data(), 4096, 0).value();
  ASSERT_TRUE(dev_.translate(mr.lkey(), base_, 8, 0, pd_.pd_num()));
  auto before = dev_.tpt_stats();
  dev_.sync_tpt();
  ASSERT_TRUE(dev_.translate(mr.lkey(), base_, 8, 0, pd_.pd_num()));
  auto after = dev_.tpt_stats();
  EXPECT_EQ(after.misses, before.misses + 1);
  EXPECT_EQ(after.syncs, before.syncs + 1);
}

TEST_F(TranslateTest, LargePagesTranslateAcrossPageBoundaries) {
  // 2 MiB "pages" over a 4 MiB anonymous mapping.
  const std::size_t len = 4 << 20;
  void* mem = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* p = static_cast<std::byte*>(mem);
  {
    auto mr = pd_.reg_mr(p + 4096, len - 8192, ACCESS_LOCAL_WRITE, 21).value();
    auto t = dev_.translate(mr.lkey(), reinterpret_cast<std::uint64_t>(p) + 4096, len - 8192, 0, pd_.pd_num());
    ASSERT_TRUE(t);
    std::uint64_t total = 0;
    t->for_each_piece([&](MemPiece m) { total += m.length; });
    EXPECT_EQ(total, len - 8192);
    EXPECT_EQ(t->pieces().front().addr, p + 4096);
  }
  ::munmap(mem, len);
}

// Translators race with registration and deregistration of other keys and
// of their own: a translation succeeds only for a key that is registered
// with exactly those bounds, and once dereg returns the key is dead.
TEST_F(TranslateTest, ConcurrentTranslateAndRegistration) {
  std::atomic<bool> stop{false};
  std::atomic<std::uint32_t> dead_key{0};
  std::atomic<int> violations{0};
  auto stable = pd_.reg_mr(buf_.data(), 4096, ACCESS_REMOTE_READ).value();
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        if (!dev_.translate(stable.lkey(), base_, 64, ACCESS_REMOTE_READ, pd_.pd_num())) ++violations;
        std::uint32_t k = dead_key.load(std::memory_order_acquire);
        if (k != 0 && dev_.translate(k, base_ + 4096, 8, 0, pd_.pd_num())) ++violations;
      }
    });
  }
  for (int i = 0; i < 3000; ++i) {
    auto mr = pd_.reg_mr(buf_.data() + 4096, 4096, 0).value();
    auto k = mr.lkey();
    (void)dev_.translate(k, base_ + 4096, 8, 0, pd_.pd_num());  // get it cached
    ASSERT_TRUE(mr.dereg());
    dead_key.store(k, std::memory_order_release);
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(violations.load(), 0);
}

}  // namespace
}  // namespace srdma
