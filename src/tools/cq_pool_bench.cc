#include "tools/cq_pool_bench.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string_view>
#include <thread>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <nlohmann/json.hpp>

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

// Each QP's CQ takes both its send and its receive completions.
std::uint32_t cqe_per_qp(const CqPoolBenchOptions& o) { return static_cast<std::uint32_t>(2 * o.depth + 1); }

// Where the pairs' buffers live: [i * 2 * size, +2 * size) for pair i.
std::uint64_t buffer_bytes(const CqPoolBenchOptions& o) { return std::uint64_t(o.pairs) * o.size * 2; }

Result<Node> make_node(const CqPoolBenchOptions& o, const Profile& p) {
  auto dev = Device::open(p);
  if (!dev) return std::unexpected(dev.error());
  dev->set_cq_dim(o.dim);
  auto pd = dev->alloc_pd();
  if (!pd) return std::unexpected(pd.error());
  std::vector<std::uint8_t> mem;
  try {
    mem.resize(buffer_bytes(o));
  } catch (const std::bad_alloc&) {
    return make_error(ENOMEM, fmt::format("no memory for the pairs' {} buffer bytes", buffer_bytes(o)));
  }
  Node n{std::move(*dev), std::move(*pd), std::move(mem), {}};
  auto mr = n.pd.reg_mr(n.mem.data(), n.mem.size(), ACCESS_LOCAL_WRITE);
  if (!mr)
    return make_error(mr.error().code, fmt::format("registering the pairs' {} buffer bytes: {} (profile num_mtt_segs {})",
                                                   n.mem.size(), mr.error().reason, p.num_mtt_segs));
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

Result<CqPoolBenchRow> run_mode(const CqPoolBenchOptions& o, const Profile& profile, bool pooled) {
  auto a = make_node(o, profile), b = make_node(o, profile);
  if (!a) return std::unexpected(a.error());
  if (!b) return std::unexpected(b.error());
  const std::uint32_t nr_cqe = cqe_per_qp(o);
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
  // What the CQs hold while the pairs run (both devices).
  const CqFootprint footprint = cq_footprint(a->dev) + cq_footprint(b->dev);
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
  row.cq = footprint;
  row.cqs = static_cast<int>(footprint.cqs);
  row.ops_per_s = static_cast<double>(ops) / secs;
  row.completions_per_s = static_cast<double>(cqes) / secs;
  row.interrupts_per_s = static_cast<double>(irq) / secs;
  row.wakeups_per_s = static_cast<double>(wakeups) / secs;
  row.completions_per_interrupt = irq ? static_cast<double>(cqes) / static_cast<double>(irq) : 0;
  eps.clear();  // QPs before their CQs and leases
  return row;
}

constexpr std::uint64_t kPageBytes = 4096;     // the pages reg_mr maps the buffers with
constexpr std::uint32_t kSharedCqSize = 4096;  // a pool CQ's least size (IB_MAX_SHARED_CQ_SZ, Device::cq_pool_get)

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

// The CQs the pool grows to for the pairs of one device: QPs spread round
// robin over n vectors, each vector's CQs fit size / nr_cqe QPs, and a miss
// grows every vector by one CQ.
std::uint64_t pool_cqs_needed(const CqPoolBenchOptions& o, const Profile& p) {
  const std::uint64_t nr = cqe_per_qp(o);
  const std::uint64_t size = std::min<std::uint64_t>(p.max_cqe, std::max<std::uint64_t>(nr, kSharedCqSize));
  const std::uint64_t n =
      std::max<std::uint64_t>(1, std::min<std::uint64_t>(p.num_comp_vectors, std::max(1u, std::thread::hardware_concurrency())));
  return n * ceil_div(ceil_div(std::uint64_t(o.pairs), n), size / nr);
}

// MTT segments one MR over the buffers takes: a buddy block (a power of two).
std::uint64_t mtt_block_segs(const CqPoolBenchOptions& o, const Profile& p) {
  const std::uint64_t pages = ceil_div(buffer_bytes(o), kPageBytes) + 1;  // + 1: the buffer need not be page aligned
  return std::bit_ceil(ceil_div(pages, std::uint64_t{1} << p.log_mtts_per_seg));
}

// The largest free block of the main MTT buddy: the FMR region and the
// reserved segments are taken out of it first (mtt_table.h), which leaves
// half of it at most.
std::uint64_t mtt_largest_block(const Profile& p) {
  const bool carved = p.fmr_reserved_mtt_segs > 0 || p.reserved_mtt_segs > 0;
  return static_cast<std::uint64_t>(carved ? p.num_mtt_segs / 2 : p.num_mtt_segs);
}

// Refuses a run the profile cannot hold, naming the field and what it needs.
Result<void> check_fits(const CqPoolBenchOptions& o, const Profile& p) {
  auto refuse = [&](const char* field, std::int64_t has, std::string need, std::uint64_t value) {
    return make_error(EINVAL, fmt::format("{} QP pairs need {}: the profile's {} is {}; {}={} or more would hold them",
                                          o.pairs, need, field, has, field, value));
  };
  if (const std::uint64_t qps = std::uint64_t(o.pairs) + p.reserved_qps; qps > std::uint64_t(p.num_qp))
    return refuse("num_qp", p.num_qp, fmt::format("{} QPs per device ({} + reserved_qps {})", qps, o.pairs, p.reserved_qps),
                  qps);
  const std::uint64_t cqs = (o.run_private ? std::uint64_t(o.pairs) : pool_cqs_needed(o, p)) + p.reserved_cqs;
  if (cqs > std::uint64_t(p.num_cq))
    return refuse("num_cq", p.num_cq,
                  fmt::format("{} CQs per device ({} {} + reserved_cqs {})", cqs, cqs - p.reserved_cqs,
                              o.run_private ? "private CQs" : "pool CQs", p.reserved_cqs),
                  cqs);
  if (cqe_per_qp(o) > p.max_cqe)
    return refuse("max_cqe", p.max_cqe, fmt::format("CQs of {} entries (2 x depth + 1)", cqe_per_qp(o)), cqe_per_qp(o));
  if (o.depth > p.max_qp_wr)
    return refuse("max_qp_wr", p.max_qp_wr, fmt::format("{} work requests per queue (--depth)", o.depth), o.depth);
  if (const std::uint64_t block = mtt_block_segs(o, p); block > mtt_largest_block(p))
    return refuse("num_mtt_segs", p.num_mtt_segs,
                  fmt::format("a block of {} MTT segments for their {} buffer bytes", block, buffer_bytes(o)), 2 * block);
  return {};
}

std::string bytes_str(std::uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB", static_cast<double>(b) / (1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.2f} MiB", static_cast<double>(b) / (1ull << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(b) / (1ull << 10));
  return fmt::format("{} B", b);
}

nlohmann::json to_json(const CqPoolBenchRow& r) {
  return {{"mode", r.mode},
          {"cqs", r.cq.cqs},
          {"cq_entries_reserved", r.cq.entries_reserved},
          {"cq_entries_used", r.cq.entries_used},
          {"cq_memory_bytes", r.cq.memory_bytes},
          {"ops_per_s", r.ops_per_s},
          {"completions_per_s", r.completions_per_s},
          {"interrupts_per_s", r.interrupts_per_s},
          {"wakeups_per_s", r.wakeups_per_s},
          {"completions_per_interrupt", r.completions_per_interrupt}};
}

Result<void> write_json(const CqPoolBenchOptions& o, const Profile& p, const std::vector<CqPoolBenchRow>& rows,
                        const std::vector<CqPoolBenchRow>& medians) {
  nlohmann::json j;
  j["pairs"] = o.pairs;
  j["depth"] = o.depth;
  j["vectors"] = o.vectors;
  j["size"] = o.size;
  j["seconds"] = o.seconds;
  j["rounds"] = o.rounds;
  j["service_us"] = o.service_us;
  j["dim"] = o.dim;
  j["profile"] = {{"num_qp", p.num_qp}, {"num_cq", p.num_cq}, {"max_cqe", p.max_cqe}, {"num_mtt_segs", p.num_mtt_segs}};
  j["rows"] = nlohmann::json::array();
  for (const auto& r : rows) j["rows"].push_back(to_json(r));
  for (const auto& m : medians) j["medians"][m.mode] = to_json(m);
  std::ofstream f(o.json);
  if (!f) return make_error(EIO, fmt::format("cannot write {}", o.json));
  f << j.dump(2) << '\n';
  if (!f) return make_error(EIO, fmt::format("cannot write {}", o.json));
  return {};
}

}  // namespace

