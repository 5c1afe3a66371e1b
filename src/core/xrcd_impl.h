// An XRC domain's shared state: its number on the device and what uses it.
// Internal to src/core.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/device_impl.h"
#include "srdma/xrcd.h"

namespace srdma::detail {

struct XrcdImpl {
  std::shared_ptr<DeviceImpl> device;
  std::uint32_t xrcdn = 0;
  std::atomic<int> usecnt{0};  // XRC SRQs and TGT QPs
  std::atomic<bool> closed{false};

  // Its number goes back when the last user lets go (an owner that did not
  // close it leaves it to its SRQs and QPs).
  ~XrcdImpl() {
    if (!closed.load()) device->hca->engine().free_xrcd(xrcdn);
  }
  static const std::shared_ptr<XrcdImpl>& of(const XrcDomain& d) { return d.state_; }
};

}  // namespace srdma::detail
