// Memory windows on the device side (IBA 10.6.7): an MPT entry flagged
// MPT_FLAG_WINDOW that names a region instead of MTTs. Keys come from the
// MPT allocator like a region's (random rotation), so a window's rkey is as
// unguessable as an MR's and a stale one fails with key_mismatch.
//
// The life of a window entry:
//   alloc_mw        -> unbound (SW-owned, length 0: translates nothing)
//   bind_mw         -> bound (HW-owned under the bind's rkey; the region's
//                      window count goes up)
//   type 1: bind_mw again (rebind, the old key dies) or with length 0
//   type 2: local_invalidate (LOCAL_INV, SEND_WITH_INV) -> unbound
//   dealloc_mw from any state.
// The rules are IBA's (10.6.7.2, the C10-7x and o10-3x rules cited below)
// as rxe enforces them (rxe_mw.c), plus window bounds on every access:
// translate() checks the window's key, state, PD, QP (type 2), access and
// bounds, then its region's entry (key, state, bounds), so protection stays
// per byte and a window never reaches past its region.
#include <fmt/format.h>

#include "hca/delivery_scope.h"
#include "hca/translation_tables.h"
#include "srdma/access.h"

namespace srdma::hca {
namespace {
constexpr std::uint32_t kKeyByte = 0xff;  // the part of a window's key a bind may change
}  // namespace

TranslationTables::WindowHop TranslationTables::through_window(std::uint32_t index, std::uint32_t key,
                                                               std::uint64_t iova, std::uint64_t length,
                                                               std::uint32_t access, std::uint32_t pdn,
                                                               std::uint32_t qpn) const {
  const auto refuse = [](Refusal r) { return WindowHop{0, 0, r, false}; };
  const MptFields w = lookup_mpt(index);
  if (!w.is_window()) return refuse(Refusal::kUnknownIndex);  // changed since translate() looked
  if (w.key != key) return refuse(Refusal::kKeyMismatch);
  if (w.status != kMptStatusHw) return refuse(Refusal::kNotHwOwned);
  if (w.pd != pdn) return refuse(Refusal::kPdMismatch);
  // Type 2B: the window is usable only through the QP that bound it.
  if ((w.flags & MPT_FLAG_WINDOW_TYPE2) && w.window_qpn() != qpn) return refuse(Refusal::kQpMismatch);
  // A window key is an R_Key: a local access (0, LOCAL_WRITE) never passes.
  if ((access & kRemoteAccess) == 0 || (access & ~(std::uint32_t{w.access} & kRemoteAccess)) != 0)
    return refuse(Refusal::kAccessDenied);
  // The window's bounds, in its own address space (offsets when zero-based).
  const std::uint64_t base = (w.flags & MPT_FLAG_ZERO_BASED) ? 0 : w.start;
  if (iova < base || iova - base > w.length || length > w.length - (iova - base))
    return refuse(Refusal::kOutOfBounds);
  const std::uint64_t va = w.start + (iova - base);
  // The responder checked the atomic's address (an offset, when zero-based)
  // for 8-byte alignment; the byte it names must be aligned too.
  if ((access & ACCESS_REMOTE_ATOMIC) && (va & 7)) return refuse(Refusal::kAccessDenied);
  // Its region (the entry translate() reads next) and where in it.
  return WindowHop{va, w.window_mr_key(), Refusal{}, true};
}

Result<std::uint32_t> TranslationTables::alloc_mw(std::uint32_t pdn, MwType type) {
  if (type != MwType::kType1 && type != MwType::kType2)
    return make_error(EINVAL, fmt::format("memory window type {} is neither 1 nor 2", static_cast<unsigned>(type)));
  std::lock_guard lock(mu_);
  if (!pd_alloc_.is_allocated(pdn)) return make_error(EINVAL, fmt::format("PD {} is not allocated", pdn));
  auto key = mpt_.alloc_key();
  if (!key) return std::unexpected(key.error());
  MptFields f;
  f.status = kMptStatusSw;  // unbound: nothing translates
  f.flags = static_cast<std::uint8_t>(MPT_FLAG_WINDOW | (type == MwType::kType2 ? MPT_FLAG_WINDOW_TYPE2 : 0));
  f.key = *key;
  f.pd = pdn;
  f.reserved = *key;
  mpt_.write(mpt_.index_of(*key), f);
  return *key;
}

void TranslationTables::drop_mr_window(std::uint32_t mr_key) {
  auto it = mr_windows_.find(mpt_.index_of(mr_key));
  if (it != mr_windows_.end() && --it->second == 0) mr_windows_.erase(it);
}

void TranslationTables::unbind_window_locked(std::uint32_t index, MptFields f) {
  const bool bound = f.status == kMptStatusHw;
  const std::uint32_t key = f.key, mr_key = f.window_mr_key();
  f.status = kMptStatusSw;
  f.access = 0;
  f.start = 0;
  f.length = 0;
  f.mtt_count = 0;
  f.map_count = 0;
  f.flags = static_cast<std::uint8_t>(f.flags & ~MPT_FLAG_ZERO_BASED);
  mpt_.write(index, f);
  tpt_.invalidate(index);
  qp_windows_.erase(index);
  if (!bound) return;
  // The key fails from the write on; the stores translated before it land
  // before the region may be deregistered (its count drops after).
  quiesce_translations(key);
  drop_mr_window(mr_key);
}

Result<void> TranslationTables::dealloc_mw(std::uint32_t alloc_key) {
  std::lock_guard lock(mu_);
  const std::uint32_t index = mpt_.index_of(alloc_key);
  if (index < mpt_.reserved()) return make_error(EINVAL, fmt::format("key {:#x} is not a memory window", alloc_key));
  MptFields f = mpt_.read(index);
  if (!f.is_window() || f.reserved != alloc_key)
    return make_error(EINVAL, fmt::format("key {:#x} is not a memory window", alloc_key));
  // IBA 10.6.7.2.7 (and rxe): deallocating a bound window invalidates it.
  unbind_window_locked(index, f);
  mpt_.write(index, MptFields{});
  tpt_.invalidate(index);
  (void)mpt_.free_key(alloc_key);
  return {};
}

Result<void> TranslationTables::bind_mw(const MwBind& b, std::uint32_t pdn, std::uint32_t qpn) {
  if (b.access & ~kMwAccessAll)
    return make_error(EINVAL, fmt::format("unknown window access bits {:#x}", b.access & ~kMwAccessAll));
  std::lock_guard lock(mu_);
  const std::uint32_t index = mpt_.index_of(b.mw_alloc_key);
  if (index < mpt_.reserved())
    return make_error(EINVAL, fmt::format("key {:#x} is not a memory window", b.mw_alloc_key));
  MptFields w = mpt_.read(index);
  if (!w.is_window() || w.reserved != b.mw_alloc_key)
    return make_error(EINVAL, fmt::format("key {:#x} is not a memory window", b.mw_alloc_key));
  const bool type2 = (w.flags & MPT_FLAG_WINDOW_TYPE2) != 0;
  if (type2 && b.type1_verb) return make_error(EINVAL, "a type 2 window is bound by a work request, not bind_mw");
  if (!type2 && !b.type1_verb) return make_error(EINVAL, "a type 1 window is bound by bind_mw, not a work request");
  if ((b.new_rkey & ~kKeyByte) != (w.key & ~kKeyByte))
    return make_error(EINVAL,
                      fmt::format("rkey {:#x} does not name window {:#x} (only the key byte may change)", b.new_rkey,
                                  w.key));
  if (w.pd != pdn)
    return make_error(EINVAL, fmt::format("the window is in PD {}, the QP in PD {} (C10-72)", w.pd, pdn));
  if (type2) {
    if (w.status != kMptStatusSw)
      return make_error(EINVAL, "a type 2 window is bound only when free: invalidate it first (o10-37.2.30)");
    if (b.length == 0) return make_error(EINVAL, "a type 2 window is not unbound by a zero-length bind (o10-37.2.40)");
  } else if (b.access & ACCESS_ZERO_BASED) {
    return make_error(EINVAL, "a type 1 window cannot be zero-based (o10-36.2.2)");
  }
  // A zero-based window's offsets are checked for an atomic's alignment:
  // they must mean aligned addresses.
  if ((b.access & ACCESS_ZERO_BASED) && (b.access & ACCESS_REMOTE_ATOMIC) && (b.addr & 7))
    return make_error(EINVAL, "a zero-based window with atomic access must start 8-byte aligned");
  std::uint32_t mr_index = 0;
  if (b.length > 0) {
    mr_index = mpt_.index_of(b.mr_key);
    const MptFields r = mr_index < mpt_.reserved() ? MptFields{} : mpt_.read(mr_index);
    if (!r.is_region() || r.key != b.mr_key || r.status != kMptStatusHw)
      return make_error(EINVAL, fmt::format("lkey {:#x} is not a valid memory region", b.mr_key));
    if (r.flags & MPT_FLAG_FMR) return make_error(EINVAL, "windows are not bound to FMRs");
    if (r.pd != w.pd) return make_error(EINVAL, fmt::format("the region is in PD {}, the window in PD {}", r.pd, w.pd));
    if (!(r.access & ACCESS_MW_BIND)) return make_error(EINVAL, "the region was registered without MW_BIND (C10-73)");
    if ((b.access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC)) && !(r.access & ACCESS_LOCAL_WRITE))
      return make_error(EINVAL, "remote write or atomic on a window needs a region with LOCAL_WRITE (C10-74)");
    if (b.addr < r.start || b.addr - r.start > r.length || b.length > r.length - (b.addr - r.start))
      return make_error(EINVAL, fmt::format("[{:#x}, +{}) is not inside the region [{:#x}, +{}) (C10-75)", b.addr,
                                            b.length, r.start, r.length));
  }
  // A type 1 window may be bound already: the new entry replaces the old
  // key at once; its stores land below before the old region's count drops.
  const bool was_bound = w.status == kMptStatusHw;
  const std::uint32_t old_key = w.key, old_mr = w.window_mr_key();
  MptFields n = w;
  n.key = b.new_rkey;
  n.flags = static_cast<std::uint8_t>((w.flags & ~MPT_FLAG_ZERO_BASED) |
                                      ((b.access & ACCESS_ZERO_BASED) ? MPT_FLAG_ZERO_BASED : 0));
  if (b.length == 0) {
    n.status = kMptStatusSw;
    n.access = 0;
    n.start = n.length = 0;
    n.mtt_count = n.map_count = 0;
  } else {
    n.status = kMptStatusHw;
    n.access = static_cast<std::uint8_t>(b.access & kRemoteAccess);
    n.start = b.addr;
    n.length = b.length;
    n.mtt_count = b.mr_key;
    n.map_count = type2 ? qpn : 0;
  }
  mpt_.write(index, n);
  tpt_.invalidate(index);
  if (b.length > 0) {
    ++mr_windows_[mr_index];
    if (type2) qp_windows_[index] = qpn;
  }
  if (was_bound) {
    quiesce_translations(old_key);
    drop_mr_window(old_mr);
  }
  return {};
}

