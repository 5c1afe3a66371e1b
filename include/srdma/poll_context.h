// Where a CQ's completions are processed (like enum ib_poll_context).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace srdma {

enum class PollContext : std::uint8_t {
  kDirect,            // the consumer calls process_cq_direct(); never pooled
  kSoftirq,           // in the completion vector's thread
  kWorkqueue,         // a worker bound to the vector
  kUnboundWorkqueue,  // a shared worker pool
};

// False for a value outside the enum (a caller's bad cast): refused with
// EINVAL wherever a poll context comes in.
constexpr bool is_valid(PollContext c) {
  return static_cast<unsigned>(c) <= static_cast<unsigned>(PollContext::kUnboundWorkqueue);
}

// "direct", "softirq", "workqueue", "unbound".
std::string_view poll_context_name(PollContext c);
std::optional<PollContext> parse_poll_context(std::string_view name);

}  // namespace srdma
