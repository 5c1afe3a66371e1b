// The device's translation and protection tables: protection domains, the
// MPT and MTT tables with their allocators, memory regions, FMRs,
// fast-registration MRs and memory windows, and the translation cache in
// front of them. Every
// byte the engine moves goes through translate().
//
// This is half of the software HCA (soft_hca.h); the other half, the queue
// engine, uses it through translate() and the fast-registration calls only.
//
// Thread safety: control operations (PDs, MRs, FMRs) serialise on one
// mutex, a leaf lock; translate() is lock-free and may run on any number of
// threads at once. Every operation that takes a key away (dereg_mr, FMR
// unmap and remap, LOCAL_INV, SEND_WITH_INV, deallocation) returns only
// after the stores translated through it before have landed
// (quiesce_translations, delivery_scope.h).
#pragma once

#include <cstdint>
#include <expected>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "alloc/index_allocator.h"
#include "hca/mpt_table.h"
#include "hca/mtt_table.h"
#include "hca/page_fault.h"
#include "hca/tpt_cache.h"
#include "srdma/access.h"
#include "srdma/profile.h"
#include "srdma/status.h"
#include "srdma/translation.h"
#include "srdma/usage.h"

namespace srdma::hca {

struct MrAttr {
  std::uint32_t pdn = 0;
  std::uint64_t iova = 0;    // the first byte's address as the consumer names it
  std::uint64_t length = 0;  // bytes, > 0
  std::uint32_t access = 0;  // AccessFlags
  std::uint8_t page_shift = 12;
};

class TranslationTables {
 public:
  // REQUIRES: `profile` came from validate_profile(), the tables were made
  // for it.
  TranslationTables(const Profile& profile, MptTable mpt, MttTable mtt, alloc::IndexAllocator pd);
  TranslationTables(const TranslationTables&) = delete;
  TranslationTables& operator=(const TranslationTables&) = delete;

  Result<std::uint32_t> alloc_pd();
  // EINVAL for a PD number that is not allocated.
  Result<void> dealloc_pd(std::uint32_t pdn);

  // Registers a region whose pages are `page_addrs` (each aligned to
  // 2^page_shift; the first holds iova's first byte at offset
  // iova % 2^page_shift). Returns the key (lkey == rkey). ENOMEM names the
  // MPT or MTT table that is exhausted.
  Result<std::uint32_t> reg_mr(const MrAttr& attr, std::span<const std::uint64_t> page_addrs);
  // Registers a region without MTTs (MPT_FLAG_PHYSICAL): iova attr.iova
  // is the byte at `base` and the rest follow it, for attr.length bytes.
  // Two users: implicit ODP (iova 0, the whole address space, base 0: one
  // key for every address of the process, access ON_DEMAND) and device
  // memory (zero-based: iova 0, base the DM's bytes). PD, access and
  // bounds are checked as for any region; length 0 (a DM MR may have it)
  // is a region no access fits. EINVAL: PD not allocated, unknown access bits, base + length beyond the address space;
  // ENOMEM: the MPT table is exhausted.
  Result<std::uint32_t> reg_phys_mr(const MrAttr& attr, std::uint64_t base);
  // EINVAL if `key` is not a registered region's current key.
  Result<void> dereg_mr(std::uint32_t key);
  // ibv_advise_mr's PREFETCH for one SGE: (key, iova, length) must name an
  // ODP region (not a window) of PD `pdn` that grants `access` (0, or
  // LOCAL_WRITE for PREFETCH_WRITE); with `fault` its pages are faulted
  // in, without it nothing is touched (PREFETCH_NO_FAULT: the device
  // holds no page tables to fill). Errors as ibv_advise_mr(3): EFAULT for
  // an unknown or stale key, a range outside the region or a page that
  // cannot be faulted in; EPERM for another PD's key or write access not
  // granted; EINVAL for a window's key or a region that is not ODP.
  Result<void> prefetch(std::uint32_t key, std::uint64_t iova, std::uint64_t length, std::uint32_t access,
                        std::uint32_t pdn, bool fault) const;
  // Points the region `key` at new pages, PD and access (ibv_rereg_mr),
  // keeping its key, as mlx5 and rxe keep it: the new entry replaces the
  // old one at once, and this returns only after every store translated
  // through the old entry has landed (then its MTTs are freed). EINVAL: not
  // a registered region's key, PD not allocated, windows bound to it, a bad
  // page list (as reg_mr); ENOMEM names the exhausted MTT table. On an
  // error the region is as it was.
  Result<void> rereg_mr(std::uint32_t key, const MrAttr& attr, std::span<const std::uint64_t> page_addrs);

