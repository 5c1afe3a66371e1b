// A log-linear latency histogram (like HdrHistogram at 1/16 resolution):
// 16 sub-buckets per power of two, so a percentile is within 6.25% of the
// true value. One writer per histogram; merge() after the writers stopped.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

namespace srdma::tools {

class LatencyHistogram {
 public:
  void record(std::uint64_t ns) {
    ++buckets_[index(ns)];
    ++count_;
    sum_ += ns;
  }
  void merge(const LatencyHistogram& o) {
    for (std::size_t i = 0; i < buckets_.size(); ++i) buckets_[i] += o.buckets_[i];
    count_ += o.count_;
    sum_ += o.sum_;
  }
  std::uint64_t count() const { return count_; }
  double mean_ns() const { return count_ ? static_cast<double>(sum_) / static_cast<double>(count_) : 0; }
  // The value below which `q` (0..1) of the samples lie (a bucket's midpoint).
  double quantile_ns(double q) const {
    if (count_ == 0) return 0;
    const auto target = static_cast<std::uint64_t>(q * static_cast<double>(count_ - 1)) + 1;
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < buckets_.size(); ++i) {
      seen += buckets_[i];
      if (seen >= target) return midpoint(i);
    }
    return midpoint(buckets_.size() - 1);
  }

 private:
  static constexpr int kSubBits = 4;  // 16 sub-buckets
  static constexpr std::size_t kBuckets = (64 - kSubBits + 1) << kSubBits;
  static std::size_t index(std::uint64_t v) {
    if (v < (1u << kSubBits)) return static_cast<std::size_t>(v);
    const int msb = std::bit_width(v) - 1;  // >= kSubBits
    const int shift = msb - kSubBits;
    const auto sub = static_cast<std::size_t>((v >> shift) & ((1u << kSubBits) - 1));
    return (static_cast<std::size_t>(shift + 1) << kSubBits) + sub;
  }
  static double midpoint(std::size_t i) {
    const std::size_t group = i >> kSubBits, sub = i & ((1u << kSubBits) - 1);
    if (group == 0) return static_cast<double>(sub);
    const int shift = static_cast<int>(group) - 1;
    const double lo = static_cast<double>((std::uint64_t{1} << kSubBits | sub) << shift);
    return lo + static_cast<double>(std::uint64_t{1} << shift) / 2;
  }

  std::array<std::uint64_t, kBuckets> buckets_{};
  std::uint64_t count_ = 0;
  std::uint64_t sum_ = 0;
};

}  // namespace srdma::tools
