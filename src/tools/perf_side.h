// `srdma perf`'s pieces that the in-process run (perf.cc) and the run
// between processes (perf_remote.cc) share: a side (a device, its CQs, QPs,
// buffers and MRs), the peer's buffers as a side sees them, the endpoints
// of a ping-pong, and the measurement loops.
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <fmt/format.h>

#include "srdma/cq.h"
#include "srdma/device.h"
#include "srdma/mr.h"
#include "srdma/net.h"
#include "srdma/pd.h"
#include "srdma/qp.h"
#include "srdma/wc.h"
#include "srdma/wr.h"
#include "tools/perf.h"

#if defined(__SANITIZE_THREAD__)
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
#endif

namespace srdma::tools::perf {

// Reads of memory a peer's RDMA WRITE fills are DMA, not C++ accesses.
inline void tsan_ignore_reads([[maybe_unused]] bool on) {
#if defined(__SANITIZE_THREAD__)
  if (on)
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
  else
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
}

using Clock = std::chrono::steady_clock;

inline std::uint64_t ticks() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
#endif
}

struct FreeDeleter {
  void operator()(std::uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<std::uint8_t[], FreeDeleter>;

inline std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

inline Result<Buffer> alloc_buffer(std::size_t n) {
  n = round_up(std::max<std::size_t>(n, 1), 4096);
  auto* p = static_cast<std::uint8_t*>(std::aligned_alloc(4096, n));
  if (p == nullptr) return make_error(ENOMEM, fmt::format("cannot allocate a {}-byte buffer", n));
  std::memset(p, 0, n);  // fault the pages in before the measurement
  return Buffer(p);
}

inline Error wc_error(const Wc& wc, const char* side) {
  return Error{EIO, fmt::format("{}: completion error on QP {:#x}: {} (vendor_err {})", side, wc.qp_num,
                                wc_status_str(wc.status), wc.vendor_err)};
}

// A CQ, busy polled, or (-e) waited on through its own completion channel.
class CqWaiter {
 public:
  CqWaiter() = default;
  CqWaiter(CompletionQueue* cq, CompChannel* ch) : cq_(cq), ch_(ch) {}

  // Busy polling: one poll, possibly returning 0. Events: polls; when empty
  // arms the CQ (CQ_NEXT_COMP) and polls again, then waits up to timeout_ms
  // for the channel's fd, takes and acks the event and polls once more.
  // -1 on an error (error()).
  int next(std::span<Wc> wc, int timeout_ms = 50) {
    int n = cq_->poll(wc);
    if (n != 0 || ch_ == nullptr) return n;
    if (!armed_) {
      auto r = cq_->req_notify(CQ_NEXT_COMP);
      if (!r) return fail(r.error());
      armed_ = true;
      if ((n = cq_->poll(wc)) != 0) return n;
    }
    pollfd p{ch_->fd(), POLLIN, 0};
    int pr = ::poll(&p, 1, timeout_ms);
    if (pr < 0 && errno != EINTR) return fail(Error{errno, "poll on the completion channel's fd failed"});
    if (pr > 0) {
      auto ev = ch_->get_event(false);
      if (ev) {
        ch_->ack_events(**ev, 1);
        ++events_;
        armed_ = false;
      } else if (ev.error().code != EAGAIN) {
        return fail(ev.error());
      }
    }
    return cq_->poll(wc);
  }
  const Error& error() const { return err_; }
  std::uint64_t events() const { return events_; }

 private:
  int fail(Error e) {
    err_ = std::move(e);
    return -1;
  }
  CompletionQueue* cq_ = nullptr;
  CompChannel* ch_ = nullptr;
  bool armed_ = false;
  std::uint64_t events_ = 0;
  Error err_;
};

struct Side {
  Device dev;
  ProtectionDomain pd;
  std::unique_ptr<CompChannel> send_ch, recv_ch;
  std::unique_ptr<CompletionQueue> send_cq, recv_cq;
  std::vector<Buffer> bufs;        // one per QP
  std::vector<MemoryRegion> mrs;   // declared after bufs: deregistered first
  std::vector<std::unique_ptr<QueuePair>> qps;
  std::vector<std::uint32_t> psn;  // each QP's starting send PSN
  CqWaiter send_w, recv_w;
  std::size_t half = 0;            // latency tests: receive half at this offset
  bool polled_link = false;        // the device's wire is received by polling (Device::progress)

  std::uint8_t* buf(std::size_t i) const { return bufs[i].get(); }
  std::uint64_t addr(std::size_t i, std::size_t off = 0) const {
    return reinterpret_cast<std::uint64_t>(bufs[i].get()) + off;
  }
};

// Receives kept posted on every QP of `side`, each covering the whole buffer
// half from `offset` (so a later, bigger size still fits).
struct Receives {
  std::vector<Sge> sge;
  std::vector<RecvWr> wr;

  void build(const Side& side, std::size_t offset, std::size_t length) {
    const std::size_t n = side.qps.size();
    sge.resize(n);
    wr.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      sge[i] = Sge{side.addr(i, offset), static_cast<std::uint32_t>(length), side.mrs[i].lkey()};
      wr[i].wr_id = i;
      wr[i].sg_list = &sge[i];
      wr[i].num_sge = 1;
    }
  }
  Result<void> post(Side& side, std::size_t i) {
    auto r = side.qps[i]->post_recv(wr[i]);
    if (!r) return make_error(r.error().code, "post_recv: " + r.error().reason);
    return {};
  }
};

inline Result<void> post(QueuePair& qp, const SendWr& wr) {
  auto r = qp.post_send(wr);
  if (!r) [[unlikely]]
    return make_error(r.error().code, "post_send: " + r.error().reason);
  return {};
}

struct CopyBuffers {
  Buffer src, dst;

