#include "srdma/qp.h"

#include <fmt/format.h>

#include "core/device_state.h"
#include "srdma/cq.h"
#include "srdma/pd.h"

namespace srdma {

QueuePair::QueuePair(std::unique_ptr<detail::QpState> s) : state_(std::move(s)) {}

QueuePair::~QueuePair() {
  if (!state_ || state_->destroyed) return;
  (void)state_->pd->device->hca->destroy_qp(state_->qp);
  state_->pd->usecnt.fetch_sub(1);
}

Result<void> QueuePair::modify(const QpAttr& attr, std::uint32_t mask) { return state_->qp->modify(attr, mask); }
QpAttr QueuePair::query() const { return state_->qp->attr(); }
QpState QueuePair::state() const { return state_->qp->state(); }
std::uint32_t QueuePair::qp_num() const { return state_->qp->qpn(); }
void* QueuePair::context() const { return state_->qp->context(); }

Result<void> QueuePair::post_send(const SendWr& wr, const SendWr** bad_wr) {
  return state_->qp->post_send(&wr, bad_wr);
}

Result<void> QueuePair::post_recv(const RecvWr& wr, const RecvWr** bad_wr) {
  return state_->qp->post_recv(&wr, bad_wr);
}

Result<std::unique_ptr<QueuePair>> ProtectionDomain::create_qp(const QpInitAttr& init) {
  if (!state_) return make_error(EINVAL, "the protection domain is deallocated");
  if (!init.send_cq || !init.recv_cq) return make_error(EINVAL, "a QP needs a send CQ and a receive CQ");
  auto* dev = state_->device.get();
  for (CompletionQueue* cq : {init.send_cq, init.recv_cq})
    if (cq->state_->destroyed || cq->state_->owner != dev)
      return make_error(EINVAL, "the CQ is destroyed or belongs to another device");
  hca::QpInit hi{state_->pdn, init.send_cq->state_->cq, init.recv_cq->state_->cq, init.cap, init.sq_sig_all,
                 init.qp_context};
  auto qp = dev->hca->create_qp(std::move(hi));
  if (!qp) return std::unexpected(qp.error());
  auto s = std::make_unique<detail::QpState>();
  s->pd = state_;
  s->qp = std::move(*qp);
  state_->usecnt.fetch_add(1);
  return std::unique_ptr<QueuePair>(new QueuePair(std::move(s)));
}

}  // namespace srdma
