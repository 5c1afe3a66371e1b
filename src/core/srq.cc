#include "srdma/srq.h"

#include <fmt/format.h>

#include "core/cq_impl.h"
#include "core/srq_impl.h"
#include "srdma/pd.h"

namespace srdma {

SharedReceiveQueue::SharedReceiveQueue(std::unique_ptr<detail::SrqImpl> s) : state_(std::move(s)) {}

SharedReceiveQueue::~SharedReceiveQueue() {
  if (!state_ || state_->destroyed) return;
  // Refused while QPs use it: they keep the device SRQ (and its number)
  // until they are destroyed, and its limit event, whose context is this
  // object, can no longer fire.
  if (!destroy()) (void)state_->srq->arm_limit(0);
}

Result<void> SharedReceiveQueue::post_recv(const RecvWr& wr, const RecvWr** bad_wr) {
  return state_->srq->post_recv(&wr, bad_wr);
}

Result<void> SharedReceiveQueue::modify(const SrqAttr& attr, std::uint32_t attr_mask) {
  if (attr_mask & ~kSrqAttrMaskAll)
    return make_error(EINVAL, fmt::format("unknown srq_attr_mask bits {:#x}", attr_mask & ~kSrqAttrMaskAll));
  auto& engine = state_->pd->device->hca->engine();
  if (attr_mask & SRQ_MAX_WR) {
    // Checked first against the new size: a resize and a limit in one call
    // either both happen or neither does.
    if ((attr_mask & SRQ_LIMIT) && attr.srq_limit > attr.max_wr)
      return make_error(EINVAL, fmt::format("srq_limit {} beyond max_wr {}", attr.srq_limit, attr.max_wr));
    if (auto r = state_->srq->resize(attr.max_wr, engine.max_srq_wr()); !r) return r;
  }
  if (attr_mask & SRQ_LIMIT) return state_->srq->arm_limit(attr.srq_limit);
  return {};
}

SrqAttr SharedReceiveQueue::query() const {
  const hca::Srq::Attr a = state_->srq->attr();
  return SrqAttr{a.max_wr, a.max_sge, a.limit};
}

Result<void> SharedReceiveQueue::destroy() {
  if (state_->destroyed) return make_error(EINVAL, "the SRQ is already destroyed");
  if (auto r = state_->pd->device->hca->engine().destroy_srq(state_->srq); !r) return r;
  state_->destroyed = true;
  state_->pd->usecnt.fetch_sub(1);
  if (state_->xrcd) state_->xrcd->usecnt.fetch_sub(1);
  return {};
}

Result<void> SharedReceiveQueue::post_srq_ops(TmOpWr& wr, TmOpWr** bad_wr) {
  return state_->srq->post_ops(&wr, bad_wr);
}
bool SharedReceiveQueue::is_tm() const { return state_->srq->is_tm(); }
SharedReceiveQueue::TmCounts SharedReceiveQueue::tm_counts() const {
  const hca::Srq::TmCounts c = state_->srq->tm_counts();
  return TmCounts{c.tags, c.unexpected, c.synced};
}

std::uint32_t SharedReceiveQueue::srq_num() const { return state_->srq->srqn(); }
void* SharedReceiveQueue::context() const { return state_->context; }
int SharedReceiveQueue::usecnt() const { return state_->srq->usecnt.load(); }
bool SharedReceiveQueue::is_xrc() const { return state_->srq->is_xrc(); }

Result<std::unique_ptr<SharedReceiveQueue>> ProtectionDomain::create_srq(const SrqInitAttr& init) {
  if (!state_) return make_error(EINVAL, "the protection domain is deallocated");
  auto* dev = state_->device.get();
  if (dev->removed) return make_error(ENODEV, "the device has been removed");
  hca::SrqXrcBinding xrc;
  std::shared_ptr<detail::XrcdImpl> xrcd;
  if (init.max_num_tags || init.max_ops) {
    if (init.xrcd) return make_error(EINVAL, "an SRQ is XRC or tag-matching, not both");
    if (!init.cq) return make_error(EINVAL, "a tag-matching SRQ needs the CQ its list operations complete on");
    if (init.cq->state_->destroyed || init.cq->state_->owner != dev)
      return make_error(EINVAL, "the CQ is destroyed or belongs to another device");
    xrc = hca::SrqXrcBinding{0, init.cq->state_->cq, init.max_num_tags, init.max_ops};
  } else if (init.xrcd || init.cq) {
    if (!init.xrcd || !init.cq) return make_error(EINVAL, "an XRC SRQ needs both its XRC domain and its CQ");
    xrcd = detail::XrcdImpl::of(*init.xrcd);
    if (xrcd->closed.load() || xrcd->device.get() != dev)
      return make_error(EINVAL, "the XRC domain is closed or belongs to another device");
    if (init.cq->state_->destroyed || init.cq->state_->owner != dev)
      return make_error(EINVAL, "the CQ is destroyed or belongs to another device");
    xrc = hca::SrqXrcBinding{xrcd->xrcdn, init.cq->state_->cq};
  }
  auto s = std::make_unique<detail::SrqImpl>();
  s->pd = state_;
  s->xrcd = xrcd;
  s->context = init.srq_context;
  s->destroyed = true;  // until the device SRQ exists
  auto q = std::unique_ptr<SharedReceiveQueue>(new SharedReceiveQueue(std::move(s)));
  // The limit event's context is the public object (as a CQ's event's).
  auto srq = dev->hca->engine().create_srq(state_->pdn, init.max_wr, init.max_sge, init.srq_limit, q.get(),
                                           std::move(xrc));
  if (!srq) return std::unexpected(srq.error());
  q->state_->srq = std::move(*srq);
  q->state_->destroyed = false;
  state_->usecnt.fetch_add(1);
  if (xrcd) xrcd->usecnt.fetch_add(1);
  return q;
}

}  // namespace srdma
