// The engine's copy routines: every routine (whatever the engine chose), at
// every size to 300 bytes and some big ones, at every alignment of source
// and destination, with guard bytes around the destination; the engine's
// copy_bytes the same way; piece lists that split differently on each
// side; and the choice of routine, SRDMA_COPY included.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/vector_copy.h"
#include "hca/copy.h"
#include "hca/soft_hca.h"
#include "test_profile.h"

namespace srdma::hca {
namespace {

constexpr std::size_t kGuard = 64;
// Under ThreadSanitizer (races, not bytes: the other builds check every
// alignment) every 7th alignment, or the byte checks take a minute.
#if defined(__SANITIZE_THREAD__)
constexpr std::size_t kAlignStep = 7;
#else
constexpr std::size_t kAlignStep = 1;
#endif
constexpr std::uint8_t kGuardByte = 0xEE;

// A source no shorter pattern repeats in: a wrong offset shows.
std::vector<std::uint8_t> random_bytes(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  std::mt19937 rng(12345);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

// Copies n bytes from src + soff to dst + kGuard + doff with `copy` and
// checks the copy and the guard bytes on either side of it. dst must hold
// kGuard + doff + n + kGuard bytes.
template <class F>
::testing::AssertionResult copies_exactly(F&& copy, const std::vector<std::uint8_t>& src,
                                          std::vector<std::uint8_t>& dst, std::size_t n, std::size_t soff,
                                          std::size_t doff) {
  std::uint8_t* d = dst.data() + kGuard + doff;
  std::memset(d - kGuard, kGuardByte, n + 2 * kGuard);
  copy(d, src.data() + soff, n);
  if (n && std::memcmp(d, src.data() + soff, n) != 0)
    return ::testing::AssertionFailure() << "wrong bytes, n=" << n << " soff=" << soff << " doff=" << doff;
  for (std::size_t i = 1; i <= kGuard; ++i)
    if (d[-static_cast<std::ptrdiff_t>(i)] != kGuardByte || d[n + i - 1] != kGuardByte)
      return ::testing::AssertionFailure() << "a byte written outside the destination, n=" << n << " soff=" << soff
                                           << " doff=" << doff;
  return ::testing::AssertionSuccess();
}

// Sizes 0-300 at every source and destination alignment mod 64, and big
// sizes (across the 256-byte, the 4 KiB and the 4 MiB boundaries) at
// a few alignments.
template <class F>
void check_routine(F&& copy, const std::string& what) {
  SCOPED_TRACE(what);
  const auto src = random_bytes((4u << 20) + 4096);
  std::vector<std::uint8_t> dst((4u << 20) + 4096);
  for (std::size_t n = 0; n <= 300; ++n)
    for (std::size_t soff = 0; soff < 64; soff += kAlignStep)
      for (std::size_t doff = 0; doff < 64; doff += kAlignStep)
        ASSERT_TRUE(copies_exactly(copy, src, dst, n, soff, doff));
  for (std::size_t n : {511, 512, 1023, 2048, 4095, 4096, 4097, 65535, 65536, 65537, (1 << 20) + 3, (4 << 20) - 1,
                        (4 << 20) + 5})
    for (std::size_t soff : {0, 1, 31, 32, 63})
      for (std::size_t doff : {0, 1, 31, 32, 63}) ASSERT_TRUE(copies_exactly(copy, src, dst, n, soff, doff));
}

TEST(Copy, EveryRoutineEverySizeAndAlignmentIsExact) {
  // copy_with runs vector_copy, movsb_copy and memcpy themselves.
  for (CopyRoutine r : kCopyRoutines)
    check_routine([r](void* d, const void* s, std::size_t n) { copy_with(r, d, s, n); }, copy_routine_name(r));
}

TEST(Copy, TheEngineCopyEverySizeAndAlignmentIsExact) {
  check_routine(copy_bytes, std::string("copy_bytes with ") + copy_routine_name(engine_copy_choice().routine));
}

// A placement stores each destination byte once (copy.h): a consumer
// polling the destination may write it as soon as it sees the data, and a
// second store of the same byte would undo that. Every length below 256 at
// every alignment, with the moves counted byte by byte.
struct CountingMove {
  std::vector<int>* stores;
  const unsigned char* base;
  template <std::size_t W>
  void operator()(unsigned char* d, const unsigned char* s) const {
    for (std::size_t i = 0; i < W; ++i) ++(*stores)[static_cast<std::size_t>(d - base) + i];
    std::memcpy(d, s, W);
  }
};
TEST(Copy, BelowTheRoutinesEveryByteIsStoredExactlyOnce) {
  std::vector<unsigned char> src(512), dst(512);
  std::iota(src.begin(), src.end(), 1);
  for (std::size_t align = 0; align < 32; ++align) {
    for (std::size_t n = 0; n < 256; ++n) {
      std::vector<int> stores(dst.size(), 0);
      std::fill(dst.begin(), dst.end(), 0);
      copy_once_small(dst.data() + align, src.data() + 7, n, CountingMove{&stores, dst.data()});
      for (std::size_t i = 0; i < dst.size(); ++i) {
        const bool inside = i >= align && i < align + n;
        ASSERT_EQ(stores[i], inside ? 1 : 0) << "n " << n << " align " << align << " byte " << i;
        ASSERT_EQ(dst[i], inside ? src[7 + i - align] : 0) << "n " << n << " align " << align << " byte " << i;
      }
    }
  }
}

TEST(Copy, RoutineForEachSize) {
  const std::string chosen = copy_routine_name(engine_copy_choice().routine);
  EXPECT_STREQ(copy_routine_for(8), "inline");
  EXPECT_STREQ(copy_routine_for(32), "inline");
  EXPECT_STREQ(copy_routine_for(33), "inline");
  EXPECT_STREQ(copy_routine_for(255), "inline");
  EXPECT_EQ(copy_routine_for(256), chosen);
  EXPECT_EQ(copy_routine_for(65536), chosen);
  EXPECT_STREQ(copy_routine_for(4 << 20), "memcpy");
  EXPECT_TRUE(chosen == "memcpy" || chosen == "movsb" || chosen == vector_copy_name()) << chosen;
}

TEST(Copy, ChoiceFromTheEnvironmentValue) {
  auto forced = choose_copy_routine("movsb");
  EXPECT_EQ(forced.routine, CopyRoutine::kMovsb);
  EXPECT_EQ(forced.how, "SRDMA_COPY=movsb");
  EXPECT_EQ(forced.warning, "");
  forced = choose_copy_routine("memcpy");
  EXPECT_EQ(forced.routine, CopyRoutine::kMemcpy);
  EXPECT_EQ(forced.warning, "");
  forced = choose_copy_routine("avx2");
  if (vector_copy_accelerated()) {
    EXPECT_EQ(forced.routine, CopyRoutine::kVectorLoop);
    EXPECT_EQ(forced.warning, "");
  } else {
    EXPECT_NE(forced.warning.find("no AVX2"), std::string::npos) << forced.warning;
  }
  for (const char* automatic : {static_cast<const char*>(nullptr), "", "auto"}) {
    auto c = choose_copy_routine(automatic);
    EXPECT_EQ(c.warning, "");
    EXPECT_NE(c.how.find("per machine"), std::string::npos) << c.how;
  }
  // An unknown value: a warning, and the per-machine choice.
  auto unknown = choose_copy_routine("avx512");
  EXPECT_EQ(unknown.warning, "SRDMA_COPY=avx512 is not one of avx2, movsb, memcpy, auto; choosing per machine");
  EXPECT_NE(unknown.how.find("per machine"), std::string::npos) << unknown.how;
}

// The engine reads SRDMA_COPY once, at its first copy of 256 bytes or more:
// each case runs in a fresh process ("threadsafe" death tests re-execute
// the test binary), sets the variable, copies and prints what it used.
void copy_once_and_report(const char* value) {
  setenv("SRDMA_COPY", value, 1);
  const auto src = random_bytes(70000);
  std::vector<std::uint8_t> dst(70000);
  copy_bytes(dst.data(), src.data(), src.size());
  std::fprintf(stderr, "routine=%s how=%s\n", copy_routine_for(65536), engine_copy_choice().how.c_str());
  std::exit(dst == src ? 0 : 1);
}

TEST(CopyDeathTest, TheEnvironmentForcesTheEngineRoutine) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(copy_once_and_report("movsb"), ::testing::ExitedWithCode(0), "routine=movsb how=SRDMA_COPY=movsb");
  EXPECT_EXIT(copy_once_and_report("memcpy"), ::testing::ExitedWithCode(0), "routine=memcpy how=SRDMA_COPY=memcpy");
  if (vector_copy_accelerated()) {
    EXPECT_EXIT(copy_once_and_report("avx2"), ::testing::ExitedWithCode(0), "routine=avx2 how=SRDMA_COPY=avx2");
  }
  EXPECT_EXIT(copy_once_and_report("auto"), ::testing::ExitedWithCode(0), "how=per machine");
}

TEST(CopyDeathTest, AnUnknownValueWarnsAndChoosesPerMachine) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(copy_once_and_report("fastest"), ::testing::ExitedWithCode(0),
              "srdma: warning: SRDMA_COPY=fastest is not one of avx2, movsb, memcpy, auto; choosing per "
              "machine\nroutine=[a-z0-9]+ how=per machine");
}

// A device reads SRDMA_COPY when it opens, so that no WRITE pays for it:
// the warning for an unknown value is out before the open returns, with
// no copy made.
void open_and_report(const char* value) {
  setenv("SRDMA_COPY", value, 1);
  bool opened = false;
  {
    auto dev = SoftHca::open(validate_profile(test::small_profile()).value());
    opened = dev.has_value();
  }  // closed before the exit
  std::fprintf(stderr, "opened=%d\n", opened ? 1 : 0);
  std::exit(0);
}

TEST(CopyDeathTest, ADeviceSetsUpTheRoutineWhenItOpens) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(open_and_report("fastest"), ::testing::ExitedWithCode(0),
              "srdma: warning: SRDMA_COPY=fastest is not one of avx2, movsb, memcpy, auto; choosing per "
              "machine\nopened=1");
}

