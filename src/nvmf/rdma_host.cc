#include "nvmf/rdma_host.h"

#include <algorithm>
#include <cstring>
#include <future>

#include <fmt/format.h>

#include "nvmf/auth.h"
#include "nvmf/capsule.h"
#include "nvmf/host_identity.h"
#include "nvmf/subsystem.h"

namespace srdma::nvmf {
namespace {

constexpr auto kKeeperTick = std::chrono::milliseconds(20);

// Waits for one command (admin commands during bring-up).
struct SyncIo {
  BlockIo io;
  std::uint64_t result = 0;
  std::promise<void> done;
  static void on_done(BlockIo& io) { static_cast<SyncIo*>(io.context)->done.set_value(); }
};

// A buffer the device may map page by page (FRWR needs no alignment, but
// the Connect and Identify data are page-sized anyway).
struct PageBuffer {
  // aligned_alloc wants a size that is a multiple of the alignment.
  explicit PageBuffer(std::size_t n)
      : p(static_cast<std::byte*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096))), size(n) {
    std::memset(p, 0, n);
  }
  ~PageBuffer() { std::free(p); }
  std::byte* p;
  std::size_t size;
};

}  // namespace

namespace {
HostOptions with_host_nqn(HostOptions o) {
  if (o.hostnqn.empty()) o.hostnqn = default_host_nqn();
  return o;
}
}  // namespace

HostController::HostController(Device& dev, ProtectionDomain pd, const HostOptions& opts)
    : dev_(dev), pd_(std::move(pd)), opts_(with_host_nqn(opts)) {}

Result<std::unique_ptr<HostController>> HostController::connect(Device& dev, std::uint64_t target_addr,
                                                                std::uint16_t port, const HostOptions& opts) {
  if (opts.subnqn.empty()) return make_error(EINVAL, "no subsystem NQN to connect to");
  if (!opts.clock) return make_error(EINVAL, "no clock");
  if (opts.queue_size < 2 || opts.queue_size > 1024)
    return make_error(EINVAL, fmt::format("queue_size {} outside 2..1024", opts.queue_size));
  auto pd = dev.alloc_pd();
  if (!pd) return std::unexpected(pd.error());
  std::unique_ptr<HostController> c(new HostController(dev, std::move(*pd), opts));
  if (auto r = c->bring_up(target_addr, port); !r) return std::unexpected(r.error());
  // A clock that jumps wakes the keeper to look at its deadlines at once.
  c->clock_wake_ = opts.clock->subscribe([p = c.get()] {
    { std::lock_guard lock(p->mu_); }
    p->cv_.notify_all();
  });
  // The keeper's first Keep Alive is due one interval after now, whenever
  // the thread gets to run.
  c->keeper_ = std::thread([p = c.get(), started = opts.clock->now()] { p->keeper_loop(started); });
  return c;
}

HostController::~HostController() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (keeper_.joinable()) keeper_.join();
  opts_.clock->unsubscribe(clock_wake_);
  // I/O queues first (their Connects named the controller), then admin.
  io_.clear();
  admin_.reset();
}

Result<std::uint64_t> HostController::admin(const HostCommand& cmd) {
  return run(*admin_, cmd, fmt::format("admin command {:#x}", cmd.sqe.opcode));
}

Result<std::vector<std::byte>> HostController::get_log_page(std::uint8_t lid, std::uint64_t offset,
                                                           std::uint32_t length) {
  if (length > opts_.max_io_size && length > kIdentifyDataSize)
    return make_error(EINVAL, fmt::format("log page read of {} bytes above the queue's {}", length, opts_.max_io_size));
  auto sqe = build_get_log_page(0, lid, offset, length, null_sgl());
  if (!sqe) return std::unexpected(sqe.error());
  PageBuffer buf(length);
  HostCommand cmd{*sqe, buf.p, length, false};
  if (auto r = admin(cmd); !r) return std::unexpected(r.error());
  return std::vector<std::byte>(buf.p, buf.p + length);
}

