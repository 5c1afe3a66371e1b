#include "nvmf/host_queue.h"

#include <cstring>

#include <fmt/format.h>

#include "common/secure_random.h"
#include "nvmf/capsule.h"
#include "nvmf/nvme_rdma_cm.h"
#include "nvmf/wire_cm.h"
#include "srdma/access.h"
#include "srdma/mr_pool.h"

namespace srdma::nvmf {
namespace {
constexpr std::size_t kSlotStride = 64;  // capsules and responses a cache line apart
constexpr std::uint32_t kPageSize = 4096;
}  // namespace

HostQueue::HostQueue(Device& dev, ProtectionDomain& pd, const HostQueueConfig& cfg)
    : dev_(dev), pd_(pd), cfg_(cfg) {}

HostQueue::~HostQueue() {
  close(ENOTCONN);
  {
    std::unique_lock lock(drain_mu_);
    drain_cv_.wait(lock, [&] { return drained_; });
  }
  if (conn_) conn_->set_disconnect_handler(CmConnection::kActive, {});
  if (qp_) (void)mr_pool_destroy(*qp_);
  qp_.reset();  // frees the MR pool's MRs with it
  lease_.release();
  private_cq_.reset();
}

Result<void> HostQueue::connect(std::uint64_t target_addr, std::uint16_t port) {
  if (cfg_.size < 2) return make_error(EINVAL, fmt::format("queue size {} below 2", cfg_.size));
  if (cfg_.max_io_size < kPageSize || cfg_.max_io_size > kMaxKeyedSglLength)
    return make_error(EINVAL, fmt::format("max_io_size {} outside 4 KiB..16 MiB", cfg_.max_io_size));
  // REG_MR, SEND, LOCAL_INV and RECV per command, and the drain.
  const std::uint32_t nr_cqe = 4 * cfg_.size + 1;
  const int hint = cfg_.qid == 0 ? 0 : cfg_.qid - 1;
  if (cfg_.pool_cqs) {
    auto lease = dev_.cq_pool_lease(nr_cqe, hint, PollContext::kSoftirq);
    if (!lease) return std::unexpected(lease.error());
    lease_ = std::move(*lease);
    cq_ = lease_.cq();
  } else {
    const auto vectors = std::max<std::uint32_t>(1, dev_.query().num_comp_vectors);
    auto cq = dev_.alloc_cq(this, nr_cqe, static_cast<std::uint32_t>(hint) % vectors, PollContext::kSoftirq);
    if (!cq) return std::unexpected(cq.error());
    private_cq_ = std::move(*cq);
    cq_ = private_cq_.get();
  }
  QpInitAttr qa;
  qa.send_cq = cq_;
  qa.recv_cq = cq_;
  qa.cap.max_send_wr = 3 * cfg_.size + 1;
  qa.cap.max_recv_wr = cfg_.size + 1;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  qa.qp_context = this;
  auto qp = pd_.create_qp(qa);
  if (!qp) return std::unexpected(qp.error());
  qp_ = std::move(*qp);
  const std::uint32_t max_pages = cfg_.max_io_size / kPageSize + 1;  // an unaligned buffer spans one more
  if (cfg_.reg == RegMode::kFrwr) {
    if (auto r = mr_pool_init(*qp_, static_cast<int>(cfg_.size), MrType::kMemReg, max_pages); !r) return r;
  } else {
    FmrPoolParams fp;
    fp.max_pages_per_fmr = max_pages;
    fp.access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;  // one access for every I/O
    fp.pool_size = cfg_.size;
    fp.dirty_watermark = std::max<std::uint32_t>(1, cfg_.size / 4);
    fp.cache = true;
    auto pool = FmrPool::create(pd_, fp);
    if (!pool) return std::unexpected(pool.error());
    fmr_pool_ = std::move(*pool);
  }

  ctrl_buf_.resize(2 * kSlotStride * cfg_.size);
  auto mr = pd_.reg_mr(ctrl_buf_.data(), ctrl_buf_.size(), ACCESS_LOCAL_WRITE);
  if (!mr) return std::unexpected(mr.error());
  ctrl_mr_ = std::move(*mr);
  reqs_ = std::make_unique<Request[]>(cfg_.size);
  recvs_.resize(cfg_.size);
  free_.reserve(cfg_.size);
  for (std::uint32_t i = 0; i < cfg_.size; ++i) {
    Request& r = reqs_[i];
    r.q = this;
    r.cid = static_cast<std::uint16_t>(i);
    r.capsule = reinterpret_cast<NvmeCommand*>(ctrl_buf_.data() + kSlotStride * i);
    r.send_cqe = {{&HostQueue::on_send}, &r};
    r.inv_cqe = {{&HostQueue::on_inv}, &r};
    RecvSlot& s = recvs_[i];
    s.q = this;
    s.rsp = reinterpret_cast<NvmeCompletion*>(ctrl_buf_.data() + kSlotStride * (cfg_.size + i));
    s.cqe = {{&HostQueue::on_recv}, nullptr};
    free_.push_back(static_cast<std::uint16_t>(cfg_.size - 1 - i));  // cid 0 first
  }

  CmRequest req;
  req.peer_addr = dev_.address();
  req.peer_qpn = qp_->qp_num();
  req.psn = random_psn();
  req.path_mtu = cfg_.path_mtu;
  NvmeRdmaCmRequest pdata;
  pdata.qid = cfg_.qid;
  pdata.hrqsize = static_cast<std::uint16_t>(cfg_.size);
  pdata.hsqsize = static_cast<std::uint16_t>(cfg_.size - 1);
  req.private_data = cm_private_data(pdata);
  // Through the device's CM agent, whichever link the target is on.
  auto reply = wire_connect(dev_, target_addr, port, req);
  if (!reply) return std::unexpected(reply.error());
  conn_ = std::move(reply->second);
  RcConnection c;
  c.peer_addr = target_addr;
  c.peer_qpn = reply->first.qpn;
  c.sq_psn = req.psn;
  c.rq_psn = reply->first.psn & 0xFFFFFF;
  c.access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;  // the MRs say what is allowed
  c.path_mtu = cfg_.path_mtu;
  if (auto r = qp_->connect(c); !r) {
    conn_->disconnect(CmConnection::kActive);
    return r;
  }
  for (RecvSlot& s : recvs_)
    if (!post_recv(s)) {
      conn_->disconnect(CmConnection::kActive);
      return make_error(EIO, "cannot post the receive ring");
    }
  conn_->set_disconnect_handler(CmConnection::kActive, [this] { close(ECONNRESET); });
  return {};
}

bool HostQueue::post_recv(RecvSlot& s) {
  Sge sge{reinterpret_cast<std::uint64_t>(s.rsp), sizeof(NvmeCompletion), ctrl_mr_.lkey()};
  RecvWr wr;
  wr.wr_cqe = &s.cqe.cqe;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return qp_->post_recv(wr).has_value();
}

Result<void> HostQueue::submit(const HostCommand& cmd, BlockIo* io, std::uint64_t* result_out) {
  if (cmd.length > cfg_.max_io_size)
    return make_error(EINVAL, fmt::format("{} bytes exceed the queue's max_io_size {}", cmd.length, cfg_.max_io_size));
  if (cmd.length > 0 && !cmd.data) return make_error(EINVAL, "data length without a buffer");
  std::uint16_t cid;
  {
    std::lock_guard lock(mu_);
    if (closing_ || !qp_) return make_error(ENOTCONN, fmt::format("queue {} is not connected", cfg_.qid));
    if (free_.empty()) return make_error(EAGAIN, fmt::format("queue {} is full", cfg_.qid));
    cid = free_.back();
    free_.pop_back();
    reqs_[cid].busy = true;
    reqs_[cid].deadline = cfg_.clock->now() + cfg_.timeout;  // check_timeouts reads it under mu_
  }
  Request& r = reqs_[cid];
  r.io = io;
  r.result_out = result_out;
  r.status = NvmeStatus::success();
  r.result = 0;
  *r.capsule = cmd.sqe;
  r.capsule->cid = cid;
  outstanding_.fetch_add(1, std::memory_order_relaxed);

  Sge capsule{reinterpret_cast<std::uint64_t>(r.capsule), sizeof(NvmeCommand), ctrl_mr_.lkey()};
  SendWr send;
  send.wr_cqe = &r.send_cqe.cqe;
  send.opcode = WrOpcode::kSend;
  send.sg_list = &capsule;
  send.num_sge = 1;
  send.send_flags = SEND_SIGNALED;
  SendWr reg;
  const SendWr* first = &send;
  if (cmd.length > 0 && fmr_pool_) {
    if (!map_fmr(r, cmd)) {
      finish(r, EAGAIN);
      return {};
    }
    auto sgl = keyed_sgl(reinterpret_cast<std::uint64_t>(cmd.data), cmd.length, r.fmr->rkey(), /*invalidate=*/false);
    r.capsule->dptr = *sgl;
    r.refs.store(2, std::memory_order_relaxed);
  } else if (cmd.length > 0) {
    // A fresh key for every registration: a late access under the previous
    // one fails instead of reaching this I/O's memory.
    r.mr = mr_pool_get(*qp_);
    if (!r.mr) {  // cannot happen: the pool has a MR per slot
      finish(r, ENOMEM);
      return {};
    }
    r.mr->inc_rkey();
    Sge sg{reinterpret_cast<std::uint64_t>(cmd.data), cmd.length, 0};
    auto mapped = r.mr->map_mr_sg(std::span<const Sge>(&sg, 1), kPageSize);
    if (!mapped || *mapped != 1) {
      (void)mr_pool_put(*qp_, r.mr);
      r.mr = nullptr;
      finish(r, EINVAL);
      return {};
    }
    reg.wr_cqe = &r.inv_cqe.cqe;  // unsignaled: only a flush completes it
    reg.opcode = WrOpcode::kRegMr;
    reg.mr = r.mr;
    reg.key = r.mr->rkey();
    reg.access = cmd.to_controller ? ACCESS_REMOTE_READ : (ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE);
    reg.next = &send;
    first = &reg;
    auto sgl = keyed_sgl(r.mr->iova(), cmd.length, r.mr->rkey(), /*invalidate=*/true);
    r.capsule->dptr = *sgl;  // length checked against max_io_size above
    r.refs.store(3, std::memory_order_relaxed);
  } else {
    if (!cmd.raw_dptr) r.capsule->dptr = null_sgl();
    r.refs.store(2, std::memory_order_relaxed);
  }
  if (auto p = qp_->post_send(*first); !p) {
    // The QP refused (closing under us): the request is failed by the
    // drain if it was posted at all; here it was not.
    if (r.mr) {
      (void)r.mr->dereg();
      r.mr = nullptr;
    }
    finish(r, ENOTCONN);
  }
  return {};
}

bool HostQueue::map_fmr(Request& r, const HostCommand& cmd) {
  const auto addr = reinterpret_cast<std::uint64_t>(cmd.data);
  const std::uint64_t first = addr & ~std::uint64_t{kPageSize - 1};
  const std::uint64_t end = addr + cmd.length;
  std::uint64_t pages[kMaxKeyedSglLength / kPageSize + 2];
  std::size_t n = 0;
  for (std::uint64_t p = first; p < end; p += kPageSize) pages[n++] = p;
  auto m = fmr_pool_->map_phys(std::span<const std::uint64_t>(pages, n), first);
  if (!m && m.error().code == EAGAIN) {
    // Every FMR is dirty below the watermark: release them now and retry.
    fmr_pool_->flush();
    m = fmr_pool_->map_phys(std::span<const std::uint64_t>(pages, n), first);
  }
  if (!m) return false;
  r.fmr = *m;
  return true;
}

void HostQueue::on_send(CompletionQueue&, const Wc& wc) {
  Request& r = *reinterpret_cast<const ReqCqe*>(wc.wr_cqe)->req;
  if (wc.status != WcStatus::kSuccess) return r.q->close(ECONNRESET);
  r.q->put_ref(r);
}

void HostQueue::on_inv(CompletionQueue&, const Wc& wc) {
  Request& r = *reinterpret_cast<const ReqCqe*>(wc.wr_cqe)->req;
  if (wc.status != WcStatus::kSuccess) return r.q->close(ECONNRESET);
  r.q->put_ref(r);
}

void HostQueue::on_recv(CompletionQueue&, const Wc& wc) {
  auto* q = static_cast<HostQueue*>(wc.qp_context);
  auto& slot = *reinterpret_cast<RecvSlot*>(reinterpret_cast<std::byte*>(wc.wr_cqe) - offsetof(RecvSlot, cqe));
  if (wc.status != WcStatus::kSuccess) return q->close(ECONNRESET);
  NvmeCompletion rsp;
  std::memcpy(&rsp, slot.rsp, sizeof(rsp));
  (void)q->post_recv(slot);
  if (wc.byte_len != sizeof(NvmeCompletion) || rsp.cid >= q->cfg_.size) return q->close(EPROTO);
  Request& r = q->reqs_[rsp.cid];
  {
    std::lock_guard lock(q->mu_);
    if (!r.busy) return;  // a response for nothing outstanding: ignored
  }
  r.status = NvmeStatus::decode(rsp.status);
  r.result = rsp.dw0 | (std::uint64_t{rsp.dw1} << 32);
  if (r.fmr && (wc.wc_flags & WC_WITH_INVALIDATE)) return q->close(EPROTO);  // FMR keys are not remotely invalidated
  if (r.mr) {
    if (wc.wc_flags & WC_WITH_INVALIDATE) {
      // The target invalidated the key for us; it must be this command's.
      if (wc.invalidated_rkey != r.mr->rkey()) return q->close(EPROTO);
      q->put_ref(r);
    } else {
      SendWr inv;
      inv.wr_cqe = &r.inv_cqe.cqe;
      inv.opcode = WrOpcode::kLocalInv;
      inv.invalidate_rkey = r.mr->rkey();
      inv.send_flags = SEND_SIGNALED;
      if (!q->qp_->post_send(inv)) return q->close(ECONNRESET);
    }
  }
  q->put_ref(r);
}

void HostQueue::put_ref(Request& r) {
  if (r.refs.fetch_sub(1, std::memory_order_acq_rel) == 1) finish(r, 0);
}

void HostQueue::finish(Request& r, int transport_error) {
  BlockIo* io;
  std::uint64_t* result_out;
  NvmeStatus status;
  std::uint64_t result;
  {
    // Everything the completion needs is copied out before the slot is
    // free: a submitter may take it the moment the lock drops.
    std::lock_guard lock(mu_);
    if (!r.busy) return;
    r.busy = false;
    io = r.io;
    result_out = r.result_out;
    status = r.status;
    result = r.result;
    if (r.mr) {
      // Normal completion: the key is invalid, the MR goes back. On a
      // failure the key may still be live: the caller deregistered it.
      (void)mr_pool_put(*qp_, r.mr);
      r.mr = nullptr;
    }
    if (r.fmr) {
      (void)fmr_pool_->unmap(r.fmr);  // lazy: the key lives until a flush
      r.fmr = nullptr;
    }
    if (!closing_) free_.push_back(r.cid);
  }
  outstanding_.fetch_sub(1, std::memory_order_relaxed);
  if (!io) return;
  io->status = transport_error ? NvmeStatus::of(StatusCode::kAbortRequested) : status;
  io->transport_error = transport_error;
  if (result_out) *result_out = result;
  if (io->done) io->done(*io);
}

bool HostQueue::check_timeouts(Clock::time_point now) {
  bool expired = false;
  {
    std::lock_guard lock(mu_);
    if (closing_) return false;
    for (std::uint32_t i = 0; i < cfg_.size && !expired; ++i)
      expired = reqs_[i].busy && reqs_[i].deadline < now;
  }
  // The owner fails the whole controller (failed() first, then every
  // queue), so whoever sees an I/O time out sees the controller failed.
  return expired;
}

void HostQueue::close(int err) {
  {
    std::lock_guard lock(mu_);
    if (closing_) return;
    closing_ = true;
    close_err_ = err;
  }
  closed_.store(true, std::memory_order_release);
  if (!qp_) {
    std::lock_guard lock(drain_mu_);
    drained_ = true;
    drain_cv_.notify_all();
    return;
  }
  QpAttr a;
  a.qp_state = QpState::kErr;
  (void)qp_->modify(a, QP_STATE);
  if (conn_) conn_->disconnect(CmConnection::kActive);
  drain();
}

void HostQueue::drain() {
  // Flushes complete in order: once both drain WRs are back, every earlier
  // WR has completed. Then what is still outstanding fails (on_drain).
  RecvWr rwr;
  rwr.wr_cqe = &drain_cqe_;
  SendWr swr;
  swr.wr_cqe = &drain_cqe_;
  swr.opcode = WrOpcode::kSend;
  swr.send_flags = SEND_SIGNALED;
  int posted = 0;
  if (qp_->post_recv(rwr)) ++posted;
  if (qp_->post_send(swr)) ++posted;
  bool done_now;
  {
    std::lock_guard lock(drain_mu_);
    drains_left_ += posted;
    done_now = drains_left_ == 0 && !drained_;
  }
  if (done_now) on_drain_complete();
}

void HostQueue::on_drain(CompletionQueue&, const Wc& wc) {
  auto* q = static_cast<HostQueue*>(wc.qp_context);
  bool done_now;
  {
    std::lock_guard lock(q->drain_mu_);
    done_now = --q->drains_left_ == 0;
  }
  if (done_now) q->on_drain_complete();
}

void HostQueue::on_drain_complete() {
  // Every request still outstanding fails; its key dies first, so the
  // memory handed back is out of the peer's reach.
  std::vector<Request*> failed;
  {
    std::lock_guard lock(mu_);
    for (std::uint32_t i = 0; i < cfg_.size; ++i) {
      Request& r = reqs_[i];
      if (!r.busy) continue;
      if (r.mr) {
        (void)r.mr->dereg();
        r.mr = nullptr;
      }
      if (r.fmr) {
        (void)fmr_pool_->unmap(r.fmr);
        r.fmr = nullptr;
      }
      failed.push_back(&r);
    }
  }
  if (fmr_pool_) fmr_pool_->flush();  // the lazily unmapped keys die here
  for (Request* r : failed) finish(*r, close_err_);
  std::lock_guard lock(drain_mu_);
  drained_ = true;
  drain_cv_.notify_all();
}

}  // namespace srdma::nvmf
