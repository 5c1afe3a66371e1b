#include "srdma/qp.h"

#include <fmt/format.h>

#include "core/cq_impl.h"
#include "core/ah_impl.h"
#include "core/qp_impl.h"
#include "core/srq_impl.h"
#include "srdma/cq.h"
#include "srdma/pd.h"

namespace srdma {

QueuePair::QueuePair(std::unique_ptr<detail::QpImpl> s) : state_(std::move(s)) {}

QueuePair::~QueuePair() {
  if (!state_ || state_->destroyed) return;
  if (state_->tgt) return;  // an XRC TGT QP: its share destroys it with the last handle
  (void)state_->pd->device->hca->engine().destroy_qp(state_->qp);
  state_->pd->usecnt.fetch_sub(1);
  // The assigned CQs' entries go back to the pool with the QP (the leases).
}

CompletionQueue* QueuePair::send_cq() const { return state_->send_cq; }
CompletionQueue* QueuePair::recv_cq() const { return state_->recv_cq; }

Result<void> QueuePair::modify(const QpAttr& attr, std::uint32_t mask) { return state_->qp->modify(attr, mask); }
QpAttr QueuePair::query() const { return state_->qp->attr(); }

Result<void> QueuePair::connect(const RcConnection& c) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qp_access_flags = c.access;
  if (auto r = modify(a, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS); !r) return r;
  a.qp_state = QpState::kRtr;
  a.dest_addr = c.peer_addr;
  a.dest_qp_num = c.peer_qpn;
  a.path_mtu = c.path_mtu;
  a.rq_psn = c.rq_psn;
  a.min_rnr_timer = c.min_rnr_timer;
  if (auto r = modify(a, QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC |
                             QP_MIN_RNR_TIMER);
      !r)
    return r;
  a.qp_state = QpState::kRts;
  a.sq_psn = c.sq_psn;
  a.timeout = c.timeout;
  a.retry_cnt = c.retry_cnt;
  a.rnr_retry = c.rnr_retry;
  return modify(a, QP_STATE | QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC);
}
QpState QueuePair::state() const { return state_->qp->state(); }
std::uint32_t QueuePair::qp_num() const { return state_->qp->qpn(); }
TransportCounters QueuePair::counters() const { return state_->qp->counters(); }
void* QueuePair::context() const { return state_->qp->context(); }

namespace {
// REG_MR: the MR's mapping now, as a page-list view for the device.
bool resolve_fast_reg(const MemoryRegion* mr, hca::FastRegView& out) {
  if (!mr->valid() || mr->type() != MrType::kMemReg) return false;
  out.page_shift = static_cast<std::uint8_t>(mr->page_shift());
  out.iova = mr->iova();
  out.length = mr->length();
  out.pages = mr->page_list();
  return true;
}
// UD: the AH's address now, for the device.
bool resolve_ah(const AddressHandle* ah, hca::UdAddress& out) {
  const detail::AhImpl& s = detail::AhAccess::state(*ah);
  out.pdn = s.pd->pdn;
  out.dest_addr = s.attr.dest_addr;
  out.hop_limit = s.attr.hop_limit;
  out.traffic_class = s.attr.traffic_class;
  return true;
}
// BIND_MW: the window's and the MR's keys now. A type 2 window is bound by
// a WR, a type 1 only through bind_mw (`verb`).
bool resolve_mw(const SendWr& wr, hca::MwBindView& out, bool verb) {
  const MemoryWindow* mw = wr.bind_mw.mw;
  if (!mw->valid() || (mw->type() == MwType::kType1) != verb) return false;
  out.mw_alloc_key = detail::MwAccess::alloc_key(*mw);
  out.type1_verb = verb;
  out.mr_key = 0;
  if (wr.bind_mw.info.length > 0) {
    const MemoryRegion* mr = wr.bind_mw.info.mr;
    if (!mr || !mr->valid()) return false;
    out.mr_key = mr->lkey();
  }
  return true;
}
bool resolve_mw_wr(const SendWr& wr, hca::MwBindView& out) { return resolve_mw(wr, out, false); }
bool resolve_mw_verb(const SendWr& wr, hca::MwBindView& out) { return resolve_mw(wr, out, true); }
}  // namespace

Result<void> QueuePair::post_send(const SendWr& wr, const SendWr** bad_wr) {
  static constexpr hca::PostResolvers kResolvers{&resolve_fast_reg, &resolve_ah, &resolve_mw_wr};
  return state_->qp->post_send(&wr, bad_wr, &kResolvers);
}