  // --- FMRs (translation_tables_fmr.cc) ---
  // Fast memory regions as on mem-free mthca: an MPT index and a fixed block
  // of MTTs allocated once, then remapped by software writes alone (no
  // firmware command), each map with a new key. Keys: the FMR's key counter
  // lives in the hw-index bits above the table index (key_to_hw_index form);
  // each map adds num_mpt to it and unmap never resets it, so a key comes
  // back only after 2^(32 - log2 num_mpt) maps of the same FMR (32768 with
  // the default 2^17 MPTs, 256 with 2^24). Every call below names an FMR by
  // its current key (the one the last map returned, or alloc's).
  //
  // Thread safety: serialised on the control mutex like reg_mr; translate()
  // on other threads sees either the old mapping or the complete new one.
  struct FmrLimits {
    std::uint32_t max_pages = 0;  // 1..kMaxFmrPages
    std::uint32_t max_maps = 0;   // maps between unmaps, 1..max_map_per_fmr()
    std::uint8_t page_shift = 12; // 12..31
  };
  // All MTTs of an FMR sit in one 4 KiB page of the MTT table (8-byte
  // entries; the buddy aligns a block to its size), as mthca requires.
  static constexpr std::uint32_t kMaxFmrPages = 4096 / 8;
  // (1 << (32 - log2 num_mpt)) - 1: the key counter's period less one.
  std::uint32_t max_map_per_fmr() const;
  // An unmapped FMR in PD `pdn`: MPT index from the MPT allocator, MTTs from
  // the FMR buddy (the main one when the profile reserves none). The MPT is
  // hardware-owned with length 0, so nothing translates until a map.
  // EINVAL: PD not allocated, unknown access bits, page_shift outside
  // [12, 32), max_pages outside 1..kMaxFmrPages, max_maps outside
  // 1..max_map_per_fmr(). ENOMEM names the exhausted table.
  Result<std::uint32_t> alloc_fmr(std::uint32_t pdn, std::uint32_t access, const FmrLimits& limits);
  // Points the FMR at `page_list` (each aligned to 2^page_shift) from `iova`
  // on (page aligned), length page_list.size() << page_shift, and returns
  // the new key: the old key's hw index + num_mpt. The MPT goes to SW, the
  // MTTs are written, then key/start/length, then HW; the MPT's release
  // publishes the MTT stores. The previous key fails from the SW step on
  // (its cached translation is dropped with it).
  // EINVAL: not an FMR's current key, an empty list or one longer than
  // max_pages, an unaligned iova or page, a wrapping range, or max_maps maps
  // since the last unmap. REQUIRES: the pages stay valid memory while mapped.
  Result<std::uint32_t> map_phys_fmr(std::uint32_t key, std::span<const std::uint64_t> page_list,
                                     std::uint64_t iova);
  // Unmaps every FMR in `keys`: each MPT goes to SW and its map count to 0,
  // then ONE sync_tpt() for the whole list. When it returns no key these
  // FMRs ever had translates. EINVAL (and nothing changed) if any key is
  // not an FMR's current key. Unmapping an unmapped FMR is harmless.
  Result<void> unmap_fmr(std::span<const std::uint32_t> keys);
  // Frees the FMR's MPT index and MTTs. EBUSY while mapped, EINVAL if `key`
  // is not an FMR's current key.
  Result<void> dealloc_fmr(std::uint32_t key);

