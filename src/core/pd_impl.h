// A protection domain's shared state, and the maker of MRs inside the core
// (alloc_mr, the MR pool). Internal to src/core.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/device_impl.h"
#include "srdma/mr.h"
#include "srdma/mw.h"
#include "srdma/status.h"

namespace srdma::detail {

struct PdImpl {
  std::shared_ptr<DeviceImpl> device;
  std::uint32_t pdn = 0;
  std::atomic<int> usecnt{0};      // live MRs (and later QPs)
  std::atomic<bool> dealloced{false};

  ~PdImpl() {
    if (!dealloced.load()) (void)device->hca->tables().dealloc_pd(pdn);
  }
};

// Makes MemoryRegions inside the core (alloc_mr, the MR pool).
struct MrAccess {
  static Result<MemoryRegion> alloc_mr(const std::shared_ptr<PdImpl>& pd, MrType type, std::uint32_t max_num_sg);
};

// What the core's bind path reads of a window: the key that names it, and
// where a type 1 bind's new key goes.
struct MwAccess {
  static std::uint32_t alloc_key(const MemoryWindow& mw) { return mw.alloc_key_; }
  static void set_bound_rkey(MemoryWindow& mw, std::uint32_t rkey) { mw.rkey_ = rkey; }
  static const std::shared_ptr<PdImpl>& pd(const MemoryWindow& mw) { return mw.pd_; }
};

}  // namespace srdma::detail