Result<Profile> cq_pool_bench_profile(const CqPoolBenchOptions& o) {
  // Sized for the run: each table holds the pairs (validate_profile rounds
  // up to a power of two), the MTT the pairs' buffers.
  Profile p;
  p.num_comp_vectors = o.vectors;
  p.num_qp = std::int64_t(o.pairs) + p.reserved_qps;
  p.num_cq = std::int64_t(o.pairs) + p.reserved_cqs;
  p.num_mtt_segs = std::max<std::int64_t>(p.num_mtt_segs, 2 * static_cast<std::int64_t>(mtt_block_segs(o, p)));
  for (const auto& [name, value] : o.profile)
    if (auto r = p.set(name, value); !r) return std::unexpected(r.error());
  auto v = validate_profile(p);
  if (!v) return make_error(v.error().code, fmt::format("the profile for {} QP pairs: {}", o.pairs, v.error().reason));
  if (auto r = check_fits(o, *v); !r) return std::unexpected(r.error());
  return *v;
}

Result<std::vector<CqPoolBenchRow>> cq_pool_bench(const CqPoolBenchOptions& o, std::ostream& out) {
  if (o.pairs < 1) return make_error(EINVAL, "--pairs must be at least 1");
  if (o.depth < 1 || o.depth > 1024) return make_error(EINVAL, "--depth must be 1..1024");
  if (o.vectors < 1 || o.vectors > 64) return make_error(EINVAL, "--vectors must be 1..64");
  if (!(o.seconds > 0 && o.seconds <= 600)) return make_error(EINVAL, "-D must be in (0, 600] seconds");
  if (o.size < 1 || o.size > 65536) return make_error(EINVAL, "--size must be 1..65536");
  if (o.rounds < 1 || o.rounds > 100) return make_error(EINVAL, "--rounds must be 1..100");
  if (o.service_us < 0 || o.service_us > 100000) return make_error(EINVAL, "--service-us must be 0..100000");
  if (!o.run_private && !o.run_pool) return make_error(EINVAL, "no mode to run");
  auto profile = cq_pool_bench_profile(o);
  if (!profile) return std::unexpected(profile.error());
  fmt::print(out, "{} RC QP pairs, depth {}, {}-byte SEND/RECV ping-pong, SOFTIRQ poll context, {} vectors, {} s "
                  "per mode; {}\n",
             o.pairs, o.depth, o.size, o.vectors, o.seconds,
             o.service_us > 0 ? fmt::format("the target answers in batches after {} us", o.service_us)
                              : std::string("the target answers from its completion handler"));
  fmt::print(out, "each device: num_qp {}, num_cq {}, max_cqe {}; CQ columns sum both devices\n", profile->num_qp,
             profile->num_cq, profile->max_cqe);
  fmt::print(out, " {:<8} {:>6} {:>13} {:>10} {:>11} {:>12} {:>15} {:>14} {:>16} {:>12}\n", "mode", "CQs",
             "CQEs reserved", "CQEs used", "CQ memory", "ops/s", "completions/s", "interrupts/s", "compl/interrupt",
             "wakeups/s");
  auto print = [&](const CqPoolBenchRow& r, const char* label) {
    fmt::print(out, " {:<8} {:>6} {:>13} {:>10} {:>11} {:>12.0f} {:>15.0f} {:>14.0f} {:>16.2f} {:>12.0f}\n", label,
               r.cqs, r.cq.entries_reserved, r.cq.entries_used, bytes_str(r.cq.memory_bytes), r.ops_per_s,
               r.completions_per_s, r.interrupts_per_s, r.completions_per_interrupt, r.wakeups_per_s);
  };
  std::vector<CqPoolBenchRow> rows;
  for (int round = 0; round < o.rounds; ++round) {
    for (bool pooled : {false, true}) {
      if (!(pooled ? o.run_pool : o.run_private)) continue;
      auto row = run_mode(o, *profile, pooled);
      if (!row) return std::unexpected(row.error());
      print(*row, row->mode);
      rows.push_back(*row);
    }
  }
  // Per mode, each column's median over the rounds (the CQs are the same in every round).
  auto median = [&](bool pooled) {
    std::vector<const CqPoolBenchRow*> mine;
    for (const auto& r : rows)
      if ((std::string_view(r.mode) == "pool") == pooled) mine.push_back(&r);
    CqPoolBenchRow m;
    if (mine.empty()) return m;
    m.mode = mine[0]->mode;
    m.cqs = mine[0]->cqs;
    m.cq = mine[0]->cq;
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
    fmt::print(out,
               " pool / private: {:.2f}x completions per interrupt, {:.2f}x operations per second; 1/{:.0f} of the "
               "CQs, {:.3f}x the CQ entries reserved, {:.3f}x the CQ memory\n",
               pool.completions_per_interrupt / priv.completions_per_interrupt,
               priv.ops_per_s > 0 ? pool.ops_per_s / priv.ops_per_s : 0,
               pool.cqs > 0 ? static_cast<double>(priv.cqs) / pool.cqs : 0,
               priv.cq.entries_reserved ? static_cast<double>(pool.cq.entries_reserved) / priv.cq.entries_reserved : 0,
               priv.cq.memory_bytes ? static_cast<double>(pool.cq.memory_bytes) / priv.cq.memory_bytes : 0);
  if (!o.json.empty()) {
    std::vector<CqPoolBenchRow> medians;
    if (o.run_private) medians.push_back(priv);
    if (o.run_pool) medians.push_back(pool);
    if (auto r = write_json(o, *profile, rows, medians); !r) return std::unexpected(r.error());
  }
  return rows;
}

}  // namespace srdma::tools
