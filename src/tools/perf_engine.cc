// `srdma perf`'s engine: sides (a device, its CQs, QPs, buffers and MRs),
// bringing QPs up, the data patterns, and the bandwidth and latency loops.
// Both fronts run it: the in-process one (perf.cc, two sides here) and the
// one between processes (perf_remote.cc, one side each); it calls neither.

#include <poll.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/cpu_affinity.h"
#include "common/secure_random.h"
#include "srdma/access.h"
#include "srdma/cq.h"
#include "srdma/device.h"
#include "srdma/mr.h"
#include "srdma/pd.h"
#include "srdma/qp.h"
#include "srdma/qp_attr.h"
#include "srdma/wc.h"
#include "srdma/wr.h"
#include "tools/link_options.h"
#include "tools/perf.h"
#include "tools/perf_side.h"

namespace srdma::tools::perf {



Error completion_failure(Side& side, const Wc& wc, const char* who) {
  Error e = wc_error(wc, who);
  // A QP in error flushes what it still holds at once: count it, so that
  // the report says the QP ended rather than stalled. Bounded: a QP whose
  // flush does not come is reported as it is.
  std::uint64_t flushed = 0;
  const auto until = Clock::now() + std::chrono::milliseconds(200);
  Wc more[16];
  while (Clock::now() < until) {
    const int n = side.send_cq->poll(more);
    if (n <= 0) {
      if (flushed > 0) break;
      continue;
    }
    for (int i = 0; i < n; ++i) flushed += more[i].status == WcStatus::kWrFlushErr;
  }
  if (flushed > 0) e.reason += fmt::format("; {} more WRs flushed", flushed);
  return e;
}

Profile side_profile() {
  Profile p;
  p.num_qp = 1024;
  p.num_cq = 64;
  p.num_mpt = 1024;
  return p;
}

PeerBuffers PeerBuffers::of(const Side& s) {
  PeerBuffers b;
  b.dev_addr = s.dev.address();
  b.half = s.half;
  for (std::size_t i = 0; i < s.qps.size(); ++i) {
    b.qpn.push_back(s.qps[i]->qp_num());
    b.psn.push_back(s.psn[i]);
    b.rkey.push_back(s.mrs[i].rkey());
    b.addr.push_back(s.addr(i));
  }
  return b;
}

std::size_t side_buffer_bytes(const PerfSettings& s, std::size_t* half) {
  const std::uint64_t max_size = *std::max_element(s.sizes.begin(), s.sizes.end());
  *half = round_up(max_size, 64);
  return is_bandwidth(s.test) ? max_size : 2 * *half;
}

Result<std::unique_ptr<Side>> open_side(const PerfSettings& s, const std::string& name, std::size_t buf_bytes,
                                        const NetConfig* net, std::uint32_t extra_send_wr,
                                        Device* opened) {
  auto side = std::make_unique<Side>();
  if (opened) {
    side->dev = std::move(*opened);
  } else {
    const Profile p = side_profile();
    auto dev = net ? Device::open(p, name, *net) : Device::open(p, name);
    if (!dev) return std::unexpected(dev.error());
    side->dev = std::move(*dev);
  }
  side->polled_link = net != nullptr;
  if (auto r = side->dev.impair(s.impair); !r) return std::unexpected(r.error());  // before the first QP
  auto pd = side->dev.alloc_pd();
  if (!pd) return std::unexpected(pd.error());
  side->pd = std::move(*pd);

  if (s.use_events) {
    for (auto* ch : {&side->send_ch, &side->recv_ch}) {
      auto c = side->dev.create_comp_channel();
      if (!c) return std::unexpected(c.error());
      *ch = std::move(*c);
    }
  }
  const std::uint32_t send_cqe = std::max<std::uint32_t>(1, (s.tx_depth + extra_send_wr) * s.num_qps);
  const std::uint32_t recv_cqe = std::max<std::uint32_t>(1, s.rx_depth * s.num_qps);
  auto scq = side->dev.create_cq(CqInit{.cqe = send_cqe, .channel = side->send_ch.get()});
  if (!scq) return std::unexpected(scq.error());
  side->send_cq = std::move(*scq);
  auto rcq = side->dev.create_cq(CqInit{.cqe = recv_cqe, .channel = side->recv_ch.get()});
  if (!rcq) return std::unexpected(rcq.error());
  side->recv_cq = std::move(*rcq);
  side->send_w = CqWaiter(side->send_cq.get(), side->send_ch.get());
  side->recv_w = CqWaiter(side->recv_cq.get(), side->recv_ch.get());

  for (std::uint32_t i = 0; i < s.num_qps; ++i) {
    auto b = alloc_buffer(buf_bytes);
    if (!b) return std::unexpected(b.error());
    auto mr = side->pd.reg_mr(b->get(), round_up(buf_bytes, 4096), kAccessAll);
    if (!mr) return std::unexpected(mr.error());
    side->bufs.push_back(std::move(*b));
    side->mrs.push_back(std::move(*mr));
    QpCaps caps{.max_send_wr = s.tx_depth + extra_send_wr,
                .max_recv_wr = std::max<std::uint32_t>(1, s.rx_depth),
                .max_send_sge = 1,
                .max_recv_sge = 1,
                .max_inline_data = s.inline_size};
    auto qp = side->pd.create_qp(QpInitAttr{.send_cq = side->send_cq.get(), .recv_cq = side->recv_cq.get(), .cap = caps});
    if (!qp) return std::unexpected(qp.error());
    side->qps.push_back(std::move(*qp));
    side->psn.push_back(random_psn());  // 24 bits from getrandom, never a seeded generator's
  }
  return side;
}

Result<void> bring_up(QueuePair& qp, std::uint32_t sq_psn, std::uint64_t peer_addr, std::uint32_t peer_qpn,
                      std::uint32_t peer_psn, std::uint32_t mtu, std::uint8_t timeout) {
  return qp.connect(RcConnection{.peer_addr = peer_addr,
                                 .peer_qpn = peer_qpn,
                                 .access = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC,
                                 .sq_psn = sq_psn,
                                 .rq_psn = peer_psn,
                                 .path_mtu = mtu,
                                 .timeout = timeout});
}




// ---------------------------------------------------------------------------
// Bandwidth

WrOpcode opcode_of(PerfTest t) {
  switch (t) {
    case PerfTest::kWriteBw:
    case PerfTest::kWriteLat:
      return WrOpcode::kRdmaWrite;
    case PerfTest::kReadBw:
    case PerfTest::kReadLat:
      return WrOpcode::kRdmaRead;
    case PerfTest::kSendBw:
    case PerfTest::kSendLat:
      return WrOpcode::kSend;
    case PerfTest::kAtomicLat:
      return WrOpcode::kAtomicFetchAndAdd;
  }
  return WrOpcode::kSend;
}

// The server's half of send_bw: drains the receive CQ and reposts.
struct RecvSink {
  Side* side = nullptr;
  Receives* rx = nullptr;
  std::uint64_t received = 0;
  std::optional<Error> error;

