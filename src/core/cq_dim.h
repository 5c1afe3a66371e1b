// Adaptive completion-event moderation for processed CQs (like the Linux
// RDMA core's DIM on ib_alloc_cq CQs of devices that set use_cq_dim).
//
// Each handler run (one completion event) reports how many completions it
// processed. Every kSample events the average decides: when the events
// carried at least the profile's count, completions are arriving faster
// than the moderation lets them batch, so step up to the next profile; when
// they carried less than half of it, the timer is what fires the events, so
// step down. The profiles are the kernel's {usec, comps} table. A busy CQ
// (a shared pool CQ collects many queues' completions) climbs to large
// batches; an idle one stays at an event per completion.
// Not thread-safe: one handler runs at a time per CQ, which is what calls it.
#pragma once

#include <cstdint>

#include "hca/cq.h"

namespace srdma::core {

class CqDim {
 public:
  struct Profile {
    std::uint16_t usec;
    std::uint16_t comps;
  };
  static constexpr Profile kProfiles[] = {{1, 1},  {1, 4},   {2, 4},   {2, 8},  {4, 8},
                                          {16, 8}, {16, 16}, {32, 16}, {32, 32}};
  static constexpr int kSample = 16;  // events per decision

  // Called after each event's processing with the completions it handled.
  void on_event(hca::Cq& cq, int completions) {
    completions_ += static_cast<std::uint32_t>(completions);
    if (++events_ < kSample) return;
    const std::uint32_t per_event = completions_ / events_;
    events_ = 0;
    completions_ = 0;
    int next = index_;
    if (per_event >= kProfiles[index_].comps && index_ + 1 < static_cast<int>(std::size(kProfiles)))
      ++next;
    else if (per_event * 2 < kProfiles[index_].comps && index_ > 0)
      --next;
    if (next == index_) return;
    index_ = next;
    // Profile 0 is {1, 1}: an event per completion, no timer needed.
    if (index_ == 0)
      (void)cq.modify(0, 0);
    else
      (void)cq.modify(kProfiles[index_].comps, kProfiles[index_].usec);
    ++changes_;
  }
  int profile() const { return index_; }
  std::uint64_t changes() const { return changes_; }

 private:
  int index_ = 0;
  std::uint32_t events_ = 0;
  std::uint32_t completions_ = 0;
  std::uint64_t changes_ = 0;
};

}  // namespace srdma::core
