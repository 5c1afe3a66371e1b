// Device memory (ibv_alloc_dm): memory the device owns, that the consumer
// reaches only through verbs -- copy_to/copy_from, and memory regions
// registered on it (ProtectionDomain::reg_dm_mr), whose keys work in SEND,
// WRITE, READ and atomics like any region's.
//
// On an HCA with on-chip memory (mlx5's MEMIC) this is SRAM behind the
// PCIe BAR; the software HCA's is host memory it maps itself, a private
// allocation per buffer, counted against the device's kMaxDmSize. Access
// goes in 4-byte words, as on mlx5: copy offsets and lengths are multiples
// of 4.
//
// An owning, move-only handle. The buffer lives while the handle or a
// region registered on it does; free() refuses (EBUSY) while regions
// remain. Thread safety: one handle is not to be used from two threads at
// once; copies may race with traffic through its regions (their bytes are
// then undefined, as on hardware).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "srdma/status.h"

namespace srdma {

namespace detail {
struct DmImpl;
}

// The device memory a device has in all (DeviceAttr::max_dm_size).
inline constexpr std::uint64_t kMaxDmSize = std::uint64_t{256} << 10;
// Its access unit: copy offsets and lengths are multiples of this.
inline constexpr std::uint64_t kDmWordSize = 4;

class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(DeviceMemory&&) noexcept = default;
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    if (this != &o) {
      (void)free();
      state_ = std::move(o.state_);
    }
    return *this;
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { (void)free(); }

  // Gives the buffer back to the device. EBUSY while memory regions are
  // registered on it; EINVAL when already freed.
  Result<void> free();

  bool valid() const { return state_ != nullptr; }
  std::size_t length() const;
  // Memory regions registered on it.
  int usecnt() const;

  // ibv_memcpy_to_dm / ibv_memcpy_from_dm: `length` bytes at `offset`.
  // EINVAL: offset or length not a multiple of kDmWordSize, a freed
  // handle; EFAULT: [offset, offset + length) not inside the buffer.
  // Length 0 copies nothing and succeeds.
  Result<void> copy_to(std::uint64_t offset, const void* src, std::size_t length);
  Result<void> copy_from(void* dst, std::uint64_t offset, std::size_t length) const;

 private:
  friend class Device;
  friend class ProtectionDomain;
  explicit DeviceMemory(std::shared_ptr<detail::DmImpl> s) : state_(std::move(s)) {}
  std::shared_ptr<detail::DmImpl> state_;
};

}  // namespace srdma
