// The options the benchmarks share about the wire between their devices:
// --impair (a link that loses, duplicates, reorders or corrupts packets,
// srdma/impair.h) and --mtu (the path MTU of every QP).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "srdma/impair.h"
#include "srdma/status.h"

namespace srdma::tools {

// "" is no impairment; otherwise parse_impair's form. EINVAL naming
// --impair and the key or value at fault.
Result<ImpairSpec> impair_option(const std::string& text);

// IBA path MTUs: 256, 512, 1024, 2048 or 4096 bytes, else EINVAL naming --mtu.
Result<void> check_mtu_option(std::uint32_t mtu);

// The path MTU on a port whose active MTU is `active`: --mtu if given
// (EINVAL naming it when above `active`: the peer's port would refuse the
// path, and so does ours), else `active`.
Result<std::uint32_t> path_mtu_option(std::optional<std::uint32_t> mtu, std::uint32_t active);

}  // namespace srdma::tools