Result<void> HostController::fabrics_connect(HostQueue& q, std::uint16_t cntlid) {
  PageBuffer data(sizeof(ConnectData));
  std::array<std::uint8_t, 16> hostid{};
  std::memcpy(hostid.data(), opts_.hostnqn.data() + opts_.hostnqn.size() - std::min<std::size_t>(16, opts_.hostnqn.size()),
              std::min<std::size_t>(16, opts_.hostnqn.size()));
  auto cd = build_connect_data(hostid, cntlid, opts_.subnqn, opts_.hostnqn);
  if (!cd) return std::unexpected(cd.error());
  std::memcpy(data.p, &*cd, sizeof(ConnectData));
  ConnectParams p;
  p.qid = q.qid();
  p.queue_size = q.size();
  p.kato_ms = q.qid() == 0 ? opts_.kato_ms : 0;
  HostCommand cmd;
  auto sqe = build_connect(0, p, null_sgl());
  if (!sqe) return std::unexpected(sqe.error());
  cmd.sqe = *sqe;
  cmd.data = data.p;
  cmd.length = sizeof(ConnectData);
  cmd.to_controller = true;
  auto dw0 = run(q, cmd, fmt::format("Connect of queue {}", q.qid()));
  if (!dw0) {
    Error e = dw0.error();
    if (e.code == EIO) e.code = ECONNREFUSED;  // the target answered: a refusal
    return std::unexpected(std::move(e));
  }
  const auto result = static_cast<std::uint32_t>(*dw0);
  if (q.qid() == 0) cntlid_ = static_cast<std::uint16_t>(result);
  // AUTHREQ (NVMe base 2.0, Connect response DW0 bits 17-18).
  if (result & auth::kConnectAuthreqAscr)
    return make_error(EPROTO, fmt::format("queue {}: the target asks for a secure channel (TLS), which RDMA has not",
                                          q.qid()));
  if (result & auth::kConnectAuthreqAtr) return authenticate(q);
  if (!opts_.dhchap_ctrl_secret.empty())
    return make_error(EACCES, fmt::format("queue {}: the controller did not authenticate (a controller secret is set, "
                                          "and the target does not ask for DH-HMAC-CHAP)", q.qid()));
  return {};
}

Result<std::uint64_t> HostController::run(HostQueue& q, const HostCommand& cmd, std::string_view what) {
  SyncIo s;
  s.io.context = &s;
  s.io.done = &SyncIo::on_done;
  auto fut = s.done.get_future();
  if (auto r = q.submit(cmd, &s.io, &s.result); !r) return std::unexpected(r.error());
  fut.wait();
  if (s.io.transport_error) return make_error(s.io.transport_error, fmt::format("{} got no response", what));
  if (!s.io.status.ok()) return make_error(EIO, fmt::format("{}: {}", what, s.io.status.to_string()));
  return s.result;
}

