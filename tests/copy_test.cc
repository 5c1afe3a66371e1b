// The engine's copy routines: every size and alignment, and piece lists
// that split differently on each side.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "common/vector_copy.h"
#include "hca/copy.h"

namespace srdma::hca {
namespace {

TEST(Copy, EverySizeAndAlignmentIsExact) {
  std::vector<std::uint8_t> src(70000), dst(70000);
  std::iota(src.begin(), src.end(), 0);
  for (std::size_t n : {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 127, 128, 129, 255, 256, 257, 4095, 4096, 4097, 65536, 65537}) {
    for (std::size_t off : {0, 1, 3, 31}) {
      std::fill(dst.begin(), dst.end(), 0xEE);
      copy_bytes(dst.data() + off, src.data() + off + 5, n);
      ASSERT_TRUE(std::equal(dst.begin() + off, dst.begin() + off + n, src.begin() + off + 5)) << n << "+" << off;
      ASSERT_EQ(dst[off + n], 0xEE) << "no byte past the end, n=" << n;
      if (off) {
        ASSERT_EQ(dst[off - 1], 0xEE) << "no byte before the start";
      }
      std::fill(dst.begin(), dst.end(), 0xEE);
      vector_copy(dst.data() + off, src.data() + off, n);
      ASSERT_TRUE(std::equal(dst.begin() + off, dst.begin() + off + n, src.begin() + off)) << n << "+" << off;
      ASSERT_EQ(dst[off + n], 0xEE);
    }
  }
  std::string routine = copy_routine_for(65536);
  EXPECT_TRUE(routine == "memcpy" || routine == vector_copy_name());
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
