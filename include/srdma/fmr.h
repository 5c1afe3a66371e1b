// Fast memory regions (FMRs, like ib_fmr): a memory key whose pages are
// remapped by the consumer without a registration, as on mthca.
//
// An FMR is allocated once with fixed limits (max_pages, max_maps,
// page_shift) and then mapped over a list of pages at an iova, unmapped,
// mapped again... Each map_phys gives the FMR a new key (the old key's
// counter above the table index plus one, never reset by unmap), so a key of
// an earlier mapping comes back only after 2^(32 - log2 num_mpt) maps of the
// same FMR (32768 with the default profile; see DeviceAttr::max_map_per_fmr).
//
// Safety: unmap() (and unmap_fmrs()) take effect before they return -- the
// device drops its cached translations once per call -- so after it no key
// of the FMR translates. Remapping without an unmap also kills the previous
// key at once. What FMRs cannot offer is an unmap ordered with the QP's
// work: the consumer must unmap before reusing memory; see FmrPool for the
// lazy flavour that made Linux remove FMRs.
//
// Fmr is an owning, move-only handle; it keeps its PD (and device) alive.
// Thread safety: one handle is not to be used from two threads at once;
// distinct handles may be.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "srdma/status.h"

namespace srdma {

namespace detail {
struct PdImpl;
}

struct FmrAttr {
  std::uint32_t max_pages = 0;   // 1..512: all of an FMR's MTTs in one 4 KiB page
  std::uint32_t max_maps = 0;    // maps between unmaps, 1..DeviceAttr::max_map_per_fmr
  std::uint8_t page_shift = 12;  // page size 2^page_shift, 12..31
};

class Fmr {
 public:
  Fmr() = default;
  Fmr(Fmr&&) noexcept;
  Fmr& operator=(Fmr&&) noexcept;
  Fmr(const Fmr&) = delete;
  Fmr& operator=(const Fmr&) = delete;
  // Unmaps (if mapped) and deallocates.
  ~Fmr();

  // Maps `pages` (addresses of the consumer's memory, each aligned to
  // 2^page_shift) at `iova` (page aligned): bytes [iova, iova + n << shift)
  // become reachable through the new lkey()/rkey(). No memory check is made
  // (the list is the consumer's, as a kernel consumer's physical pages are).
  // EINVAL: an invalid handle, no pages or more than max_pages, an unaligned
  // iova or page, or max_maps maps since the last unmap.
  // REQUIRES: the pages stay mapped while the FMR maps them.
  Result<void> map_phys(std::span<const std::uint64_t> pages, std::uint64_t iova);
  // Unmaps; when it returns no key of this FMR translates (one SYNC_TPT).
  // EINVAL on an invalid handle. Unmapping an unmapped FMR is harmless.
  Result<void> unmap();
  // Frees the FMR. EBUSY while mapped; EINVAL on an invalid handle.
  Result<void> dealloc();

  bool valid() const { return pd_ != nullptr; }
  bool mapped() const { return mapped_; }
  // The current key (lkey == rkey): the last map's, or the allocation's.
  std::uint32_t lkey() const { return key_; }
  std::uint32_t rkey() const { return key_; }
  std::uint64_t iova() const { return iova_; }
  std::uint64_t length() const { return length_; }
  std::uint32_t map_count() const { return maps_; }  // since the last unmap
  const FmrAttr& attr() const { return attr_; }
  std::uint32_t access() const { return access_; }
  std::uint32_t pd_num() const;

 private:
  friend class ProtectionDomain;
  friend Result<void> unmap_fmrs(std::span<Fmr* const> fmrs);
  Fmr(std::shared_ptr<detail::PdImpl> pd, std::uint32_t key, std::uint32_t access, const FmrAttr& attr)
      : pd_(std::move(pd)), key_(key), access_(access), attr_(attr) {}
  void release() noexcept;

  std::shared_ptr<detail::PdImpl> pd_;
  std::uint32_t key_ = 0;
  std::uint32_t access_ = 0;
  FmrAttr attr_;
  bool mapped_ = false;
  std::uint32_t maps_ = 0;
  std::uint64_t iova_ = 0;
  std::uint64_t length_ = 0;
};

// Unmaps every FMR in `fmrs` with ONE translation-cache sync (like
// ib_unmap_fmr on a list). EINVAL if one is null or invalid or they are not
// all on one device; nothing is unmapped then.
Result<void> unmap_fmrs(std::span<Fmr* const> fmrs);

}  // namespace srdma