Result<void> HostController::authenticate(HostQueue& q) {
  if (opts_.dhchap_secret.empty())
    return make_error(EACCES, fmt::format("queue {}: the target requires DH-HMAC-CHAP authentication, and no host "
                                          "secret is set (--dhchap-secret)", q.qid()));
  auth::HostConfig cfg;
  cfg.host_nqn = opts_.hostnqn;
  cfg.subsystem_nqn = opts_.subnqn;
  auto host_key = auth::parse_dhchap_secret(opts_.dhchap_secret);
  if (!host_key) return make_error(EINVAL, "--dhchap-secret: " + host_key.error().reason);
  cfg.host_key = std::move(*host_key);
  if (!opts_.dhchap_ctrl_secret.empty()) {
    auto ctrl_key = auth::parse_dhchap_secret(opts_.dhchap_ctrl_secret);
    if (!ctrl_key) return make_error(EINVAL, "--dhchap-ctrl-secret: " + ctrl_key.error().reason);
    cfg.controller_key = std::move(*ctrl_key);
  }
  if (auto r = auth::validate(cfg); !r) return r;
  auth::HostAuth a(std::move(cfg), next_t_id_++);
  PageBuffer buf(std::max<std::size_t>(auth::kAuthReceiveLength, auth::kMaxMessageLength));
  auth::HostStep step = a.start();
  // Each message goes as an AUTH_Send and each answer comes back to an
  // AUTH_Receive, one command at a time (auth.h).
  for (;;) {
    if (!step.send.empty()) {
      std::memcpy(buf.p, step.send.data(), step.send.size());
      const auto tl = static_cast<std::uint32_t>(step.send.size());
      HostCommand send{auth::as_nvme_command(auth::make_auth_send(0, tl, null_sgl())), buf.p, tl, true};
      if (auto r = run(q, send, fmt::format("AUTH_Send on queue {}", q.qid())); !r) {
        if (r.error().code != EIO) return std::unexpected(r.error());
        a.on_command_failed(r.error().reason);
        break;
      }
    }
    if (!step.receive) break;
    std::memset(buf.p, 0, auth::kAuthReceiveLength);
    HostCommand receive{auth::as_nvme_command(auth::make_auth_receive(0, auth::kAuthReceiveLength, null_sgl())), buf.p,
                        auth::kAuthReceiveLength, false};
    if (auto r = run(q, receive, fmt::format("AUTH_Receive on queue {}", q.qid())); !r) {
      if (r.error().code != EIO) return std::unexpected(r.error());
      a.on_command_failed(r.error().reason);
      break;
    }
    step = a.on_receive(std::span<const std::byte>(buf.p, auth::kAuthReceiveLength));
  }
  if (!a.result().authenticated())
    return make_error(EACCES, fmt::format("queue {}: DH-HMAC-CHAP authentication failed: {}", q.qid(),
                                          a.result().detail.empty() ? "no result" : a.result().detail));
  return {};
}

Result<void> HostController::bring_up(std::uint64_t target_addr, std::uint16_t port) {
  HostQueueConfig ac;
  ac.qid = 0;
  ac.size = opts_.admin_queue_size;
  ac.max_io_size = std::max<std::uint32_t>(opts_.max_io_size, kIdentifyDataSize);
  ac.pool_cqs = opts_.pool_cqs;
  ac.reg = opts_.reg;
  ac.path_mtu = opts_.path_mtu;
  ac.timeout = opts_.io_timeout;
  ac.clock = opts_.clock;
  admin_ = std::make_unique<HostQueue>(dev_, pd_, ac);
  if (auto r = admin_->connect(target_addr, port); !r) return r;
  if (auto r = fabrics_connect(*admin_, kDynamicCntlid); !r) return r;

  // CAP, then enable and wait for ready (CAP.TO bounds the wait).
  auto cap = admin(HostCommand{build_property_get(0, Property::kCap)});
  if (!cap) return std::unexpected(cap.error());
  const std::uint32_t mqes = static_cast<std::uint32_t>(*cap & 0xFFFF) + 1;
  if (opts_.queue_size > mqes)
    return make_error(EINVAL, fmt::format("queue_size {} above the controller's maximum {}", opts_.queue_size, mqes));
  auto cc = build_property_set(0, Property::kCc, kCcEnable | (6u << 16) | (4u << 20));  // IOSQES 64 B, IOCQES 16 B
  if (!cc) return std::unexpected(cc.error());
  if (auto r = admin(HostCommand{*cc}); !r) return std::unexpected(r.error());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500) * ((*cap >> kCapToShift) & 0xFF);
  for (;;) {
    auto csts = admin(HostCommand{build_property_get(0, Property::kCsts)});
    if (!csts) return std::unexpected(csts.error());
    if (*csts & kCstsReady) break;
    if (std::chrono::steady_clock::now() > deadline) return make_error(ETIMEDOUT, "the controller did not become ready");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  PageBuffer buf(kIdentifyDataSize);
  HostCommand id{build_identify(0, Cns::kController, 0, null_sgl()), buf.p, kIdentifyDataSize, false};
  if (auto r = admin(id); !r) return std::unexpected(r.error());
  std::memcpy(&id_, buf.p, sizeof(id_));
  std::memset(buf.p, 0, buf.size);
  HostCommand list{build_identify(0, Cns::kActiveNamespaceList, 0, null_sgl()), buf.p, kIdentifyDataSize, false};
  if (auto r = admin(list); !r) return std::unexpected(r.error());
  std::vector<std::uint32_t> nsids;
  for (std::size_t i = 0; i < kMaxActiveNamespaceList; ++i) {
    std::uint32_t nsid;
    std::memcpy(&nsid, buf.p + 4 * i, 4);
    if (nsid == 0) break;
    nsids.push_back(nsid);
  }
  for (std::uint32_t nsid : nsids) {
    HostCommand ns{build_identify(0, Cns::kNamespace, nsid, null_sgl()), buf.p, kIdentifyDataSize, false};
    if (auto r = admin(ns); !r) return std::unexpected(r.error());
    IdentifyNamespace idns;
    std::memcpy(&idns, buf.p, sizeof(idns));
    const unsigned lbads = idns.lbaf[idns.flbas & 0xF].lbads;
    if (lbads < 9 || lbads > 16) return make_error(EPROTO, fmt::format("namespace {}: block size 2^{}", nsid, lbads));
    namespaces_.push_back({nsid, 1u << lbads, idns.nsze});
  }

  std::uint32_t n = opts_.nr_io_queues;
  if (n == 0) n = std::max(1u, std::thread::hardware_concurrency());
  if (opts_.subnqn == kDiscoveryNqn) n = 0;  // a discovery controller has an admin queue only
  for (std::uint32_t i = 0; i < n; ++i) {
    HostQueueConfig qc;
    qc.qid = static_cast<std::uint16_t>(i + 1);
    qc.size = opts_.queue_size;
    qc.max_io_size = opts_.max_io_size;
    qc.pool_cqs = opts_.pool_cqs;
    qc.reg = opts_.reg;
  qc.path_mtu = opts_.path_mtu;
    qc.timeout = opts_.io_timeout;
    qc.clock = opts_.clock;
    auto q = std::make_unique<HostQueue>(dev_, pd_, qc);
    if (auto r = q->connect(target_addr, port); !r) return r;
    if (auto r = fabrics_connect(*q, cntlid_); !r) return r;
    io_.push_back(std::move(q));
  }
  return {};
}

