// A protection domain: an owning, move-only handle (like ib_pd).
//
// The PD number stays allocated while the handle or any region in it lives;
// dealloc() frees it at once and refuses (EBUSY) while regions remain.
// Thread safety: distinct handles may be used from distinct threads; one
// handle is not to be used from two threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "srdma/ah.h"
#include "srdma/dm.h"
#include "srdma/fmr.h"
#include "srdma/mr.h"
#include "srdma/mw.h"
#include "srdma/qp.h"
#include "srdma/srq.h"
#include "srdma/status.h"

namespace srdma {

namespace detail {
struct DeviceImpl;
}

class ProtectionDomain {
 public:
  ProtectionDomain() = default;
  ProtectionDomain(ProtectionDomain&&) noexcept = default;
  ProtectionDomain& operator=(ProtectionDomain&&) noexcept = default;
  ProtectionDomain(const ProtectionDomain&) = delete;
  ProtectionDomain& operator=(const ProtectionDomain&) = delete;
  ~ProtectionDomain() = default;

  // Registers [addr, addr + length) with IBTA access flags (AccessFlags).
  // page_shift: the page size the device's MTTs describe, 12 (4 KiB) to 30.
  // Errors: EINVAL for unknown access bits, remote write or atomic without
  // LOCAL_WRITE (IBA 10.6.3.1), zero length, a wrapping range or a bad
  // page_shift; EFAULT when the range is not mapped with the permissions
  // asked for (write permission for any write access); ENOMEM naming the
  // MPT or MTT table when it is exhausted.
  // REQUIRES: the memory stays mapped while registered (the device cannot
  // pin it; unmapping registered memory is the consumer's bug).
  //
  // With ACCESS_ON_DEMAND the region is an on-demand paging one: the range
  // need not be mapped now (no EFAULT here); each access faults its pages
  // in when it runs, and an unmapped or wrongly protected page ends that
  // access in a protection error (hca/page_fault.h). EOPNOTSUPP where the
  // device has no ODP (DeviceAttr::on_demand_paging).
  Result<MemoryRegion> reg_mr(void* addr, std::size_t length, std::uint32_t access,
                              unsigned page_shift = 12);
  // An implicit ODP region (ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND)): one
  // key whose iova is the address, for every address of the process; PD,
  // access and bounds checks apply as to any region, and every access
  // faults its pages in. `access` as reg_mr's (ACCESS_ON_DEMAND implied).
  // addr() is null and length() SIZE_MAX. EINVAL for bad access bits,
  // EOPNOTSUPP without ODP.
  Result<MemoryRegion> reg_implicit_odp_mr(std::uint32_t access);
  // ibv_advise_mr: prefetch the pages of each SGE's range, all ODP regions
  // of this PD (TranslationTables::prefetch gives the errors: EFAULT,
  // EPERM, EINVAL as ibv_advise_mr(3)). kPrefetchWrite needs LOCAL_WRITE;
  // kPrefetchNoFault checks and touches nothing. Synchronous: when it
  // returns the pages are in. EINVAL for an empty list.
  enum class MrAdvice : std::uint8_t { kPrefetch, kPrefetchWrite, kPrefetchNoFault };
  Result<void> advise_mr(MrAdvice advice, std::span<const Sge> sges) const;
  // A region on device memory (ibv_reg_dm_mr), zero-based: its iova 0 is
  // byte `offset` of `dm`, its keys work locally and remotely as any
  // region's. While it lives dm.free() answers EBUSY. Length 0 is taken
  // (as mlx5 takes it): a region no access fits. EINVAL: `dm` freed
  // or of another device, [offset, offset + length) beyond the
  // buffer, bad access bits (as reg_mr; no ON_DEMAND or MW_BIND).
  Result<MemoryRegion> reg_dm_mr(DeviceMemory& dm, std::uint64_t offset, std::size_t length, std::uint32_t access);
  // Re-registers `mr` (a user MR of this device, in this PD or another) in
  // this PD over [addr, addr + length) with `access` (ibv_rereg_mr), with
  // reg_mr's checks and errors. Its keys stay; the old translation stops
  // before this returns (no store through it is still to land). EINVAL also
  // for windows bound to it. On an error `mr` is as it was.
  Result<void> rereg_mr(MemoryRegion& mr, void* addr, std::size_t length, std::uint32_t access,
                        unsigned page_shift = 12);

  // A fast-registration MR (ib_alloc_mr(pd, IB_MR_TYPE_MEM_REG,
  // max_num_sg)): free, its key translates nothing until a REG_MR work
  // request on a QP of this PD makes it valid (see mr.h). Its MTTs, room
  // for max_num_sg pages, are reserved now. EINVAL: type not kMemReg,
  // max_num_sg 0 or beyond the MTT table; ENOMEM names the exhausted table.
  Result<MemoryRegion> alloc_mr(MrType type, std::uint32_t max_num_sg);
  // An unmapped fast memory region (like ib_alloc_fmr) with IBTA access
  // flags: no key of it translates until map_phys. Errors: EINVAL for
  // unknown access bits, remote write or atomic without LOCAL_WRITE,
  // page_shift outside [12, 32), max_pages outside 1..512 or max_maps
  // outside 1..DeviceAttr::max_map_per_fmr; ENOMEM naming the exhausted MPT
  // or (FMR) MTT table. The FMR counts in usecnt() until deallocated.
  Result<Fmr> alloc_fmr(std::uint32_t access, const FmrAttr& attr);

  // A memory window of `type` (mw.h), unbound; it counts in usecnt() until
  // deallocated. EINVAL: a type other than 1 or 2; ENOMEM: the MPT table
  // (shared with memory regions) is exhausted.
  Result<MemoryWindow> alloc_mw(MwType type);

  // A queue pair (RC, UC or UD: init.qp_type) in RESET. EINVAL names a cap
  // beyond the device's limits, or a missing CQ.
  Result<std::unique_ptr<QueuePair>> create_qp(const QpInitAttr& init);
  // A shared receive queue (srq.h) in this PD: the lkeys of its WRs are
  // of this PD. EINVAL names the field beyond the device's max_srq_wr or
  // max_srq_sge (or srq_limit above max_wr); ENOMEM when max_srq exist.
  Result<std::unique_ptr<SharedReceiveQueue>> create_srq(const SrqInitAttr& init);

  // An address handle for UD sends (ah.h). EINVAL for a dest_addr the
  // device's link cannot reach (on the RoCEv2 link: not a roce_address, or
  // a DGID that is not its IPv4-mapped GID) and for fields out of range.
  Result<std::unique_ptr<AddressHandle>> create_ah(const AhAttr& attr);

  // EBUSY while memory regions or windows, QPs, SRQs or AHs use it.
  Result<void> dealloc();

  bool valid() const { return state_ != nullptr; }
  std::uint32_t pd_num() const;
  // Memory regions and windows, QPs, SRQs and AHs using this PD.
  int usecnt() const;

 private:
  friend class Device;
  friend class FmrPool;  // reads the device's max_map_per_fmr
  explicit ProtectionDomain(std::shared_ptr<detail::PdImpl> s) : state_(std::move(s)) {}
  std::shared_ptr<detail::PdImpl> state_;
};

}  // namespace srdma
