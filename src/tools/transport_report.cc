#include "tools/transport_report.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "srdma/device.h"

namespace srdma::tools {

DeviceTransport device_transport(std::string role, const Device& dev) {
  return DeviceTransport{std::move(role), dev.counters(), dev.impair_stats(), dev.wire_stats()};
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

TransportCounters transport_from_json(const nlohmann::json& j) {
  TransportCounters c;
  if (!j.is_object()) return c;
  auto get = [&](const nlohmann::json& o, std::string_view key) -> std::uint64_t {
    const auto it = o.find(key);
    return it != o.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
  };
  c.requests_sent = get(j, "requests_sent");
  c.requests_received = get(j, "requests_received");
  c.responses_sent = get(j, "responses_sent");
  c.responses_received = get(j, "responses_received");
  c.retransmissions = get(j, "retransmissions");
  c.timeouts = get(j, "timeouts");
  c.rnr_naks_sent = get(j, "rnr_naks_sent");
  c.rnr_naks_received = get(j, "rnr_naks_received");
  c.rnr_retries = get(j, "rnr_retries");
  c.seq_naks_sent = get(j, "seq_naks_sent");
  c.seq_naks_received = get(j, "seq_naks_received");
  c.duplicate_requests = get(j, "duplicate_requests");
  if (const auto d = j.find("dropped"); d != j.end() && d->is_object())
    for (std::size_t r = 0; r < kNumDropReasons; ++r)
      c.dropped[r] = get(*d, drop_reason_str(static_cast<DropReason>(r)));
  return c;
}

ImpairStats impair_from_json(const nlohmann::json& j) {
  ImpairStats s;
  if (!j.is_object()) return s;
  auto get = [&](std::string_view key) -> std::uint64_t {
    const auto it = j.find(key);
    return it != j.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
  };
  s.passed = get("passed");
  s.dropped = get("dropped");
  s.duplicated = get("duplicated");
  s.reordered = get("reordered");
  s.corrupted = get("corrupted");
  return s;
}

WireStats wire_from_json(const nlohmann::json& j) {
  WireStats w;
  if (!j.is_object()) return w;
  auto get = [&](std::string_view key) -> std::uint64_t {
    const auto it = j.find(key);
    return it != j.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
  };
  w.frames_sent = get("frames_sent");
  w.frames_received = get("frames_received");
  w.send_errors = get("send_errors");
  w.rx_overruns = get("rx_overruns");
  w.source_port_fallbacks = get("source_port_fallbacks");
  return w;
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
    if (d.wire.frames_sent + d.wire.frames_received > 0)
      j[d.role]["wire"] = {{"frames_sent", d.wire.frames_sent},
                           {"frames_received", d.wire.frames_received},
                           {"send_errors", d.wire.send_errors},
                           {"rx_overruns", d.wire.rx_overruns},
                           {"source_port_fallbacks", d.wire.source_port_fallbacks}};
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
    const WireStats& w = d.wire;
    if (w.frames_sent + w.frames_received > 0)
      fmt::print(out, "{}  {:<{}}  RoCEv2 frames {} sent / {} received, send errors {}, receive overruns {}\n", indent,
                 "", width, w.frames_sent, w.frames_received, w.send_errors, w.rx_overruns);
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