  // The pieces of memory (key, iova, length) covers for an access of kind
  // `access` (AccessFlags; 0 = local read) from protection domain `pdn`, or
  // why not. Zero length touches nothing and is never refused (IBA 9.4.x:
  // a zero-length transfer carries no memory access to check).
  // A memory window's key (an R_Key only) translates for a remote access
  // alone, through the QP `qpn` if it is a type 2 window (0: no QP), and
  // then through its region: both entries' checks apply.
  std::expected<Translation, Refusal> translate(std::uint32_t key, std::uint64_t iova,
                                                std::uint64_t length, std::uint32_t access,
                                                std::uint32_t pdn, std::uint32_t qpn = 0) const;
  // Drops every cached translation (SYNC_TPT).
  void sync_tpt() { tpt_.clear(); }
  const TptCache& tpt_cache() const { return tpt_; }

  // --- Fast registration (translation_tables_frwr.cc) ---
  // FRWR (IBA 10.6.3.3 / ib_alloc_mr(IB_MR_TYPE_MEM_REG)): an MPT entry that
  // the engine (re)registers and invalidates in work-request order. Such an
  // entry carries MPT_FLAG_REGION | MPT_FLAG_FAST_REG; its MTTs (room for
  // max_num_sg pages) are allocated once, from the main buddy, when the MR
  // is allocated; `mtt_count` is that capacity and `reserved` keeps the key
  // alloc_key() handed out (the current key differs in its key byte).
  //
  // Locking: all four take mu_. The engine calls fast_reg/local_invalidate
  // with a QP's sq_mu_ or rq_mu_ held; that is safe because mu_ is a leaf:
  // nothing holds mu_ while it takes a QP, CQ or inbox lock.

  // A free (invalid, SW-owned) fast-registration MR in PD `pdn` with room for
  // `max_num_sg` pages. Returns its key. EINVAL: PD not allocated, max_num_sg
  // 0 or beyond the MTT table; ENOMEM names the exhausted table.
  Result<std::uint32_t> alloc_fast_reg_mr(std::uint32_t pdn, std::uint32_t max_num_sg);
  // Frees a fast-registration MR in any state; `alloc_key` is the key
  // alloc_fast_reg_mr returned. Its keys stop translating before this
  // returns. EINVAL if it is not such an MR.
  Result<void> dealloc_fast_reg_mr(std::uint32_t alloc_key);
  // REG_MR, executed by the requester at the WQE's turn: makes the free MR
  // whose index `key` names valid under `key` (its key byte may be new)
  // for [iova, iova + length) over `pages` (each 2^page_shift aligned).
  // EINVAL (the engine completes the WR with kMemMgmtOpErr) unless the MPT
  // is a fast-registration MR of PD `pdn`, free, `key` differs from its
  // current key at most in the key byte, pages fit max_num_sg and cover the
  // range exactly, and `access` is valid (remote write/atomic need local
  // write, IBA 10.6.3.1).
  Result<void> fast_reg(std::uint32_t key, std::uint32_t pdn, std::uint32_t access, std::uint64_t iova,
                        std::uint64_t length, std::uint8_t page_shift, std::span<const std::uint64_t> pages);
  // LOCAL_INV, or the responder's half of SEND_WITH_INV: the MR whose
  // current key is `key`, a fast-registration MR of PD `pdn`, goes back to
  // free; the key fails every translation once this returns (the cached
  // translation is dropped too). Invalidating a free MR with its current
  // key succeeds (nothing to do), as in IBA. EINVAL otherwise, and while
  // memory windows are bound to the MR (rxe_invalidate_mr).
  // A type 2 window's key frees the window likewise (IBA 10.6.7.2.5; a
  // type 1 window is never invalidated by a WR, o10-37.2.26); `remote_qpn`
  // non-zero (SEND_WITH_INV) also requires it to be bound through that QP.
  Result<void> local_invalidate(std::uint32_t key, std::uint32_t pdn, std::uint32_t remote_qpn = 0);

