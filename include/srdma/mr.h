// A registered memory region: an owning, move-only handle (like ib_mr).
//
// Two kinds (MrType): a user region from ProtectionDomain::reg_mr, valid
// from registration to dereg; and a fast-registration MR from
// ProtectionDomain::alloc_mr(MrType::kMemReg, ...) (FRWR), which starts
// free (its keys translate nothing) and is made valid and invalid by work
// requests on a QP of its PD:
//
//   mr.inc_rkey();                      // a fresh key byte per use
//   mr.map_mr_sg(sg, 4096);             // the page list, iova and length
//   post REG_MR {mr, mr.rkey(), access} // valid under that key, in QP order
//   ... advertise mr.rkey() and mr.iova() to the peer ...
//   post LOCAL_INV {mr.rkey()}, or the peer's SEND_WITH_INV
//
// Thread safety: one handle is not to be used from two threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "srdma/status.h"
#include "srdma/wr.h"

namespace srdma {

namespace detail {
struct PdImpl;
struct DmImpl;
struct MrAccess;
}

enum class MrType : std::uint8_t {
  kUser,    // reg_mr: a region of the consumer's memory, valid until dereg
  kMemReg,  // alloc_mr: fast registration through REG_MR work requests
};

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
  // this returns. A kMemReg MR is freed in any state (valid or free).
  // EINVAL on an empty handle.
  Result<void> dereg();

  bool valid() const { return pd_ != nullptr; }
  MrType type() const { return type_; }
  // For a kMemReg MR: the key the next REG_MR installs (see inc_rkey).
  std::uint32_t lkey() const { return key_; }
  std::uint32_t rkey() const { return key_; }
  void* addr() const { return addr_; }
  std::size_t length() const { return length_; }
  std::uint32_t access() const { return access_; }
  std::uint32_t pd_num() const;

  // --- Fast registration (kMemReg) ---

  // Maps a scatter/gather list (Sge::addr and ::length; lkeys ignored) into
  // this MR's page list with ib_map_mr_sg's rules: the first element may
  // start at an offset into a page (and at *sg_offset bytes into it), every
  // later element must start on a page boundary and the one before it end
  // on one -- unless it continues the previous element exactly, then the
  // two merge; the last element may end short. Mapping stops at the first
  // element that breaks the rules or when max_num_sg pages are full.
  // Returns how many elements were mapped completely; iova() is the first
  // mapped byte's address and length() the bytes mapped. When the pages
  // fill up inside an element, that element's mapped part counts in
  // length() and *sg_offset (if given) says where in it mapping stopped;
  // otherwise *sg_offset becomes 0.
  // EINVAL: not a kMemReg MR, page_size not a power of two in 4 KiB..1 GiB,
  // an empty list or an empty first element, *sg_offset beyond it.
  // REQUIRES: the memory stays mapped while a registration of it is valid
  // (it plays the part of DMA addresses; the device cannot pin it).
  Result<int> map_mr_sg(std::span<const Sge> sg, std::uint32_t page_size, std::uint32_t* sg_offset = nullptr);
  // ib_inc_rkey: the next key byte, the rest unchanged; lkey and rkey both
  // take it (REG_MR installs the WR's key, normally this one).
  void inc_rkey() { key_ = ((key_ + 1) & 0xffu) | (key_ & ~0xffu); }

  std::uint64_t iova() const { return iova_; }
  std::uint32_t max_num_sg() const { return max_num_sg_; }
  std::uint32_t page_size() const { return std::uint32_t{1} << page_shift_; }
  unsigned page_shift() const { return page_shift_; }
  // The pages map_mr_sg produced (each page_size aligned), in iova order.
  std::span<const std::uint64_t> page_list() const { return pages_; }

 private:
  friend class ProtectionDomain;
  friend struct detail::MrAccess;
  MemoryRegion(std::shared_ptr<detail::PdImpl> pd, std::uint32_t key, void* addr, std::size_t length,
               std::uint32_t access)
      : pd_(std::move(pd)), key_(key), addr_(addr), length_(length), access_(access) {}

  std::shared_ptr<detail::PdImpl> pd_;
  std::shared_ptr<detail::DmImpl> dm_;  // the device memory it is on (reg_dm_mr), else null
  std::uint32_t key_ = 0;
  void* addr_ = nullptr;
  std::size_t length_ = 0;
  std::uint32_t access_ = 0;
  // Fast registration.
  MrType type_ = MrType::kUser;
  std::uint32_t alloc_key_ = 0;  // the key the device allocated: what dereg frees
  std::uint32_t max_num_sg_ = 0;
  unsigned page_shift_ = 12;
  std::uint64_t iova_ = 0;
  std::vector<std::uint64_t> pages_;
};

}  // namespace srdma
