// An SRQ's shared state: the device SRQ and the PD it keeps alive.
// Internal to src/core.
#pragma once

#include <memory>

#include "core/pd_impl.h"
#include "core/xrcd_impl.h"
#include "hca/srq.h"
#include "srdma/srq.h"

namespace srdma::detail {

struct SrqImpl {
  std::shared_ptr<PdImpl> pd;
  std::shared_ptr<XrcdImpl> xrcd;  // an XRC SRQ's domain
  std::shared_ptr<hca::Srq> srq;
  void* context = nullptr;
  bool destroyed = false;
  // The device SRQ behind a public one (create_qp's srq).
  static const std::shared_ptr<hca::Srq>& of(const SharedReceiveQueue& q) { return q.state_->srq; }
  static DeviceImpl* device_of(const SharedReceiveQueue& q) { return q.state_->pd->device.get(); }
  static bool destroyed_of(const SharedReceiveQueue& q) { return q.state_->destroyed; }
};

}  // namespace srdma::detail
