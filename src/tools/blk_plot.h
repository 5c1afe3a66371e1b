// `srdma blk bench --plot`: an SVG chart of IOPS and interrupts per second
// for each CQ mode (written directly: no plotting dependency).
#pragma once

#include <string>
#include <vector>

#include "srdma/status.h"
#include "tools/blk_bench.h"

namespace srdma::tools {

Result<void> write_plot(const std::string& path, const std::vector<BlkModeResult>& results);

}  // namespace srdma::tools