  // Two buffers of `bytes` for the bandwidth rows' copy rate.
  static Result<CopyBuffers> of(std::size_t bytes) {
    auto src = alloc_buffer(bytes);
    if (!src) return std::unexpected(src.error());
    auto dst = alloc_buffer(bytes);
    if (!dst) return std::unexpected(dst.error());
    return CopyBuffers{std::move(*src), std::move(*dst)};
  }
};

// Control shared by the two sides of a ping-pong.
struct Control {
  std::atomic<int> state{0};  // 0 running, 1 stop (the client is done), 2 the server failed
};

// One side's prebuilt work request and its state.
struct Endpoint {
  Side* side = nullptr;
  Sge sge;
  SendWr wr;
  std::uint32_t base_flags = 0;
  std::uint32_t cq_mod = 1;
  std::uint64_t posted = 0;  // across sizes, so moderation stays every Nth
  volatile std::uint8_t* post_byte = nullptr;
  volatile std::uint8_t* poll_byte = nullptr;
  Receives* rx = nullptr;
  const char* name = "";

  // Waits for one completion on `w`; false when told to stop.
  Result<bool> wait_one(CqWaiter& w, const Control& ctl, Wc& out) {
    for (;;) {
      const int n = w.next(std::span<Wc>(&out, 1));
      if (n == 1) {
        if (out.status != WcStatus::kSuccess) [[unlikely]]
          return std::unexpected(wc_error(out, name));
        return true;
      }
      if (n < 0) [[unlikely]]
        return std::unexpected(w.error());
      if (ctl.state.load(std::memory_order_relaxed) != 0) [[unlikely]]
        return false;
    }
  }

  // Posts the k-th message and, when it is signaled, waits for its completion.
  Result<bool> send(std::uint64_t k, const Control& ctl) {
    if (post_byte) *post_byte = static_cast<std::uint8_t>(k);
    const bool signaled = ++posted % cq_mod == 0;
    wr.send_flags = base_flags | (signaled ? SEND_SIGNALED : 0u);
    wr.wr_id = k;
    if (auto r = post(*side->qps[0], wr); !r) [[unlikely]]
      return std::unexpected(r.error());
    if (!signaled) return true;
    Wc wc;
    return wait_one(side->send_w, ctl, wc);
  }

