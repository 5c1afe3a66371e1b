// An XRC domain (like ib_xrcd / ibv_xrcd, IBA annex A14.2): what XRC SRQs
// and XRC TGT QPs share. A TGT QP receives only into XRC SRQs of its own
// domain: the XRCETH of each request names the SRQ, and the target refuses
// (NAK Invalid RD Request) an SRQ of another domain, a basic SRQ, or a
// number no SRQ has.
//
// An XrcDomain is a stable object owned through std::unique_ptr; it keeps
// its device alive. close() is refused (EBUSY) while XRC SRQs or TGT QPs
// use it; the destructor of an owner that never closed it leaves the
// domain to them until they are gone.
// Thread safety: any member from any thread.
#pragma once

#include <cstdint>
#include <memory>

#include "srdma/qp.h"
#include "srdma/status.h"

namespace srdma {

namespace detail {
struct XrcdImpl;
}

class XrcDomain {
 public:
  ~XrcDomain();
  XrcDomain(const XrcDomain&) = delete;
  XrcDomain& operator=(const XrcDomain&) = delete;

  // An XRC TGT QP (ibv's XRC_RECV) of this domain, in RESET. It has no PD,
  // no CQs and no queues of its own: init's CQs, SRQ and caps must be
  // empty and qp_type kXrcTgt (EINVAL otherwise). What it receives
  // completes on the CQ of the XRC SRQ each message names, with its qp_num.
  Result<std::unique_ptr<QueuePair>> create_tgt_qp(const QpInitAttr& init);
  // Another handle on this domain's TGT QP `qp_num` (ibv_open_qp): the
  // same QP, which lives until its last handle is destroyed. Its async
  // events and completions carry the creator's qp_context. ENOENT: no TGT
  // QP of that number in this domain.
  Result<std::unique_ptr<QueuePair>> open_tgt_qp(std::uint32_t qp_num);
  // EBUSY while XRC SRQs or TGT QPs use it; afterwards it may only be
  // destroyed.
  Result<void> close();
  std::uint32_t xrcd_num() const;
  // XRC SRQs and TGT QPs in it.
  int usecnt() const;

 private:
  friend class Device;
  friend struct detail::XrcdImpl;
  explicit XrcDomain(std::shared_ptr<detail::XrcdImpl> s);
  std::shared_ptr<detail::XrcdImpl> state_;
};

}  // namespace srdma