  // --- Memory windows (translation_tables_mw.cc) ---
  // IBA 10.6.7: a window is an MPT entry of its own (MPT_FLAG_WINDOW), keyed
  // by the same allocator as regions, so its rkey rotates like theirs and a
  // stale one never translates. Unbound it is SW-owned; a bind makes it
  // HW-owned under the bind's rkey over [addr, addr + length) of a region
  // of its PD, and translate() then goes window -> region. A region with
  // windows bound to it cannot be deregistered or invalidated (IBA
  // 10.6.7.2.6; rxe's num_mw).
  //
  // Locking: as the FRWR calls; bind_mw and the invalidations run on the
  // engine with a QP lock held (mu_ is a leaf). Every call that takes a
  // window key away returns after the stores translated through it landed.
  enum class MwType : std::uint8_t { kType1 = 1, kType2 = 2 };
  // An unbound window in PD `pdn`; its key (the one the type 1 verb
  // advances and a type 2 bind replaces the key byte of). EINVAL: PD not
  // allocated; ENOMEM: the MPT table is exhausted.
  Result<std::uint32_t> alloc_mw(std::uint32_t pdn, MwType type);
  // Frees the window `alloc_key` names (alloc_mw's key), bound or not: a
  // bound one is invalidated first (its key fails before this returns) and
  // its region may then be deregistered. EINVAL if it is not a window.
  Result<void> dealloc_mw(std::uint32_t alloc_key);
  // What one bind asks for (a Bind MW work request, IBA 10.6.7.2.4).
  struct MwBind {
    std::uint32_t mw_alloc_key = 0;  // the window (alloc_mw's key)
    std::uint32_t new_rkey = 0;      // its key once bound: only the key byte may differ
    std::uint32_t mr_key = 0;        // the region's lkey (length > 0)
    std::uint64_t addr = 0;          // in the region's iova space
    std::uint64_t length = 0;        // 0: unbind (type 1 only)
    std::uint32_t access = 0;        // kMwAccessAll bits
    bool type1_verb = false;         // posted by the type 1 bind verb, not a WR
  };
  // Executed by the requester at the WR's turn on QP `qpn` of PD `pdn`.
  // EINVAL (the WR completes with kMwBindErr) for every rule of IBA
  // 10.6.7.2 and rxe_check_bind_mw: not a window; a type 1 window through
  // a WR or a type 2 through the verb; the QP, window and region not all in
  // one PD (C10-72 asks it of type 2; rxe checks only the region's PD for
  // type 1, we ask all three of both types); a type 2 window that is not free (o10-37.2.30) or a
  // bind of it with length 0 (o10-37.2.40); a zero-based type 1 window
  // (o10-36.2.2); the region not valid under mr_key, an FMR, or without
  // MW_BIND (C10-73); remote write or atomic on a region without local
  // write (C10-74); the range outside the region (C10-75); unknown access
  // bits; a zero-based window with atomic access that starts unaligned. A type 1 rebind invalidates the previous key.
  Result<void> bind_mw(const MwBind& b, std::uint32_t pdn, std::uint32_t qpn);
  // Invalidates every type 2 window bound through QP `qpn` (the QP is being
  // destroyed: its QPN must not carry them to its next owner).
  void invalidate_windows_of_qp(std::uint32_t qpn);
  // How many windows are bound to the region at `mr_key`'s index.
  std::uint32_t windows_bound_to(std::uint32_t mr_key) const;

  bool pd_allocated(std::uint32_t pdn) const;

  // The MPT, MTT and PD rows of the device's usage table, the MTT buddies,
  // and the address space the tables take (resident only where touched).
  std::vector<TableUsage> table_usage() const;
  std::vector<BuddyUsage> buddy_usage() const;
  std::size_t table_bytes() const;

