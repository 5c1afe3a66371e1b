#include "nvmf/rdma_target.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "nvmf/nvme_rdma_cm.h"
#include "common/secure_random.h"
#include "nvmf/auth.h"
#include "nvmf/target_queue.h"
#include "srdma/net.h"

namespace srdma::nvmf {
namespace {
constexpr auto kReaperPeriod = std::chrono::milliseconds(50);  // keep-alive and Connect deadline checks
constexpr std::size_t kMaxCntlid = 0xFFEF;  // NVMe base: FFF0h-FFFFh are reserved

// A host device's address as an operator reads it.
std::string peer_name(std::uint64_t addr) {
  return is_roce_link_address(addr) ? ip_str(ip_of_roce_address(addr)) : fmt::format("device {}", addr);
}
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
    : dev_(dev),
      pd_(std::move(pd)),
      opts_(opts),
      // Unconnected queues never take more than a quarter of the device's
      // QPs: the rest stays for the hosts that connect.
      unconnected_cap_(std::max<std::uint32_t>(
          1, std::min(opts.admission.max_unconnected, dev.query().max_qp / 4))) {
  // A clock that jumps wakes the reaper to check keep-alives at once.
  clock_wake_ = opts_.clock->subscribe([this] {
    { std::lock_guard lock(mu_); }
    cv_.notify_all();
  });
  reaper_ = std::thread([this] { reaper_loop(); });
}

RdmaTarget::~RdmaTarget() {
  listeners_.clear();  // no new request reaches the target; its connections keep the CM agent
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
  std::lock_guard lock(mu_);  // a Connect sees the registry before or after, and GENCTR with it
  if (auto r = subsystems_.add(std::move(s)); !r) return r;
  ++genctr_;
  return {};
}

Result<std::size_t> RdmaTarget::remove_subsystem(std::string_view nqn) {
  if (nqn == kDiscoveryNqn) return make_error(EINVAL, "the discovery subsystem stays");
  {
    std::lock_guard lock(mu_);
    if (auto r = subsystems_.remove(nqn); !r) return std::unexpected(r.error());
  }
  return access_changed();
}

std::size_t RdmaTarget::access_changed() {
  std::vector<std::string> lines;
  {
    std::lock_guard lock(mu_);
    ++genctr_;
    for (const auto& [id, weak] : controllers_) {
      const std::shared_ptr<Controller> c = weak.lock();
      if (!c || c->revoked()) continue;
      const auto sub = subsystems_.find(c->subsystem()->nqn());
      const bool subsystem_stays = sub == c->subsystem();
      if (subsystem_stays && sub->host_allowed(c->hostnqn())) continue;
      c->revoke();
      lines.push_back(fmt::format("controller {} of {} on {}: {}, disconnecting", id, c->hostnqn(),
                                  c->subsystem()->nqn(),
                                  subsystem_stays ? "the host is no longer allowed" : "the subsystem was removed"));
    }
  }
  cv_.notify_all();  // the reaper closes the revoked controllers' queues now, not at its next scan
  for (const std::string& l : lines) log(l);
  return lines.size();
}

Result<void> RdmaTarget::listen(std::uint16_t port) {
  // Through the device's CM agent: hosts in this process, in others and on
  // other hosts all connect with a REQ to its GSI QP.
  auto l = wire_listen(dev_, port, this);
  if (!l) return std::unexpected(l.error());
  std::lock_guard lock(mu_);
  ports_.push_back(port);
  listeners_.push_back(std::move(*l));
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
  std::uint64_t genctr = 0;
  {
    std::lock_guard lock(mu_);
    ports = ports_;
    genctr = genctr_;
  }
  std::vector<DiscoveryLogEntry> entries;
  const std::string traddr = is_roce_link_address(dev_.address()) ? ip_str(ip_of_roce_address(dev_.address()))
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
      e.adrfam = is_roce6_address(dev_.address()) ? kAdrfamIpv6 : kAdrfamIpv4;
      e.subtype = kSubtypeNvme;
      e.portid = static_cast<std::uint16_t>(i + 1);
      e.asqsz = static_cast<std::uint16_t>(opts_.limits.max_queue_size);
      put(e.trsvcid, sizeof e.trsvcid, std::to_string(ports[i]));
      std::memcpy(e.subnqn, nqn.data(), std::min(nqn.size(), sizeof e.subnqn - 1));
      put(e.traddr, sizeof e.traddr, traddr);
      e.rdma.qptype = kRdmaQptypeConnected;
      e.rdma.prtype = is_roce_link_address(dev_.address()) ? kRdmaPrtypeRoceV2 : kRdmaPrtypeNotSpecified;
      e.rdma.cms = kRdmaCmsRdmaCm;
      entries.push_back(e);
    }
  }
  DiscoveryLogHeader h;
  h.genctr = genctr;  // a host that sees it change reads the log again
  h.numrec = entries.size();
  std::vector<std::byte> page(sizeof h + entries.size() * sizeof(DiscoveryLogEntry));
  std::memcpy(page.data(), &h, sizeof h);
  if (!entries.empty()) std::memcpy(page.data() + sizeof h, entries.data(), entries.size() * sizeof(DiscoveryLogEntry));
  return page;
}

