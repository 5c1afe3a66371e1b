#include "tools/cq_pool_bench.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <chrono>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "srdma/access.h"
#include "srdma/device.h"

namespace srdma::tools {
namespace {

// One side of one QP pair: its QP, buffers, and the callbacks that keep
// the ping-pong going.
struct Endpoint {
  struct Completion {
    WrCqe cqe;
    Endpoint* ep = nullptr;
  };
  std::unique_ptr<QueuePair> qp;
  Endpoint* peer = nullptr;
  bool requester = false;  // the side that counts round trips
  std::uint32_t lkey = 0;
  std::uint64_t buf = 0;  // [buf, +size) is sent from, [buf + size, +size) received into
  std::uint32_t size = 0;
  Completion recv_done{{&Endpoint::on_recv}, this};
  Completion send_done{{&Endpoint::on_send}, this};
  std::atomic<bool>* running = nullptr;
  // Per endpoint, on their own cache line: shared counters bumped by every
  // completion would cost more than what is measured. One CQ's thread
  // completes an endpoint at a time, so round_trips has one writer.
  alignas(64) std::atomic<std::uint64_t> round_trips{0};
  std::atomic<int> in_handlers{0};  // handlers running and replies queued (teardown waits for 0)
  struct Target* target = nullptr;  // with --service-us, the responder side answers through it
  std::atomic<int> errors{0};

  void post_recv() {
    Sge s{buf + size, size, lkey};
    RecvWr r;
    r.wr_cqe = &recv_done.cqe;
    r.sg_list = &s;
    r.num_sge = 1;
    if (!qp->post_recv(r)) ++errors;
  }
  void send() {
    Sge s{buf, size, lkey};
    SendWr w;
    w.wr_cqe = &send_done.cqe;
    w.opcode = WrOpcode::kSend;
    w.sg_list = &s;
    w.num_sge = 1;
    w.send_flags = SEND_SIGNALED;
    if (!qp->post_send(w)) ++errors;
  }
  static Endpoint* of(const Wc& wc) { return reinterpret_cast<Completion*>(wc.wr_cqe)->ep; }
  // Brackets a handler: the release at its end orders all it did before
  // the teardown that waits for the count to reach 0.
  struct Busy {
    std::atomic<int>* n;
    explicit Busy(std::atomic<int>* c) : n(c) { n->fetch_add(1, std::memory_order_acq_rel); }
    ~Busy() { n->fetch_sub(1, std::memory_order_release); }
  };
  static void on_send(CompletionQueue&, const Wc& wc) {
    Busy busy(&of(wc)->in_handlers);
    if (wc.status != WcStatus::kSuccess) ++of(wc)->errors;
  }
  static void on_recv(CompletionQueue&, const Wc& wc) {
    Endpoint* ep = of(wc);
    Busy busy(&ep->in_handlers);
    if (wc.status != WcStatus::kSuccess) {
      ++ep->errors;
      return;
    }
    ep->post_recv();
    if (!ep->requester) {
      if (ep->target != nullptr) return defer_reply(ep);
      return ep->send();  // a reply for every request, running or not: the requester drains
    }
    ep->round_trips.store(ep->round_trips.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (ep->running->load(std::memory_order_relaxed)) ep->send();
  }
  static void defer_reply(Endpoint* ep);
};

// The target's "media" (--service-us): requests are answered in batches
// after a service time, as a storage target would, so that completions
// reach the host in bursts across many QPs.
struct Target {
  explicit Target(std::chrono::microseconds t) : service(t) {}
  std::mutex mu;  // guards pending, stop
  std::condition_variable cv;
  std::vector<Endpoint*> pending;
  bool stop = false;
  const std::chrono::microseconds service;
  std::thread thread{[this] { run(); }};