// Per machine, the engine's copies of 4 KiB or more take turns among
// the candidates until each has its samples; every copy stays exact
// meanwhile, and then one routine is chosen.
void copy_until_chosen(int threads, int copies) {
  setenv("SRDMA_COPY", "auto", 1);
  std::atomic<int> wrong{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      const auto src = random_bytes(8192 + 64 * t + t);
      std::vector<std::uint8_t> dst(src.size() + 1);
      for (int i = 0; i < copies; ++i) {
        std::fill(dst.begin(), dst.end(), 0);
        copy_bytes(dst.data(), src.data(), src.size());
        if (!std::equal(src.begin(), src.end(), dst.begin()) || dst.back() != 0) ++wrong;
      }
    });
  for (auto& t : pool) t.join();
  const CopyChoice c = engine_copy_choice();
  std::fprintf(stderr, "wrong=%d deciding=%d routine=%s how=%s\n", wrong.load(), c.deciding,
               copy_routine_name(c.routine), c.how.c_str());
  std::exit(0);
}

TEST(CopyDeathTest, PerMachineTheEngineCopiesChoose) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // One thread, one size: the samples fill (after the warm-up, in blocks
  // 100 copies apart: about 2,100 copies).
  EXPECT_EXIT(copy_until_chosen(1, 3000), ::testing::ExitedWithCode(0),
              "wrong=0 deciding=0 routine=[a-z0-9]+ how=per machine: .*chosen on the engine's own copies of >= 4 "
              "KiB, median per copy cycle .* GB/s");
  // Four threads at once: exact copies, while sampling and after.
  EXPECT_EXIT(copy_until_chosen(4, 2000), ::testing::ExitedWithCode(0),
              "wrong=0 deciding=[01] routine=[a-z0-9]+ how=per machine: ");
}

TEST(Copy, PiecesSplitDifferentlyOnEachSide) {
  std::vector<std::uint8_t> src(1000), dst(1000, 0);
  std::iota(src.begin(), src.end(), 1);
  auto* s = reinterpret_cast<std::byte*>(src.data());
  auto* d = reinterpret_cast<std::byte*>(dst.data());
  MemPiece from[] = {{s, 100}, {s + 100, 300}, {s + 400, 600}};
  MemPiece to[] = {{d + 500, 250}, {d, 500}, {d + 750, 250}};
  EXPECT_EQ(copy_pieces(to, from), 1000u);
  EXPECT_TRUE(std::equal(dst.begin() + 500, dst.begin() + 750, src.begin()));
  EXPECT_TRUE(std::equal(dst.begin(), dst.begin() + 500, src.begin() + 250));
  EXPECT_TRUE(std::equal(dst.begin() + 750, dst.end(), src.begin() + 750));
  // The shorter side bounds the copy.
  MemPiece small[] = {{d, 10}};
  EXPECT_EQ(copy_pieces(small, from), 10u);
}

}  // namespace
}  // namespace srdma::hca
