// The state of a QP's MR pool (mr_pool.h). Internal to src/core.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "srdma/mr.h"

namespace srdma::detail {

// The QP's MR pool (mr_pool.h, like qp->rdma_mrs and qp->mrs_used).
struct MrPoolImpl {
  std::mutex mu;  // guards all, free_list, max_num_sg, type
  std::vector<std::unique_ptr<MemoryRegion>> all;  // every MR of the pool
  std::vector<MemoryRegion*> free_list;            // those not handed out
  std::uint32_t max_num_sg = 0;
  MrType type = MrType::kMemReg;
  std::atomic<int> used{0};  // handed out (mrs_used)
};

}  // namespace srdma::detail