  // Returns false on an error (in `error`).
  bool drain(bool may_block) {
    Wc wc[32];
    int n = may_block ? side->recv_w.next(wc) : side->recv_cq->poll(wc);
    if (n < 0) {
      error = side->recv_w.error();
      return false;
    }
    for (int j = 0; j < n; ++j) {
      if (wc[j].status != WcStatus::kSuccess) {
        error = wc_error(wc[j], "server");
        return false;
      }
      if (auto r = rx->post(*side, wc[j].wr_id); !r) {
        error = r.error();
        return false;
      }
    }
    received += static_cast<std::uint64_t>(n);
    return true;
  }
};


// --verify's pattern for WR k of QP i: the first word carries k and i
// (consecutive iterations differ from the first byte on), the rest is
// mixed from them and the word's index.
std::uint64_t pattern_word(std::uint64_t k, std::uint32_t i, std::size_t w) {
  if (w == 0) return k | (std::uint64_t{i} << 48);
  std::uint64_t x = k * 0x9e3779b97f4a7c15ull ^ (std::uint64_t{i} << 32) ^ w;  // splitmix64
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint8_t pattern_byte(std::uint64_t k, std::uint32_t i, std::size_t off) {
  return static_cast<std::uint8_t>(pattern_word(k, i, off / 8) >> (8 * (off % 8)));
}

void fill_pattern(std::uint8_t* p, std::size_t n, std::uint64_t k, std::uint32_t i) {
  std::size_t off = 0;
  for (; off + 8 <= n; off += 8) {
    const std::uint64_t w = pattern_word(k, i, off / 8);
    std::memcpy(p + off, &w, 8);
  }
  for (; off < n; ++off) p[off] = pattern_byte(k, i, off);
}

Result<void> check_pattern(const std::uint8_t* p, std::size_t n, std::uint64_t k, std::uint32_t i) {
  std::size_t off = 0;
  for (; off + 8 <= n; off += 8) {
    const std::uint64_t w = pattern_word(k, i, off / 8);
    if (std::memcmp(p + off, &w, 8) != 0) break;
  }
  for (; off < n; ++off)
    if (p[off] != pattern_byte(k, i, off))
      return make_error(EIO, fmt::format("verify: QP {} iteration {}: byte {} of {} is {:#04x}, expected {:#04x}", i, k,
                                         off, n, p[off], pattern_byte(k, i, off)));
  return {};
}

Result<BwRow> run_bw(Side& c, const PeerBuffers& peer, Side* server, const PerfSettings& s, std::uint64_t size,
                     Receives& rx, CopyBuffers& copy, std::vector<std::uint64_t>* posted_per_qp) {
  const std::uint32_t q = s.num_qps;
  const WrOpcode op = opcode_of(s.test);
  const std::uint32_t base_flags = size <= s.inline_size ? SEND_INLINE : 0u;
  // --verify: where each QP's bytes come from and go to (the receives of
  // send_bw cover the server's buffer from offset 0). With the server in
  // another process, a WRITE or READ is paired with its check: write_bw's
  // WRITE is read back into the second half of the buffer, read_bw's READ
  // reads what a WRITE from that half put there just before (RC order), and
  // send_bw's receiver checks what arrives.
  const bool remote = server == nullptr;
  const bool read_back = s.verify && remote && op != WrOpcode::kSend;
  const std::size_t half = round_up(size, 64);
  auto source = [&](std::uint32_t i) {
    if (remote) return op == WrOpcode::kRdmaRead ? c.buf(i) + half : c.buf(i);
    return op == WrOpcode::kRdmaRead ? server->buf(i) : c.buf(i);
  };
  auto destination = [&](std::uint32_t i) {
    if (remote) return op == WrOpcode::kRdmaRead ? c.buf(i) : c.buf(i) + half;
    return op == WrOpcode::kRdmaRead ? c.buf(i) : server->buf(i);
  };
  // The WR that goes with each read_back WR: the priming WRITE before a READ,
  // the READ back after a WRITE.
  std::vector<Sge> check_sge(read_back ? q : 0);
  std::vector<SendWr> check_wr(read_back ? q : 0);
  for (std::uint32_t i = 0; read_back && i < q; ++i) {
    check_sge[i] = Sge{c.addr(i, half), static_cast<std::uint32_t>(size), c.mrs[i].lkey()};
    check_wr[i].sg_list = &check_sge[i];
    check_wr[i].num_sge = 1;
    check_wr[i].opcode = op == WrOpcode::kRdmaRead ? WrOpcode::kRdmaWrite : WrOpcode::kRdmaRead;
    check_wr[i].remote_addr = peer.addr[i];
    check_wr[i].rkey = peer.rkey[i];
  }

  const bool timed = s.duration_s > 0;
  const std::uint64_t per_qp = timed ? std::numeric_limits<std::uint64_t>::max() : s.iterations;
  // What the loop below touches per WR of QP i, together in qps[i] (the
  // tool's own cache footprint is part of every rate it measures).
  struct QpRun {
    SendWr wr;
    Sge sge;
    QueuePair* qp = nullptr;
    std::uint64_t scnt = 0, ccnt = 0, limit = 0;  // posted, completed, to post
    std::uint32_t until_signaled = 0;
  };
  std::vector<QpRun> qps(q);
  for (std::uint32_t i = 0; i < q; ++i) {
    QpRun& r = qps[i];
    r.sge = Sge{c.addr(i), static_cast<std::uint32_t>(size), c.mrs[i].lkey()};
    r.wr.sg_list = &r.sge;
    r.wr.num_sge = 1;
    r.wr.opcode = op;
    if (op != WrOpcode::kSend) {
      r.wr.remote_addr = peer.addr[i];
      r.wr.rkey = peer.rkey[i];
    }
    r.qp = c.qps[i].get();
    r.limit = per_qp;
    r.until_signaled = s.cq_mod;
  }

  // send_bw: the server reposts receives, in its own thread (as perftest's
  // server process does) or, with --single-thread, between polls here.
  std::atomic<std::uint64_t> target{timed ? std::numeric_limits<std::uint64_t>::max() : s.iterations * q};
  std::atomic<bool> abort{false}, server_failed{false};
  RecvSink sink{server, &rx, 0, std::nullopt};
  std::thread server_thread;
  const bool sends = op == WrOpcode::kSend && !remote;  // the sink is ours to run
  if (sends && !s.single_thread) {
    server_thread = std::thread([&] {
      while (sink.received < target.load(std::memory_order_acquire) && !abort.load(std::memory_order_relaxed)) {
        if (!sink.drain(true)) {
          server_failed.store(true, std::memory_order_release);
          return;
        }
      }
    });
  }
  auto stop_server = [&](bool failed) {
    if (failed) abort.store(true);
    if (server_thread.joinable()) server_thread.join();
  };

  // Checkpoints for the peak: about 100 windows. A window's rate is the WRs
  // completed between two checkpoints over the time from the posting of the
  // first of them (as perftest's tcompleted[j] - tposted[i]): completions
  // come in bursts, so completion times alone would overstate it.
  struct Checkpoint {
    Clock::time_point t;
    std::uint64_t posted;
    std::uint64_t done;
  };
  std::vector<Checkpoint> cps;
  cps.reserve(256);
  const std::uint64_t total = timed ? 0 : s.iterations * q;
  const std::uint64_t cp_step =
      timed ? std::numeric_limits<std::uint64_t>::max()
            : std::max<std::uint64_t>({1, total / 100, 2ull * s.tx_depth * q});
  const auto cp_period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s.duration_s / 100));
  std::uint64_t next_cp = cp_step;
  std::uint64_t posted = 0;

  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s.duration_s));
  auto next_cp_time = start + cp_period;
  cps.push_back({start, 0, 0});
  std::uint64_t completed = 0;
  bool stopping = !timed;
  std::uint32_t loops = 0;
  Wc wc[16];

  for (;;) {
    for (std::uint32_t i = 0; i < q; ++i) {
      QpRun& run = qps[i];
      SendWr& w = run.wr;
      while (run.scnt < run.limit && run.scnt - run.ccnt < s.tx_depth) {
        const std::uint64_t k = ++run.scnt;
        // Every cq_mod-th WR (k % cq_mod == 0, counted down: no division
        // per post) and the last one are signaled.
        std::uint32_t signaled = k == run.limit ? SEND_SIGNALED : 0u;
        if (--run.until_signaled == 0) {
          run.until_signaled = s.cq_mod;
          signaled = SEND_SIGNALED;
        }
        w.wr_id = (k << 16) | i;
        if (s.verify) fill_pattern(source(i), size, k, i);
        ++posted;
        if (!read_back) [[likely]] {
          w.send_flags = base_flags | signaled;
          if (auto r = run.qp->post_send(w); !r) [[unlikely]] {
            stop_server(true);
            return make_error(r.error().code, "post_send: " + r.error().reason);
          }
          continue;
        }
        // read_back: a pair, one completion, the second WR's.
        SendWr& first = op == WrOpcode::kRdmaRead ? check_wr[i] : w;
        SendWr& second = op == WrOpcode::kRdmaRead ? w : check_wr[i];
        first.send_flags = 0;
        second.send_flags = SEND_SIGNALED;
        second.wr_id = w.wr_id;
        Result<void> r = post(*run.qp, first);
        if (r) r = post(*run.qp, second);
        if (!r) [[unlikely]] {
          stop_server(true);
          return std::unexpected(r.error());
        }
      }
    }
    if (stopping) {
      bool all = true;
      for (const QpRun& r : qps) all = all && r.ccnt == r.limit;
      if (all) break;
    }
    const int n = c.send_w.next(wc);
    if (n < 0) [[unlikely]] {
      stop_server(true);
      return std::unexpected(c.send_w.error());
    }
    for (int j = 0; j < n; ++j) {
      if (wc[j].status != WcStatus::kSuccess) [[unlikely]] {
        stop_server(true);
        return std::unexpected(completion_failure(c, wc[j], "client"));
      }
      const std::uint32_t i = static_cast<std::uint32_t>(wc[j].wr_id & 0xffff);
      const std::uint64_t k = wc[j].wr_id >> 16;
      completed += k - qps[i].ccnt;
      qps[i].ccnt = k;
      if (s.verify && !(remote && op == WrOpcode::kSend)) {  // every WR signaled, one in flight: WR k's data
        if (s.before_verify) s.before_verify(i, k, std::span<std::uint8_t>(destination(i), size));
        if (auto r = check_pattern(destination(i), size, k, i); !r) [[unlikely]] {
          stop_server(true);
          return std::unexpected(r.error());
        }
      }
    }
    if (sends && s.single_thread && !sink.drain(false)) [[unlikely]] {
      stop_server(true);
      return std::unexpected(*sink.error);
    }
    if (server_failed.load(std::memory_order_relaxed)) [[unlikely]] {
      stop_server(true);
      return std::unexpected(*sink.error);
    }
    if (completed >= next_cp) {
      if (cps.size() < cps.capacity()) cps.push_back({Clock::now(), posted, completed});
      next_cp += cp_step;
    }
    if (timed && (++loops & 63) == 0) {
      const auto now = Clock::now();
      if (now >= next_cp_time) {
        if (cps.size() < cps.capacity()) cps.push_back({now, posted, completed});
        next_cp_time += cp_period;
      }
      if (!stopping && now >= deadline) {
        // Stop at the next signaled WR of each QP, so every WR completes.
        stopping = true;
        for (QpRun& r : qps) r.limit = round_up(r.scnt, s.cq_mod);
      }
    }
  }
  const auto end = Clock::now();
  cps.push_back({end, posted, completed});
  if (posted_per_qp) {
    posted_per_qp->clear();
    for (const QpRun& r : qps) posted_per_qp->push_back(r.scnt);
  }

  if (sends) {
    target.store(completed, std::memory_order_release);
    if (s.single_thread) {
      while (sink.received < completed)
        if (!sink.drain(false)) return std::unexpected(*sink.error);
    }
    stop_server(false);
    if (sink.error) return std::unexpected(*sink.error);
  }

  const double secs = std::chrono::duration<double>(end - start).count();
  const double mib = static_cast<double>(size) / (1 << 20);
  BwRow row;
  row.bytes = size;
  row.iterations = timed ? completed / q : s.iterations;
  row.bw_avg_mib_s = secs > 0 ? static_cast<double>(completed) * mib / secs : 0;
  row.msg_rate_mpps = secs > 0 ? static_cast<double>(completed) / secs / 1e6 : 0;
  for (std::size_t j = 1; j < cps.size(); ++j) {
    // The window starts at the last checkpoint before the first of its WRs was posted.
    std::size_t from = j - 1;
    while (from > 0 && cps[from].posted > cps[j - 1].done) --from;
    const double dt = std::chrono::duration<double>(cps[j].t - cps[from].t).count();
    const std::uint64_t dn = cps[j].done - cps[j - 1].done;
    if (dt > 0 && dn > 0) row.bw_peak_mib_s = std::max(row.bw_peak_mib_s, static_cast<double>(dn) * mib / dt);
  }
  row.bw_peak_mib_s = std::max(row.bw_peak_mib_s, row.bw_avg_mib_s);

  // The copy rate for the same size, measured now, on buffers of the same alignment.
  row.memcpy_mib_s = measure_copy(false, copy.dst.get(), copy.src.get(), size, s.copy_budget_ms);
  row.loop_mib_s = measure_copy(true, copy.dst.get(), copy.src.get(), size, s.copy_budget_ms);
  row.copy_bw_mib_s = std::max(row.memcpy_mib_s, row.loop_mib_s);
  row.bw_over_copy = row.copy_bw_mib_s > 0 ? row.bw_avg_mib_s / row.copy_bw_mib_s : 0;
  return row;
}