  ~Target() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    cv.notify_one();
    thread.join();
  }
  // A queued reply counts as work in flight until it is sent.
  void add(Endpoint* ep) {
    ep->in_handlers.fetch_add(1, std::memory_order_acq_rel);
    {
      std::lock_guard lock(mu);
      pending.push_back(ep);
    }
    cv.notify_one();
  }
  void run() {
    std::vector<Endpoint*> batch;
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || !pending.empty(); });
      if (stop) return;
      lock.unlock();
      std::this_thread::sleep_for(service);
      lock.lock();
      batch.swap(pending);
      lock.unlock();
      for (Endpoint* ep : batch) {
        ep->send();
        ep->in_handlers.fetch_sub(1, std::memory_order_release);
      }
      batch.clear();
      lock.lock();
    }
  }
};

void Endpoint::defer_reply(Endpoint* ep) { ep->target->add(ep); }

struct Node {
  Device dev;
  ProtectionDomain pd;
  std::vector<std::uint8_t> mem;
  MemoryRegion mr;
};

Result<Node> make_node(const CqPoolBenchOptions& o) {
  Profile p;
  p.num_comp_vectors = o.vectors;
  p.num_qp = 1024;
  p.num_cq = 1024;
  auto dev = Device::open(p);
  if (!dev) return std::unexpected(dev.error());
  dev->set_cq_dim(o.dim);
  auto pd = dev->alloc_pd();
  if (!pd) return std::unexpected(pd.error());
  Node n{std::move(*dev), std::move(*pd), std::vector<std::uint8_t>(std::size_t(o.pairs) * o.size * 2), {}};
  auto mr = n.pd.reg_mr(n.mem.data(), n.mem.size(), ACCESS_LOCAL_WRITE);
  if (!mr) return std::unexpected(mr.error());
  n.mr = std::move(*mr);
  return n;
}

Result<void> connect(QueuePair& qp, const Device& peer, std::uint32_t peer_qpn) {
  return qp.connect(RcConnection{.peer_addr = peer.address(), .peer_qpn = peer_qpn});
}

std::uint64_t total(const Device& d, std::uint64_t CompVectorStats::*field) {
  std::uint64_t n = 0;
  for (const auto& v : d.comp_vector_stats()) n += v.*field;
  return n;
}