std::optional<cm::CmCounters> RdmaTarget::cm_counters() const {
  std::lock_guard lock(mu_);
  if (listeners_.empty()) return std::nullopt;
  return listeners_.front()->counters();  // one agent per device: every listener's is the same
}

TargetStats RdmaTarget::stats() const {
  std::lock_guard lock(mu_);
  TargetStats s;
  s.commands = commands_.load(std::memory_order_relaxed);
  s.errors = errors_.load(std::memory_order_relaxed);
  s.queues = queues_.size();
  s.evicted_unconnected = refusals_.evicted_unconnected;
  s.refused_unconnected_per_host = refusals_.refused_unconnected_per_host;
  s.refused_queues = refusals_.refused_queues;
  s.refused_requests = refusals_.refused_requests;
  s.refused_connects = refusals_.refused_connects;
  s.reaped_unconnected = refusals_.reaped_unconnected;
  s.queue_alloc_failures = refusals_.queue_alloc_failures;
  s.authenticated = refusals_.authenticated;
  s.auth_failures = refusals_.auth_failures;
  for (auto& [id, c] : controllers_)
    if (!c.expired()) ++s.controllers;
  return s;
}

std::string RdmaTarget::admit(std::uint64_t host) {
  const AdmissionLimits& a = opts_.admission;
  TargetQueue* victim = nullptr;
  {
    std::lock_guard lock(mu_);
    // Queues being made count as unconnected: concurrent REQs cannot pass
    // the limits together.
    std::uint32_t being_made = 0, from_host = 0;
    for (const auto& [addr, n] : admitting_) {
      being_made += n;
      if (addr == host) from_host += n;
    }
    std::uint32_t total = being_made;
    // The victim, should one be needed: the oldest whose CM handshake is
    // not done (a spoofed source never sends the RTU), else the oldest.
    auto older = [](const TargetQueue* a, const TargetQueue* b) {
      if (a->cm_established() != b->cm_established()) return !a->cm_established();
      return a->admitted_seq < b->admitted_seq;
    };
    for (const auto& [q, owned] : queues_) {
      if (q->connected() || q->closing()) continue;
      ++total;
      if (q->host_addr() == host) ++from_host;
      if (!victim || older(q, victim)) victim = q;
    }
    if (queues_.size() + being_made >= a.max_queues) {
      ++refusals_.refused_queues;
      return fmt::format("{} queues, the limit", queues_.size() + being_made);
    }
    if (from_host >= a.max_unconnected_per_host) {
      ++refusals_.refused_unconnected_per_host;
      return fmt::format("{} queues from this host wait for their Connect, the limit", from_host);
    }
    if (total < unconnected_cap_) victim = nullptr;
    if (victim) {
      ++refusals_.evicted_unconnected;
      ++pinned_;  // the reaper frees no queue until the victim's close() is done
    }
    ++admitting_[host];
  }
  if (victim) {
    log(fmt::format("queue {} from {}: closed unconnected to make room ({} queues wait for their Connect)",
                    victim->qid(), peer_name(victim->host_addr()), unconnected_cap_));
    victim->close();
    {
      std::lock_guard lock(mu_);
      --pinned_;
    }
    cv_.notify_all();
  }
  return {};
}

