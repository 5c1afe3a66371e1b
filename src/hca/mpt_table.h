// The MPT (memory protection table): one 64-byte entry per memory key,
// indexed by key_to_hw_index(key) & (num_mpt - 1), like mthca's MPT context.
//
// Ownership follows the hardware: software builds an entry while its status
// byte is SW (0xF0) and hands it to the device by writing HW (0x00); only a
// HW-owned entry translates. The entries live in zeroed, lazily touched
// memory, so an unused table costs address space, not RAM. A zero entry has
// no REGION flag and so is no memory region at all.
//
// Thread safety: readers (translate) are lock-free through each entry's
// seqlock; writers are serialised by the owner (the translation tables' control lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "alloc/index_allocator.h"
#include "alloc/zeroed_array.h"
#include "hca/keys.h"
#include "hca/seqlock.h"
#include "srdma/status.h"

namespace srdma::hca {

inline constexpr std::uint8_t kMptStatusSw = 0xF0;
inline constexpr std::uint8_t kMptStatusHw = 0x00;

enum MptFlags : std::uint8_t {
  MPT_FLAG_REGION = 1u << 0,    // a memory region (not a window)
  // No MTTs (mthca's PHYSICAL MPT, as get_dma_mr uses): the region's
  // bytes follow each other from the address kept in mtt_seg, which iova
  // `start` names. An implicit ODP region (start 0, the whole address
  // space, mtt_seg 0: identity) and a device-memory region (zero-based,
  // mtt_seg the DM's bytes) are such entries.
  MPT_FLAG_PHYSICAL = 1u << 1,
  MPT_FLAG_FMR = 1u << 2,       // remapped by map_phys_fmr, not firmware
  MPT_FLAG_FAST_REG = 1u << 3,  // FRWR: registered by REG_MR work requests
  // The MTT entries are consecutive pages (each the one before plus the
  // page size): every translation is one piece, found without walking
  // them. Set with the MTTs, by whoever writes them.
  MPT_FLAG_CONTIGUOUS = 1u << 4,
  // A memory window (IBA 10.6.7; mthca/mlx4 keep windows in the MPT too):
  // no MTTs of its own; it names the region it is bound to, and translates
  // through that region's entry.
  MPT_FLAG_WINDOW = 1u << 5,
  MPT_FLAG_WINDOW_TYPE2 = 1u << 6,  // type 2 (2B): bound by WR, usable through its QP only
  MPT_FLAG_ZERO_BASED = 1u << 7,    // a window's addresses are offsets from its start
};

// MPT_FLAG_CONTIGUOUS for `pages`, each 2^page_shift aligned.
inline std::uint8_t contiguity_flag(std::span<const std::uint64_t> pages, std::uint8_t page_shift) {
  for (std::size_t i = 1; i < pages.size(); ++i)
    if (pages[i] != pages[0] + (std::uint64_t{i} << page_shift)) return 0;
  return MPT_FLAG_CONTIGUOUS;
}

// The fields of one MPT entry, as the device sees them.
struct MptFields {
  std::uint8_t status = kMptStatusSw;
  std::uint8_t flags = 0;
  std::uint8_t access = 0;      // AccessFlags
  std::uint8_t page_shift = 0;  // log2 of the page size the MTTs describe
  std::uint32_t key = 0;        // lkey == rkey
  std::uint32_t pd = 0;
  std::uint32_t mtt_count = 0;  // MTT entries used (a window: the key of its region)
  std::uint64_t start = 0;      // iova of the first byte (a window: in its region's iova space)
  std::uint64_t length = 0;     // bytes
  std::uint64_t mtt_seg = 0;    // first MTT segment (PHYSICAL: the address of iova `start`)
  std::uint32_t map_count = 0;  // FMR: maps since the last unmap (a type 2 window: its QPN)
  std::uint32_t reserved = 0;   // FRWR MR, window: the key alloc_key() handed out

  bool is_region() const { return flags & MPT_FLAG_REGION; }
  bool is_window() const { return flags & MPT_FLAG_WINDOW; }
  // A window's fields under their own names (mthca's MPT has an lkey and a
  // QPN field for a window where a region has MTT fields).
  std::uint32_t window_mr_key() const { return mtt_count; }
  std::uint32_t window_qpn() const { return map_count; }
};

// One entry as stored: the fields behind a seqlock, 64 bytes like mthca's.
struct MptEntry {
  Seqlock<MptFields> cell;
  std::uint64_t pad = 0;
};
static_assert(sizeof(MptFields) == 48);
static_assert(sizeof(MptEntry) == 64, "an MPT entry is 64 bytes, as in mthca");

class MptTable {
 public:
  // num: a power of two; reserved: low indices never handed out;
  // rotation: how the key byte and the bits above the index move
  // (index_allocator.h; the device's is random).
  static Result<MptTable> create(std::uint32_t num, std::uint32_t reserved,
                                 alloc::TopRotation rotation = alloc::TopRotation::sequential());

  // A new key for a free slot (the allocator's value rotated into key form),
  // or ENOMEM.
  Result<std::uint32_t> alloc_key();
  // EINVAL unless `key` is exactly a key alloc_key() handed out and not freed.
  Result<void> free_key(std::uint32_t key);

  std::uint32_t index_of(std::uint32_t key) const { return key_to_hw_index(key) & index_mask_; }
  MptFields read(std::uint32_t index, std::uint64_t* version = nullptr) const {
    return entries_[index].cell.load(version);
  }
  std::uint64_t version(std::uint32_t index) const { return entries_[index].cell.version(); }
  // REQUIRES: the caller serialises writers.
  void write(std::uint32_t index, const MptFields& f) { entries_[index].cell.store(f); }

  std::uint32_t num() const { return alloc_.num(); }
  std::uint32_t reserved() const { return alloc_.reserved(); }
  std::uint32_t used() const { return alloc_.used(); }
  std::size_t bytes() const { return entries_.bytes() + alloc_.bytes(); }

 private:
  explicit MptTable(alloc::IndexAllocator a);

  alloc::IndexAllocator alloc_;
  std::uint32_t index_mask_;  // num() - 1
  alloc::ZeroedArray<MptEntry> entries_;
};

}  // namespace srdma::hca
