#include "tools/transport_report.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "srdma/device.h"

namespace srdma::tools {

DeviceTransport device_transport(std::string role, const Device& dev) {
  return DeviceTransport{std::move(role), dev.counters(), dev.impair_stats()};
}

nlohmann::json to_json(const TransportCounters& c) {
  nlohmann::json dropped = nlohmann::json::object();
  for (std::size_t r = 0; r < kNumDropReasons; ++r)
    dropped[std::string(drop_reason_str(static_cast<DropReason>(r)))] = c.dropped[r];
  return {{"requests_sent", c.requests_sent},
          {"requests_received", c.requests_received},
          {"responses_sent", c.responses_sent},
          {"responses_received", c.responses_received},
          {"retransmissions", c.retransmissions},
          {"timeouts", c.timeouts},
          {"rnr_naks_sent", c.rnr_naks_sent},
          {"rnr_naks_received", c.rnr_naks_received},
          {"rnr_retries", c.rnr_retries},
          {"seq_naks_sent", c.seq_naks_sent},
          {"seq_naks_received", c.seq_naks_received},
          {"duplicate_requests", c.duplicate_requests},
          {"dropped", std::move(dropped)},
          {"dropped_total", c.dropped_total()}};
}

nlohmann::json to_json(const ImpairStats& s) {
  return {{"passed", s.passed},
          {"dropped", s.dropped},
          {"duplicated", s.duplicated},
          {"reordered", s.reordered},
          {"corrupted", s.corrupted}};
}

nlohmann::json to_json(const std::vector<DeviceTransport>& devs) {
  nlohmann::json j = nlohmann::json::object();
  for (const DeviceTransport& d : devs) {
    j[d.role] = to_json(d.counters);
    j[d.role]["impair"] = to_json(d.impair);
  }
  return j;
}

void print_transport(const std::vector<DeviceTransport>& devs, const ImpairSpec& impair, std::ostream& out,
                     const std::string& indent) {
  std::size_t width = 0;
  for (const DeviceTransport& d : devs) width = std::max(width, d.role.size());
  for (const DeviceTransport& d : devs) {
    const TransportCounters& c = d.counters;
    std::string drops;
    for (std::size_t r = 0; r < kNumDropReasons; ++r)
      if (c.dropped[r])
        drops += fmt::format("{}{} {}", drops.empty() ? " (" : ", ", drop_reason_str(static_cast<DropReason>(r)),
                             c.dropped[r]);
    if (!drops.empty()) drops += ")";
    fmt::print(out,
               "{}transport {:<{}}: requests {} sent / {} received, responses {} / {}, retransmissions {}, "
               "timeouts {}, seq NAKs {} / {}, RNR NAKs {} / {}, duplicate requests {}, dropped {}{}\n",
               indent, d.role, width, c.requests_sent, c.requests_received, c.responses_sent, c.responses_received,
               c.retransmissions, c.timeouts, c.seq_naks_sent, c.seq_naks_received, c.rnr_naks_sent,
               c.rnr_naks_received, c.duplicate_requests, c.dropped_total(), drops);
  }
  if (!impair.any()) return;
  fmt::print(out, "{}impaired link {}\n", indent, to_string(impair));
  for (const DeviceTransport& d : devs) {
    const ImpairStats& s = d.impair;
    fmt::print(out, "{}  {:<{}}: passed {}, dropped {}, duplicated {}, reordered {}, corrupted {}\n", indent, d.role,
               width, s.passed, s.dropped, s.duplicated, s.reordered, s.corrupted);
  }
}

}  // namespace srdma::tools
