// An XRC domain's shared state: its number on the device and what uses it.
// Internal to src/core.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/device_impl.h"
#include "srdma/xrcd.h"

namespace srdma::detail {

struct TgtQpShare;

struct XrcdImpl {
  std::shared_ptr<DeviceImpl> device;
  std::uint32_t xrcdn = 0;
  std::atomic<int> usecnt{0};  // XRC SRQs and TGT QPs
  std::atomic<bool> closed{false};
  std::mutex tgt_mu;  // guards tgt_qps
  // Its TGT QPs by number, for open_tgt_qp (weak: their handles own them).
  std::unordered_map<std::uint32_t, std::weak_ptr<TgtQpShare>> tgt_qps;

  // Its number goes back when the last user lets go (an owner that did not
  // close it leaves it to its SRQs and QPs).
  ~XrcdImpl() {
    if (!closed.load()) device->hca->engine().free_xrcd(xrcdn);
  }
  static const std::shared_ptr<XrcdImpl>& of(const XrcDomain& d) { return d.state_; }
};

// A TGT QP shared by the handle that created it and those that opened it
// (XrcDomain::open_tgt_qp): the device QP goes with the last of them.
struct TgtQpShare {
  std::shared_ptr<XrcdImpl> xrcd;
  std::shared_ptr<hca::Qp> qp;
  ~TgtQpShare() {
    {
      std::lock_guard lock(xrcd->tgt_mu);
      if (auto it = xrcd->tgt_qps.find(qp->qpn()); it != xrcd->tgt_qps.end() && it->second.expired())
        xrcd->tgt_qps.erase(it);
    }
    (void)xrcd->device->hca->engine().destroy_qp(qp);
    xrcd->usecnt.fetch_sub(1);
  }
};

}  // namespace srdma::detail
