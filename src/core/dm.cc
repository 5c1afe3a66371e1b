#include "srdma/dm.h"

#include <sys/mman.h>

#include <cstring>

#include <fmt/format.h>

#include "core/dm_impl.h"
#include "srdma/device.h"

namespace srdma {

namespace detail {

DmImpl::~DmImpl() {
  if (base) ::munmap(base, mapped);
  device->dm_bytes.fetch_sub(mapped);
}

}  // namespace detail

namespace {

// The bounds and word rules of one copy.
Result<void> check_copy(const detail::DmImpl* dm, std::uint64_t offset, std::size_t length) {
  if (!dm) return make_error(EINVAL, "the device memory is freed");
  if (offset % kDmWordSize || length % kDmWordSize)
    return make_error(EINVAL, fmt::format("offset {} and length {} must be multiples of {} (device memory words)",
                                          offset, length, kDmWordSize));
  if (offset > dm->length || length > dm->length - offset)
    return make_error(EFAULT, fmt::format("[{}, +{}) is not inside the {}-byte device memory", offset, length,
                                          dm->length));
  return {};
}

}  // namespace

Result<void> DeviceMemory::free() {
  if (!state_) return make_error(EINVAL, "the device memory is already freed");
  if (int n = state_->usecnt.load(); n > 0)
    return make_error(EBUSY, fmt::format("{} memory region(s) are registered on the device memory", n));
  state_.reset();
  return {};
}

std::size_t DeviceMemory::length() const { return state_ ? state_->length : 0; }
int DeviceMemory::usecnt() const { return state_ ? state_->usecnt.load() : 0; }

Result<void> DeviceMemory::copy_to(std::uint64_t offset, const void* src, std::size_t length) {
  if (auto ok = check_copy(state_.get(), offset, length); !ok) return ok;
  if (length) std::memcpy(state_->base + offset, src, length);
  return {};
}

Result<void> DeviceMemory::copy_from(void* dst, std::uint64_t offset, std::size_t length) const {
  if (auto ok = check_copy(state_.get(), offset, length); !ok) return ok;
  if (length) std::memcpy(dst, state_->base + offset, length);
  return {};
}

Result<DeviceMemory> Device::alloc_dm(std::uint64_t length, std::uint32_t log_align) {
  if (state_->removed) return make_error(ENODEV, "the device has been removed");
  if (length == 0) return make_error(EINVAL, "device memory needs at least one byte");
  if (length > kMaxDmSize)
    return make_error(EINVAL, fmt::format("{} bytes exceed max_dm_size {}", length, kMaxDmSize));
  // Every buffer starts on a page: any alignment up to a page is met.
  if (log_align > 12) return make_error(EINVAL, fmt::format("log_align_req {} beyond a page (12)", log_align));
  const std::size_t mapped = (length + 4095) & ~std::size_t{4095};
  // Reserve the pages in the device's budget first (concurrent allocations
  // cannot overshoot it).
  std::uint64_t used = state_->dm_bytes.load();
  do {
    if (used + mapped > kMaxDmSize)
      return make_error(ENOMEM, fmt::format("device memory: {} of {} bytes in use, {} more asked for", used,
                                            kMaxDmSize, mapped));
  } while (!state_->dm_bytes.compare_exchange_weak(used, used + mapped));
  auto dm = std::make_shared<detail::DmImpl>();
  dm->device = state_;
  dm->mapped = mapped;  // the destructor gives the reservation back
  dm->length = static_cast<std::size_t>(length);
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return make_error(ENOMEM, "device memory: mmap failed");
  dm->base = static_cast<std::byte*>(p);
  return DeviceMemory(std::move(dm));
}

}  // namespace srdma
