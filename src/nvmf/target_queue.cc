#include "nvmf/target_queue.h"

#include <algorithm>
#include <cstring>
#include <variant>

#include <fmt/format.h>

#include "nvmf/capsule.h"
#include "nvmf/rdma_target.h"
#include "srdma/access.h"

namespace srdma::nvmf {
namespace {
constexpr std::size_t kRspStride = 64;  // responses a cache line apart
// The admission slot's data: the Connect data (1 KiB) and room for the
// in-band authentication messages that may follow it.
constexpr std::size_t kAdmissionDataBytes = 4096;
}

TargetQueue::TargetQueue(RdmaTarget& target, std::uint16_t qid, std::uint32_t size,
                         std::shared_ptr<CmConnection> conn)
    : target_(target), qid_(qid), size_(size), conn_(std::move(conn)) {}

TargetQueue::~TargetQueue() = default;

std::uint32_t TargetQueue::qpn() const { return qp_ ? qp_->qp_num() : 0; }

Result<void> TargetQueue::init(const CmRequest& req, std::uint32_t local_psn) {
  const TargetOptions& o = target_.options();
  Device& dev = target_.device();
  host_addr_ = req.peer_addr;
  created_ = o.clock->now();
  // The admin queue takes no in-capsule data (its IOCCSZ is the bare SQE).
  in_capsule_size_ = qid_ == 0 ? 0 : o.limits.in_capsule_data_size;
  capsule_stride_ = static_cast<std::uint32_t>((sizeof(NvmeCommand) + in_capsule_size_ + 63) / 64 * 64);

  // Receives: one per slot, the admission slot's, and the drain; sends: a
  // data transfer and a response per slot plus the admission slot's and
  // the drain. The CQ and QP are sized for the grown queue now: the CQ
  // comes from the pool (or is a ring of a few KiB) and the QP's queues
  // hold WR descriptors, not data.
  const std::uint32_t recv_wr = size_ + 2, send_wr = 2 * size_ + 3;
  const std::uint32_t nr_cqe = recv_wr + send_wr;  // nvmet: recv + 2 x send + 1
  const auto vectors = std::max<std::uint32_t>(1, dev.query().num_comp_vectors);
  // The I/O queue index (qid - 1) mod vectors, the admin queue on vector 0:
  // the vector the host gives the same queue, so in one process a queue's
  // work stays on one CPU (across machines any fixed spread does as well).
  const std::uint32_t vector = qid_ == 0 ? 0 : (qid_ - 1u) % vectors;
  if (o.pool_cqs) {
    auto lease = dev.cq_pool_lease(nr_cqe, static_cast<int>(vector), o.poll_ctx);
    if (!lease) return std::unexpected(lease.error());
    lease_ = std::move(*lease);
    cq_ = lease_.cq();
  } else {
    auto cq = dev.alloc_cq(this, nr_cqe, vector, o.poll_ctx);
    if (!cq) return std::unexpected(cq.error());
    private_cq_ = std::move(*cq);
    cq_ = private_cq_.get();
  }

  QpInitAttr qa;
  qa.send_cq = cq_;
  qa.recv_cq = cq_;
  qa.cap.max_send_wr = send_wr;
  qa.cap.max_recv_wr = recv_wr;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  qa.qp_context = this;
  auto qp = target_.pd().create_qp(qa);
  if (!qp) return std::unexpected(qp.error());
  qp_ = std::move(*qp);

  // The admission slot: its receive buffer, capsule, response and a data
  // buffer for the Connect data (and, with authentication, its messages).
  const std::size_t bytes = 2 * std::size_t{capsule_stride_} + kRspStride + kAdmissionDataBytes;
  admission_buf_ = std::make_unique<std::byte[]>(bytes);
  auto mr = target_.pd().reg_mr(admission_buf_.get(), bytes, ACCESS_LOCAL_WRITE);
  if (!mr) return std::unexpected(mr.error());
  admission_mr_ = std::move(*mr);
  std::byte* at = admission_buf_.get();
  place_recv(admission_recv_, at, admission_mr_.lkey());
  place_slot(admission_slot_, at + capsule_stride_, admission_mr_.lkey(), kAdmissionDataBytes);
  admission_slot_.admission = true;
  free_slots_.push_back(&admission_slot_);

  RcConnection c;
  c.peer_addr = req.peer_addr;
  c.peer_qpn = req.peer_qpn;
  c.access = ACCESS_LOCAL_WRITE;  // the host never reads or writes target memory
  c.path_mtu = req.path_mtu;
  c.sq_psn = local_psn & 0xFFFFFF;
  c.rq_psn = req.psn & 0xFFFFFF;
  if (auto r = qp_->connect(c); !r) return r;
  if (!post_recv(admission_recv_)) return make_error(EIO, "cannot post the admission receive");
  return {};
}

void TargetQueue::place_recv(RecvBuf& b, std::byte* capsule, std::uint32_t lkey) {
  b.cqe = {&TargetQueue::on_recv};
  b.q = this;
  b.capsule = capsule;
  b.lkey = lkey;
}

void TargetQueue::place_slot(Slot& s, std::byte* base, std::uint32_t lkey, std::uint32_t data_bytes) {
  s.q = this;
  s.capsule = base;
  s.rsp = reinterpret_cast<NvmeCompletion*>(base + capsule_stride_);
  s.data = base + capsule_stride_ + kRspStride;
  s.lkey = lkey;
  s.data_bytes = data_bytes;
  s.read_cqe = {{&TargetQueue::on_read}, &s};
  s.send_cqe = {{&TargetQueue::on_send}, &s};
}

Result<void> TargetQueue::grow() {
  const TargetOptions& o = target_.options();
  const std::uint32_t data_size = std::max<std::uint32_t>(o.limits.max_io_size, kIdentifyDataSize);
  // Not zeroed: pages appear as the slots use them.
  const std::size_t per_slot = capsule_stride_ + kRspStride + data_size;
  const std::size_t nslots = 2 * std::size_t{size_};
  const std::size_t recv_bytes = std::size_t{capsule_stride_} * size_;
  buf_size_ = recv_bytes + per_slot * nslots;
  buf_ = std::make_unique_for_overwrite<std::byte[]>(buf_size_);
  auto mr = target_.pd().reg_mr(buf_.get(), buf_size_, ACCESS_LOCAL_WRITE);
  if (!mr) {
    buf_.reset();
    return std::unexpected(mr.error());
  }
  mr_ = std::move(*mr);

  recvs_.resize(size_);
  for (std::uint32_t i = 0; i < size_; ++i) {
    place_recv(recvs_[i], buf_.get() + std::size_t{capsule_stride_} * i, mr_.lkey());
  }
  slots_.resize(nslots);
  {
    std::lock_guard lock(slots_mu_);
    free_slots_.reserve(nslots);
    waiting_.reserve(size_ + 1);
    for (std::size_t i = 0; i < nslots; ++i) {
      place_slot(slots_[i], buf_.get() + recv_bytes + per_slot * i, mr_.lkey(), data_size);
      free_slots_.push_back(&slots_[nslots - 1 - i]);
    }
  }
  for (RecvBuf& b : recvs_)
    if (!post_recv(b)) return make_error(EIO, "cannot post the receive ring");
  return {};
}

bool TargetQueue::post_recv(RecvBuf& b) {
  Sge sge{reinterpret_cast<std::uint64_t>(b.capsule), capsule_stride_, b.lkey};
  RecvWr wr;
  wr.wr_cqe = &b.cqe;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  std::lock_guard lock(post_mu_);
  if (closing_) return false;
  return qp_->post_recv(wr).has_value();
}

bool TargetQueue::post_send(const SendWr& wr) {
  std::lock_guard lock(post_mu_);
  if (closing_) return false;
  // Behind WRs already waiting for room: in order, as RC would send them.
  if (!deferred_.empty()) {
    defer(&wr);
    return true;
  }
  const SendWr* bad = nullptr;
  if (auto r = qp_->post_send(wr, &bad); !r) {
    // A full send queue is a wait, not a failure: a completion that is slow
    // to come (a lost ACK, retried after the transport timeout) holds its
    // WQE while the host's next command arrives. Dropping the WR would lose
    // a response and leave the host's command hanging until its timeout
    // (nvmet-rdma queues such a response on its wait list the same way).
    if (r.error().code != ENOMEM || bad == nullptr) return false;
    defer(bad);
  }
  return true;
}

TargetQueue::Deferred TargetQueue::copy_chain(const SendWr* wr) {
  // A deep copy of the chain from `wr` on: the caller's WRs and SGEs are
  // gone once it returns.
  Deferred d;
  for (const SendWr* w = wr; w; w = w->next) {
    d.wrs.push_back(*w);
    d.sges.insert(d.sges.end(), w->sg_list, w->sg_list + w->num_sge);
  }
  std::size_t at = 0;
  for (std::size_t i = 0; i < d.wrs.size(); ++i) {
    d.wrs[i].sg_list = d.wrs[i].num_sge ? &d.sges[at] : nullptr;
    at += static_cast<std::size_t>(d.wrs[i].num_sge);
    d.wrs[i].next = i + 1 < d.wrs.size() ? &d.wrs[i + 1] : nullptr;
  }
  return d;
}

void TargetQueue::defer(const SendWr* wr) {
  deferred_.push_back(copy_chain(wr));
}

void TargetQueue::post_deferred() {
  // (Under the lock even when nothing waits: a flag read without it could
  // miss a chain deferred just as the last completion that would post it
  // ran.)
  std::lock_guard lock(post_mu_);
  while (!closing_ && !deferred_.empty()) {
    Deferred& d = deferred_.front();
    const SendWr* bad = nullptr;
    if (auto r = qp_->post_send(d.wrs.front(), &bad); !r) {
      if (r.error().code != ENOMEM || bad == nullptr) return;  // the QP is failing: its close drops the rest
      // Part of the chain went: keep the rest, first in line.
      if (bad != &d.wrs.front()) d = copy_chain(bad);
      return;
    }
    deferred_.pop_front();
  }
}

void TargetQueue::close() {
  std::size_t reads_dropped = 0;
  {
    std::lock_guard lock(post_mu_);
    if (closing_) return;
    closing_ = true;
    closed_.store(true, std::memory_order_release);
    // WRs still waiting for room are dropped with the queue; a READ among
    // them had begun an I/O the drain waits for.
    for (const Deferred& d : deferred_)
      for (const SendWr& w : d.wrs) reads_dropped += w.opcode == WrOpcode::kRdmaRead;
    deferred_.clear();
  }
  for (std::size_t i = 0; i < reads_dropped; ++i) io_end();
  QpAttr a;
  a.qp_state = QpState::kErr;
  (void)qp_->modify(a, QP_STATE);
  target_.queue_closed(this);
}

void TargetQueue::io_end() {
  if (ns_ops_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::lock_guard lock(drain_mu_);
    drain_cv_.notify_all();
  }
}

void TargetQueue::drain_and_destroy() {
  if (qp_) {
    // The drain WRs go in after close() stopped every other post.
    Sge none{};
    RecvWr rwr;
    rwr.wr_cqe = &drain_cqe_;
    rwr.sg_list = &none;
    rwr.num_sge = 0;
    SendWr swr;
    swr.wr_cqe = &drain_cqe_;
    swr.opcode = WrOpcode::kSend;
    swr.send_flags = SEND_SIGNALED;
    int posted = 0;
    if (qp_->post_recv(rwr)) ++posted;
    if (qp_->post_send(swr)) ++posted;
    std::unique_lock lock(drain_mu_);
    drains_left_ += posted;
    drain_cv_.wait(lock, [&] { return drains_left_ == 0 && ns_ops_.load(std::memory_order_acquire) == 0; });
  }
  conn_->set_disconnect_handler(CmConnection::kPassive, {});
  conn_->disconnect(CmConnection::kPassive);
  qp_.reset();
  lease_.release();
  private_cq_.reset();
  if (mr_.valid()) (void)mr_.dereg();
  if (admission_mr_.valid()) (void)admission_mr_.dereg();
}

void TargetQueue::on_drain(CompletionQueue&, const Wc& wc) {
  auto* q = static_cast<TargetQueue*>(wc.qp_context);
  std::lock_guard lock(q->drain_mu_);
  // A drain WR may complete before the reaper counted it: count down past 0
  // and let the wait see 0 again.
  --q->drains_left_;
  q->drain_cv_.notify_all();
}

void TargetQueue::fail(const Wc& wc) {
  if (wc.status != WcStatus::kWrFlushErr) target_.count_command(true);
  close();
}

void TargetQueue::on_recv(CompletionQueue&, const Wc& wc) {
  auto& b = *reinterpret_cast<RecvBuf*>(wc.wr_cqe);  // cqe is RecvBuf's first member
  TargetQueue* q = b.q;
  if (wc.status != WcStatus::kSuccess) return q->fail(wc);
  Slot* s = nullptr;
  {
    std::lock_guard lock(q->slots_mu_);
    if (q->free_slots_.empty()) {
      b.byte_len = wc.byte_len;
      q->waiting_.push_back(&b);
      return;
    }
    s = q->free_slots_.back();
    q->free_slots_.pop_back();
  }
  q->start(*s, b, wc.byte_len);
}

void TargetQueue::start(Slot& s, RecvBuf& b, std::uint32_t byte_len) {
  const std::uint32_t len = std::min(byte_len, capsule_stride_);
  std::memcpy(s.capsule, b.capsule, len);
  (void)post_recv(b);
  execute(s, len);
}

void TargetQueue::release(Slot& s) {
  // Once the queue grew, the admission slot is done: its small data buffer
  // must not meet an I/O command.
  if (s.admission && connected()) return;
  RecvBuf* b = nullptr;
  {
    std::lock_guard lock(slots_mu_);
    if (waiting_.empty()) {
      free_slots_.push_back(&s);
      return;
    }
    b = waiting_.front();
    waiting_.erase(waiting_.begin());
  }
  start(s, *b, b->byte_len);
}

void TargetQueue::on_read(CompletionQueue&, const Wc& wc) {
  Slot& s = slot_of(wc);
  TargetQueue* q = s.q;
  if (wc.status != WcStatus::kSuccess) {
    // The host's key or memory refused the RDMA READ: the QP is in error
    // (IBA: a remote access error ends the connection), so no status can
    // reach the host; it learns through the disconnect.
    q->io_end();
    return q->fail(wc);
  }
  q->post_deferred();  // the completion made room
  if (s.cmd.kind == CommandKind::kConnect) {
    q->finish_connect(s);
  } else if (s.cmd.kind == CommandKind::kAuthSend) {
    q->finish_auth_send(s);
  } else {
    q->finish_write(s);
  }
  q->io_end();
}

void TargetQueue::on_send(CompletionQueue&, const Wc& wc) {
  Slot& s = slot_of(wc);
  if (wc.status != WcStatus::kSuccess) return s.q->fail(wc);
  s.q->post_deferred();  // the completion made room
  // The response is out: the slot takes the next command.
  s.q->release(s);
}

void TargetQueue::refuse(Slot& s, const Refusal& r) {
  s.cmd = Command{};
  s.cmd.cid = r.cid;
  s.invalidate = false;
  respond(s, r.status, r.dw0);
}

void TargetQueue::respond(Slot& s, NvmeStatus status, std::uint64_t result, std::uint32_t write_len) {
  target_.count_command(!status.ok());
  const std::uint16_t head = static_cast<std::uint16_t>(sq_head_.load(std::memory_order_relaxed) % size_);
  *s.rsp = build_completion(s.cmd.cid, qid_, head, status, result);
  Sge rsp{reinterpret_cast<std::uint64_t>(s.rsp), sizeof(NvmeCompletion), s.lkey};
  SendWr send;
  send.wr_cqe = &s.send_cqe.cqe;
  send.sg_list = &rsp;
  send.num_sge = 1;
  send.send_flags = SEND_SIGNALED;
  if (s.invalidate) {
    send.opcode = WrOpcode::kSendWithInv;
    send.invalidate_rkey = s.invalidate_rkey;
  } else {
    send.opcode = WrOpcode::kSend;
  }
  Sge data{reinterpret_cast<std::uint64_t>(s.data), write_len, s.lkey};
  SendWr write;
  if (write_len > 0) {
    // The data first, unsignaled: RC ordering puts it in host memory
    // before the response arrives.
    write.wr_cqe = &s.send_cqe.cqe;  // only a flush would complete it
    write.opcode = WrOpcode::kRdmaWrite;
    write.sg_list = &data;
    write.num_sge = 1;
    write.remote_addr = s.cmd.data.addr;
    write.rkey = s.cmd.data.key;
    write.next = &send;
  }
  (void)post_send(write_len > 0 ? write : send);
}

void TargetQueue::execute(Slot& s, std::uint32_t byte_len) {
  sq_head_.fetch_add(1, std::memory_order_relaxed);
  QueueContext ctx;
  ctx.type = qid_ == 0 ? QueueType::kAdmin : QueueType::kIo;
  ctx.connected = connected_.load(std::memory_order_acquire);
  ctx.in_capsule_data_size = in_capsule_size_;
  ctx.max_queue_size = target_.options().limits.max_queue_size;
  const std::uint32_t len = std::min(byte_len, capsule_stride_);
  ParseResult parsed = parse_command(std::span<const std::byte>(s.capsule, len), ctx);
  if (auto* r = std::get_if<Refusal>(&parsed)) return refuse(s, *r);
  s.cmd = std::get<Command>(parsed);
  const Command& c = s.cmd;
  s.invalidate = c.data.kind == DataDescriptor::Kind::kKeyed && c.data.invalidate;
  s.invalidate_rkey = c.data.key;
  // In-band authentication (NVMe base 2.0 8.13): a queue whose host must
  // authenticate runs nothing but AUTH_Send/AUTH_Receive until it has.
  const bool auth_command = c.kind == CommandKind::kAuthSend || c.kind == CommandKind::kAuthReceive;
  if (auth_command && !auth_) return respond(s, NvmeStatus::of(StatusCode::kInvalidField));  // nothing to authenticate (nvmet)
  if (!auth_command && c.kind != CommandKind::kConnect && auth_ && !admitted_.load(std::memory_order_acquire))
    return respond(s, NvmeStatus::of(auth::kAuthenticationRequired));

  switch (c.kind) {
    case CommandKind::kConnect: {
      if (c.data.kind == DataDescriptor::Kind::kInCapsule) {
        std::memmove(s.data, c.data.in_capsule.data(), std::min<std::size_t>(c.data.in_capsule.size(), 1024));
        return finish_connect(s);
      }
      if (c.data.kind != DataDescriptor::Kind::kKeyed || c.data.length < sizeof(ConnectData))
        return respond(s, NvmeStatus::of(StatusCode::kDataSglLengthInvalid));
      return fetch_from_host(s, sizeof(ConnectData));
    }
    case CommandKind::kPropertyGet: {
      std::uint64_t v = 0;
      NvmeStatus st = ctrl_->property_get(c.property, &v);
      return respond(s, st, v);
    }
    case CommandKind::kPropertySet:
      return respond(s, ctrl_->property_set(c.property));
    case CommandKind::kKeepAlive:
      ctrl_->keep_alive();
      return respond(s, NvmeStatus::success());
    case CommandKind::kIdentify: {
      if (c.data.kind != DataDescriptor::Kind::kKeyed)
        return respond(s, NvmeStatus::of(StatusCode::kSglDescriptorTypeInvalid));
      NvmeStatus st = ctrl_->identify(c, std::span<std::byte>(s.data, kIdentifyDataSize));
      if (!st.ok()) return respond(s, st);
      return respond(s, st, 0, std::min<std::uint32_t>(c.data.length, kIdentifyDataSize));
    }
    case CommandKind::kGetLogPage: {
      if (c.data.kind != DataDescriptor::Kind::kKeyed)
        return respond(s, NvmeStatus::of(StatusCode::kSglDescriptorTypeInvalid));
      // Only the discovery controller has a log page here: LID 70h.
      if (c.log.lid != kLogPageDiscovery || ctrl_->subsystem()->nqn() != kDiscoveryNqn)
        return respond(s, NvmeStatus::of(StatusCode::kInvalidField));
      const std::vector<std::byte> page = target_.discovery_log(ctrl_->hostnqn());
      const std::uint32_t room = std::max<std::uint32_t>(target_.options().limits.max_io_size, kIdentifyDataSize);
      if (c.log.length > room) return respond(s, NvmeStatus::of(StatusCode::kInvalidField));
      // Past the end reads zeros (NVMe base 5.16: what is not there is 0).
      std::memset(s.data, 0, c.log.length);
      if (c.log.offset < page.size())
        std::memcpy(s.data, page.data() + c.log.offset,
                    std::min<std::uint64_t>(c.log.length, page.size() - c.log.offset));
      return respond(s, NvmeStatus::success(), 0, c.log.length);
    }
    case CommandKind::kFlush:
    case CommandKind::kRead:
    case CommandKind::kWrite:
      return execute_read_write(s);
    case CommandKind::kAuthSend:
      if (c.auth_length > s.data_bytes) return respond(s, NvmeStatus::of(StatusCode::kInvalidField));
      if (c.data.kind == DataDescriptor::Kind::kInCapsule) {
        std::memmove(s.data, c.data.in_capsule.data(), c.auth_length);
        return finish_auth_send(s);
      }
      return fetch_from_host(s, c.auth_length);
    case CommandKind::kAuthReceive:
      if (c.data.kind != DataDescriptor::Kind::kKeyed)
        return respond(s, NvmeStatus::of(StatusCode::kSglDescriptorTypeInvalid));
      return auth_receive(s);
  }
  respond(s, NvmeStatus::of(StatusCode::kInvalidOpcode));
}

void TargetQueue::execute_read_write(Slot& s) {
  const Command& c = s.cmd;
  if (!ctrl_->ready()) return respond(s, NvmeStatus::of(StatusCode::kCommandSequenceError));
  if (c.kind == CommandKind::kFlush && c.nsid == kNsidBroadcast) return respond(s, NvmeStatus::success());
  s.ns = ctrl_->subsystem()->find_namespace(c.nsid);
  Namespace* ns = s.ns.get();
  if (!ns) return respond(s, NvmeStatus::of(StatusCode::kInvalidNamespace));
  if (c.kind == CommandKind::kFlush) {
    io_begin();
    ns->flush([&s](NvmeStatus st) {
      s.q->respond(s, st);
      s.q->io_end();
    });
    return;
  }
  if (c.rw.slba >= ns->block_count() || c.rw.nlb > ns->block_count() - c.rw.slba)
    return respond(s, NvmeStatus::of(StatusCode::kLbaOutOfRange));
  if (NvmeStatus st = check_transfer_length(c, ns->block_size()); !st.ok()) return respond(s, st);
  const std::uint64_t bytes = std::uint64_t{c.rw.nlb} * ns->block_size();
  if (bytes > target_.options().limits.max_io_size) return respond(s, NvmeStatus::of(StatusCode::kInvalidField));
  const auto len = static_cast<std::uint32_t>(bytes);

  if (c.kind == CommandKind::kRead) {
    if (c.data.kind != DataDescriptor::Kind::kKeyed)
      return respond(s, NvmeStatus::of(StatusCode::kSglDescriptorTypeInvalid));
    io_begin();
    ns->read(c.rw.slba, c.rw.nlb, std::span<std::byte>(s.data, len), [&s, len](NvmeStatus st) {
      if (st.ok()) {
        s.q->respond(s, st, 0, len);
      } else {
        s.q->respond(s, st);
      }
      s.q->io_end();
    });
    return;
  }
  // Write: the data came in the capsule, or is fetched with RDMA READ.
  if (c.data.kind == DataDescriptor::Kind::kInCapsule) {
    std::memmove(s.data, c.data.in_capsule.data(), len);
    return finish_write(s);
  }
  fetch_from_host(s, len);
}

void TargetQueue::fetch_from_host(Slot& s, std::uint32_t len) {
  Sge sge{reinterpret_cast<std::uint64_t>(s.data), len, s.lkey};
  SendWr rd;
  rd.wr_cqe = &s.read_cqe.cqe;
  rd.opcode = WrOpcode::kRdmaRead;
  rd.sg_list = &sge;
  rd.num_sge = 1;
  rd.send_flags = SEND_SIGNALED;
  rd.remote_addr = s.cmd.data.addr;
  rd.rkey = s.cmd.data.key;
  io_begin();  // ends in on_read, or here when the queue is closing
  if (!post_send(rd)) io_end();
}

void TargetQueue::finish_write(Slot& s) {
  const Command& c = s.cmd;
  Namespace* ns = s.ns.get();
  const std::size_t len = std::size_t{c.rw.nlb} * ns->block_size();
  io_begin();
  ns->write(c.rw.slba, c.rw.nlb, std::span<const std::byte>(s.data, len), [&s](NvmeStatus st) {
    s.q->respond(s, st);
    s.q->io_end();
  });
}

void TargetQueue::finish_connect(Slot& s) {
  auto parsed = parse_connect_data(std::span<const std::byte>(s.data, sizeof(ConnectData)));
  if (auto* r = std::get_if<Refusal>(&parsed)) return respond(s, r->status, r->dw0);
  const auto& info = std::get<ConnectInfo>(parsed);
  if (s.cmd.connect.qid != qid_)
    return respond(s, NvmeStatus::of(StatusCode::kConnectInvalidParameters), connect_ipo(false, 42));
  if (s.cmd.connect.queue_size > size_)
    return respond(s, NvmeStatus::of(StatusCode::kConnectInvalidParameters), connect_ipo(false, 44));
  std::shared_ptr<Controller> ctrl;
  std::uint32_t dw0 = 0;
  NvmeStatus st = target_.connect_controller(*this, s.cmd.connect, info, &ctrl, &dw0);
  if (!st.ok()) return respond(s, st, dw0);
  hostnqn_ = std::string(info.hostnqn);
  auto auth = target_.auth_config(*ctrl->subsystem(), hostnqn_);
  if (!auth) {
    target_.queue_refused(*this, auth.error().reason);
    return respond(s, NvmeStatus::of(StatusCode::kConnectInvalidHost));
  }
  ctrl_ = std::move(ctrl);
  ctrl_raw_.store(ctrl_.get(), std::memory_order_release);
  connected_.store(true, std::memory_order_release);
  if (*auth) {
    // The host must authenticate first (AUTHREQ ATR beside the CNTLID);
    // the queue stays small until it has.
    auth_ = std::make_unique<auth::ControllerAuth>(std::move(**auth));
    return respond(s, st, ctrl_->cntlid() | auth::kConnectAuthreqAtr);
  }
  admit(s, st, ctrl_->cntlid());
}

void TargetQueue::admit(Slot& s, NvmeStatus status, std::uint64_t result, std::uint32_t write_len) {
  // Admitted: now the queue gets its memory (before the response, so the
  // host's next command finds a receive posted).
  if (auto r = grow(); !r) {
    target_.queue_refused(*this, fmt::format("cannot allocate the queue: {}", r.error().reason));
    return respond(s, NvmeStatus::of(StatusCode::kConnectControllerBusy));
  }
  admitted_.store(true, std::memory_order_release);
  respond(s, status, result, write_len);
}

void TargetQueue::log_auth_outcome() {
  const auth::AuthResult& r = auth_->result();
  if (auth_logged_ || (!r.authenticated() && !r.failed())) return;
  auth_logged_ = true;
  target_.auth_outcome(*this, hostnqn_, r);
}

void TargetQueue::finish_auth_send(Slot& s) {
  const StatusCode sc = auth_->on_send(std::span<const std::byte>(s.data, s.cmd.auth_length));
  log_auth_outcome();
  // Bidirectional: the host's Success2 ends the exchange here.
  if (auth_->authenticated() && !admitted_.load(std::memory_order_acquire)) return admit(s, NvmeStatus::of(sc), 0);
  respond(s, NvmeStatus::of(sc));
}

void TargetQueue::auth_receive(Slot& s) {
  auth::ControllerReceive r = auth_->on_receive(s.cmd.auth_length);
  log_auth_outcome();
  if (r.status != StatusCode::kSuccess) return respond(s, NvmeStatus::of(r.status));
  if (r.data.size() > s.data_bytes || r.data.size() > s.cmd.auth_length)
    return respond(s, NvmeStatus::of(StatusCode::kInternalError));
  std::memcpy(s.data, r.data.data(), r.data.size());
  const auto len = static_cast<std::uint32_t>(r.data.size());
  // Unidirectional: the Success1 that goes out now ends the exchange.
  if (auth_->authenticated() && !admitted_.load(std::memory_order_acquire))
    return admit(s, NvmeStatus::success(), 0, len);
  respond(s, NvmeStatus::success(), 0, len);
}

}  // namespace srdma::nvmf
