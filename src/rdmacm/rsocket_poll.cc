// rpoll and rselect: rsockets and ordinary fds in one call. An rsocket is
// ready by its protocol state (data queued, room and credits to send, a
// connection request, the connection's end), not by its fd; to sleep,
// each rsocket's CQ is armed and its completion channel and CM channel
// are poll()ed with the ordinary fds, then everything is checked again.
#include <poll.h>
#include <rdma/rsocket.h>
#include <sys/select.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include "rsocket.h"
#include "rsocket_dgram.h"
#include "srdma_cm_private.h"

namespace srdma::rdmacm::rs {
namespace {

constexpr int kWakeUpMs = 5000;  // a bounded sleep (rdma-core 44's wake_up_interval)

std::int64_t now_ms() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return std::int64_t(t.tv_sec) * 1000 + t.tv_nsec / 1000000;
}

short conn_revents(RSocket& rs, short events) {
  short revents = 0;
  if ((events & POLLIN) && conn_have_rdata(rs)) revents |= POLLIN;
  if ((events & POLLOUT) && can_send(rs)) revents |= POLLOUT;
  // The end is reported once what arrived before it is read: rstream -T a
  // treats POLLHUP as an error even with POLLIN beside it (as TCP does not
  // hang up while data waits).
  if (!(rs.state & kConnected) && !(rs.state == kDisconnected && have_rdata(rs)))
    revents |= rs.state == kDisconnected ? POLLHUP : POLLERR;
  return revents;
}

// rdma-core's rs_poll_rs, never blocking. REQUIRES rs.mu.
short poll_rs(RSocket& rs, short events, std::unique_lock<std::mutex>& lock) {
  if (rs.cq && (rs.state & (kConnected | kDisconnected | kError))) {
    process_cq(rs);
    return conn_revents(rs, events);
  }
  if (rs.state == kListening) {
    pollfd p{rs.channel->fd, static_cast<short>(events & POLLIN), 0};
    (void)poll(&p, 1, 0);
    return p.revents & POLLIN;
  }
  if (rs.state & kOpening) {
    if (do_connect(rs, lock, true) == 0 && rs.cq) {
      process_cq(rs);
      return conn_revents(rs, events);
    }
  }
  if (rs.state == kConnectError) return static_cast<short>((events & (POLLIN | POLLOUT)) | POLLERR);
  return 0;
}

}  // namespace
}  // namespace srdma::rdmacm::rs

using namespace srdma::rdmacm::rs;  // NOLINT: the C entry points below

