#include "srdma/xrcd.h"

#include <fmt/format.h>

#include "core/qp_impl.h"
#include "core/xrcd_impl.h"
#include "srdma/device.h"

namespace srdma {

XrcDomain::XrcDomain(std::shared_ptr<detail::XrcdImpl> s) : state_(std::move(s)) {}

XrcDomain::~XrcDomain() = default;  // the state lives while SRQs and QPs hold it

Result<void> XrcDomain::close() {
  if (state_->closed.load()) return make_error(EINVAL, "the XRC domain is already closed");
  if (int n = state_->usecnt.load(); n > 0)
    return make_error(EBUSY, fmt::format("XRC domain {} is used by {} XRC SRQ(s) and TGT QP(s)", state_->xrcdn, n));
  state_->device->hca->engine().free_xrcd(state_->xrcdn);
  state_->closed.store(true);
  return {};
}

std::uint32_t XrcDomain::xrcd_num() const { return state_->xrcdn; }
int XrcDomain::usecnt() const { return state_->usecnt.load(); }

Result<std::unique_ptr<QueuePair>> XrcDomain::create_tgt_qp(const QpInitAttr& init) {
  if (state_->closed.load()) return make_error(EINVAL, "the XRC domain is closed");
  auto* dev = state_->device.get();
  if (dev->removed) return make_error(ENODEV, "the device has been removed");
  if (init.qp_type != QpType::kXrcTgt) return make_error(EINVAL, "an XRC domain creates XRC TGT QPs only");
  if (init.send_cq || init.recv_cq || init.srq || init.create_flags)
    return make_error(EINVAL, "an XRC TGT QP has no CQs, no SRQ and no create_flags");
  if (init.cap.max_send_wr || init.cap.max_recv_wr || init.cap.max_inline_data)
    return make_error(EINVAL, "an XRC TGT QP has no send or receive queue of its own (caps 0)");
  hca::QpInit hi;
  hi.type = QpType::kXrcTgt;
  hi.qp_context = init.qp_context;
  hi.xrcdn = state_->xrcdn;
  auto qp = dev->hca->engine().create_qp(std::move(hi));
  if (!qp) return std::unexpected(qp.error());
  auto share = std::make_shared<detail::TgtQpShare>();
  share->xrcd = state_;
  share->qp = std::move(*qp);
  state_->usecnt.fetch_add(1);
  {
    std::lock_guard lock(state_->tgt_mu);
    state_->tgt_qps[share->qp->qpn()] = share;
  }
  auto s = std::make_unique<detail::QpImpl>();
  s->qp = share->qp;
  s->tgt = std::move(share);
  return std::unique_ptr<QueuePair>(new QueuePair(std::move(s)));
}

Result<std::unique_ptr<QueuePair>> XrcDomain::open_tgt_qp(std::uint32_t qp_num) {
  if (state_->closed.load()) return make_error(EINVAL, "the XRC domain is closed");
  std::shared_ptr<detail::TgtQpShare> share;
  {
    std::lock_guard lock(state_->tgt_mu);
    if (auto it = state_->tgt_qps.find(qp_num); it != state_->tgt_qps.end()) share = it->second.lock();
  }
  if (!share) return make_error(ENOENT, fmt::format("no XRC TGT QP {:#x} in XRC domain {}", qp_num, state_->xrcdn));
  auto s = std::make_unique<detail::QpImpl>();
  s->qp = share->qp;
  s->tgt = std::move(share);
  return std::unique_ptr<QueuePair>(new QueuePair(std::move(s)));
}

Result<std::unique_ptr<XrcDomain>> Device::open_xrcd() {
  if (state_->removed) return make_error(ENODEV, "the device has been removed");
  auto s = std::make_shared<detail::XrcdImpl>();
  s->device = state_;
  s->xrcdn = state_->hca->engine().alloc_xrcd();
  return std::unique_ptr<XrcDomain>(new XrcDomain(std::move(s)));
}

}  // namespace srdma
