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
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "srdma/status.h"

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
};

struct CqPoolBenchRow {
  const char* mode = "";
  int cqs = 0;                  // CQs the two devices used
  double ops_per_s = 0;         // round trips per second
  double completions_per_s = 0;
  double interrupts_per_s = 0;  // completion events (EQEs): one per armed CQ that fired
  double wakeups_per_s = 0;     // vector-thread wake-ups that delivered them
  double completions_per_interrupt = 0;
};

Result<std::vector<CqPoolBenchRow>> cq_pool_bench(const CqPoolBenchOptions& opts, std::ostream& out);

}  // namespace srdma::tools
