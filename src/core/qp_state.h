// A QP's shared state: the device QP, its CQs (and the pool leases that
// gave them), its MR pool. Internal to src/core.
#pragma once

#include <memory>

#include "core/mr_pool_state.h"
#include "core/pd_state.h"
#include "hca/qp.h"
#include "srdma/cq_pool.h"

namespace srdma::detail {

struct QpState {
  std::shared_ptr<PdState> pd;
  std::shared_ptr<hca::Qp> qp;
  CompletionQueue* send_cq = nullptr;
  CompletionQueue* recv_cq = nullptr;
  CqLease send_lease, recv_lease;  // QP_CREATE_ASSIGN_CQS: returned with the QP
  bool destroyed = false;
  MrPoolState mr_pool;  // destroyed with the QP, see mr_pool.h
};

}  // namespace srdma::detail
