#include "hca/mtt_table.h"

#include <bit>

#include <fmt/format.h>

namespace srdma::hca {

int mtt_order_for(std::uint64_t n_entries, int log_mtts_per_seg) {
  std::uint64_t segs = (n_entries + (std::uint64_t{1} << log_mtts_per_seg) - 1) >> log_mtts_per_seg;
  if (segs <= 1) return 0;
  return static_cast<int>(std::bit_width(segs - 1));  // fls(segs - 1)
}

namespace {
int fls_minus_one(std::uint32_t n) { return n <= 1 ? 0 : static_cast<int>(std::bit_width(n - 1)); }
}  // namespace

Result<MttTable> MttTable::create(std::uint32_t num_segs, int log_mtts_per_seg,
                                  std::uint32_t fmr_reserved_segs, std::uint32_t reserved_segs) {
  auto main = alloc::BuddyAllocator::create(fls_minus_one(num_segs));
  if (!main) return make_error(main.error().code, "MTT table: " + main.error().reason);
  bool has_fmr = fmr_reserved_segs > 0;
  int fmr_order = has_fmr ? fls_minus_one(fmr_reserved_segs) : 0;
  auto fmr = alloc::BuddyAllocator::create(fmr_order);
  if (!fmr) return make_error(fmr.error().code, "FMR MTT table: " + fmr.error().reason);

  MttTable t(log_mtts_per_seg, std::move(*main), std::move(*fmr), has_fmr);
  if (has_fmr) {
    // Prevent regular MRs from using FMR MTTs: the FMR region is the first
    // order-i block of the main buddy.
    auto base = t.main_.alloc(fmr_order);
    if (!base)
      return make_error(ENOMEM, fmt::format("MTT table of {} segments cannot hold an FMR region of 2^{}",
                                            num_segs, fmr_order));
    t.fmr_base_ = *base;
    t.fmr_block_segs_ = std::uint32_t{1} << fmr_order;
  }
  if (reserved_segs > 0) {
    // Firmware's MTTs come first out of the buddy FMRs use.
    auto r = t.alloc(std::uint64_t{reserved_segs} << log_mtts_per_seg, MttPool::kFmr);
    if (!r) return make_error(ENOMEM, fmt::format("MTT table too small to reserve {} segments: {}", reserved_segs,
                                                  r.error().reason));
    t.reserved_segs_ = std::uint32_t{1} << r->order;
  }
  return t;
}

MttTable::MttTable(int log_mtts_per_seg, alloc::BuddyAllocator main, alloc::BuddyAllocator fmr,
                   bool has_fmr)
    : log_mtts_per_seg_(log_mtts_per_seg),
      main_(std::move(main)),
      fmr_(std::move(fmr)),
      has_fmr_(has_fmr),
      entries_(std::size_t{main_.num_segments()} << log_mtts_per_seg) {}

Result<MttRange> MttTable::alloc(std::uint64_t n_entries, MttPool pool) {
  if (!has_fmr_) pool = MttPool::kMain;
  alloc::BuddyAllocator& b = buddy(pool);
  int order = mtt_order_for(n_entries, log_mtts_per_seg_);
  const char* name = pool == MttPool::kFmr ? "FMR MTT table" : "MTT table";
  if (order > b.max_order())
    return make_error(ENOMEM, fmt::format("{}: {} entries need 2^{} segments, more than its 2^{}", name,
                                          n_entries, order, b.max_order()));
  auto seg = b.alloc(order);
  if (!seg) return make_error(ENOMEM, fmt::format("{} exhausted: {}", name, seg.error().reason));
  std::uint32_t global = pool == MttPool::kFmr ? fmr_base_ + *seg : *seg;
  return MttRange{global, order, pool};
}

void MttTable::free(const MttRange& r) {
  if (r.order < 0) return;
  if (r.pool == MttPool::kFmr && has_fmr_)
    (void)fmr_.free(r.first_seg - fmr_base_, r.order);
  else
    (void)main_.free(r.first_seg, r.order);
}

void MttTable::write(std::uint64_t entry, std::span<const std::uint64_t> page_addrs) {
  for (std::size_t i = 0; i < page_addrs.size(); ++i)
    std::atomic_ref<std::uint64_t>(entries_[entry + i])
        .store(page_addrs[i] | kMttPresent, std::memory_order_relaxed);
}

std::uint64_t MttTable::used_segs() const {
  // Segments in use by MRs, the firmware reservation included; the FMR
  // region counts only for what FMRs took out of it.
  std::uint64_t used = main_.num_segments() - main_.free_segments() - fmr_block_segs_;
  if (has_fmr_) used += fmr_.num_segments() - fmr_.free_segments();
  return used;
}

std::size_t MttTable::bytes() const { return entries_.bytes() + main_.bytes() + fmr_.bytes(); }

}  // namespace srdma::hca
