// `srdma blk bench`: an fio-like load on the NVMe-oF target and host over
// softrdma, in one process, comparing private CQs (one per queue) with the
// shared CQ pool -- the measurement of the shared-CQ patch.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "srdma/status.h"
#include "tools/cq_footprint.h"
#include "tools/transport_report.h"

namespace srdma::tools {

struct BlkBenchOptions {
  std::uint32_t controllers = 4;
  std::uint32_t queues = 0;     // I/O queues per controller; 0: one per CPU
  std::uint32_t qd = 32;        // I/Os in flight per queue
  std::uint32_t bs = 4096;      // bytes per I/O
  std::string rw = "randread";  // randread | randwrite | randrw
  std::uint32_t rwmix = 50;     // randrw: percent reads
  std::uint64_t size = 64ull << 20;  // bytes per namespace (one per controller)
  double runtime = 5;           // seconds per mode (when ios == 0)
  std::uint64_t ios = 0;        // I/Os per mode instead of a runtime
  bool verify = false;
  std::string cq = "both";      // private | pool | both
  std::string reg = "frwr";     // frwr | fmr
  std::string backend = "ram";  // ram | file:PATH
  std::string json;             // write the results here
  std::string plot;             // write an SVG chart here
  bool progress = true;
  bool dim = true;              // adaptive completion-event moderation on both devices
  std::uint64_t inject_corruption_after = 0;  // tests: corrupt a block after N I/Os (0: never)
  std::optional<std::uint32_t> mtu;  // path MTU of every queue's QP (the host's CM request carries it); none: the port's active MTU
  std::string impair;           // host and target send through an impairing link (srdma/impair.h); "" none
  // Only the host, against a target elsewhere (srdma nvmf target), on a
  // device of its own at `ip`, through the CM on the wire.
  std::string connect;          // ADDR[:PORT], an IPv6 ADDR bracketed before a port ([::1]:4420)
  std::string ip;
  std::string nqn;
  // With --connect: the host NQN (empty: this machine's) and its
  // DH-HMAC-CHAP secrets (nvme connect's --dhchap-secret/--dhchap-ctrl-secret).
  std::string hostnqn;
  std::string dhchap_secret;
  std::string dhchap_ctrl_secret;
  // With --connect: when the target goes away the host connects again
  // every reconnect_delay seconds; its I/O waits, and fails only when
  // ctrl_loss_tmo seconds pass without a connection (nvme-cli's options).
  double reconnect_delay = 10;
  double ctrl_loss_tmo = 600;
};

struct BlkModeResult {
  std::string mode;
  std::uint64_t ios = 0;
  double seconds = 0;
  double iops = 0;
  double mib_s = 0;
  double lat_avg_us = 0, lat_p50_us = 0, lat_p99_us = 0, lat_p9999_us = 0;
  double interrupts_per_s = 0;  // completion events (EQEs), host and target devices
  double wakeups_per_s = 0;     // vector threads' wake-ups
  double completions_per_interrupt = 0;
  std::uint32_t cqs = 0;      // the host controllers' CQs (4X private, X pooled in the shared-CQ patch)
  CqFootprint cq_footprint;  // every CQ of the devices in this process, while the queues ran
  double cpu_us_per_io = 0;
  std::uint64_t verify_errors = 0;
  std::uint64_t io_errors = 0;
  std::uint64_t reconnects = 0;  // --connect: controllers connected again after a loss
  std::vector<DeviceTransport> transport;  // the host's and the target's, after the last I/O
};

// Runs the modes `opts.cq` names and prints the table to `out`. An error
// for bad options or a failed setup; a run whose verification found a
// mismatch or whose I/Os failed returns EIO after printing.
Result<std::vector<BlkModeResult>> blk_bench(const BlkBenchOptions& opts, std::ostream& out);

}  // namespace srdma::tools
