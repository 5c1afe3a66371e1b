#include "nvmf/rdma_target.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "nvmf/nvme_rdma_cm.h"
#include "nvmf/target_queue.h"
#include "srdma/net.h"

namespace srdma::nvmf {
namespace {
constexpr auto kReaperPeriod = std::chrono::milliseconds(50);  // keep-alive checks
}

Result<std::unique_ptr<RdmaTarget>> RdmaTarget::create(Device& dev, const TargetOptions& opts) {
  if (opts.limits.max_queue_size < 2 || opts.limits.max_queue_size > 1024)
    return make_error(EINVAL, fmt::format("max_queue_size {} outside 2..1024", opts.limits.max_queue_size));
  if (opts.limits.max_io_size < 4096 || (opts.limits.max_io_size & (opts.limits.max_io_size - 1)))
    return make_error(EINVAL, fmt::format("max_io_size {} is not a power of two >= 4096", opts.limits.max_io_size));
  if (opts.poll_ctx == PollContext::kDirect) return make_error(EINVAL, "the target needs a processed poll context");
  if (!opts.clock) return make_error(EINVAL, "no clock");
  auto pd = dev.alloc_pd();
  if (!pd) return std::unexpected(pd.error());
  std::unique_ptr<RdmaTarget> t(new RdmaTarget(dev, std::move(*pd), opts));
  // The well-known discovery subsystem: no namespaces, its log lists the rest.
  auto disc = Subsystem::create(std::string(kDiscoveryNqn), "SRDMADISCOVERY", "softrdma discovery");
  if (!disc) return std::unexpected(disc.error());
  if (auto r = t->subsystems_.add(std::move(*disc)); !r) return std::unexpected(r.error());
  return t;
}

RdmaTarget::RdmaTarget(Device& dev, ProtectionDomain pd, const TargetOptions& opts)
    : dev_(dev), pd_(std::move(pd)), opts_(opts) {
  // A clock that jumps wakes the reaper to check keep-alives at once.
  clock_wake_ = opts_.clock->subscribe([this] {
    { std::lock_guard lock(mu_); }
    cv_.notify_all();
  });
  reaper_ = std::thread([this] { reaper_loop(); });
}

RdmaTarget::~RdmaTarget() {
  for (std::uint16_t port : ports_) ConnectionManager::instance().stop_listening(dev_.address(), port);
  wire_listeners_.clear();  // no new request reaches the target; its connections keep the CM agent
  disconnect_all();
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return queues_.empty(); });
    stop_ = true;
  }
  cv_.notify_all();
  reaper_.join();
  opts_.clock->unsubscribe(clock_wake_);
}

Result<void> RdmaTarget::add_subsystem(std::shared_ptr<Subsystem> s) {
  if (!s) return make_error(EINVAL, "no subsystem");
  return subsystems_.add(std::move(s));
}

Result<void> RdmaTarget::listen(std::uint16_t port) {
  if (auto r = ConnectionManager::instance().listen(dev_.address(), port, this); !r) return r;
  // A device on the RoCEv2 link also listens on the wire: hosts in other
  // processes and on other hosts connect through its CM agent.
  std::unique_ptr<WireListener> wire;
  if (is_roce_address(dev_.address())) {
    auto w = wire_listen(dev_, port, this);
    if (!w) {
      ConnectionManager::instance().stop_listening(dev_.address(), port);
      return std::unexpected(w.error());
    }
    wire = std::move(*w);
  }
  std::lock_guard lock(mu_);
  ports_.push_back(port);
  if (wire) wire_listeners_.push_back(std::move(wire));
  return {};
}

void RdmaTarget::disconnect_all() {
  // The reaper may be tearing down a queue that closed on its own: pinning
  // keeps it from freeing any queue until these close() calls are done.
  std::vector<TargetQueue*> qs;
  {
    std::lock_guard lock(mu_);
    ++pinned_;
    for (auto& [q, owned] : queues_) qs.push_back(q);
  }
  for (TargetQueue* q : qs) q->close();
  {
    std::lock_guard lock(mu_);
    --pinned_;
  }
  cv_.notify_all();
}