Result<void> TranslationTables::invalidate_window_locked(std::uint32_t index, MptFields f, std::uint32_t key,
                                                         std::uint32_t pdn, std::uint32_t remote_qpn) {
  if (!(f.flags & MPT_FLAG_WINDOW_TYPE2))
    return make_error(EINVAL, fmt::format("key {:#x} is a type 1 window: no WR invalidates it (o10-37.2.26)", key));
  if (f.key != key) return make_error(EINVAL, fmt::format("key {:#x} is stale: the window's key is {:#x}", key, f.key));
  if (f.pd != pdn) return make_error(EINVAL, fmt::format("the window is in PD {}, the QP in PD {}", f.pd, pdn));
  if (f.status == kMptStatusSw) return {};  // free already: nothing to do, as for an MR
  if (remote_qpn != 0 && f.window_qpn() != remote_qpn)
    return make_error(EINVAL,
                      fmt::format("the window is bound through QP {:#x}, not {:#x}", f.window_qpn(), remote_qpn));
  unbind_window_locked(index, f);
  return {};
}

void TranslationTables::invalidate_windows_of_qp(std::uint32_t qpn) {
  std::lock_guard lock(mu_);
  std::vector<std::uint32_t> indices;
  for (const auto& [index, q] : qp_windows_)
    if (q == qpn) indices.push_back(index);
  for (std::uint32_t index : indices) unbind_window_locked(index, mpt_.read(index));
}

std::uint32_t TranslationTables::windows_bound_to(std::uint32_t mr_key) const {
  std::lock_guard lock(mu_);
  auto it = mr_windows_.find(mpt_.index_of(mr_key));
  return it == mr_windows_.end() ? 0 : it->second;
}

}  // namespace srdma::hca