const NamespaceInfo* HostController::find_namespace(std::uint32_t nsid) const {
  for (const auto& ns : namespaces_)
    if (ns.nsid == nsid) return &ns;
  return nullptr;
}

Result<void> HostController::submit(BlockIo& io, std::uint32_t queue) {
  if (queue >= io_.size()) return make_error(EINVAL, fmt::format("no I/O queue {} (the controller has {})", queue, io_.size()));
  if (!io.done) return make_error(EINVAL, "an I/O without a completion callback");
  if (failed()) return make_error(ENOTCONN, "the controller has failed");
  HostCommand cmd;
  if (io.op == BlockIo::Op::kFlush) {
    auto f = build_flush(0, io.nsid);
    if (!f) return std::unexpected(f.error());
    cmd.sqe = *f;
    return io_[queue]->submit(cmd, &io);
  }
  const NamespaceInfo* ns = find_namespace(io.nsid);
  if (!ns) return make_error(EINVAL, fmt::format("no namespace {}", io.nsid));
  if (io.nblocks == 0 || !io.buf) return make_error(EINVAL, "a read or write needs blocks and a buffer");
  if (io.lba >= ns->num_blocks || io.nblocks > ns->num_blocks - io.lba)
    return make_error(EINVAL, fmt::format("blocks {}+{} beyond namespace {} of {}", io.lba, io.nblocks, io.nsid, ns->num_blocks));
  const std::uint64_t bytes = std::uint64_t{io.nblocks} * ns->block_size;
  if (bytes > opts_.max_io_size) return make_error(EINVAL, fmt::format("{} bytes exceed max_io_size {}", bytes, opts_.max_io_size));
  const bool write = io.op == BlockIo::Op::kWrite;
  auto sqe = write ? build_write(0, io.nsid, io.lba, io.nblocks, null_sgl()) : build_read(0, io.nsid, io.lba, io.nblocks, null_sgl());
  if (!sqe) return std::unexpected(sqe.error());
  cmd.sqe = *sqe;
  cmd.data = io.buf;
  cmd.length = static_cast<std::uint32_t>(bytes);
  cmd.to_controller = write;
  return io_[queue]->submit(cmd, &io);
}