Result<CmReply> RdmaTarget::on_connect_request(const CmRequest& req, const std::shared_ptr<CmConnection>& conn) {
  auto refuse_request = [&](int code, std::string why) -> Result<CmReply> {
    {
      std::lock_guard lock(mu_);
      ++refusals_.refused_requests;
    }
    log(fmt::format("refused a connect request from {}: {}", peer_name(req.peer_addr), why));
    return make_error(code, std::move(why));
  };
  auto pd = parse_cm_private_data<NvmeRdmaCmRequest>(req.private_data);
  if (!pd) return refuse_request(EPROTO, "the connect request carries no NVMe/RDMA private data");
  if (pd->recfmt != 0) return refuse_request(EPROTO, fmt::format("record format {} is not 0", pd->recfmt));
  const std::uint32_t size = std::uint32_t{pd->hsqsize} + 1;
  if (size < 2 || size > opts_.limits.max_queue_size || pd->hrqsize < size)
    return refuse_request(EINVAL, fmt::format("queue size {} outside 2..{} (host receive queue {})", size,
                                              opts_.limits.max_queue_size, pd->hrqsize));
  if (pd->qid > opts_.limits.max_io_queues)
    return refuse_request(EINVAL, fmt::format("queue id {} too large", pd->qid));
  // Admission: a stranger's REQs hold at most a few unconnected queues
  // (each a QP, a CQ lease and a few KiB), whatever addresses it spoofs.
  if (std::string why = admit(req.peer_addr); !why.empty()) {
    log(fmt::format("refused a connect request from {}: {}", peer_name(req.peer_addr), why));
    return make_error(ECONNREFUSED, std::move(why));
  }
  auto q = std::make_unique<TargetQueue>(*this, pd->qid, size, conn);
  const std::uint32_t psn = random_psn();
  // On failure nothing ran on the queue yet: destroying it drops the
  // receives with the QP.
  auto made = q->init(req, psn);
  auto done_admitting = [&] {  // REQUIRES mu_
    auto it = admitting_.find(req.peer_addr);
    if (--it->second == 0) admitting_.erase(it);
  };
  if (!made) {
    {
      std::lock_guard lock(mu_);
      done_admitting();
    }
    log(fmt::format("refused a connect request from {}: {}", peer_name(req.peer_addr), made.error().reason));
    return std::unexpected(made.error());
  }
  TargetQueue* raw = q.get();
  conn->set_disconnect_handler(CmConnection::kPassive, [raw] { raw->close(); });
  CmReply reply;
  reply.qpn = raw->qpn();
  reply.psn = psn;
  NvmeRdmaCmReply rep;
  rep.crqsize = static_cast<std::uint16_t>(size);
  reply.private_data = cm_private_data(rep);
  std::lock_guard lock(mu_);
  done_admitting();
  raw->admitted_seq = next_admitted_seq_++;
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
    ++refusals_.refused_connects;
    line = fmt::format("refused {}: no subsystem {}", info.hostnqn, info.subnqn);
    *dw0 = connect_ipo(true, 256);  // SUBNQN
    return NvmeStatus::of(StatusCode::kConnectInvalidParameters);
  }
  if (sub->nqn() == kDiscoveryNqn && q.qid() != 0) {
    ++refusals_.refused_connects;
    line = fmt::format("refused {}: an I/O queue for the discovery controller", info.hostnqn);
    *dw0 = connect_ipo(false, 42);  // QID
    return NvmeStatus::of(StatusCode::kConnectInvalidParameters);
  }
  if (!sub->host_allowed(info.hostnqn)) {
    ++refusals_.refused_connects;
    line = fmt::format("refused {} on {} (queue {}): the host is not allowed", info.hostnqn, info.subnqn, q.qid());
    return NvmeStatus::of(StatusCode::kConnectInvalidHost);
  }
  if (q.qid() == 0) {
    if (info.cntlid != kDynamicCntlid) {
      ++refusals_.refused_connects;
      line = fmt::format("refused {} on {}: an admin queue's Connect names controller {}", info.hostnqn, info.subnqn,
                         info.cntlid);
      *dw0 = connect_ipo(true, 16);
      return NvmeStatus::of(StatusCode::kConnectInvalidParameters);
    }
    std::erase_if(controllers_, [](const auto& kv) { return kv.second.expired(); });
    if (controllers_.size() >= kMaxCntlid) return NvmeStatus::of(StatusCode::kConnectControllerBusy);
    // cntlid 1..0xFFEF, random: an I/O queue's Connect names its
    // controller, and a guessable ID would let a host that is allowed on
    // the subsystem try other hosts' (the host NQN must match as well).
    std::uint16_t id = 0;
    do {
      id = static_cast<std::uint16_t>(1 + secure_random_u32() % kMaxCntlid);
    } while (controllers_.contains(id));
    auto ctrl = std::make_shared<Controller>(id, sub, std::string(info.hostnqn), f.kato_ms, opts_.limits, opts_.clock);
    controllers_[id] = ctrl;
    line = fmt::format("controller {} for {} on {} (KATO {} ms)", id, info.hostnqn, info.subnqn, ctrl->kato_ms());
    *out = std::move(ctrl);
    return NvmeStatus::success();
  }
  auto it = controllers_.find(info.cntlid);
  std::shared_ptr<Controller> ctrl = it == controllers_.end() ? nullptr : it->second.lock();
  if (!ctrl || ctrl->subsystem() != sub || ctrl->hostnqn() != info.hostnqn || ctrl->revoked()) {
    ++refusals_.refused_connects;
    line = fmt::format("refused {} on {} (queue {}): no controller {} of this host", info.hostnqn, info.subnqn,
                       q.qid(), info.cntlid);
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

void RdmaTarget::queue_refused(TargetQueue& q, const std::string& why) {
  {
    std::lock_guard lock(mu_);
    ++refusals_.queue_alloc_failures;
  }
  log(fmt::format("queue {} from {}: {}", q.qid(), peer_name(q.host_addr()), why));
}

Result<std::optional<auth::ControllerConfig>> RdmaTarget::auth_config(const Subsystem& sub,
                                                                       const std::string& hostnqn) const {
  const auto secrets = sub.host_secrets(hostnqn);
  if (!secrets) return std::optional<auth::ControllerConfig>{};
  auth::ControllerConfig cfg;
  cfg.host_nqn = hostnqn;
  cfg.subsystem_nqn = sub.nqn();
  auto host_key = auth::parse_dhchap_secret(secrets->dhchap_secret);
  if (!host_key) return make_error(EINVAL, fmt::format("{}'s DH-HMAC-CHAP secret: {}", hostnqn, host_key.error().reason));
  cfg.host_key = std::move(*host_key);
  if (!secrets->dhchap_ctrl_secret.empty()) {
    auto ctrl_key = auth::parse_dhchap_secret(secrets->dhchap_ctrl_secret);
    if (!ctrl_key)
      return make_error(EINVAL, fmt::format("{}'s controller secret: {}", hostnqn, ctrl_key.error().reason));
    cfg.controller_key = std::move(*ctrl_key);
  }
  if (auto r = auth::validate(cfg); !r) return std::unexpected(r.error());
  return std::optional<auth::ControllerConfig>{std::move(cfg)};
}

void RdmaTarget::auth_outcome(TargetQueue& q, const std::string& hostnqn, const auth::AuthResult& r) {
  {
    std::lock_guard lock(mu_);
    ++(r.authenticated() ? refusals_.authenticated : refusals_.auth_failures);
  }
  if (r.authenticated())
    log(fmt::format("{} authenticated on queue {} ({}, {}{})", hostnqn, q.qid(), auth::hash_name(r.hash),
                    auth::dh_group_name(r.group), r.bidirectional ? ", bidirectional" : ""));
  else
    log(fmt::format("refused {} on queue {} from {}: authentication failed: {}", hostnqn, q.qid(),
                    peer_name(q.host_addr()), r.detail));
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
    std::vector<std::string> lines;
    const auto now = clock.now();
    for (auto& [q, owned] : queues_) {
      if (const Controller* c = q->controller_if_connected();
          c && !q->closing() && (c->keep_alive_expired() || c->revoked())) {
        expired.push_back(q);
      } else if (!q->connected() && !q->closing() && now - q->created() > opts_.admission.connect_timeout) {
        // A queue that never connected (a stranger's REQ, or a host that
        // died before its Connect) gives its QP and lease back.
        ++refusals_.reaped_unconnected;
        lines.push_back(fmt::format("queue {} from {}: no Connect within {} ms (or no authentication), closed", q->qid(),
                                    peer_name(q->host_addr()), opts_.admission.connect_timeout.count()));
        expired.push_back(q);
      }
    }
    auto closing = std::move(closing_);
    closing_.clear();
    lock.unlock();
    for (const std::string& l : lines) log(l);
    for (TargetQueue* q : expired) q->close();  // comes back through closing_
    for (TargetQueue* q : closing) q->drain_and_destroy();
    lock.lock();
    cv_.wait(lock, [&] { return pinned_ == 0; });
    for (TargetQueue* q : closing) queues_.erase(q);
    cv_.notify_all();
  }
}

}  // namespace srdma::nvmf
