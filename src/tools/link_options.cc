#include "tools/link_options.h"

#include <fmt/format.h>

namespace srdma::tools {

Result<ImpairSpec> impair_option(const std::string& text) {
  if (text.empty()) return ImpairSpec{};
  auto spec = parse_impair(text);
  if (!spec) return make_error(EINVAL, fmt::format("--impair '{}': {}", text, spec.error().reason));
  return spec;
}

Result<void> check_mtu_option(std::uint32_t mtu) {
  if (mtu < 256 || mtu > 4096 || (mtu & (mtu - 1)) != 0)
    return make_error(EINVAL, fmt::format("--mtu {}: the path MTU must be 256, 512, 1024, 2048 or 4096 bytes", mtu));
  return {};
}

Result<std::uint32_t> path_mtu_option(std::optional<std::uint32_t> mtu, std::uint32_t active) {
  if (!mtu) return active;
  if (*mtu > active) return make_error(EINVAL, fmt::format("--mtu {}: the port's active MTU is {}", *mtu, active));
  return *mtu;
}

}  // namespace srdma::tools