  // Waits for the peer's k-th message: the last byte of the buffer (write)
  // or a receive completion (send).
  Result<bool> receive(std::uint64_t k, const Control& ctl) {
    if (poll_byte) {
      // Polling memory the peer's RDMA WRITE fills, as perftest does: the
      // device's write is DMA to this thread, outside the C++ memory model,
      // so ThreadSanitizer is told to ignore these reads.
      const auto want = static_cast<std::uint8_t>(k);
      tsan_ignore_reads(true);
      bool arrived = true;
      const bool drive = side->polled_link;
      while (*poll_byte != want) {
        if (ctl.state.load(std::memory_order_relaxed) != 0) [[unlikely]] {
          arrived = false;
          break;
        }
        if (drive) (void)side->dev.progress();  // the RoCEv2 link is received by its pollers
      }
      tsan_ignore_reads(false);
      std::atomic_thread_fence(std::memory_order_acquire);
      return arrived;
    }
    Wc wc;
    auto r = wait_one(side->recv_w, ctl, wc);
    if (!r || !*r) return r;
    if (auto p = rx->post(*side, 0); !p) [[unlikely]]
      return std::unexpected(p.error());
    return true;
  }
};

// The peer's QPs and buffers as this side sees them: what RDMA names.
struct PeerBuffers {
  std::uint64_t dev_addr = 0;      // Device::address() of the peer's device
  std::vector<std::uint32_t> qpn, psn, rkey;
  std::vector<std::uint64_t> addr;  // each QP's buffer
  std::size_t half = 0;             // latency tests: the peer receives at addr + half

  static PeerBuffers of(const Side& s);
};

// Buffer bytes per QP for `s`: bandwidth tests move one message; latency
// tests send from the first half and receive into the second (perftest's
// post_buf and poll_buf). Also the half.
std::size_t side_buffer_bytes(const PerfSettings& s, std::size_t* half);

// A side on the in-process link (net null) or on the RoCEv2 link; each QP's
// starting PSN from the CSPRNG (a peer's PSN is what a stranger must guess
// to be believed).
// `extra_send_wr`: send queue entries beyond the TX depth.
// `opened`: a device to use instead of opening one (the perf server's,
// open while it waits for a client).
Result<std::unique_ptr<Side>> open_side(const PerfSettings& s, const std::string& name, std::size_t buf_bytes,
                                        const NetConfig* net = nullptr, std::uint32_t extra_send_wr = 0,
                                        Device* opened = nullptr);
// The profile a side's device is opened with.
Profile side_profile();
// `timeout`: the QP's local ACK timeout (RcConnection::timeout).
Result<void> bring_up(QueuePair& qp, std::uint32_t sq_psn, std::uint64_t peer_addr, std::uint32_t peer_qpn,
                      std::uint32_t peer_psn, std::uint32_t mtu, std::uint8_t timeout);

WrOpcode opcode_of(PerfTest t);
// A failed completion as the command reports it, with the number of WRs
// the QP flushed after it (drained from the send CQ).
Error completion_failure(Side& side, const Wc& wc, const char* who);
// --verify's pattern for WR k of QP i.
void fill_pattern(std::uint8_t* p, std::size_t n, std::uint64_t k, std::uint32_t i);
Result<void> check_pattern(const std::uint8_t* p, std::size_t n, std::uint64_t k, std::uint32_t i);

// A ping-pong endpoint that posts from `me` to `peer`'s QP 0 (its buffer
// half for a WRITE), `size` bytes with `flags`.
void setup_endpoint(Endpoint& e, Side& me, const PeerBuffers& peer, WrOpcode op, std::uint64_t size,
                    std::uint32_t flags);

// One bandwidth size from `c` to `peer`. `server`: the peer's side when it
// is in this process (send_bw's receives, --verify's destination); null
// when it is in another (that process drains its receives; --verify reads
// WRITEs back, see perf_remote.cc). Per QP, the WRs posted go to `posted`.
Result<BwRow> run_bw(Side& c, const PeerBuffers& peer, Side* server, const PerfSettings& s, std::uint64_t size,
                     Receives& rx, CopyBuffers& copy, std::vector<std::uint64_t>* posted = nullptr);
// One latency size; `b` (the server's endpoint) is driven here only when
// `server` is set, else the other process answers. `control`: one the
// caller may stop from another thread (state 2: the peer is gone).
Result<LatRow> run_lat(Side& c, const PeerBuffers& peer, Side* server, const PerfSettings& s, std::uint64_t size,
                       Endpoint& a, Endpoint& b, Control* control = nullptr);

}  // namespace srdma::tools::perf
