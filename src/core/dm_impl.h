// A device-memory buffer's shared state (srdma/dm.h). Internal to src/core.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>

#include "core/device_impl.h"

namespace srdma::detail {

struct DmImpl {
  std::shared_ptr<DeviceImpl> device;
  std::byte* base = nullptr;  // our own mapping, page aligned
  std::size_t length = 0;     // what was asked for
  std::size_t mapped = 0;     // whole pages: what counts against kMaxDmSize
  std::atomic<int> usecnt{0};  // memory regions registered on it

  DmImpl() = default;
  DmImpl(const DmImpl&) = delete;
  DmImpl& operator=(const DmImpl&) = delete;
  // Unmaps the buffer and gives its pages back to the device's budget.
  ~DmImpl();
};

}  // namespace srdma::detail