Result<CqPoolBenchRow> run_mode(const CqPoolBenchOptions& o, bool pooled) {
  auto a = make_node(o), b = make_node(o);
  if (!a) return std::unexpected(a.error());
  if (!b) return std::unexpected(b.error());
  // Each QP's CQ takes both its send and its receive completions.
  const auto nr_cqe = static_cast<std::uint32_t>(2 * o.depth + 1);
  std::vector<std::unique_ptr<CompletionQueue>> private_cqs;
  std::vector<CqLease> leases;
  auto cq_for = [&](Node& n, int i) -> Result<CompletionQueue*> {
    if (pooled) {
      auto l = n.dev.cq_pool_lease(nr_cqe, -1, PollContext::kSoftirq);
      if (!l) return std::unexpected(l.error());
      leases.push_back(std::move(*l));
      return leases.back().cq();
    }
    auto cq = n.dev.alloc_cq(nullptr, nr_cqe, static_cast<std::uint32_t>(i % o.vectors), PollContext::kSoftirq);
    if (!cq) return std::unexpected(cq.error());
    private_cqs.push_back(std::move(*cq));
    return private_cqs.back().get();
  };

  std::atomic<bool> running{true};
  std::optional<Target> target;
  if (o.service_us > 0) target.emplace(std::chrono::microseconds(o.service_us));
  std::vector<std::unique_ptr<Endpoint>> eps;
  const QpCaps caps{static_cast<std::uint32_t>(o.depth), static_cast<std::uint32_t>(o.depth), 1, 1, 0};
  for (int i = 0; i < o.pairs; ++i) {
    auto ca = cq_for(*a, i), cb = cq_for(*b, i);
    if (!ca) return std::unexpected(ca.error());
    if (!cb) return std::unexpected(cb.error());
    auto ea = std::make_unique<Endpoint>(), eb = std::make_unique<Endpoint>();
    auto qa = a->pd.create_qp(QpInitAttr{*ca, *ca, caps});
    auto qb = b->pd.create_qp(QpInitAttr{*cb, *cb, caps});
    if (!qa) return std::unexpected(qa.error());
    if (!qb) return std::unexpected(qb.error());
    ea->qp = std::move(*qa);
    eb->qp = std::move(*qb);
    for (auto [ep, node, req] : {std::tuple{ea.get(), &*a, true}, std::tuple{eb.get(), &*b, false}}) {
      ep->requester = req;
      ep->lkey = node->mr.lkey();
      ep->buf = reinterpret_cast<std::uint64_t>(node->mem.data()) + std::uint64_t(i) * o.size * 2;
      ep->size = o.size;
      ep->running = &running;
      ep->target = target ? &*target : nullptr;
    }
    ea->peer = eb.get();
    eb->peer = ea.get();
    if (auto r = connect(*ea->qp, b->dev, eb->qp->qp_num()); !r) return std::unexpected(r.error());
    if (auto r = connect(*eb->qp, a->dev, ea->qp->qp_num()); !r) return std::unexpected(r.error());
    for (int k = 0; k < o.depth; ++k) {
      ea->post_recv();
      eb->post_recv();
    }
    eps.push_back(std::move(ea));
    eps.push_back(std::move(eb));
  }
  const auto irq0 = total(a->dev, &CompVectorStats::events) + total(b->dev, &CompVectorStats::events);
  const auto wake0 = total(a->dev, &CompVectorStats::interrupts) + total(b->dev, &CompVectorStats::interrupts);
  const auto cqe0 = total(a->dev, &CompVectorStats::cqes) + total(b->dev, &CompVectorStats::cqes);
  auto round_trips = [&] {
    std::uint64_t n = 0;
    for (auto& ep : eps) n += ep->round_trips.load(std::memory_order_relaxed);
    return n;
  };
  auto in_handlers = [&] {
    int n = 0;
    for (auto& ep : eps) n += ep->in_handlers.load(std::memory_order_acquire);
    return n;
  };
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& ep : eps)
    if (ep->requester)
      for (int k = 0; k < o.depth; ++k) ep->send();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
  const auto ops = round_trips();
  const auto t1 = std::chrono::steady_clock::now();
  const auto irq = total(a->dev, &CompVectorStats::events) + total(b->dev, &CompVectorStats::events) - irq0;
  const auto wakeups =
      total(a->dev, &CompVectorStats::interrupts) + total(b->dev, &CompVectorStats::interrupts) - wake0;
  const auto cqes = total(a->dev, &CompVectorStats::cqes) + total(b->dev, &CompVectorStats::cqes) - cqe0;
  running = false;
  // Drain: let every message in flight complete before the QPs go (the
  // count stops moving once nothing is in flight; at most a second).
  for (int i = 0, still = 0; i < 200 && still < 4; ++i) {
    const auto before = round_trips();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    still = round_trips() == before && in_handlers() == 0 ? still + 1 : 0;
  }
  int errors = 0;
  for (auto& ep : eps) errors += ep->errors.load();
  if (errors) return make_error(EIO, fmt::format("{} work requests failed in {} mode", errors, pooled ? "pool" : "private"));

  const double secs = std::chrono::duration<double>(t1 - t0).count();
  CqPoolBenchRow row;
  row.mode = pooled ? "pool" : "private";
  row.cqs = pooled ? static_cast<int>(a->dev.cq_pool_stats().size() + b->dev.cq_pool_stats().size())
                   : static_cast<int>(private_cqs.size());
  row.ops_per_s = static_cast<double>(ops) / secs;
  row.completions_per_s = static_cast<double>(cqes) / secs;
  row.interrupts_per_s = static_cast<double>(irq) / secs;
  row.wakeups_per_s = static_cast<double>(wakeups) / secs;
  row.completions_per_interrupt = irq ? static_cast<double>(cqes) / static_cast<double>(irq) : 0;
  eps.clear();  // QPs before their CQs and leases
  return row;
}

}  // namespace