// ---------------------------------------------------------------------------
// Latency

// Pins the calling thread to the n-th CPU it may run on, for its lifetime
// (best effort; the old mask comes back at the end), as perftest's users
// pin each side with taskset: the two sides of a two-thread ping-pong on
// different cores rather than wherever the scheduler happens to put them,
// which makes run-to-run latency bimodal.
class ScopedPin {
 public:
  explicit ScopedPin(int n) {
    const int cpu = nth_allowed_cpu(n);
    if (cpu < 0 || sched_getaffinity(0, sizeof old_, &old_) != 0) return;
    pinned_ = pin_thread(pthread_self(), cpu);
  }
  ~ScopedPin() {
    if (pinned_) (void)pthread_setaffinity_np(pthread_self(), sizeof old_, &old_);
  }
  ScopedPin(const ScopedPin&) = delete;
  ScopedPin& operator=(const ScopedPin&) = delete;

 private:
  cpu_set_t old_{};
  bool pinned_ = false;
};


struct LatSamples {
  std::vector<std::uint64_t> t;  // ticks at each post, and after the last
  Clock::time_point c0, c1;      // the same instants on the steady clock
  std::uint64_t k0 = 0, k1 = 0;
  bool half = false;             // ping-pong: half the round trip
};

LatRow lat_stats(std::uint64_t size, const LatSamples& ls) {
  LatRow row;
  row.bytes = size;
  const std::size_t n = ls.t.size() > 0 ? ls.t.size() - 1 : 0;
  row.iterations = n;
  if (n == 0) return row;
  const double ns = std::chrono::duration<double, std::nano>(ls.c1 - ls.c0).count();
  const double us_per_tick = ls.k1 > ls.k0 ? ns / 1000.0 / static_cast<double>(ls.k1 - ls.k0) : 0.001;
  const double scale = us_per_tick / (ls.half ? 2.0 : 1.0);
  std::vector<double> d(n);
  for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<double>(ls.t[i + 1] - ls.t[i]) * scale;
  std::sort(d.begin(), d.end());
  double sum = 0;
  for (double x : d) sum += x;
  const double avg = sum / static_cast<double>(n);
  double var = 0;
  for (double x : d) var += (x - avg) * (x - avg);
  auto pct = [&](double p) {
    auto idx = static_cast<std::size_t>(std::ceil(p * static_cast<double>(n)));
    return d[std::clamp<std::size_t>(idx, 1, n) - 1];
  };
  row.t_min_us = d.front();
  row.t_max_us = d.back();
  row.t_typical_us = d[n / 2];  // perftest's t_typical: the median
  row.t_avg_us = avg;
  row.t_stdev_us = std::sqrt(var / static_cast<double>(n));
  row.t_p50_us = pct(0.50);
  row.t_p99_us = pct(0.99);
  row.t_p999_us = pct(0.999);
  return row;
}

