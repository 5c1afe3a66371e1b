// A shared receive queue (like ib_srq / ibv_srq, IBA 10.2.9): receive WRs
// that every QP created with it (QpInitAttr::srq) consumes, in the order
// posted; each completion goes to the consuming QP's receive CQ with that
// QP's qp_num.
//
// A SharedReceiveQueue is a stable object owned through std::unique_ptr
// (its address is the context of its limit event); it keeps its PD and
// device alive. destroy() is refused (EBUSY) while QPs use it; the
// destructor of an owner that never called destroy() lets the device keep
// it for those QPs until they are gone, as for a CQ.
// Thread safety: post_recv, modify and query from any thread, concurrently
// with the QPs taking WRs.
#pragma once

#include <cstdint>
#include <memory>

#include "srdma/status.h"
#include "srdma/wr.h"

namespace srdma {

class CompletionQueue;
class XrcDomain;
namespace detail {
struct SrqImpl;
}

struct SrqInitAttr {
  std::uint32_t max_wr = 0;     // 1..DeviceAttr::max_srq_wr
  std::uint32_t max_sge = 1;    // 1..DeviceAttr::max_srq_sge
  std::uint32_t srq_limit = 0;  // armed from creation when non-zero (at most max_wr)
  void* srq_context = nullptr;
  // An XRC SRQ (ibv's IBV_SRQT_XRC), both or neither: the XRC domain
  // whose TGT QPs may receive into it (xrcd.h) and the CQ (of the same
  // device) its receives complete on; srq_num() is what an INI's WRs name.
  XrcDomain* xrcd = nullptr;
  CompletionQueue* cq = nullptr;
  // A tag-matching SRQ (ibv's IBV_SRQT_TM): max_num_tags (1..
  // DeviceAttr::tm_max_num_tags) tagged buffers in its list, max_ops
  // (1..tm_max_ops), and `cq` (xrcd null), where its list operations
  // complete. Messages (RC QPs attached to it) complete on the QP's receive
  // CQ as kTmRecv / kTmNoTag (wc.h); each starts with a TMH (wr.h): an
  // EAGER one whose tag matches a posted tag lands, without its TMH, in
  // that tag's buffer (WC_TM_MATCH | WC_TM_DATA_VALID, the tag's
  // recv_wr_id); any other takes an ordinary receive whole. Matching stops
  // while the consumer's unexpected count (TM_OP_SYNC) is behind the
  // SRQ's. A RNDV request (TMH, RVH, at most
  // DeviceAttr::tm_max_rndv_hdr_size bytes in one packet) that matches is
  // offloaded: the tag completes as matched (WC_TM_MATCH) at once, the
  // device READs the RVH's buffer into the tag's over the QP the request
  // came by and completes the tag again (WC_TM_DATA_VALID, or the READ's
  // error), then sends the sender the FIN (the TMH and RVH, opcode FIN).
  // One it does not fetch (an RVH of 0 bytes or more than the tag's buffer)
  // completes the tag with kTmRndvIncomplete, its TMH and RVH in the
  // buffer.
  std::uint32_t max_num_tags = 0;
  std::uint32_t max_ops = 0;
};

// Which SrqAttr fields modify() sets (like enum ibv_srq_attr_mask).
enum SrqAttrMask : std::uint32_t {
  SRQ_MAX_WR = 1u << 0,  // resize: at least the WRs posted now, at most max_srq_wr
  SRQ_LIMIT = 1u << 1,   // arm the limit event (0 disarms), at most max_wr
};
inline constexpr std::uint32_t kSrqAttrMaskAll = SRQ_MAX_WR | SRQ_LIMIT;

struct SrqAttr {
  std::uint32_t max_wr = 0;
  std::uint32_t max_sge = 0;
  std::uint32_t srq_limit = 0;  // 0: not armed
};

class SharedReceiveQueue {
 public:
  ~SharedReceiveQueue();
  SharedReceiveQueue(const SharedReceiveQueue&) = delete;
  SharedReceiveQueue& operator=(const SharedReceiveQueue&) = delete;

  // Posts a list linked by `next`; on error *bad_wr names the first WR not
  // posted (all before it are posted, none after it). EINVAL for num_sge
  // beyond max_sge or a NULL sg_list with num_sge > 0, ENOMEM when max_wr
  // WRs are posted.
  Result<void> post_recv(const RecvWr& wr, const RecvWr** bad_wr = nullptr);
  // SRQ_MAX_WR resizes, SRQ_LIMIT arms the limit: when an armed SRQ's
  // posted WRs drop below srq_limit, the device raises kSrqLimitReached
  // once (async_event.h) and disarms. EINVAL for unknown mask bits and out
  // of range values; nothing changes then.
  Result<void> modify(const SrqAttr& attr, std::uint32_t attr_mask);
  SrqAttr query() const;
  // A tag-matching SRQ's list operations (ibv_post_srq_ops; TmOpWr in
  // wr.h): run at once, in order; an ADD writes its handle back. EINVAL
  // (not a TM SRQ, an SGE list beyond max_sge, a handle out of range),
  // ENOMEM (the tag list is full); *bad_wr names the first op not run.
  Result<void> post_srq_ops(TmOpWr& wr, TmOpWr** bad_wr = nullptr);
  bool is_tm() const;
  // A tag-matching SRQ's state: tags posted (not consumed nor removed),
  // unexpected messages it counted, and the consumer's count as last
  // reported (TM_OP_SYNC); matching runs while the two counts agree.
  struct TmCounts {
    std::uint32_t tags = 0;
    std::uint32_t unexpected = 0;
    std::uint32_t synced = 0;
  };
  TmCounts tm_counts() const;
  // EBUSY while QPs use it; afterwards the object may only be destroyed.
  Result<void> destroy();

  std::uint32_t srq_num() const;
  void* context() const;
  // An XRC SRQ (SrqInitAttr::xrcd).
  bool is_xrc() const;
  // QPs attached to it.
  int usecnt() const;

 private:
  friend class ProtectionDomain;
  friend struct detail::SrqImpl;
  explicit SharedReceiveQueue(std::unique_ptr<detail::SrqImpl> s);
  std::unique_ptr<detail::SrqImpl> state_;
};

}  // namespace srdma
