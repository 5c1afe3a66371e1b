// A small device profile for tests: tables of a few thousand entries (cheap
// to open many times) and two completion vectors.
#pragma once

#include "srdma/profile.h"

namespace srdma::test {

inline Profile small_profile(std::int64_t num_qp_cq = 64) {
  Profile p;
  p.num_mpt = 1 << 10;
  p.num_mtt_segs = 1 << 12;
  p.fmr_reserved_mtt_segs = 1 << 10;
  p.num_qp = num_qp_cq;
  p.num_cq = num_qp_cq;
  p.num_comp_vectors = 2;
  return p;
}

}  // namespace srdma::test
