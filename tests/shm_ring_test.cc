// The same-host path's ring (hca/shm_ring.h): records in order across the
// wrap, a full ring, the doorbell's handshake, and a producer or consumer
// that lies about its words: the other side marks the ring broken and reads
// or writes nothing more, never out of bounds.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <thread>
#include <vector>

#include "hca/shm_ring.h"

namespace srdma::hca {
namespace {

constexpr std::size_t kBytes = ShmRing::kMinBytes;

std::vector<std::byte> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>(seed + i * 13);
  return v;
}

bool push(ShmRing& r, const std::vector<std::byte>& v, std::uint8_t ttl = 64) {
  const std::array<std::span<const std::byte>, 1> pieces{std::span<const std::byte>(v)};
  if (!r.push(pieces, ttl, 0)) return false;
  r.publish();
  return true;
}

// The consumer's view of the producer's ring, as the peer process gets it.
ShmRing consumer_of(const ShmRing& producer) {
  auto c = ShmRing::attach(::fcntl(producer.fd(), F_DUPFD_CLOEXEC, 0), producer.data_bytes());
  EXPECT_TRUE(c) << c.error().reason;
  return std::move(*c);
}

// A ring's shared memory (header page and data), mapped on its own: what
// the other side's process could write.
constexpr std::size_t kMapped = ShmRing::kHeaderPage + kBytes;
std::uint64_t* words_of(const ShmRing& r) {
  void* p = ::mmap(nullptr, kMapped, PROT_READ | PROT_WRITE, MAP_SHARED, r.fd(), 0);
  EXPECT_NE(p, MAP_FAILED);
  return static_cast<std::uint64_t*>(p);
}
constexpr std::size_t kHeadWord = 0;
constexpr std::size_t kTailWord = 8;  // the next cache line

TEST(ShmRing, RecordsArriveInOrderWithTheirBytesAcrossManyWraps) {
  auto p = ShmRing::create(kBytes);
  ASSERT_TRUE(p) << p.error().reason;
  ShmRing c = consumer_of(*p);
  std::size_t sent = 0, got = 0;
  // Sizes that do not divide the ring: records straddle its end.
  for (int round = 0; round < 400; ++round) {
    while (push(*p, pattern(1000 + (sent % 7) * 333, static_cast<std::uint8_t>(sent)), 64)) ++sent;
    ShmRecord rec;
    for (int k = 0; k < 5 && c.peek(rec); ++k) {
      const auto want = pattern(1000 + (got % 7) * 333, static_cast<std::uint8_t>(got));
      ASSERT_EQ(rec.frame.size(), want.size());
      ASSERT_EQ(std::memcmp(rec.frame.data(), want.data(), want.size()), 0) << got;
      EXPECT_EQ(rec.ttl, 64);
      c.pop();
      ++got;
    }
  }
  EXPECT_GT(sent, 5 * kBytes / 3000);  // wrapped many times
  EXPECT_FALSE(p->broken());
  EXPECT_FALSE(c.broken());
}

TEST(ShmRing, ARecordIsUnseenUntilPublished) {
  auto p = ShmRing::create(kBytes);
  ASSERT_TRUE(p);
  ShmRing c = consumer_of(*p);
  const auto v = pattern(200, 9);
  const std::array<std::span<const std::byte>, 1> pieces{std::span<const std::byte>(v)};
  ASSERT_TRUE(p->push(pieces, 64, 0));
  ASSERT_TRUE(p->push(pieces, 64, 0));
  EXPECT_TRUE(p->unpublished());
  ShmRecord rec;
  EXPECT_FALSE(c.peek(rec));
  EXPECT_TRUE(c.park());  // nothing visible: it may sleep
  p->publish();
  EXPECT_FALSE(p->unpublished());
  EXPECT_TRUE(p->take_wakeup());  // and the publish wakes it
  ASSERT_TRUE(c.peek(rec));
  c.pop();
  ASSERT_TRUE(c.peek(rec));
  EXPECT_EQ(std::memcmp(rec.frame.data(), v.data(), v.size()), 0);
}

TEST(ShmRing, AFullRingRefusesUntilTheConsumerFreesRoom) {
  auto p = ShmRing::create(kBytes);
  ASSERT_TRUE(p);
  ShmRing c = consumer_of(*p);
  const auto v = pattern(4000, 1);
  int n = 0;
  while (push(*p, v)) ++n;
  EXPECT_EQ(n, static_cast<int>(kBytes / 4032));  // 16 + 4000 rounded to 64
  ShmRecord rec;
  ASSERT_TRUE(c.peek(rec));
  c.pop();
  EXPECT_TRUE(push(*p, v));
  EXPECT_FALSE(push(*p, v));
  EXPECT_FALSE(p->broken());
}

TEST(ShmRing, TheProducerWakesAParkedConsumerOnceAndAnAwakeOneNever) {
  auto p = ShmRing::create(kBytes);
  ASSERT_TRUE(p);
  ShmRing c = consumer_of(*p);
  const auto v = pattern(64, 2);
  // A new ring starts parked: its first record wakes the consumer.
  ASSERT_TRUE(push(*p, v));
  EXPECT_TRUE(p->take_wakeup());
  EXPECT_FALSE(p->take_wakeup());
  // A consumer with records waiting may not sleep.
  EXPECT_FALSE(c.park());
  ASSERT_TRUE(push(*p, v));
  EXPECT_FALSE(p->take_wakeup());  // it never parked
  ShmRecord rec;
  while (c.peek(rec)) c.pop();
  EXPECT_TRUE(c.park());
  ASSERT_TRUE(push(*p, v));
  EXPECT_TRUE(p->take_wakeup());
  c.unpark();
  ASSERT_TRUE(push(*p, v));
  EXPECT_FALSE(p->take_wakeup());
}

// Both sides at once, many times: every record arrives and no park that
// raced a push goes without its wakeup.
TEST(ShmRing, AProducerAndAConsumerOnTwoThreadsLoseNothing) {
  auto p = ShmRing::create(kBytes);
  ASSERT_TRUE(p);
  ShmRing c = consumer_of(*p);
  constexpr int kRecords = 200000;
  std::atomic<int> wakeups{0};
  std::atomic<bool> asleep{false};
  std::thread producer([&] {
    std::array<std::byte, 96> b{};
    for (int i = 0; i < kRecords;) {
      std::memcpy(b.data(), &i, sizeof i);
      const std::array<std::span<const std::byte>, 1> pieces{std::span<const std::byte>(b).first(32 + i % 64)};
      if (!p->push(pieces, 64, 0)) {
        std::this_thread::yield();
        continue;
      }
      // Published in batches of a few, as the link does at a batch's end.
      if (i % 3 == 2 || i + 1 == kRecords) p->publish();
      if (p->unpublished() ? false : p->take_wakeup()) {
        wakeups.fetch_add(1);
        asleep.store(false);
      }
      ++i;
    }
  });
  int next = 0;
  while (next < kRecords) {
    ShmRecord rec;
    if (c.peek(rec)) {
      int i;
      std::memcpy(&i, rec.frame.data(), sizeof i);
      ASSERT_EQ(i, next);
      ASSERT_EQ(rec.frame.size(), static_cast<std::size_t>(32 + i % 64));
      c.pop();
      ++next;
      continue;
    }
    if (next % 1000 == 0) {
      // Asleep: only the producer's wakeup may end it.
      asleep.store(true);
      if (c.park())
        while (asleep.load()) std::this_thread::yield();
      else
        asleep.store(false);
    }
  }
  producer.join();
  EXPECT_FALSE(c.broken());
}

TEST(ShmRing, CreateRefusesASizeThatIsNoPowerOfTwoInRange) {
  for (std::size_t n : {std::size_t{0}, ShmRing::kMinBytes / 2, ShmRing::kMinBytes + 64, ShmRing::kMaxBytes * 2}) {
    auto r = ShmRing::create(n);
    ASSERT_FALSE(r) << n;
    EXPECT_EQ(r.error().code, EINVAL);
  }
}

TEST(ShmRing, AttachRefusesAMemfdThatIsNotSealedOrNotOfTheSizeAnnounced) {
  // Unsealed: the producer could shrink it under us.
  const int loose = ::memfd_create("test", MFD_CLOEXEC);
  ASSERT_EQ(::ftruncate(loose, ShmRing::kHeaderPage + kBytes), 0);
  auto a = ShmRing::attach(loose, kBytes);
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code, EPROTO);
  auto p = ShmRing::create(kBytes);
  ASSERT_TRUE(p);
  auto wrong = ShmRing::attach(::fcntl(p->fd(), F_DUPFD_CLOEXEC, 0), 2 * kBytes);
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code, EPROTO);
  int pipefd[2];
  ASSERT_EQ(::pipe2(pipefd, O_CLOEXEC), 0);
  auto pipe = ShmRing::attach(pipefd[0], kBytes);
  EXPECT_FALSE(pipe);
  ::close(pipefd[1]);
  EXPECT_FALSE(ShmRing::attach(::fcntl(p->fd(), F_DUPFD_CLOEXEC, 0), 12345));  // not a power of two
  // And a sealed ring cannot be resized by anyone.
  EXPECT_NE(::ftruncate(p->fd(), 4096), 0);
}

