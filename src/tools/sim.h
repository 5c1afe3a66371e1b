// The allocator simulators behind `srdma sim bitmap` and `srdma sim buddy`:
// one operation per input line, one result line per operation, for capacity
// planning and golden tests. They run the library's own allocators.
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <ostream>
#include <string_view>
#include <vector>

#include "srdma/status.h"

namespace srdma::tools {

// bitmap: `alloc` -> value | `error ENOMEM ...`; `free V` -> `ok` | `error EINVAL ...`.
// EINVAL (nothing read) for parameters the allocator refuses.
Result<void> sim_bitmap(std::uint32_t num, std::uint32_t reserved, std::uint32_t mask,
                        std::istream& in, std::ostream& out);

// buddy: `alloc ORDER` -> segment | `error CODE ...`; `free SEG ORDER` ->
// `ok` | `error EINVAL ...`; `reserve SEG ORDER` -> `ok` | `error CODE ...`.
Result<void> sim_buddy(int max_order, std::istream& in, std::ostream& out);

// cq-pool: `get NR_CQE HINT CTX` / `put CQ NR_CQE` -> `ok cq=C vector=V
// cqe=E used=U`; `destroy CQ`, `resize CQ CQE` -> what the device answers;
// `trim` -> `ok freed=K`; failures `error CODE reason`. Runs the library's
// own pool (core::CqPool) over CQs that are only numbers.
Result<void> sim_cq_pool(std::uint32_t vectors, std::uint32_t cpus, std::uint32_t max_cqe, std::istream& in,
                         std::ostream& out);

// Helpers shared by the simulators.
std::vector<std::string_view> split_words(std::string_view line);
// Decimal, or hexadecimal with 0x; the whole word must parse and fit.
std::optional<std::uint64_t> parse_u64(std::string_view word);
std::optional<std::int64_t> parse_i64(std::string_view word);
// The line as it may be echoed in a reason: control bytes replaced, long
// lines cut.
std::string printable(std::string_view line);
void print_error(std::ostream& out, const Error& e);

}  // namespace srdma::tools
