// The device profile: how big each resource table of a software HCA is, fixed
// at device open (like mthca's hca_profile and its module parameters).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "srdma/status.h"

namespace srdma {

struct Profile {
  // Table sizes. <= 0 means "the default"; others are rounded up to a power
  // of two.
  std::int64_t num_qp = 1 << 16;
  std::int64_t num_cq = 1 << 16;
  std::int64_t num_mpt = 1 << 17;
  std::int64_t num_mtt_segs = 1 << 20;            // 8 Mi MTT entries by default
  std::int64_t fmr_reserved_mtt_segs = 1 << 18;   // carved out for FMRs
  std::int64_t num_pd = 1 << 15;
  // MTT entries per segment = 2^log_mtts_per_seg; outside 1..5 means 3.
  std::int64_t log_mtts_per_seg = 3;

  // Device limits. <= 0 means the default; not rounded.
  std::int64_t num_comp_vectors = 0;  // default: online CPUs
  std::int64_t max_cqe = (1 << 22) - 1;  // a CQ's ring is as long as asked; libfabric's rxm asks 2^18
  std::int64_t max_qp_wr = 16384;
  std::int64_t max_sge = 32;
  std::int64_t max_inline_data = 512;
  // RoCEv2 congestion control (DCQCN: ECN marks, CNPs, rate pacing) on
  // every RC and UC QP: 1 on, 0 off. SRDMA_CC=0 turns it off too.
  std::int64_t congestion_control = 1;

  // Entries at the bottom of each table that are never handed out. Negative
  // or >= the table size is an error.
  std::int64_t reserved_qps = 2;       // QP0 and QP1, the special QPs
  std::int64_t reserved_cqs = 1;
  std::int64_t reserved_mrws = 1;      // MPT 0, so key 0 is never valid
  std::int64_t reserved_mtt_segs = 1;  // taken first from the FMR buddy, as mthca does
  std::int64_t reserved_pds = 1;

  // Names and values of every field, in declaration order (for tools).
  std::vector<std::pair<std::string, std::int64_t>> fields() const;
  // Sets a field by name; EINVAL for an unknown name.
  Result<void> set(const std::string& name, std::int64_t value);
};

// The profile a device would run with: defaults filled in, sizes rounded up
// to powers of two, fmr_reserved_mtt_segs >= num_mtt_segs repaired to
// num_mtt_segs / 2 and log_mtts_per_seg outside 1..5 repaired to 3, each
// repair described in `repairs` if given. What cannot be repaired is EINVAL
// with the field named.
Result<Profile> validate_profile(const Profile& requested,
                                 std::vector<std::string>* repairs = nullptr);

}  // namespace srdma