extern "C" {

int rpoll(pollfd* fds, nfds_t nfds, int timeout) {
  if (nfds && !fds) return rs_fail("rpoll", EFAULT, "NULL fds");
  std::vector<RSocketRef> socks(nfds);
  for (nfds_t i = 0; i < nfds; ++i) socks[i] = lookup(fds[i].fd);
  const std::int64_t deadline = timeout > 0 ? now_ms() + timeout : 0;
  std::vector<pollfd> pfds;
  std::vector<std::size_t> first(nfds);
  for (;;) {
    // Check everything; arm the CQs of those not ready.
    int ready = 0;
    for (nfds_t i = 0; i < nfds; ++i) {
      fds[i].revents = 0;
      RSocket* rs = socks[i].get();
      if (rs && rs->type == SOCK_DGRAM) {
        std::lock_guard lock(rs->mu);
        fds[i].revents = dgram_revents(*rs, fds[i].events);
        if (!fds[i].revents && timeout && dgram_arm(*rs)) fds[i].revents = dgram_revents(*rs, fds[i].events);
      } else if (rs) {
        std::unique_lock lock(rs->mu);
        fds[i].revents = poll_rs(*rs, fds[i].events, lock);
        if (!fds[i].revents && rs->cq && !rs->cq_armed && timeout) {
          ibv_req_notify_cq(rs->cq, 0);
          rs->cq_armed = true;
          fds[i].revents = poll_rs(*rs, fds[i].events, lock);  // CQEs from before the arming
        }
      } else if (fds[i].fd >= 0) {
        pollfd p{fds[i].fd, fds[i].events, 0};
        (void)poll(&p, 1, 0);
        fds[i].revents = p.revents;
      }
      if (fds[i].revents) ++ready;
    }
    if (ready || !timeout) return ready;
    int wait = kWakeUpMs;
    if (timeout > 0) {
      const std::int64_t left = deadline - now_ms();
      if (left <= 0) return 0;
      wait = static_cast<int>(std::min<std::int64_t>(left, kWakeUpMs));
    }
    pfds.clear();
    ibv_context* device = nullptr;  // whose wire this thread receives while it waits
    for (nfds_t i = 0; i < nfds; ++i) {
      first[i] = pfds.size();
      RSocket* rs = socks[i].get();
      if (rs && rs->type == SOCK_DGRAM) {
        std::lock_guard lock(rs->mu);
        dgram_wait_fds(*rs, pfds);
        if (!device && rs->dg->channel) device = rs->dg->channel->context;
      } else if (rs) {
        std::lock_guard lock(rs->mu);
        if (rs->cq_channel) {
          pfds.push_back({rs->cq_channel->fd, POLLIN, 0});
          if (!device) device = rs->cq_channel->context;
        }
        pfds.push_back({rs->channel->fd, POLLIN, 0});
      } else {
        pfds.push_back({fds[i].fd, fds[i].events, 0});
      }
    }
    // With an rsocket's device: receiving from its wire meanwhile (see
    // wait_for), so that the completions wanted wake this thread directly.
    const int n = device ? srdma_poll_receiving(device, pfds.data(), pfds.size(), wait)
                         : poll(pfds.data(), pfds.size(), wait);
    if (n < 0) return -1;
    for (nfds_t i = 0; i < nfds; ++i) {
      RSocket* rs = socks[i].get();
      if (rs && rs->type == SOCK_DGRAM) {
        std::lock_guard lock(rs->mu);
        dgram_after_wait(*rs);
      } else if (rs) {
        std::lock_guard lock(rs->mu);
        if (rs->cq_channel && pfds[first[i]].revents) take_cq_event(*rs);
        if (rs->cq_channel && pfds[first[i] + 1].revents) drain_cm_events(*rs);
      }
    }
  }
}

int rselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds, timeval* timeout) {
  if (nfds < 0 || nfds > FD_SETSIZE) return rs_fail("rselect", EINVAL, "nfds out of range");
  std::vector<pollfd> fds;
  for (int fd = 0; fd < nfds; ++fd) {
    short events = 0;
    if (readfds && FD_ISSET(fd, readfds)) events |= POLLIN;
    if (writefds && FD_ISSET(fd, writefds)) events |= POLLOUT;
    const bool except = exceptfds && FD_ISSET(fd, exceptfds);
    if (events || except) fds.push_back({fd, events, 0});
  }
  const int ms = timeout ? static_cast<int>(timeout->tv_sec * 1000 + timeout->tv_usec / 1000) : -1;
  int ret = rpoll(fds.data(), fds.size(), ms);
  if (readfds) FD_ZERO(readfds);
  if (writefds) FD_ZERO(writefds);
  if (exceptfds) FD_ZERO(exceptfds);
  if (ret <= 0) return ret;
  ret = 0;
  for (const pollfd& p : fds) {
    if (readfds && (p.revents & (POLLIN | POLLHUP))) {
      FD_SET(p.fd, readfds);
      ++ret;
    }
    if (writefds && (p.revents & POLLOUT)) {
      FD_SET(p.fd, writefds);
      ++ret;
    }
    if (exceptfds && (p.revents & ~(POLLIN | POLLOUT))) {
      FD_SET(p.fd, exceptfds);
      ++ret;
    }
  }
  return ret;
}

}  // extern "C"
