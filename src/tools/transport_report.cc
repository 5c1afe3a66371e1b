#include "tools/transport_report.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "srdma/device.h"

namespace srdma::tools {

DeviceTransport device_transport(std::string role, const Device& dev) {
  return DeviceTransport{std::move(role), dev.counters(), dev.impair_stats(), dev.wire_stats()};
}

DeviceTransport transport_since(DeviceTransport now, const DeviceTransport& before) {
  now.counters -= before.counters;
  ImpairStats& i = now.impair;
  i.passed -= before.impair.passed;
  i.dropped -= before.impair.dropped;
  i.duplicated -= before.impair.duplicated;
  i.reordered -= before.impair.reordered;
  i.corrupted -= before.impair.corrupted;
  i.tail_dropped -= before.impair.tail_dropped;
  i.ce_marked -= before.impair.ce_marked;
  WireStats& w = now.wire;
  w.frames_sent -= before.wire.frames_sent;
  w.frames_received -= before.wire.frames_received;
  w.send_errors -= before.wire.send_errors;
  w.rx_overruns -= before.wire.rx_overruns;
  w.source_port_fallbacks -= before.wire.source_port_fallbacks;
  w.send_calls -= before.wire.send_calls;
  w.recv_calls -= before.wire.recv_calls;
  w.datagrams_received -= before.wire.datagrams_received;
  w.steer_rebuilds -= before.wire.steer_rebuilds;  // host_members is a gauge: as it is now
  w.steer_foreign -= before.wire.steer_foreign;
  w.steer_bad_probes -= before.wire.steer_bad_probes;
  w.same_host_frames_sent -= before.wire.same_host_frames_sent;  // same_host_peers is a gauge
  w.same_host_frames_received -= before.wire.same_host_frames_received;
  w.same_host_ring_full -= before.wire.same_host_ring_full;
  w.same_host_refused -= before.wire.same_host_refused;
  return now;
}

nlohmann::json to_json(const TransportCounters& c) {
  nlohmann::json dropped = nlohmann::json::object();
  for (std::size_t r = 0; r < kNumDropReasons; ++r)
    dropped[std::string(drop_reason_str(static_cast<DropReason>(r)))] = c.dropped[r];
  nlohmann::json naks_sent = nlohmann::json::object();
  for (std::size_t i = 0; i < kNumNakCauses; ++i)
    naks_sent[std::string(nak_cause_str(static_cast<NakCause>(i)))] = c.naks_sent[i];
  nlohmann::json naks_received = nlohmann::json::object();
  for (std::size_t i = 0; i < kNumNakCodes; ++i)
    naks_received[std::string(nak_code_str(static_cast<NakCode>(i)))] = c.naks_received[i];
  return {{"requests_sent", c.requests_sent},
          {"requests_received", c.requests_received},
          {"responses_sent", c.responses_sent},
          {"responses_received", c.responses_received},
          {"retransmissions", c.retransmissions},
          {"timeouts", c.timeouts},
          {"rto_expiries", c.rto_expiries},
          {"tail_probes", c.tail_probes},
          {"rnr_naks_sent", c.rnr_naks_sent},
          {"rnr_naks_received", c.rnr_naks_received},
          {"rnr_retries", c.rnr_retries},
          {"seq_naks_sent", c.seq_naks_sent},
          {"seq_naks_received", c.seq_naks_received},
          {"duplicate_requests", c.duplicate_requests},
          {"cnps_sent", c.cnps_sent},
          {"cnps_received", c.cnps_received},
          {"rate_decreases", c.rate_decreases},
          {"rate_increases", c.rate_increases},
          {"paced_waits", c.paced_waits},
          {"lowest_rate_mbps", c.lowest_rate_mbps},
          {"dropped", std::move(dropped)},
          {"dropped_total", c.dropped_total()},
          {"naks_sent", std::move(naks_sent)},
          {"naks_received", std::move(naks_received)}};
}

namespace {
// A count in a peer's report: what is missing or not a count reads as 0.
std::uint64_t count_field(const nlohmann::json& o, std::string_view key) {
  const auto it = o.find(key);
  return it != o.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}
}  // namespace

TransportCounters transport_from_json(const nlohmann::json& j) {
  TransportCounters c;
  if (!j.is_object()) return c;
  c.requests_sent = count_field(j, "requests_sent");
  c.requests_received = count_field(j, "requests_received");
  c.responses_sent = count_field(j, "responses_sent");
  c.responses_received = count_field(j, "responses_received");
  c.retransmissions = count_field(j, "retransmissions");
  c.timeouts = count_field(j, "timeouts");
  c.rto_expiries = count_field(j, "rto_expiries");
  c.tail_probes = count_field(j, "tail_probes");
  c.rnr_naks_sent = count_field(j, "rnr_naks_sent");
  c.rnr_naks_received = count_field(j, "rnr_naks_received");
  c.rnr_retries = count_field(j, "rnr_retries");
  c.seq_naks_sent = count_field(j, "seq_naks_sent");
  c.seq_naks_received = count_field(j, "seq_naks_received");
  c.duplicate_requests = count_field(j, "duplicate_requests");
  c.cnps_sent = count_field(j, "cnps_sent");
  c.cnps_received = count_field(j, "cnps_received");
  c.rate_decreases = count_field(j, "rate_decreases");
  c.rate_increases = count_field(j, "rate_increases");
  c.paced_waits = count_field(j, "paced_waits");
  c.lowest_rate_mbps = count_field(j, "lowest_rate_mbps");
  if (const auto d = j.find("dropped"); d != j.end() && d->is_object())
    for (std::size_t r = 0; r < kNumDropReasons; ++r)
      c.dropped[r] = count_field(*d, drop_reason_str(static_cast<DropReason>(r)));
  if (const auto n = j.find("naks_sent"); n != j.end() && n->is_object())
    for (std::size_t i = 0; i < kNumNakCauses; ++i)
      c.naks_sent[i] = count_field(*n, nak_cause_str(static_cast<NakCause>(i)));
  if (const auto n = j.find("naks_received"); n != j.end() && n->is_object())
    for (std::size_t i = 0; i < kNumNakCodes; ++i)
      c.naks_received[i] = count_field(*n, nak_code_str(static_cast<NakCode>(i)));
  return c;
}

ImpairStats impair_from_json(const nlohmann::json& j) {
  ImpairStats s;
  if (!j.is_object()) return s;
  s.passed = count_field(j, "passed");
  s.dropped = count_field(j, "dropped");
  s.duplicated = count_field(j, "duplicated");
  s.reordered = count_field(j, "reordered");
  s.corrupted = count_field(j, "corrupted");
  s.tail_dropped = count_field(j, "tail_dropped");
  s.ce_marked = count_field(j, "ce_marked");
  return s;
}

WireStats wire_from_json(const nlohmann::json& j) {
  WireStats w;
  if (!j.is_object()) return w;
  w.frames_sent = count_field(j, "frames_sent");
  w.frames_received = count_field(j, "frames_received");
  w.send_errors = count_field(j, "send_errors");
  w.rx_overruns = count_field(j, "rx_overruns");
  w.source_port_fallbacks = count_field(j, "source_port_fallbacks");
  w.send_calls = count_field(j, "send_calls");
  w.recv_calls = count_field(j, "recv_calls");
  w.datagrams_received = count_field(j, "datagrams_received");
  w.gro = j.contains("gro") && j["gro"].is_boolean() && j["gro"].get<bool>();
  w.host_members = static_cast<std::uint32_t>(count_field(j, "host_members"));
  w.steer_rebuilds = count_field(j, "steer_rebuilds");
  w.steer_foreign = count_field(j, "steer_foreign");
  w.steer_bad_probes = count_field(j, "steer_bad_probes");
  w.same_host_peers = static_cast<std::uint32_t>(count_field(j, "same_host_peers"));
  w.same_host_frames_sent = count_field(j, "same_host_frames_sent");
  w.same_host_frames_received = count_field(j, "same_host_frames_received");
  w.same_host_ring_full = count_field(j, "same_host_ring_full");
  w.same_host_refused = count_field(j, "same_host_refused");
  return w;
}

nlohmann::json to_json(const ImpairStats& s) {
  return {{"passed", s.passed},
          {"dropped", s.dropped},
          {"duplicated", s.duplicated},
          {"reordered", s.reordered},
          {"corrupted", s.corrupted},
          {"tail_dropped", s.tail_dropped},
          {"ce_marked", s.ce_marked}};
}

nlohmann::json to_json(const std::vector<DeviceTransport>& devs) {
  nlohmann::json j = nlohmann::json::object();
  for (const DeviceTransport& d : devs) {
    j[d.role] = to_json(d.counters);
    j[d.role]["impair"] = to_json(d.impair);
    if (d.wire.frames_sent + d.wire.frames_received + d.wire.same_host_frames_sent +
            d.wire.same_host_frames_received >
        0)
      j[d.role]["wire"] = {{"frames_sent", d.wire.frames_sent},
                           {"frames_received", d.wire.frames_received},
                           {"send_errors", d.wire.send_errors},
                           {"rx_overruns", d.wire.rx_overruns},
                           {"source_port_fallbacks", d.wire.source_port_fallbacks},
                           {"send_calls", d.wire.send_calls},
                           {"recv_calls", d.wire.recv_calls},
                           {"datagrams_received", d.wire.datagrams_received},
                           {"gro", d.wire.gro},
                           {"host_members", d.wire.host_members},
                           {"steer_rebuilds", d.wire.steer_rebuilds},
                           {"steer_foreign", d.wire.steer_foreign},
                           {"steer_bad_probes", d.wire.steer_bad_probes},
                           {"same_host_peers", d.wire.same_host_peers},
                           {"same_host_frames_sent", d.wire.same_host_frames_sent},
                           {"same_host_frames_received", d.wire.same_host_frames_received},
                           {"same_host_ring_full", d.wire.same_host_ring_full},
                           {"same_host_refused", d.wire.same_host_refused}};
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
    std::string naks;
    for (std::size_t i = 0; i < kNumNakCauses; ++i)
      if (c.naks_sent[i])
        naks += fmt::format("{}sent {} {}", naks.empty() ? ", NAKs (" : ", ", nak_cause_str(static_cast<NakCause>(i)),
                            c.naks_sent[i]);
    for (std::size_t i = 0; i < kNumNakCodes; ++i)
      if (c.naks_received[i])
        naks += fmt::format("{}received {} {}", naks.empty() ? ", NAKs (" : ", ",
                            nak_code_str(static_cast<NakCode>(i)), c.naks_received[i]);
    if (!naks.empty()) naks += ")";
    fmt::print(out,
               "{}transport {:<{}}: requests {} sent / {} received, responses {} / {}, retransmissions {}, "
               "timeouts {}, early (RTO) {}, tail probes {}, seq NAKs {} / {}, RNR NAKs {} / {}, duplicate requests {}, dropped {}{}{}\n",
               indent, d.role, width, c.requests_sent, c.requests_received, c.responses_sent, c.responses_received,
               c.retransmissions, c.timeouts, c.rto_expiries, c.tail_probes, c.seq_naks_sent, c.seq_naks_received, c.rnr_naks_sent,
               c.rnr_naks_received, c.duplicate_requests, c.dropped_total(), drops, naks);
    if (c.cnps_sent + c.cnps_received + c.rate_decreases > 0)
      fmt::print(out,
                 "{}  {:<{}}  congestion control: CNPs {} sent / {} received, rate cuts {}, increases {}, paced "
                 "waits {}, lowest rate now {}\n",
                 indent, "", width, c.cnps_sent, c.cnps_received, c.rate_decreases, c.rate_increases, c.paced_waits,
                 c.lowest_rate_mbps ? fmt::format("{} Mb/s", c.lowest_rate_mbps) : std::string("line rate"));
    const WireStats& w = d.wire;
    if (w.frames_sent + w.frames_received > 0)
      fmt::print(out,
                 "{}  {:<{}}  RoCEv2 frames {} sent / {} received, send errors {}, receive overruns {}; system calls: "
                 "{} sendmmsg, {} recvmmsg for {} datagrams (GRO {})\n",
                 indent, "", width, w.frames_sent, w.frames_received, w.send_errors, w.rx_overruns, w.send_calls,
                 w.recv_calls, w.datagrams_received, w.gro ? "on" : "off");
    if (w.host_members > 1 || w.steer_foreign + w.steer_bad_probes > 0)
      fmt::print(out,
                 "{}  {:<{}}  host group: {} processes on the address, {} steering rebuilds, {} packets for others "
                 "dropped, {} stranger probes ignored\n",
                 indent, "", width, w.host_members, w.steer_rebuilds, w.steer_foreign, w.steer_bad_probes);
    if (w.same_host_frames_sent + w.same_host_frames_received + w.same_host_refused > 0)
      fmt::print(out,
                 "{}  {:<{}}  same-host path (shared memory): {} peers, frames {} sent / {} received, {} lost to a "
                 "full ring, {} refused\n",
                 indent, "", width, w.same_host_peers, w.same_host_frames_sent, w.same_host_frames_received,
                 w.same_host_ring_full, w.same_host_refused);
  }
  if (!impair.any()) return;
  fmt::print(out, "{}impaired link {}\n", indent, to_string(impair));
  for (const DeviceTransport& d : devs) {
    const ImpairStats& s = d.impair;
    fmt::print(out, "{}  {:<{}}: passed {}, dropped {}, duplicated {}, reordered {}, corrupted {}", indent, d.role,
               width, s.passed, s.dropped, s.duplicated, s.reordered, s.corrupted);
    if (impair.rate_gbps > 0) fmt::print(out, ", bottleneck tail drops {}, CE marks {}", s.tail_dropped, s.ce_marked);
    fmt::print(out, "\n");
  }
}

}  // namespace srdma::tools
