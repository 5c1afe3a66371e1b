// What the wire did during a benchmark, per device: the transport's
// counters (retransmissions, timeouts, NAKs, duplicates, drops by reason)
// and, with --impair, what the impairing link did to the packets. The
// benchmarks print these under their tables and add them to their JSON.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "srdma/counters.h"
#include "srdma/device.h"
#include "srdma/impair.h"

namespace srdma {
class Device;
}

namespace srdma::tools {

struct DeviceTransport {
  std::string role;  // "client", "server", "host", "target"
  TransportCounters counters;
  ImpairStats impair;
  WireStats wire;  // the RoCEv2 link's (zero in process)
};

// The device's counters and impairment stats now.
DeviceTransport device_transport(std::string role, const Device& dev);
// What a device counted between two snapshots (a device that outlives one
// benchmark mode: blk bench --connect's host).
DeviceTransport transport_since(DeviceTransport now, const DeviceTransport& before);

// {"requests_sent": ..., "retransmissions": ..., "dropped": {"bad_psn": ...},
//  "dropped_total": ...}
nlohmann::json to_json(const TransportCounters& c);
// The inverse of to_json (a peer's report): a field that is missing or not
// a count reads as 0.
TransportCounters transport_from_json(const nlohmann::json& j);
ImpairStats impair_from_json(const nlohmann::json& j);
WireStats wire_from_json(const nlohmann::json& j);
// {"passed": ..., "dropped": ..., "duplicated": ..., "reordered": ..., "corrupted": ...}
nlohmann::json to_json(const ImpairStats& s);
// {"<role>": {<counters>, "impair": {<stats>}}, ...}
nlohmann::json to_json(const std::vector<DeviceTransport>& devs);

// One line per device of counters, and with an impairment one more per
// device of what the link did; each line starts with `indent`.
void print_transport(const std::vector<DeviceTransport>& devs, const ImpairSpec& impair, std::ostream& out,
                     const std::string& indent = " ");

}  // namespace srdma::tools
