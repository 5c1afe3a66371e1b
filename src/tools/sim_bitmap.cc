#include <string>

#include <fmt/format.h>

#include "alloc/index_allocator.h"
#include "tools/sim.h"

namespace srdma::tools {

Result<void> sim_bitmap(std::uint32_t num, std::uint32_t reserved, std::uint32_t mask,
                        std::istream& in, std::ostream& out) {
  // mthca's own rotation: a model check replays the kernel's answers value
  // for value (the device's random rotation would not match the goldens).
  auto a = alloc::IndexAllocator::create(num, mask, reserved, alloc::TopRotation::sequential());
  if (!a) return std::unexpected(a.error());
  std::string line;
  while (std::getline(in, line)) {
    auto w = split_words(line);
    if (w.empty()) continue;  // blank lines are not operations
    if (w[0] == "alloc" && w.size() == 1) {
      auto v = a->alloc();
      if (v) out << *v << '\n';
      else print_error(out, v.error());
    } else if (w[0] == "free" && w.size() == 2) {
      auto v = parse_u64(w[1]);
      if (!v || *v > 0xffffffffu) {
        print_error(out, Error{EINVAL, fmt::format("'{}' is not a 32-bit value", printable(w[1]))});
        continue;
      }
      auto r = a->free(static_cast<std::uint32_t>(*v));
      if (r) out << "ok\n";
      else print_error(out, r.error());
    } else {
      print_error(out, Error{EINVAL, fmt::format("cannot parse '{}': expected 'alloc' or 'free VALUE'", printable(line))});
    }
  }
  out.flush();
  return {};
}

}  // namespace srdma::tools
