// A receive WR list, converted to the core's RecvWrs a batch at a time
// (an ibv_sge is a Sge), posted with `post`, and the core's bad WR mapped
// back to the application's.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>

#include "errors.h"
#include "srdma/wr.h"

namespace srdma::verbs {

inline constexpr std::size_t kPostBatch = 16;  // WRs converted and posted to the core at a time

template <class Post>
int post_recv_list(const char* verb, ibv_recv_wr* wr, ibv_recv_wr** bad_wr, Post&& post) {
  std::array<RecvWr, kPostBatch> batch;
  std::array<ibv_recv_wr*, kPostBatch> from;
  while (wr) {
    std::size_t n = 0;
    int refused = 0;
    for (; wr && n < kPostBatch; wr = wr->next, ++n) {
      if (wr->num_sge < 0) {
        refused = fail(verb, EINVAL, "negative num_sge");
        break;
      }
      RecvWr& w = batch[n];
      w = RecvWr{};
      w.wr_id = wr->wr_id;
      w.sg_list = reinterpret_cast<const Sge*>(wr->sg_list);
      w.num_sge = wr->num_sge;
      if (n) batch[n - 1].next = &w;
      from[n] = wr;
    }
    if (n) {
      const RecvWr* bad = nullptr;
      if (auto r = post(batch[0], &bad); !r) {
        *bad_wr = bad ? from[static_cast<std::size_t>(bad - batch.data())] : from[0];
        return fail(verb, r.error());
      }
    }
    if (refused) {
      *bad_wr = wr;
      return refused;
    }
  }
  return 0;
}

}  // namespace srdma::verbs
