// The simulators behind `srdma sim`: output format, errors, and that they
// replay the kernel's allocators exactly.
#include "tools/sim.h"

#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "mthca_models.h"

namespace srdma::tools {
namespace {

std::string run_bitmap(std::uint32_t num, std::uint32_t reserved, std::uint32_t mask, const std::string& in) {
  std::istringstream is(in);
  std::ostringstream os;
  EXPECT_TRUE(sim_bitmap(num, reserved, mask, is, os));
  return os.str();
}

std::string run_buddy(int max_order, const std::string& in) {
  std::istringstream is(in);
  std::ostringstream os;
  EXPECT_TRUE(sim_buddy(max_order, is, os));
  return os.str();
}

// Only the first two words of each line (the reason text is free).
std::string codes(const std::string& out) {
  std::istringstream is(out);
  std::string line, result;
  while (std::getline(is, line)) {
    auto w = split_words(line);
    result += std::string(w[0]);
    if (w[0] == "error") result += " " + std::string(w[1]);
    result += "\n";
  }
  return result;
}

TEST(SimBitmap, AllocFreeAndErrors) {
  std::string out = run_bitmap(4, 1, 0xffffffff,
                               "alloc\nalloc\nalloc\nalloc\nfree 2\n\nfree 2\nfree 0\nfree 99\nalloc\nbogus\n"
                               "free\nfree x\nfree 4294967296\nalloc 3\n");
  EXPECT_EQ(codes(out),
            "1\n2\n3\nerror ENOMEM\nok\n"  // the failed alloc advanced top to 4
            "error EINVAL\nerror EINVAL\nerror EINVAL\n"
            "10\n"                          // 2 | top 8 (advanced again by the free)
            "error EINVAL\nerror EINVAL\nerror EINVAL\nerror EINVAL\nerror EINVAL\n");
}

TEST(SimBuddy, CrlfInputAndHexOrders) {
  EXPECT_EQ(run_buddy(3, "alloc 0x1\r\nfree 0 1\r\n"), "0\nok\n");
}

TEST(SimBitmap, MaskLimitsTheRotation) {
  // QP-style mask: top wraps within 24 bits.
  std::string in;
  for (int i = 0; i < 5; ++i) in += "alloc\nfree " + std::to_string(i) + "\n";
  std::string out = run_bitmap(1 << 23, 0, (1u << 24) - 1, "alloc\nfree 0\nalloc\nfree 8388608\nalloc\n");
  EXPECT_EQ(out, "0\nok\n8388608\nok\n0\n");
}

TEST(SimBitmap, RefusesBadParameters) {
  std::istringstream is("alloc\n");
  std::ostringstream os;
  EXPECT_EQ(sim_bitmap(6, 0, ~0u, is, os).error().code, EINVAL);
  EXPECT_EQ(sim_bitmap(8, 9, ~0u, is, os).error().code, EINVAL);
  EXPECT_TRUE(os.str().empty());
}

TEST(SimBuddy, AllocFreeReserveAndErrors) {
  std::string out = run_buddy(3,
                              "alloc 0\nalloc 1\nalloc 3\nalloc 9\nalloc -1\nfree 0 1\nfree 0 0\nfree 0 0\n"
                              "reserve 4 2\nalloc 2\nfree 4 2\nalloc 2\nalloc x\nfree 1\nfree -1 0\n");
  EXPECT_EQ(codes(out),
            "0\n2\nerror ENOMEM\nerror EINVAL\nerror EINVAL\n"
            "error EINVAL\nok\nerror EINVAL\n"
            "ok\nerror ENOMEM\nok\n4\n"
            "error EINVAL\nerror EINVAL\nerror EINVAL\n");
}

// The simulator's output for random sequences equals the kernel model's.
TEST(SimBuddy, MatchesTheKernelModelOnRandomInput) {
  const int max_order = 8;
  test::MthcaBuddyModel m(max_order);
  std::mt19937 rng(42);
  std::vector<std::pair<std::uint32_t, int>> live;
  std::string in, expected;
  for (int i = 0; i < 3000; ++i) {
    if (rng() % 2 || live.empty()) {
      int order = static_cast<int>(rng() % 4);
      in += "alloc " + std::to_string(order) + "\n";
      auto seg = m.alloc(order);
      if (seg < 0) {
        expected += "error ENOMEM\n";
      } else {
        expected += std::to_string(seg) + "\n";
        live.emplace_back(static_cast<std::uint32_t>(seg), order);
      }
    } else {
      auto k = rng() % live.size();
      auto [seg, order] = live[k];
      live.erase(live.begin() + static_cast<long>(k));
      in += "free " + std::to_string(seg) + " " + std::to_string(order) + "\n";
      m.free(seg, order);
      expected += "ok\n";
    }
  }
  EXPECT_EQ(codes(run_buddy(max_order, in)), expected);
}

TEST(SimBitmap, MatchesTheKernelModelOnRandomInput) {
  test::MthcaAllocModel m(64, ~0u, 3);
  std::mt19937 rng(7);
  std::vector<std::uint32_t> live;
  std::string in, expected;
  for (int i = 0; i < 3000; ++i) {
    if (rng() % 100 < 55 || live.empty()) {
      in += "alloc\n";
      auto v = m.alloc();
      if (v == ~0u) {
        expected += "error ENOMEM\n";
      } else {
        expected += std::to_string(v) + "\n";
        live.push_back(v);
      }
    } else {
      auto k = rng() % live.size();
      auto v = live[k];
      live.erase(live.begin() + static_cast<long>(k));
      in += "free " + std::to_string(v) + "\n";
      m.free(v);
      expected += "ok\n";
    }
  }
  EXPECT_EQ(codes(run_bitmap(64, 3, ~0u, in)), expected);
}

TEST(SimParse, Numbers) {
  EXPECT_EQ(parse_u64("0x10"), 16u);
  EXPECT_EQ(parse_u64("10"), 10u);
  EXPECT_FALSE(parse_u64("-1"));
  EXPECT_FALSE(parse_u64("1x"));
  EXPECT_FALSE(parse_u64(""));
  EXPECT_EQ(parse_i64("-3"), -3);
  EXPECT_EQ(parse_i64("0x10"), 16);
  EXPECT_EQ(parse_i64("-9223372036854775808"), INT64_MIN);
  EXPECT_FALSE(parse_i64("9223372036854775808"));
  EXPECT_EQ(printable("a\rb"), "a?b");
  EXPECT_EQ(printable(std::string(100, 'x')).size(), 67u);
  EXPECT_FALSE(parse_i64("3.5"));
}

}  // namespace
}  // namespace srdma::tools