std::vector<std::byte> RdmaTarget::discovery_log(std::string_view hostnqn) const {
  std::vector<std::uint16_t> ports;
  {
    std::lock_guard lock(mu_);
    ports = ports_;
  }
  std::vector<DiscoveryLogEntry> entries;
  const std::string traddr = is_roce_address(dev_.address()) ? ipv4_str(roce_ipv4(dev_.address()))
                                                             : fmt::format("{}", dev_.address());
  auto put = [](char* field, std::size_t size, const std::string& v) {
    std::memset(field, ' ', size);  // ASCII fields are space padded
    std::memcpy(field, v.data(), std::min(v.size(), size));
  };
  for (const std::string& nqn : subsystems_.nqns()) {
    if (nqn == kDiscoveryNqn) continue;
    auto sub = subsystems_.find(nqn);
    if (!sub || !sub->host_allowed(hostnqn)) continue;
    for (std::size_t i = 0; i < ports.size(); ++i) {
      DiscoveryLogEntry e;
      e.trtype = kTrtypeRdma;
      e.adrfam = kAdrfamIpv4;
      e.subtype = kSubtypeNvme;
      e.portid = static_cast<std::uint16_t>(i + 1);
      e.asqsz = static_cast<std::uint16_t>(opts_.limits.max_queue_size);
      put(e.trsvcid, sizeof e.trsvcid, std::to_string(ports[i]));
      std::memcpy(e.subnqn, nqn.data(), std::min(nqn.size(), sizeof e.subnqn - 1));
      put(e.traddr, sizeof e.traddr, traddr);
      e.rdma.qptype = kRdmaQptypeConnected;
      e.rdma.prtype = is_roce_address(dev_.address()) ? kRdmaPrtypeRoceV2 : kRdmaPrtypeNotSpecified;
      e.rdma.cms = kRdmaCmsRdmaCm;
      entries.push_back(e);
    }
  }
  DiscoveryLogHeader h;
  h.genctr = 1;  // subsystems and ports are fixed once listening
  h.numrec = entries.size();
  std::vector<std::byte> page(sizeof h + entries.size() * sizeof(DiscoveryLogEntry));
  std::memcpy(page.data(), &h, sizeof h);
  if (!entries.empty()) std::memcpy(page.data() + sizeof h, entries.data(), entries.size() * sizeof(DiscoveryLogEntry));
  return page;
}

TargetStats RdmaTarget::stats() const {
  std::lock_guard lock(mu_);
  TargetStats s;
  s.commands = commands_.load(std::memory_order_relaxed);
  s.errors = errors_.load(std::memory_order_relaxed);
  s.queues = queues_.size();
  for (auto& [id, c] : controllers_)
    if (!c.expired()) ++s.controllers;
  return s;
}

Result<CmReply> RdmaTarget::on_connect_request(const CmRequest& req, const std::shared_ptr<CmConnection>& conn) {
  auto pd = parse_cm_private_data<NvmeRdmaCmRequest>(req.private_data);
  if (!pd) return make_error(EPROTO, "the connect request carries no NVMe/RDMA private data");
  if (pd->recfmt != 0) return make_error(EPROTO, fmt::format("record format {} is not 0", pd->recfmt));
  const std::uint32_t size = std::uint32_t{pd->hsqsize} + 1;
  if (size < 2 || size > opts_.limits.max_queue_size || pd->hrqsize < size)
    return make_error(EINVAL, fmt::format("queue size {} outside 2..{} (host receive queue {})", size,
                                          opts_.limits.max_queue_size, pd->hrqsize));
  if (pd->qid > opts_.limits.max_io_queues) return make_error(EINVAL, fmt::format("queue id {} too large", pd->qid));
  auto q = std::make_unique<TargetQueue>(*this, pd->qid, size, conn);
  // On failure nothing ran on the queue yet: destroying it drops the
  // receives with the QP.
  if (auto r = q->init(req.peer_addr, req.peer_qpn, req.path_mtu); !r) return std::unexpected(r.error());
  TargetQueue* raw = q.get();
  conn->set_disconnect_handler(CmConnection::kPassive, [raw] { raw->close(); });
  CmReply reply;
  reply.qpn = raw->qpn();
  NvmeRdmaCmReply rep;
  rep.crqsize = static_cast<std::uint16_t>(size);
  reply.private_data = cm_private_data(rep);
  std::lock_guard lock(mu_);
  queues_.emplace(raw, std::move(q));
  return reply;
}

NvmeStatus RdmaTarget::connect_controller(TargetQueue& q, const ConnectFields& f, const ConnectInfo& info,
                                          std::shared_ptr<Controller>* out, std::uint32_t* dw0) {
  std::string line;
  NvmeStatus st = connect_locked(q, f, info, out, dw0, line);
  if (opts_.log && !line.empty()) opts_.log(line);
  return st;
}

