// The receive side's queue, whichever it is: the QP's own ring of receive
// WQEs, or the SRQ it takes them from. post_recv fills the ring; the
// responder takes from it. Guarded by the QP's rq_mu_.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "hca/recv_wqe.h"
#include "hca/srq.h"

namespace srdma::hca {

class RecvQueue {
 public:
  // `depth`, `max_sge`: the QP's caps (ignored with an SRQ: the QP has no
  // ring of its own then). `pdn`: the QP's PD.
  RecvQueue(std::shared_ptr<Srq> srq, std::uint32_t depth, std::uint32_t max_sge, std::uint32_t pdn)
      : srq_(std::move(srq)), depth_(depth), pdn_(srq_ ? srq_->pdn() : pdn),
        ring_(srq_ ? 1 : std::bit_ceil(std::max<std::uint64_t>(depth, 1))), mask_(ring_.size() - 1) {
    if (!srq_)
      for (auto& r : ring_) r.sges.reserve(max_sge);
  }

  // The PD the WQEs' lkeys belong to (with an SRQ, the SRQ's).
  std::uint32_t pdn() const { return pdn_; }
  // The SRQ it takes from (null: the QP's own ring).
  const std::shared_ptr<Srq>& srq() const { return srq_; }
  // An XRC TGT QP takes from the XRC SRQ each message names: from the
  // start of a message on, `srq` (null between messages: it holds no SRQ it
  // has no use for). A WQE still held from the one before stays held (only
  // a failed message leaves one, and it ends the QP).
  void select_srq(std::shared_ptr<Srq> srq) {
    if (srq_held_ || srq_ == srq) return;
    pdn_ = srq ? srq->pdn() : 0;
    srq_ = std::move(srq);
  }

  // post_recv's side (the QP's own ring only).
  bool full() const { return tail_ - head_ >= depth_; }
  RecvWqe& next_slot() { return ring_[tail_ & mask_]; }
  void produce() { ++tail_; }

  // The responder's side. Whether a WQE is there for a new message (with
  // an SRQ, this takes one from it and holds it for the QP); the one a
  // message in progress places into; and taking it off to complete it
  // (valid until the next post_recv or ready()).
  bool ready() {
    if (!srq_) return head_ != tail_;
    if (!srq_held_) srq_held_ = srq_->take(srq_wqe_);
    return srq_held_;
  }
  // A tag-matching SRQ matches on the message's first bytes (`first`) and
  // its length (Srq::take_tm).
  bool ready(std::span<const std::byte> first, std::uint64_t message_length) {
    if (!srq_ || !srq_->is_tm()) return ready();
    if (!srq_held_) srq_held_ = srq_->take_tm(first, message_length, srq_wqe_);
    return srq_held_;
  }
  bool is_tm() const { return srq_ && srq_->is_tm(); }
  RecvWqe& head() { return srq_ ? srq_wqe_ : ring_[head_ & mask_]; }
  RecvWqe& take() {
    if (srq_) {
      srq_held_ = false;
      return srq_wqe_;
    }
    return ring_[head_++ & mask_];
  }
  bool empty() const { return srq_ ? !srq_held_ : head_ == tail_; }

  // RESET: the queue empties; a WQE taken from the SRQ is lost with the
  // QP's state (as on RESET of any QP).
  void reset() {
    head_ = tail_ = 0;
    srq_held_ = false;
  }

 private:
  std::shared_ptr<Srq> srq_;  // changes only by select_srq (an XRC TGT QP)
  const std::uint64_t depth_;
  std::uint32_t pdn_;
  std::vector<RecvWqe> ring_;  // [head_, tail_) are posted, oldest first; a power of two long
  const std::uint64_t mask_;
  std::uint64_t head_ = 0, tail_ = 0;
  // With an SRQ: the WQE taken from it for the message in progress (or
  // taken for one that found it and then failed a check), kept until the
  // message completes.
  RecvWqe srq_wqe_;
  bool srq_held_ = false;
};

}  // namespace srdma::hca
