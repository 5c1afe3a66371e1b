// The string and rate helpers of libibverbs.
#include <infiniband/verbs.h>

#include <array>
#include <cstddef>

namespace {

template <std::size_t N>
const char* lookup(const std::array<const char*, N>& names, int i) {
  return i >= 0 && static_cast<std::size_t>(i) < N && names[static_cast<std::size_t>(i)] ? names[static_cast<std::size_t>(i)]
                                                                                          : "unknown";
}

// IBA's static rates: the multiple of 2.5 Gb/s and the Mb/s of each enum.
struct Rate {
  ibv_rate rate;
  int mult;
  int mbps;
};
constexpr std::array<Rate, 21> kRates{{
    {IBV_RATE_2_5_GBPS, 1, 2500},     {IBV_RATE_5_GBPS, 2, 5000},       {IBV_RATE_10_GBPS, 4, 10000},
    {IBV_RATE_20_GBPS, 8, 20000},     {IBV_RATE_30_GBPS, 12, 30000},    {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},    {IBV_RATE_80_GBPS, 32, 80000},    {IBV_RATE_120_GBPS, 48, 120000},
    {IBV_RATE_14_GBPS, 5, 14062},     {IBV_RATE_56_GBPS, 22, 56250},    {IBV_RATE_112_GBPS, 45, 112500},
    {IBV_RATE_168_GBPS, 67, 168750},  {IBV_RATE_25_GBPS, 10, 25781},    {IBV_RATE_100_GBPS, 40, 103125},
    {IBV_RATE_200_GBPS, 80, 206250},  {IBV_RATE_300_GBPS, 120, 309375}, {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},    {IBV_RATE_400_GBPS, 160, 425000}, {IBV_RATE_600_GBPS, 240, 637500},
}};

}  // namespace

extern "C" {

const char* ibv_wc_status_str(ibv_wc_status status) {
  static constexpr std::array<const char*, IBV_WC_TM_RNDV_INCOMPLETE + 1> names{
      "success",
      "local length error",
      "local QP operation error",
      "local EE context operation error",
      "local protection error",
      "Work Request Flushed Error",
      "memory management operation error",
      "bad response error",
      "local access error",
      "remote invalid request error",
      "remote access error",
      "remote operation error",
      "transport retry counter exceeded",
      "RNR retry counter exceeded",
      "local RDD violation error",
      "remote invalid RD request",
      "aborted error",
      "invalid EE context number",
      "invalid EE context state",
      "fatal error",
      "response timeout error",
      "general error",
      "TM error",
      "TM software rendezvous",
  };
  return lookup(names, status);
}

const char* ibv_node_type_str(ibv_node_type node_type) {
  static constexpr std::array<const char*, IBV_NODE_UNSPECIFIED + 1> names{
      "unknown", "InfiniBand channel adapter", "InfiniBand switch", "InfiniBand router", "iWARP NIC",
      "usNIC",   "usNIC UDP",                  "unspecified"};
  return lookup(names, node_type);
}

const char* ibv_port_state_str(ibv_port_state port_state) {
  static constexpr std::array<const char*, IBV_PORT_ACTIVE_DEFER + 1> names{
      "PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED", "PORT_ACTIVE", "PORT_ACTIVE_DEFER"};
  return lookup(names, port_state);
}

const char* ibv_event_type_str(ibv_event_type event) {
  static constexpr std::array<const char*, IBV_EVENT_WQ_FATAL + 1> names{
      "CQ error",
      "local work queue catastrophic error",
      "invalid request local work queue error",
      "local access violation work queue error",
      "communication established",
      "send queue drained",
      "path migrated",
      "path migration request error",
      "local catastrophic error",
      "port active",
      "port error",
      "LID change",
      "P_Key change",
      "SM change",
      "SRQ catastrophic error",
      "SRQ limit reached",
      "last WQE reached",
      "client reregistration",
      "GID table change",
      "WQ fatal",
  };
  return lookup(names, event);
}

int ibv_rate_to_mult(ibv_rate rate) {
  for (const Rate& r : kRates)
    if (r.rate == rate) return r.mult;
  return 0;
}

ibv_rate mult_to_ibv_rate(int mult) {
  for (const Rate& r : kRates)
    if (r.mult == mult) return r.rate;
  return IBV_RATE_MAX;
}

int ibv_rate_to_mbps(ibv_rate rate) {
  for (const Rate& r : kRates)
    if (r.rate == rate) return r.mbps;
  return 0;
}

ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const Rate& r : kRates)
    if (r.mbps == mbps) return r.rate;
  return IBV_RATE_MAX;
}

}  // extern "C"
