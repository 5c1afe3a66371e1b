// `srdma cq-pool-bench`: the headline measurement of the shared CQ pool.
// QP pairs between two devices run an event-driven SEND/RECV ping-pong: each
// side handles its completions in its CQ's SOFTIRQ poll context, and the
// host side posts the next request. The target side answers from its
// completion handler (the default), or, with a service time, from a thread
// of its own that answers in batches after that time (as storage would, so
// completions reach the host in bursts across many QPs). It runs once with
// a private CQ per QP and once with CQs from the pool, in one run, and
// reports completions per interrupt, interrupts per second and operations
// per second for both. With several rounds the modes alternate (so a drift
// of the machine's load hits both) and the per-mode medians are compared.
// The rows come back in run order.
//
// Scale: each device's profile is sized from the options (QP and CQ tables
// for --pairs, the MTT for the pairs' buffers), so thousands of pairs run
// without profile flags; fields given in `profile` override that sizing,
// and a run the resulting profile cannot hold is refused up front (EINVAL
// naming the profile field and the value it would need). Each mode also
// reports what its CQs hold (cq_footprint.h), both devices summed.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "srdma/profile.h"
#include "srdma/status.h"
#include "tools/cq_footprint.h"

namespace srdma::tools {

struct CqPoolBenchOptions {
  int pairs = 64;
  int depth = 32;        // messages in flight per QP pair
  int vectors = 2;
  double seconds = 2.0;  // per mode
  std::uint32_t size = 64;
  int rounds = 1;   // modes alternate this many times; the medians are compared
  bool dim = true;  // adaptive completion-event moderation on the processed CQs
  // 0: the target answers in its completion handler; > 0: a thread answers
  // in batches after this many microseconds of "service".
  int service_us = 0;
  bool run_private = true;  // --mode: one of the two alone (for profiling)
  bool run_pool = true;
  // Profile fields (NAME, VALUE) set over the sizing from the options.
  std::vector<std::pair<std::string, std::int64_t>> profile = {};
  std::string json = {};  // write the rows and the medians here
};

struct CqPoolBenchRow {
  const char* mode = "";
  int cqs = 0;                  // CQs the two devices used
  CqFootprint cq;               // what those CQs hold, both devices (cq.cqs == cqs)
  double ops_per_s = 0;         // round trips per second
  double completions_per_s = 0;
  double interrupts_per_s = 0;  // completion events (EQEs): one per armed CQ that fired
  double wakeups_per_s = 0;     // vector-thread wake-ups that delivered them
  double completions_per_interrupt = 0;
};

// The profile each of the two devices opens with: sized for the options,
// `o.profile` applied, validated; EINVAL when it cannot hold the run (the
// field named, with the value the run needs).
Result<Profile> cq_pool_bench_profile(const CqPoolBenchOptions& o);

Result<std::vector<CqPoolBenchRow>> cq_pool_bench(const CqPoolBenchOptions& opts, std::ostream& out);

}  // namespace srdma::tools
