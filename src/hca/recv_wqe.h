// A posted receive as the device keeps it: what a QP's receive queue and
// a shared receive queue (srq.h) hold, and what the responder places into.
#pragma once

#include <cstdint>
#include <vector>

#include "srdma/wr.h"

namespace srdma::hca {

// What a tag-matching SRQ made of the message a WQE was taken for (none:
// not a TM SRQ). kMatched: the WQE is a posted tag's buffer and the
// message's TMH is not placed (skip); kRndv: a posted tag's buffer that a
// rendezvous request matched, whose data the device READs from the sender
// (rndv_*: the RVH) and of which nothing is placed; the others took an
// ordinary receive and place the whole message, TMH included.
enum class TmDisposition : std::uint8_t { kNone, kUnexpected, kNoTag, kMatched, kRndv };

struct RecvWqe {
  std::uint64_t wr_id = 0;
  std::vector<Sge> sges;
  std::uint64_t length = 0;  // the sum of the SGEs' lengths
  TmDisposition tm = TmDisposition::kNone;
  std::uint32_t skip = 0;    // bytes at the message's start not placed
  std::uint64_t tm_tag = 0;  // the TMH's tag and app_ctx (kUnexpected, kMatched, kRndv)
  std::uint32_t tm_priv = 0;
  std::uint64_t rndv_va = 0;  // kRndv: the RVH's buffer, unchecked (the sender's to grant)
  std::uint32_t rndv_rkey = 0;
  std::uint32_t rndv_len = 0;

  // Copies `wr` in, keeping the SGE vector's capacity.
  void assign(const RecvWr& wr) {
    wr_id = wr.wr_id;
    sges.assign(wr.sg_list, wr.sg_list + wr.num_sge);
    length = 0;
    for (const Sge& sg : sges) length += sg.length;
    tm = TmDisposition::kNone;
    skip = 0;
    tm_tag = 0;
    tm_priv = 0;
    rndv_va = 0;
    rndv_rkey = 0;
    rndv_len = 0;
  }
};

}  // namespace srdma::hca