NvmeStatus RdmaTarget::connect_locked(TargetQueue& q, const ConnectFields& f, const ConnectInfo& info,
                                      std::shared_ptr<Controller>* out, std::uint32_t* dw0, std::string& line) {
  std::lock_guard lock(mu_);
  auto sub = subsystems_.find(info.subnqn);
  if (!sub) {
    line = fmt::format("refused {}: no subsystem {}", info.hostnqn, info.subnqn);
    *dw0 = connect_ipo(true, 256);  // SUBNQN
    return NvmeStatus::of(StatusCode::kConnectInvalidParameters);
  }
  if (sub->nqn() == kDiscoveryNqn && q.qid() != 0) {
    line = fmt::format("refused {}: an I/O queue for the discovery controller", info.hostnqn);
    *dw0 = connect_ipo(false, 42);  // QID
    return NvmeStatus::of(StatusCode::kConnectInvalidParameters);
  }
  if (!sub->host_allowed(info.hostnqn)) {
    line = fmt::format("refused {} on {} (queue {}): the host is not allowed", info.hostnqn, info.subnqn, q.qid());
    return NvmeStatus::of(StatusCode::kConnectInvalidHost);
  }
  if (q.qid() == 0) {
    if (info.cntlid != kDynamicCntlid) {
      *dw0 = connect_ipo(true, 16);
      return NvmeStatus::of(StatusCode::kConnectInvalidParameters);
    }
    // cntlid 1..0xFFEF; skip ones still in use after a wrap.
    for (int tries = 0; tries < 0xFFEF; ++tries) {
      std::uint16_t id = next_cntlid_;
      next_cntlid_ = next_cntlid_ >= 0xFFEF ? 1 : next_cntlid_ + 1;
      auto it = controllers_.find(id);
      if (it != controllers_.end() && !it->second.expired()) continue;
      auto ctrl = std::make_shared<Controller>(id, sub, std::string(info.hostnqn), f.kato_ms, opts_.limits, opts_.clock);
      controllers_[id] = ctrl;
      *out = std::move(ctrl);
      line = fmt::format("controller {} for {} on {}", id, info.hostnqn, info.subnqn);
      return NvmeStatus::success();
    }
    return NvmeStatus::of(StatusCode::kConnectControllerBusy);
  }
  auto it = controllers_.find(info.cntlid);
  std::shared_ptr<Controller> ctrl = it == controllers_.end() ? nullptr : it->second.lock();
  if (!ctrl || ctrl->subsystem() != sub || ctrl->hostnqn() != info.hostnqn) {
    *dw0 = connect_ipo(true, 16);  // CNTLID
    return NvmeStatus::of(StatusCode::kConnectInvalidParameters);
  }
  *out = std::move(ctrl);
  return NvmeStatus::success();
}

void RdmaTarget::queue_closed(TargetQueue* q) {
  if (opts_.log) {
    const Controller* c = q->controller_if_connected();
    opts_.log(c ? fmt::format("controller {} queue {} closed", c->cntlid(), q->qid())
                : fmt::format("queue {} closed before its Connect", q->qid()));
  }
  std::lock_guard lock(mu_);
  closing_.push_back(q);
  cv_.notify_all();
}

void RdmaTarget::reaper_loop() {
  const Clock& clock = *opts_.clock;
  // Due a period after the last keep-alive scan, not after the wait starts:
  // time that moved in between (a ManualClock's advance()) is not missed.
  auto next_scan = clock.now() + kReaperPeriod;
  std::unique_lock lock(mu_);
  for (;;) {
    if (!stop_ && closing_.empty()) clock.wait_until(cv_, lock, next_scan);
    if (stop_) return;
    next_scan = clock.now() + kReaperPeriod;
    // Keep-alive: a controller whose host went silent loses its queues.
    std::vector<TargetQueue*> expired;
    for (auto& [q, owned] : queues_)
      if (const Controller* c = q->controller_if_connected(); c && c->keep_alive_expired()) expired.push_back(q);
    auto closing = std::move(closing_);
    closing_.clear();
    lock.unlock();
    for (TargetQueue* q : expired) q->close();  // comes back through closing_
    for (TargetQueue* q : closing) q->drain_and_destroy();
    lock.lock();
    cv_.wait(lock, [&] { return pinned_ == 0; });
    for (TargetQueue* q : closing) queues_.erase(q);
    cv_.notify_all();
  }
}

}  // namespace srdma::nvmf