void setup_endpoint(Endpoint& e, Side& me, const PeerBuffers& peer, WrOpcode op, std::uint64_t size,
                    std::uint32_t flags) {
  e.sge = Sge{me.addr(0), static_cast<std::uint32_t>(size), me.mrs[0].lkey()};
  e.wr.sg_list = &e.sge;
  e.wr.num_sge = 1;
  e.wr.opcode = op;
  e.base_flags = flags;
  e.wr.remote_addr = peer.addr[0] + (op == WrOpcode::kRdmaWrite ? peer.half : 0);
  e.wr.rkey = peer.rkey[0];
  e.wr.compare_add = 1;
  e.post_byte = e.poll_byte = nullptr;
  if (op == WrOpcode::kRdmaWrite) {
    std::memset(me.buf(0), 0, 2 * me.half);
    e.post_byte = me.buf(0) + size - 1;
    e.poll_byte = me.buf(0) + me.half + size - 1;
  }
}

Result<LatRow> run_lat(Side& c, const PeerBuffers& peer, Side* server, const PerfSettings& s, std::uint64_t size,
                       Endpoint& a, Endpoint& b, Control* control) {
  const WrOpcode op = opcode_of(s.test);
  const bool pingpong = s.test == PerfTest::kWriteLat || s.test == PerfTest::kSendLat;
  const std::uint32_t flags = size <= s.inline_size ? SEND_INLINE : 0u;

  // a: the client; b: the server (only active in the ping-pong tests, and
  // here only when the server is in this process).
  setup_endpoint(a, c, peer, op, size, flags);
  if (server) setup_endpoint(b, *server, PeerBuffers::of(c), op, size, flags);

  const bool timed = s.duration_s > 0;
  LatSamples ls;
  ls.half = pingpong;
  if (!timed) ls.t.reserve(s.iterations + 1);
  else ls.t.reserve(1 << 20);
  Control own_control;
  Control& ctl = control ? *control : own_control;
  std::optional<Error> server_error;

  std::thread server_thread;
  std::optional<ScopedPin> client_pin;
  if (pingpong && server && !s.single_thread) {
    // The server first: a thread starts with its creator's mask.
    server_thread = std::thread([&] {
      ScopedPin pin(1);
      for (std::uint64_t k = 1; timed || k <= s.iterations; ++k) {
        auto r = b.receive(k, ctl);
        if (r && *r) r = b.send(k, ctl);
        if (!r) {
          server_error = r.error();
          ctl.state.store(2, std::memory_order_release);
          return;
        }
        if (!*r) return;  // stopped
      }
    });
    client_pin.emplace(0);
  }
  auto finish = [&](std::optional<Error> e) -> std::optional<Error> {
    int expected = 0;
    ctl.state.compare_exchange_strong(expected, 1);
    if (server_thread.joinable()) server_thread.join();
    if (server_error) return server_error;
    return e;
  };

  const auto deadline_span = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s.duration_s));
  ls.c0 = Clock::now();
  ls.k0 = ticks();
  const auto deadline = ls.c0 + deadline_span;
  for (std::uint64_t k = 1;; ++k) {
    if (!timed) {
      if (k > s.iterations) break;
    } else if ((k & 63) == 0 && Clock::now() >= deadline) {
      break;
    }
    ls.t.push_back(ticks());
    auto r = a.send(k, ctl);
    if (r && *r && pingpong) {
      if (s.single_thread) {
        r = b.receive(k, ctl);
        if (r && *r) r = b.send(k, ctl);
      }
      if (r && *r) r = a.receive(k, ctl);
    }
    if (!r || !*r) [[unlikely]] {
      auto e = finish(r ? Error{EIO, "the server stopped"} : r.error());
      return std::unexpected(*e);
    }
  }
  ls.t.push_back(ticks());
  ls.k1 = ls.t.back();
  ls.c1 = Clock::now();
  if (auto e = finish(std::nullopt)) return std::unexpected(*e);
  return lat_stats(size, ls);
}

}  // namespace srdma::tools::perf