TEST(ShmRing, AProducerThatLiesAboutItsHeadOrARecordBreaksTheRingAndNothingIsRead) {
  for (int lie = 0; lie < 4; ++lie) {
    auto p = ShmRing::create(kBytes);
    ASSERT_TRUE(p);
    ShmRing c = consumer_of(*p);
    ASSERT_TRUE(push(*p, pattern(100, 3)));
    std::uint64_t* w = words_of(*p);
    auto* rec = reinterpret_cast<std::uint32_t*>(reinterpret_cast<std::byte*>(w) + ShmRing::kHeaderPage);
    switch (lie) {
      case 0: w[kHeadWord] = kBytes * 4; break;  // more than the ring holds
      case 1: w[kHeadWord] = 70; break;          // not a record boundary
      case 2: rec[0] = 1u << 30; break;          // a record longer than what was published
      case 3: rec[1] = 5000; break;              // a frame longer than its record
    }
    ShmRecord r;
    EXPECT_FALSE(c.peek(r)) << lie;
    EXPECT_TRUE(c.broken()) << lie;
    EXPECT_FALSE(c.peek(r));
    ::munmap(w, kMapped);
  }
}

TEST(ShmRing, AConsumerThatLiesAboutItsTailBreaksTheRingForTheProducer) {
  auto p = ShmRing::create(kBytes);
  ASSERT_TRUE(p);
  ShmRing c = consumer_of(*p);
  ASSERT_TRUE(push(*p, pattern(100, 4)));
  std::uint64_t* w = words_of(*p);
  w[kTailWord] = std::uint64_t{1} << 40;  // freed more than was ever written: it would let us overwrite unread records
  EXPECT_FALSE(push(*p, pattern(100, 5)));
  EXPECT_TRUE(p->broken());
  ::munmap(w, kMapped);
}

}  // namespace
}  // namespace srdma::hca
