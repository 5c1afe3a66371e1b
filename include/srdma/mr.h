// A registered memory region: an owning, move-only handle (like ib_mr).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "srdma/status.h"

namespace srdma {

namespace detail {
struct PdState;
}

class MemoryRegion {
 public:
  MemoryRegion() = default;
  MemoryRegion(MemoryRegion&&) noexcept;
  MemoryRegion& operator=(MemoryRegion&&) noexcept;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;
  // Deregisters if still registered.
  ~MemoryRegion();

  // The keys stop working (the device drops its cached translation) before
  // this returns. EINVAL on an empty handle.
  Result<void> dereg();

  bool valid() const { return pd_ != nullptr; }
  std::uint32_t lkey() const { return key_; }
  std::uint32_t rkey() const { return key_; }
  void* addr() const { return addr_; }
  std::size_t length() const { return length_; }
  std::uint32_t access() const { return access_; }
  std::uint32_t pd_num() const;

 private:
  friend class ProtectionDomain;
  MemoryRegion(std::shared_ptr<detail::PdState> pd, std::uint32_t key, void* addr, std::size_t length,
               std::uint32_t access)
      : pd_(std::move(pd)), key_(key), addr_(addr), length_(length), access_(access) {}

  std::shared_ptr<detail::PdState> pd_;
  std::uint32_t key_ = 0;
  void* addr_ = nullptr;
  std::size_t length_ = 0;
  std::uint32_t access_ = 0;
};

}  // namespace srdma
