// A shared receive queue of the software device (IBA 10.2.9, like
// ib_srq / ibv_srq): receive WQEs that any QP attached to it consumes, in
// the order posted.
//
// A QP's responder takes a WQE (take()) when a message that needs one
// arrives, under its own rq_mu_, and keeps it until the message completes;
// several QPs take concurrently. Lock order: a QP's rq_mu_, then mu_ (a
// leaf: nothing else is taken under it).
//
// The limit (IBA 10.2.9.3, ibv_modify_srq's srq_limit): when armed
// (non-zero) and a take() leaves fewer WQEs than the limit, the SRQ raises
// SRQ_LIMIT_REACHED once and disarms; the consumer re-arms with modify().
// The check runs when a WQE is taken, the only thing that lowers the count.
//
// Thread safety: every member from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "hca/fast_mutex.h"
#include "hca/recv_wqe.h"
#include "srdma/status.h"
#include "srdma/wr.h"

namespace srdma::hca {

class AsyncEventDispatcher;
class Cq;

// An XRC SRQ (IBA A14, ibv_create_srq_ex's IBV_SRQT_XRC): the XRC domain
// it belongs to (a TGT QP of that domain only may receive into it) and the
// CQ its receives complete on (a TGT QP has none of its own).
// A tag-matching SRQ (ibv's IBV_SRQT_TM): xrcdn 0, max_num_tags > 0, and
// the CQ its list operations complete on.
struct SrqXrcBinding {
  std::uint32_t xrcdn = 0;  // 0: a basic SRQ
  std::shared_ptr<Cq> cq;
  std::uint32_t max_num_tags = 0;  // > 0: tag matching
  std::uint32_t max_ops = 0;
};

class Srq {
 public:
  using XrcBinding = SrqXrcBinding;
  // `context` is what the limit event carries (the core's public object).
  Srq(std::uint32_t srqn, std::uint32_t pdn, std::uint32_t max_wr, std::uint32_t max_sge, std::uint32_t limit,
      void* context, AsyncEventDispatcher& events, XrcBinding xrc = {});
  // An XRC SRQ's CQ is in use (Cq::usecnt, destroy_cq is EBUSY) from
  // creation until the last holder lets go: the engine, or a TGT QP placing
  // a message into it after destroy_srq.
  ~Srq();
  Srq(const Srq&) = delete;
  Srq& operator=(const Srq&) = delete;

  std::uint32_t srqn() const { return srqn_; }
  std::uint32_t pdn() const { return pdn_; }
  bool is_xrc() const { return xrc_.xrcdn != 0; }
  std::uint32_t xrcdn() const { return xrc_.xrcdn; }
  const std::shared_ptr<Cq>& cq() const { return xrc_.cq; }
  void* context() const { return context_; }

  // As QueuePair::post_recv: on error *bad_wr names the first WR not
  // posted. EINVAL for num_sge beyond max_sge or a NULL sg_list with
  // num_sge > 0, ENOMEM when max_wr WQEs are posted.
  Result<void> post_recv(const RecvWr* wr, const RecvWr** bad_wr);
  // The oldest posted WQE, swapped into `out` (no allocation); false if
  // none is posted. May raise the limit event.
  bool take(RecvWqe& out);
  // A TM SRQ: the WQE for a message of `message_length` bytes (UINT64_MAX:
  // longer than its first packet) whose first bytes are `head` (kTmhSize +
  // kRvhSize of them, or the whole message if shorter), after matching its
  // TMH: a posted tag's buffer it matches (removed from the list), else an
  // ordinary WQE (take()): for NO_TAG, and as unexpected (counted) for a
  // tag that matches none, while the consumer is behind on unexpected
  // messages, and for a message too short for a TMH or with an opcode
  // other than EAGER, NO_TAG or RNDV. A RNDV message matches only whole in
  // one packet, from kTmhSize + kRvhSize to kMaxRndvHdrSize bytes (any
  // other is unexpected: its RVH goes to the consumer); its tag's WQE is
  // kRndv, with the RVH's fields (the responder checks them).
  // false: no WQE (an RNR NAK; nothing counted).
  bool take_tm(std::span<const std::byte> head, std::uint64_t message_length, RecvWqe& out);
  bool is_tm() const { return xrc_.max_num_tags != 0; }
  // The longest rendezvous request the device offloads (tm_caps'
  // max_rndv_hdr_size): TMH, RVH and up to 32 bytes the sender adds.
  static constexpr std::uint32_t kMaxRndvHdrSize = 64;

  // ibv_post_srq_ops: runs each op now, completing the signaled ones on
  // the SRQ's CQ. EINVAL (not a TM SRQ, an SGE list beyond max_sge, a
  // handle never returned), ENOMEM (max_num_tags posted); *bad names the
  // first op not run.
  Result<void> post_ops(TmOpWr* wr, TmOpWr** bad);
  struct TmCounts {
    std::uint32_t tags = 0;        // posted, not consumed nor removed
    std::uint32_t unexpected = 0;  // unexpected messages counted
    std::uint32_t synced = 0;      // the consumer's count, as last reported
  };
  TmCounts tm_counts() const;

  struct Attr {
    std::uint32_t max_wr = 0;
    std::uint32_t max_sge = 0;
    std::uint32_t limit = 0;  // 0: not armed
  };
  Attr attr() const;
  // A new capacity (EINVAL below the WQEs posted now); `device_max_wr`
  // bounds it.
  Result<void> resize(std::uint32_t max_wr, std::uint32_t device_max_wr);
  // Arms the limit (0 disarms); EINVAL above max_wr.
  Result<void> arm_limit(std::uint32_t limit);
  // WQEs posted and not yet taken.
  std::uint32_t posted() const;

  std::atomic<int> usecnt{0};  // QPs attached

 private:
  const std::uint32_t srqn_;
  const std::uint32_t pdn_;
  const std::uint32_t max_sge_;
  void* const context_;
  const XrcBinding xrc_;
  AsyncEventDispatcher& events_;

  mutable FastMutex mu_;  // guards everything below
  std::vector<RecvWqe> ring_;  // a power of two long: [head_, tail_) are posted, oldest first
  std::uint64_t head_ = 0, tail_ = 0;
  std::uint32_t max_wr_;
  std::uint32_t limit_;
  // Tag matching: slots indexed by handle (free when !used), and the
  // posted ones in the order posted (matching takes the oldest that fits).
  struct Tag {
    RecvWqe wqe;
    std::uint64_t tag = 0, mask = 0;
    std::uint64_t seq = 0;  // order posted
    bool used = false;
  };
  std::vector<Tag> tags_;
  std::vector<std::uint32_t> free_tags_;
  std::uint64_t tag_seq_ = 0;
  std::uint32_t unexpected_ = 0;  // the device's count of unexpected messages
  std::uint32_t synced_ = 0;      // the consumer's, from its last TM_OP_SYNC op

  bool take_locked(RecvWqe& out, bool& limit_reached);  // under mu_
};

}  // namespace srdma::hca