Result<void> HostController::submit_command(const HostCommand& cmd, std::uint32_t qid, BlockIo& io,
                                            std::uint64_t* result) {
  if (qid > io_.size()) return make_error(EINVAL, fmt::format("no queue {} (the controller has {} I/O queues)", qid, io_.size()));
  if (!io.done) return make_error(EINVAL, "a command without a completion callback");
  HostQueue& q = qid == 0 ? *admin_ : *io_[qid - 1];
  return q.submit(cmd, &io, result);
}

void HostController::fail(int err) {
  failed_.store(true, std::memory_order_release);
  for (auto& q : io_) q->close(err);
  if (admin_) admin_->close(err);
}

std::vector<CompletionQueue*> HostController::cqs() const {
  std::vector<CompletionQueue*> out;
  auto add = [&](const HostQueue& q) {
    if (std::find(out.begin(), out.end(), q.cq()) == out.end()) out.push_back(q.cq());
  };
  if (admin_) add(*admin_);
  for (const auto& q : io_) add(*q);
  return out;
}

void HostController::keeper_loop(Clock::time_point started) {
  const Clock& clock = *opts_.clock;
  const auto interval =
      std::chrono::milliseconds(opts_.keep_alive_interval_ms ? opts_.keep_alive_interval_ms : opts_.kato_ms / 2);
  auto next_ka = started + interval;
  struct KeepAlive {
    BlockIo io;
    HostController* ctrl = nullptr;
    std::atomic<bool> busy{false};
    // Wakes the keeper: a Keep Alive that fell due while this one was out
    // goes now.
    static void on_done(BlockIo& io) {
      auto* k = static_cast<KeepAlive*>(io.context);
      HostController* c = k->ctrl;  // `k` may be gone once busy is false
      {
        std::lock_guard lock(c->mu_);
        k->busy.store(false, std::memory_order_release);
      }
      c->cv_.notify_all();
    }
  } ka;
  ka.io.context = &ka;
  ka.io.done = &KeepAlive::on_done;
  ka.ctrl = this;
  // The next look is due a tick after the last one, not after the wait
  // starts: time that moved in between (a ManualClock's advance() before
  // this thread waits) is not missed.
  auto next_check = started;
  std::unique_lock lock(mu_);
  while (!stop_) {
    // A Keep Alive held back while the last one was out goes as soon as
    // that one is back (on_done clears `busy` under mu_ and notifies).
    const bool ka_due = opts_.kato_ms && !ka.busy.load(std::memory_order_acquire) && clock.now() >= next_ka;
    if (!ka_due) clock.wait_until(cv_, lock, next_check);
    if (stop_) break;
    lock.unlock();
    const auto now = clock.now();
    next_check = now + kKeeperTick;
    bool timed_out = admin_->check_timeouts(now);
    for (auto& q : io_) timed_out |= q->check_timeouts(now);
    if (timed_out || admin_->closed()) {
      if (!failed()) fail(timed_out ? ETIMEDOUT : ECONNRESET);
    } else if (opts_.kato_ms && now >= next_ka && !ka.busy.load(std::memory_order_acquire)) {
      next_ka = now + interval;
      ka.busy.store(true, std::memory_order_relaxed);
      if (!admin_->submit(HostCommand{build_keep_alive(0)}, &ka.io)) ka.busy.store(false);
    }
    lock.lock();
  }
  lock.unlock();
  // The keep-alive's BlockIo lives here: wait for it to come back.
  if (ka.busy.load(std::memory_order_acquire)) {
    admin_->close(ENOTCONN);
    while (ka.busy.load(std::memory_order_acquire)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace srdma::nvmf