 private:
  MptFields lookup_mpt(std::uint32_t index) const {
    MptFields f;
    if (tpt_.lookup_into(index, f)) [[likely]] return f;
    return lookup_mpt_miss(index);
  }
  MptFields lookup_mpt_miss(std::uint32_t index) const;
  // The translation of [iova, iova + length) inside region entry `f`, once
  // every check passed.
  Translation region_translation(const MptFields& f, std::uint64_t iova, std::uint64_t length) const {
    if (f.flags & MPT_FLAG_PHYSICAL) [[unlikely]]
      return Translation::direct(reinterpret_cast<std::byte*>(f.mtt_seg + (iova - f.start)), length);
    std::uint64_t page_mask = (std::uint64_t{1} << f.page_shift) - 1;
    std::uint64_t offset = (iova - f.start) + (f.start & page_mask);
    const std::uint64_t* mtt = mtt_.entry_ptr(f.mtt_seg << mtt_.log_mtts_per_seg());
    return Translation(mtt, offset, length, f.page_shift, (f.flags & MPT_FLAG_CONTIGUOUS) != 0);
  }
  // region_translation, and for an ODP region (ACCESS_ON_DEMAND in the
  // entry: the one place that decides) the fault-in of its pages for
  // `access`, which refuses with kPageFault where the kernel cannot.
  std::expected<Translation, Refusal> region_access(const MptFields& f, std::uint64_t iova, std::uint64_t length,
                                                    std::uint32_t access) const {
    const Translation t = region_translation(f, iova, length);
    if (f.access & ACCESS_ON_DEMAND) [[unlikely]]
      if (!fault_in_translation(t, access)) return std::unexpected(Refusal::kPageFault);
    return t;
  }
  // fault_in() of every piece of `t`, for writing if `access` writes.
  [[gnu::noinline]] static bool fault_in_translation(const Translation& t, std::uint32_t access);
  // Both translations' checks of a region entry `f`, in translate()'s
  // order from the key on.
  std::expected<Translation, Refusal> checked_region(const MptFields& f, std::uint32_t key, std::uint64_t iova,
                                                     std::uint64_t length, std::uint32_t access,
                                                     std::uint32_t pdn) const;
  // translate() of a window's key (the entry at `index`): the window's
  // checks, by a read of its own; translate() then reads its region. The
  // result is small and nothing of translate()'s is passed by address: a
  // call that took one would keep translate()'s entry or result in memory
  // on the region path too (about 20 instructions a translation).
  struct WindowHop {
    std::uint64_t va = 0;      // where the access lands, in the region's iova space
    std::uint32_t mr_key = 0;  // the region's key
    Refusal refusal{};         // when !ok
    bool ok = false;
  };
  [[gnu::noinline]] WindowHop through_window(std::uint32_t index, std::uint32_t key, std::uint64_t iova,
                                             std::uint64_t length, std::uint32_t access, std::uint32_t pdn,
                                             std::uint32_t qpn) const;
  // A window's entry goes back to unbound (SW, no access, length 0) and
  // its region's count drops; the stores through its key have landed when
  // this returns (the wait holds mu_, as dealloc_fast_reg_mr's: a
  // translation window takes no lock). REQUIRES: mu_ held.
  void unbind_window_locked(std::uint32_t index, MptFields f);
  // LOCAL_INV / SEND_WITH_INV of the window entry `f` at `index` (`key`
  // names it). REQUIRES: mu_ held.
  Result<void> invalidate_window_locked(std::uint32_t index, MptFields f, std::uint32_t key, std::uint32_t pdn,
                                        std::uint32_t remote_qpn);
  // One window fewer bound to the region `mr_key`. REQUIRES: mu_ held.
  void drop_mr_window(std::uint32_t mr_key);

