// The link's receive buffers (hca/rx_buffer_pool.h): a buffer comes back to
// the pool only when the last packet that refers to it lets go, on any
// thread, and the pool keeps no more than it was told.
#include "hca/rx_buffer_pool.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace srdma::hca {
namespace {

TEST(RxBufferPool, ABufferComesBackWhenItsLastHolderLetsGo) {
  auto pool = RxBufferPool::make(4096, 2);
  RxBufferPool::Buffer a = pool->take();
  ASSERT_EQ(a->size(), 4096u);
  const std::vector<std::byte>* first = a.get();
  RxBufferPool::Buffer packet = a;  // a READ response keeps the batch's buffer
  a.reset();
  EXPECT_EQ(pool->kept(), 0u) << "a packet still holds it";
  RxBufferPool::Buffer b = pool->take();
  EXPECT_NE(b.get(), first) << "a held buffer is never handed out again";
  packet.reset();
  EXPECT_EQ(pool->kept(), 1u);
  RxBufferPool::Buffer c = pool->take();
  EXPECT_EQ(c.get(), first) << "the returned buffer is reused";
  EXPECT_EQ(pool->kept(), 0u);
}

TEST(RxBufferPool, KeepsAtMostItsLimitAndOutlivesNothing) {
  auto pool = RxBufferPool::make(64, 2);
  std::vector<RxBufferPool::Buffer> out;
  for (int i = 0; i < 5; ++i) out.push_back(pool->take());
  out.clear();
  EXPECT_EQ(pool->kept(), 2u) << "the rest are freed";
  // A packet may outlive the pool's owner: its deleter holds the pool.
  RxBufferPool::Buffer late = pool->take();
  std::weak_ptr<RxBufferPool> weak = pool;
  pool.reset();
  EXPECT_FALSE(weak.expired());
  late.reset();
  EXPECT_TRUE(weak.expired());
}

// Holders on other threads let go while the receiver takes buffers (TSan:
// the pool's mutex orders a reader's last use before the buffer's reuse).
TEST(RxBufferPool, HoldersOnOtherThreadsGiveBuffersBack) {
  auto pool = RxBufferPool::make(256, 4);
  std::vector<std::thread> readers;
  for (int i = 0; i < 64; ++i) {
    RxBufferPool::Buffer b = pool->take();
    (*b)[0] = std::byte{static_cast<unsigned char>(i)};
    readers.emplace_back([held = std::move(b), i]() mutable {
      EXPECT_EQ((*held)[0], std::byte{static_cast<unsigned char>(i)});
      held.reset();
    });
    if (readers.size() == 4) {
      for (auto& t : readers) t.join();
      readers.clear();
    }
  }
  for (auto& t : readers) t.join();
  EXPECT_LE(pool->kept(), 4u);
  EXPECT_GE(pool->kept(), 1u);
}

}  // namespace
}  // namespace srdma::hca
