// Adaptive completion-event moderation for processed CQs (like the Linux
// RDMA core's DIM on ib_alloc_cq CQs of devices that set use_cq_dim).
//
// Every kSample events the CQ's completions per millisecond (throughput)
// and completions per event (batching) over the sample decide, in two
// regimes over one table of {usec, comps} profiles:
// - Up to the kernel's top, {32 us, 32} (its rdma_dim_prof), and whenever
//   events carry less than half of that top's count, the count decides:
//   events that fill the profile's count step up, events under half of it
//   step down. Quick, steady under noise, and it brings an idle
//   CQ back to an event per completion.
// - Above it, a hill climb like the kernel's rdma_dim: a significant change
//   (> 10%) of throughput decides first (better: go on the way we were
//   going; worse: turn round and step back), then one of batching; with
//   both the same the CQ stays. The climb never goes under the kernel's
//   top (that is the count's ground).
//
// Better than the kernel's table: above its top the periods go on to 1 ms.
// A CQ whose events are spaced by its handler's work and the scheduler
// rather than by the moderation (a shared pool CQ under a closed-loop
// load, where completions wait on a busy core anyway) keeps gaining
// batching there without losing throughput; a latency-bound one (few
// requests in flight) loses throughput at the first longer period and
// turns back.
// Not thread-safe: one handler runs at a time per CQ, which is what calls it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iterator>

#include "hca/cq.h"

namespace srdma::core {

class CqDim {
 public:
  using Clock = std::chrono::steady_clock;
  struct Profile {
    std::uint16_t usec;
    std::uint16_t comps;
  };
  // The kernel's rdma_dim_prof, then longer periods (see above).
  static constexpr Profile kProfiles[] = {{1, 1},     {1, 4},     {2, 4},     {2, 8},     {4, 8},
                                          {16, 8},    {16, 16},   {32, 16},   {32, 32},   {64, 64},
                                          {128, 128}, {256, 256}, {512, 256}, {1024, 256}};
  static constexpr int kKernelTop = 8;  // {32, 32}
  static constexpr int kTop = static_cast<int>(std::size(kProfiles)) - 1;
  static constexpr int kSample = 16;  // events per decision

  // Called after each event's processing with the completions it handled.
  void on_event(hca::Cq& cq, int completions, Clock::time_point now) {
    if (events_ == 0) start_ = now;
    completions_ += static_cast<std::uint64_t>(completions);
    if (++events_ <= kSample) return;  // the sample spans kSample events after its first
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now - start_).count();
    const Stats curr{.cpms = us > 0 ? completions_ * 1000 / static_cast<std::uint64_t>(us) : completions_ * 1000,
                     .cpe_x100 = completions_ * 100 / static_cast<std::uint64_t>(events_)};
    events_ = 0;
    completions_ = 0;
    const int next = decide(curr);
    prev_ = curr;
    if (next == index_) return;
    index_ = next;
    // Profile 0 is {1, 1}: an event per completion, no timer needed. The
    // count never exceeds half the CQ: an event is due while the other half
    // still holds what arrives before the handler runs.
    if (index_ == 0)
      (void)cq.modify(0, 0);
    else
      (void)cq.modify(static_cast<std::uint16_t>(std::min<std::uint32_t>(kProfiles[index_].comps,
                                                                       std::max<std::uint32_t>(1, cq.cqe() / 2))),
                      kProfiles[index_].usec);
    ++changes_;
  }
  int profile() const { return index_; }
  std::uint64_t changes() const { return changes_; }

 private:
  struct Stats {
    std::uint64_t cpms = 0;      // completions per millisecond
    std::uint64_t cpe_x100 = 0;  // completions per event, x 100
  };
  enum class Verdict { kSame, kBetter, kWorse };

  static bool significant(std::uint64_t v, std::uint64_t ref) {
    const std::uint64_t d = v > ref ? v - ref : ref - v;
    return ref != 0 && d * 100 / ref > 10;
  }
  Verdict compare(const Stats& curr) const {
    if (prev_.cpms == 0) return Verdict::kBetter;
    if (significant(curr.cpms, prev_.cpms)) return curr.cpms > prev_.cpms ? Verdict::kBetter : Verdict::kWorse;
    if (significant(curr.cpe_x100, prev_.cpe_x100))
      return curr.cpe_x100 > prev_.cpe_x100 ? Verdict::kBetter : Verdict::kWorse;
    return Verdict::kSame;
  }
  int decide(const Stats& curr) {
    const std::uint64_t per_event = curr.cpe_x100 / 100;
    // Up to the kernel's top, and whenever events carry less than half its
    // count, the count decides (quick, and steady under noise): events
    // that fill the profile's count step up, events under half of it step
    // down.
    if (index_ < kKernelTop || per_event * 2 < kProfiles[kKernelTop].comps) {
      up_ = true;
      if (per_event >= kProfiles[index_].comps && index_ < kKernelTop) return index_ + 1;
      if (per_event * 2 < kProfiles[index_].comps && index_ > 0) return index_ - 1;
      return index_;
    }
    // Above it, the climb (see the top of this file).
    switch (compare(curr)) {
      case Verdict::kSame:
        return index_;
      case Verdict::kWorse:
        up_ = !up_;
        break;
      case Verdict::kBetter:
        break;
    }
    if (up_) return index_ < kTop ? index_ + 1 : index_;
    if (index_ == kKernelTop) up_ = true;  // the count rule's ground: the next move is up
    return index_ > kKernelTop ? index_ - 1 : index_;
  }

  int index_ = 0;
  bool up_ = true;  // the way the climb goes
  Stats prev_;
  Clock::time_point start_{};
  std::uint32_t events_ = 0;
  std::uint64_t completions_ = 0;
  std::uint64_t changes_ = 0;
};

}  // namespace srdma::core