Result<std::vector<CqPoolBenchRow>> cq_pool_bench(const CqPoolBenchOptions& o, std::ostream& out) {
  if (o.pairs < 1 || o.pairs > 256) return make_error(EINVAL, "--pairs must be 1..256");
  if (o.depth < 1 || o.depth > 1024) return make_error(EINVAL, "--depth must be 1..1024");
  if (o.vectors < 1 || o.vectors > 64) return make_error(EINVAL, "--vectors must be 1..64");
  if (!(o.seconds > 0 && o.seconds <= 600)) return make_error(EINVAL, "-D must be in (0, 600] seconds");
  if (o.size < 1 || o.size > 65536) return make_error(EINVAL, "--size must be 1..65536");
  if (o.rounds < 1 || o.rounds > 100) return make_error(EINVAL, "--rounds must be 1..100");
  if (o.service_us < 0 || o.service_us > 100000) return make_error(EINVAL, "--service-us must be 0..100000");
  fmt::print(out, "{} RC QP pairs, depth {}, {}-byte SEND/RECV ping-pong, SOFTIRQ poll context, {} vectors, {} s "
                  "per mode; {}\n",
             o.pairs, o.depth, o.size, o.vectors, o.seconds,
             o.service_us > 0 ? fmt::format("the target answers in batches after {} us", o.service_us)
                              : std::string("the target answers from its completion handler"));
  fmt::print(out, " {:<8} {:>5} {:>12} {:>15} {:>14} {:>16} {:>12}\n", "mode", "CQs", "ops/s", "completions/s",
             "interrupts/s", "compl/interrupt", "wakeups/s");
  auto print = [&](const CqPoolBenchRow& r, const char* label) {
    fmt::print(out, " {:<8} {:>5} {:>12.0f} {:>15.0f} {:>14.0f} {:>16.2f} {:>12.0f}\n", label, r.cqs, r.ops_per_s,
               r.completions_per_s, r.interrupts_per_s, r.completions_per_interrupt, r.wakeups_per_s);
  };
  std::vector<CqPoolBenchRow> rows;
  if (!o.run_private && !o.run_pool) return make_error(EINVAL, "no mode to run");
  for (int round = 0; round < o.rounds; ++round) {
    for (bool pooled : {false, true}) {
      if (!(pooled ? o.run_pool : o.run_private)) continue;
      auto row = run_mode(o, pooled);
      if (!row) return std::unexpected(row.error());
      print(*row, row->mode);
      rows.push_back(*row);
    }
  }
  // Per mode, each column's median over the rounds.
  auto median = [&](bool pooled) {
    std::vector<const CqPoolBenchRow*> mine;
    for (const auto& r : rows)
      if ((std::string_view(r.mode) == "pool") == pooled) mine.push_back(&r);
    CqPoolBenchRow m;
    if (mine.empty()) return m;
    m.mode = mine[0]->mode;
    m.cqs = mine[0]->cqs;
    auto col = [&](double CqPoolBenchRow::*f) {
      std::vector<double> v;
      for (const auto* r : mine) v.push_back(r->*f);
      std::sort(v.begin(), v.end());
      const std::size_t n = v.size();
      return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    };
    for (auto f : {&CqPoolBenchRow::ops_per_s, &CqPoolBenchRow::completions_per_s, &CqPoolBenchRow::interrupts_per_s,
                   &CqPoolBenchRow::wakeups_per_s, &CqPoolBenchRow::completions_per_interrupt})
      m.*f = col(f);
    return m;
  };
  const CqPoolBenchRow priv = median(false), pool = median(true);
  if (o.rounds > 1) {
    fmt::print(out, " medians over {} rounds:\n", o.rounds);
    if (o.run_private) print(priv, "private");
    if (o.run_pool) print(pool, "pool");
  }
  if (o.run_private && o.run_pool && priv.completions_per_interrupt > 0)
    fmt::print(out, " pool / private: {:.2f}x completions per interrupt, {:.2f}x operations per second\n",
               pool.completions_per_interrupt / priv.completions_per_interrupt,
               priv.ops_per_s > 0 ? pool.ops_per_s / priv.ops_per_s : 0);
  return rows;
}

}  // namespace srdma::tools
