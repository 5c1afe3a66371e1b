#include "srdma/poll_context.h"

namespace srdma {

std::string_view poll_context_name(PollContext c) {
  switch (c) {
    case PollContext::kDirect: return "direct";
    case PollContext::kSoftirq: return "softirq";
    case PollContext::kWorkqueue: return "workqueue";
    case PollContext::kUnboundWorkqueue: return "unbound";
  }
  return "?";
}

std::optional<PollContext> parse_poll_context(std::string_view name) {
  for (auto c : {PollContext::kDirect, PollContext::kSoftirq, PollContext::kWorkqueue, PollContext::kUnboundWorkqueue})
    if (poll_context_name(c) == name) return c;
  return std::nullopt;
}

}  // namespace srdma
