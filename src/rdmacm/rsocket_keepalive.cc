// SO_KEEPALIVE, as rdma-core's tcp_svc: a thread sends each watched,
// connected rsocket a zero-length RDMA WRITE (no immediate: the peer sees
// no completion) every keepalive_time seconds (TCP_KEEPIDLE, else the
// kernel's tcp_keepalive_time). A peer that is gone makes the write's
// retries run out, the completion fails, and the connection ends with EIO.
#include <rdma/rsocket.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "rsocket.h"

namespace srdma::rdmacm::rs {
namespace {

using Clock = std::chrono::steady_clock;

struct Watched {
  std::weak_ptr<RSocket> rs;
  std::chrono::seconds period;  // a copy: rs's own field is guarded by rs.mu
  Clock::time_point due;
};

struct Service {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Watched> watched;
  bool running = false;
};
Service& service() {
  static auto* s = new Service;  // never destroyed: its thread may outlive main
  return *s;
}

void send_keepalive(RSocket& rs) {
  std::lock_guard lock(rs.mu);
  if (!(rs.state & kConnected) || !rs.id || !rs.id->qp || !ctrl_avail(rs)) return;
  ++rs.ctrl_seqno;
  ibv_send_wr wr{}, *bad;
  wr.wr_id = make_imm(kOpCtrl, kCtrlKeepalive);
  wr.opcode = IBV_WR_RDMA_WRITE;
  if (ibv_post_send(rs.id->qp, &wr, &bad)) protocol_error(rs, EIO, "ibv_post_send of a keepalive failed");
}

void run() {
  Service& s = service();
  std::unique_lock lock(s.mu);
  for (;;) {
    auto next = Clock::time_point::max();
    const auto now = Clock::now();
    for (auto it = s.watched.begin(); it != s.watched.end();) {
      RSocketRef rs = it->rs.lock();
      if (!rs) {
        it = s.watched.erase(it);
        continue;
      }
      if (it->due <= now) {
        lock.unlock();
        send_keepalive(*rs);
        lock.lock();
        it->due = now + it->period;
      }
      next = std::min(next, it->due);
      ++it;
    }
    if (next == Clock::time_point::max())
      s.cv.wait(lock);
    else
      s.cv.wait_until(lock, next);
  }
}

unsigned kernel_keepalive_time() {
  unsigned t = 7200;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/tcp_keepalive_time", "r")) {
    if (std::fscanf(f, "%u", &t) != 1) t = 7200;
    std::fclose(f);
  }
  return t;
}

}  // namespace

// REQUIRES rs->mu (keepalive_time).
void watch_keepalive(const RSocketRef& rs, bool on) {
  if (on && !rs->keepalive_time) rs->keepalive_time = kernel_keepalive_time();
  const std::chrono::seconds period(rs->keepalive_time);
  Service& s = service();
  std::lock_guard lock(s.mu);
  std::erase_if(s.watched, [&](const Watched& w) { return w.rs.expired() || w.rs.lock() == rs; });
  if (on) {
    s.watched.push_back({rs, period, Clock::now() + period});
    if (!s.running) {
      s.running = true;
      std::thread(run).detach();
    }
  }
  s.cv.notify_all();
}

}  // namespace srdma::rdmacm::rs