  const Profile& profile_;
  mutable std::mutex mu_;  // guards the allocators and MPT/MTT writes
  MptTable mpt_;
  MttTable mtt_;
  alloc::IndexAllocator pd_alloc_;
  mutable TptCache tpt_;
  // FMRs by MPT index: what alloc_fmr fixed for the FMR's life. The key the
  // MPT allocator handed out is kept to give the index back (the current key
  // has moved on).
  struct FmrSlot {
    std::uint32_t alloc_key = 0;
    MttRange mtts;
    FmrLimits limits;
  };
  std::unordered_map<std::uint32_t, FmrSlot> fmrs_;  // guarded by mu_
  // Windows bound per region, by the region's MPT index (rxe's num_mw):
  // dereg and invalidation of a region refuse while it is not zero.
  std::unordered_map<std::uint32_t, std::uint32_t> mr_windows_;  // guarded by mu_
  // Type 2 windows bound, window MPT index -> QPN (for destroy_qp).
  std::unordered_map<std::uint32_t, std::uint32_t> qp_windows_;  // guarded by mu_
  // The FMR at `key`'s index if `key` is its current key, else null.
  // REQUIRES: mu_ held.
  FmrSlot* find_fmr(std::uint32_t key, MptFields& f);
};

// Inline: every data-path byte goes through here.
inline std::expected<Translation, Refusal> TranslationTables::translate(std::uint32_t key, std::uint64_t iova,
                                                              std::uint64_t length, std::uint32_t access,
                                                              std::uint32_t pdn, std::uint32_t qpn) const {
  if (length == 0) return Translation{};
  std::uint32_t index = mpt_.index_of(key);
  if (index < mpt_.reserved()) [[unlikely]] return std::unexpected(Refusal::kUnknownIndex);
  MptFields f = lookup_mpt(index);
  if (!f.is_region()) [[unlikely]] {
    if (!f.is_window()) return std::unexpected(Refusal::kUnknownIndex);
    const WindowHop hop = through_window(index, key, iova, length, access, pdn, qpn);
    if (!hop.ok) return std::unexpected(hop.refusal);
    // The region it is bound to: it cannot go away while bound, but the
    // window's snapshot may be older than an unbind and a dereg.
    const std::uint32_t mr_index = mpt_.index_of(hop.mr_key);
    if (mr_index < mpt_.reserved()) return std::unexpected(Refusal::kNotHwOwned);
    const MptFields r = lookup_mpt(mr_index);
    if (!r.is_region() || r.key != hop.mr_key || r.status != kMptStatusHw)
      return std::unexpected(Refusal::kNotHwOwned);
    if (hop.va < r.start || hop.va - r.start > r.length || length > r.length - (hop.va - r.start))
      return std::unexpected(Refusal::kOutOfBounds);
    return region_access(r, hop.va, length, access);
  }
  return checked_region(f, key, iova, length, access, pdn);
}

inline std::expected<Translation, Refusal> TranslationTables::checked_region(const MptFields& f, std::uint32_t key,
                                                                   std::uint64_t iova, std::uint64_t length,
                                                                   std::uint32_t access, std::uint32_t pdn) const {
  if (f.key != key) [[unlikely]] return std::unexpected(Refusal::kKeyMismatch);
  if (f.status != kMptStatusHw) [[unlikely]] return std::unexpected(Refusal::kNotHwOwned);
  if (f.pd != pdn) [[unlikely]] return std::unexpected(Refusal::kPdMismatch);
  if ((access & ~std::uint32_t{f.access}) != 0) [[unlikely]] return std::unexpected(Refusal::kAccessDenied);
  // Overflow-safe: iova >= start and iova + length <= start + mr length.
  if (iova < f.start || iova - f.start > f.length || length > f.length - (iova - f.start)) [[unlikely]]
    return std::unexpected(Refusal::kOutOfBounds);
  return region_access(f, iova, length, access);
}

}  // namespace srdma::hca
