// A WR list from the application, converted to the core's WRs a batch at a
// time, posted with `post`, and the core's bad WR mapped back to the
// application's: ibv_post_send, ibv_post_recv and ibv_post_srq_recv.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <utility>

#include "errors.h"
#include "srdma/status.h"
#include "srdma/wr.h"

namespace srdma::verbs {

inline constexpr std::size_t kPostBatch = 16;  // WRs converted and posted to the core at a time

// `convert(const IbvWr&)` gives a Result<CoreWr>; `post(const CoreWr& first,
// const CoreWr** bad)` posts a chain. A WR that does not convert is the bad
// WR, with everything before it posted.
template <class CoreWr, class IbvWr, class Convert, class Post>
int post_list(const char* verb, IbvWr* wr, IbvWr** bad_wr, Convert&& convert, Post&& post) {
  std::array<CoreWr, kPostBatch> batch;
  std::array<IbvWr*, kPostBatch> from;
  while (wr) {
    std::size_t n = 0;
    int refused = 0;
    for (; wr && n < kPostBatch; wr = wr->next, ++n) {
      auto w = convert(*wr);
      if (!w) {
        refused = fail(verb, w.error());
        break;
      }
      batch[n] = *w;
      if (n) batch[n - 1].next = &batch[n];
      from[n] = wr;
    }
    if (n) {
      const CoreWr* bad = nullptr;
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

// A receive WR (an ibv_sge is a Sge).
inline Result<RecvWr> to_recv_wr(const ibv_recv_wr& in) {
  if (in.num_sge < 0) return make_error(EINVAL, "negative num_sge");
  RecvWr w;
  w.wr_id = in.wr_id;
  w.sg_list = reinterpret_cast<const Sge*>(in.sg_list);
  w.num_sge = in.num_sge;
  return w;
}

template <class Post>
int post_recv_list(const char* verb, ibv_recv_wr* wr, ibv_recv_wr** bad_wr, Post&& post) {
  return post_list<RecvWr>(verb, wr, bad_wr, to_recv_wr, std::forward<Post>(post));
}

}  // namespace srdma::verbs
