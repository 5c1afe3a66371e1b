#include "hca/tpt_cache.h"

namespace srdma::hca {

std::optional<MptFields> TptCache::lookup(std::uint32_t index) const {
  Line l = lines_[slot(index)].load();
  if (l.valid && l.index == index) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    return l.fields;
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  return std::nullopt;
}

void TptCache::fill(std::uint32_t index, const MptFields& f) {
  (void)lines_[slot(index)].try_store(Line{index, 1, f});
}

void TptCache::invalidate(std::uint32_t index) {
  Seqlock<Line>& line = lines_[slot(index)];
  if (line.load().index == index) line.store(Line{});
}

void TptCache::clear() {
  for (auto& line : lines_) line.store(Line{});
  syncs_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace srdma::hca
