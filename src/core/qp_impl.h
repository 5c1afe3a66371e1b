// A QP's shared state: the device QP, its CQs (and the pool leases that
// gave them), its MR pool. Internal to src/core.
#pragma once

#include <memory>

#include "core/mr_pool_impl.h"
#include "core/pd_impl.h"
#include "core/xrcd_impl.h"
#include "hca/qp.h"
#include "srdma/cq_pool.h"

namespace srdma::detail {

struct QpImpl {
  std::shared_ptr<PdImpl> pd;  // null for an XRC TGT QP, which has its domain instead
  std::shared_ptr<TgtQpShare> tgt;  // an XRC TGT QP: its share (the device QP goes with the last)
  std::shared_ptr<hca::Qp> qp;
  CompletionQueue* send_cq = nullptr;
  CompletionQueue* recv_cq = nullptr;
  CqLease send_lease, recv_lease;  // QP_CREATE_ASSIGN_CQS: returned with the QP
  bool destroyed = false;
  MrPoolImpl mr_pool;  // destroyed with the QP, see mr_pool.h
};

}  // namespace srdma::detail
