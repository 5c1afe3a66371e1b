// A posted receive as the device keeps it: what a QP's receive queue and
// a shared receive queue (srq.h) hold, and what the responder places into.
#pragma once

#include <cstdint>
#include <vector>

#include "srdma/wr.h"

namespace srdma::hca {

struct RecvWqe {
  std::uint64_t wr_id = 0;
  std::vector<Sge> sges;
  std::uint64_t length = 0;  // the sum of the SGEs' lengths

  // Copies `wr` in, keeping the SGE vector's capacity.
  void assign(const RecvWr& wr) {
    wr_id = wr.wr_id;
    sges.assign(wr.sg_list, wr.sg_list + wr.num_sge);
    length = 0;
    for (const Sge& sg : sges) length += sg.length;
  }
};

}  // namespace srdma::hca
