#include <limits>
#include <string>

#include <fmt/format.h>

#include "alloc/buddy_allocator.h"
#include "tools/sim.h"

namespace srdma::tools {
namespace {

// An order: any integer (the allocator judges the range); clamped so that
// absurd values still reach it as out of range.
int to_order(std::int64_t v) {
  if (v < std::numeric_limits<int>::min()) return std::numeric_limits<int>::min();
  if (v > std::numeric_limits<int>::max()) return std::numeric_limits<int>::max();
  return static_cast<int>(v);
}

}  // namespace

Result<void> sim_buddy(int max_order, std::istream& in, std::ostream& out) {
  auto b = alloc::BuddyAllocator::create(max_order);
  if (!b) return std::unexpected(b.error());
  std::string line;
  auto bad = [&](std::string_view why) {
    print_error(out, Error{EINVAL, fmt::format("cannot parse '{}': {}", printable(line), why)});
  };
  while (std::getline(in, line)) {
    auto w = split_words(line);
    if (w.empty()) continue;  // blank lines are not operations
    if (w[0] == "alloc" && w.size() == 2) {
      auto order = parse_i64(w[1]);
      if (!order) {
        bad("ORDER is not a 64-bit integer");
        continue;
      }
      auto seg = b->alloc(to_order(*order));
      if (seg) out << *seg << '\n';
      else print_error(out, seg.error());
    } else if ((w[0] == "free" || w[0] == "reserve") && w.size() == 3) {
      auto seg = parse_u64(w[1]);
      auto order = parse_i64(w[2]);
      if (!seg || *seg > 0xffffffffu || !order) {
        bad("expected a 32-bit SEG and an integer ORDER");
        continue;
      }
      auto r = w[0] == "free" ? b->free(static_cast<std::uint32_t>(*seg), to_order(*order))
                              : b->reserve(static_cast<std::uint32_t>(*seg), to_order(*order));
      if (r) out << "ok\n";
      else print_error(out, r.error());
    } else {
      bad("expected 'alloc ORDER', 'free SEG ORDER' or 'reserve SEG ORDER'");
    }
  }
  out.flush();
  return {};
}

}  // namespace srdma::tools