Result<std::uint32_t> QueuePair::bind_mw(MemoryWindow& mw, const MwBindInfo& info, std::uint64_t wr_id,
                                         std::uint32_t send_flags) {
  if (!mw.valid()) return make_error(EINVAL, "the memory window is not allocated");
  if (mw.type() != MwType::kType1)
    return make_error(EINVAL, "bind_mw binds type 1 windows; a type 2 window is bound by a kBindMw work request");
  if (!info.mr && (info.addr || info.length)) return make_error(EINVAL, "an address or length without an MR");
  if (info.mr && info.mr->pd_num() != mw.pd_num()) return make_error(EPERM, "the MR and the window are in other PDs");
  SendWr w;
  w.wr_id = wr_id;
  w.opcode = WrOpcode::kBindMw;
  w.send_flags = send_flags;
  w.bind_mw.mw = &mw;
  w.bind_mw.rkey = mw.next_rkey();
  w.bind_mw.info = info;
  static constexpr hca::PostResolvers kBindVerb{&resolve_fast_reg, &resolve_ah, &resolve_mw_verb};
  if (auto r = state_->qp->post_send(&w, nullptr, &kBindVerb); !r)
    return std::unexpected(r.error());
  detail::MwAccess::set_bound_rkey(mw, w.bind_mw.rkey);
  return w.bind_mw.rkey;
}

Result<void> QueuePair::post_recv(const RecvWr& wr, const RecvWr** bad_wr) {
  return state_->qp->post_recv(&wr, bad_wr);
}

namespace {

// The vector whose interrupt thread runs on `cpu`, else cpu mod n.
int vector_for_cpu(detail::DeviceImpl& dev, int cpu) {
  if (cpu < 0) return -1;  // round robin
  const auto n = static_cast<std::uint32_t>(dev.hca->profile().num_comp_vectors);
  for (std::uint32_t v = 0; v < n; ++v)
    if (dev.hca->engine().event_queue(v).cpu() == cpu) return static_cast<int>(v);
  return cpu;  // the pool takes it mod n
}

}  // namespace

Result<std::unique_ptr<QueuePair>> ProtectionDomain::create_qp(const QpInitAttr& init) {
  if (!state_) return make_error(EINVAL, "the protection domain is deallocated");
  auto* dev = state_->device.get();
  if (dev->removed) return make_error(ENODEV, "the device has been removed");
  if (init.create_flags & ~std::uint32_t{QP_CREATE_ASSIGN_CQS | QP_CREATE_GSI | QP_CREATE_NO_CONGESTION_CONTROL})
    return make_error(EINVAL, "unknown create_flags");
  const bool gsi = init.create_flags & QP_CREATE_GSI;
  if (gsi && init.qp_type != QpType::kUd) return make_error(EINVAL, "the GSI QP is a UD QP");
  if (init.qp_type == QpType::kXrcTgt)
    return make_error(EINVAL, "an XRC TGT QP has no PD: XrcDomain::create_tgt_qp makes it");
  const bool ini = init.qp_type == QpType::kXrcIni;
  if (ini && (init.recv_cq || init.srq || (init.create_flags & QP_CREATE_ASSIGN_CQS)))
    return make_error(EINVAL, "an XRC INI QP has a send CQ only (no receive CQ, SRQ or assigned CQs)");
  auto s = std::make_unique<detail::QpImpl>();
  if (init.create_flags & QP_CREATE_ASSIGN_CQS) {
    if (init.send_cq || init.recv_cq) return make_error(EINVAL, "QP_CREATE_ASSIGN_CQS takes no CQs from the caller");
    Device handle = detail::ClientAccess::handle(state_->device);
    const int hint = vector_for_cpu(*dev, init.affinity_hint);
    // Exactly what the caps can produce: a CQE per send WR, one per receive.
    auto send = handle.cq_pool_lease(std::max(init.cap.max_send_wr, 1u), hint, init.assign_poll_ctx);
    if (!send) return std::unexpected(send.error());
    auto recv = handle.cq_pool_lease(std::max(init.cap.max_recv_wr, 1u), send->cq()->comp_vector(),
                                     init.assign_poll_ctx);
    if (!recv) return std::unexpected(recv.error());
    s->send_cq = send->cq();
    s->recv_cq = recv->cq();
    s->send_lease = std::move(*send);
    s->recv_lease = std::move(*recv);
  } else {
    if (!init.send_cq || (!init.recv_cq && !ini)) return make_error(EINVAL, "a QP needs a send CQ and a receive CQ");
    s->send_cq = init.send_cq;
    s->recv_cq = init.recv_cq;
  }
  for (CompletionQueue* cq : {s->send_cq, s->recv_cq})
    if (cq && (cq->state_->destroyed || cq->state_->owner != dev))
      return make_error(EINVAL, "the CQ is destroyed or belongs to another device");
  hca::QpInit hi{state_->pdn, s->send_cq->state_->cq, s->recv_cq ? s->recv_cq->state_->cq : nullptr,
                 init.cap, init.sq_sig_all, init.qp_context, nullptr, init.qp_type, gsi};
  hi.congestion_control = !(init.create_flags & QP_CREATE_NO_CONGESTION_CONTROL);
  if (init.srq) {
    if (detail::SrqImpl::destroyed_of(*init.srq) || detail::SrqImpl::device_of(*init.srq) != dev)
      return make_error(EINVAL, "the SRQ is destroyed or belongs to another device");
    hi.srq = detail::SrqImpl::of(*init.srq);
  }
  auto qp = dev->hca->engine().create_qp(std::move(hi));
  if (!qp) return std::unexpected(qp.error());
  s->pd = state_;
  s->qp = std::move(*qp);
  state_->usecnt.fetch_add(1);
  return std::unique_ptr<QueuePair>(new QueuePair(std::move(s)));
}

}  // namespace srdma
