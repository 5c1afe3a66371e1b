// Extended CQs: ibv_create_cq_ex and the clock of their timestamps, reached
// through verbs_context (create_cq_ex, query_rt_values).
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <mutex>

namespace srdma::verbs {

// What start_poll took from the core CQ and next_poll walks. The batch is
// the application's from start_poll to end_poll (mu held unless the CQ was
// created single-threaded, as rdma-core's providers lock their CQ).
struct CqExPoll {
  static constexpr int kBatch = 16;
  std::mutex mu;
  std::array<ibv_wc, kBatch> wc;
  std::array<std::uint64_t, kBatch> ts;    // CLOCK_MONOTONIC ns, when taken from the core CQ
  std::array<std::uint64_t, kBatch> wall;  // CLOCK_REALTIME ns, likewise
  std::array<ibv_wc_tm_info, kBatch> tm;   // a tag-matching SRQ's message: the TMH's tag and app_ctx
  int at = 0;     // the current CQE; between polls, the first not handed out
  int count = 0;  // CQEs in the batch
  bool single_threaded = false;
  bool stamp = false, stamp_wall = false;
};

ibv_cq_ex* create_cq_ex_op(ibv_context* context, ibv_cq_init_attr_ex* attr);
int query_rt_values_op(ibv_context* context, ibv_values_ex* values);

}  // namespace srdma::verbs
