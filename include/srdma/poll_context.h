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

// "direct", "softirq", "workqueue", "unbound".
std::string_view poll_context_name(PollContext c);
std::optional<PollContext> parse_poll_context(std::string_view name);

}  // namespace srdma
