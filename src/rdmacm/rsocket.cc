// rsocket lifecycle: rsocket, rbind, rlisten, raccept, rconnect,
// rshutdown, rclose and the address calls, over RDMA CM IDs on event
// channels of their own (always O_NONBLOCK underneath: a blocking call
// waits in poll() on the channel's fd).
//
// Unlike rdma-core, no service thread accepts or drives connections: a
// listener's CONNECT_REQUEST waits on its channel until raccept (whose fd
// rpoll watches) takes it and answers REP at once; a connecting socket
// advances whenever it is called or polled. The QP is ready to receive
// before the REP leaves, so a peer that writes at once is not lost.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "errors.h"
#include "objects.h"
#include "rsocket.h"
#include "rsocket_dgram.h"

namespace srdma::rdmacm::rs {
namespace {

std::mutex g_table_mu;
std::unordered_map<int, RSocketRef>& table() {
  static auto* t = new std::unordered_map<int, RSocketRef>;  // never destroyed: atexit order
  return *t;
}

void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Waits until the CM channel has an event (blocking sockets).
void wait_channel(RSocket& rs, std::unique_lock<std::mutex>& lock) {
  pollfd p{rs.channel->fd, POLLIN, 0};
  lock.unlock();
  (void)poll(&p, 1, 5000);  // bounded: a missed wakeup costs a re-check, not a hang
  lock.lock();
}

int errno_of_event(const rdma_cm_event& e) {
  if (e.event == RDMA_CM_EVENT_REJECTED) return ECONNREFUSED;
  if (e.event == RDMA_CM_EVENT_UNREACHABLE) return e.status == -ETIMEDOUT ? ETIMEDOUT : EHOSTUNREACH;
  if (e.event == RDMA_CM_EVENT_ADDR_ERROR || e.event == RDMA_CM_EVENT_ROUTE_ERROR) return EHOSTUNREACH;
  if (e.event == RDMA_CM_EVENT_DISCONNECTED) return ECONNRESET;
  return ECONNABORTED;
}

RSocketRef make_socket(int domain) {
  auto rs = std::make_shared<RSocket>();
  rs->domain = domain;
  rs->channel = rdma_create_event_channel();
  if (!rs->channel) return nullptr;
  set_nonblock(rs->channel->fd);
  rs->fd = rs->channel->fd;
  return rs;
}

}  // namespace

int rs_fail(const char* call, int code, const char* reason) { return fail(call, code, reason); }

int ipv4_of(const char* call, const sockaddr* addr, socklen_t len, sockaddr_in& out) {
  if (!addr) return rs_fail(call, EFAULT, "NULL address");
  if (len < sizeof(sa_family_t)) return rs_fail(call, EINVAL, "address too short");
  if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)
    return rs_fail(call, EAFNOSUPPORT, "an AF_INET or AF_INET6 address");
  if (len < (addr->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in)))
    return rs_fail(call, EINVAL, "address too short for its family");
  std::uint32_t ip = 0;
  std::uint16_t port = 0;
  if (!ipv4_view(addr, ip, port))
    return rs_fail(call, EAFNOSUPPORT,
                   "an IPv6 address that is not an IPv4 one (softrdma's CM and rsockets are IPv4: "
                   "::, ::1 and ::ffff:a.b.c.d only)");
  out = sockaddr_in{};
  out.sin_family = AF_INET;
  out.sin_addr.s_addr = htonl(ip);
  out.sin_port = htons(port);
  return 0;
}

void present_addr(int domain, const sockaddr* src, sockaddr* out, socklen_t* len) {
  sockaddr_in6 v6{};
  if (domain == AF_INET6 && src->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(src);
    v6.sin6_family = AF_INET6;
    v6.sin6_port = v4->sin_port;
    if (v4->sin_addr.s_addr != htonl(INADDR_ANY)) {
      v6.sin6_addr.s6_addr[10] = 0xff;
      v6.sin6_addr.s6_addr[11] = 0xff;
      std::memcpy(&v6.sin6_addr.s6_addr[12], &v4->sin_addr.s_addr, 4);
    }
    src = reinterpret_cast<const sockaddr*>(&v6);
  }
  const socklen_t size = src->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  std::memcpy(out, src, std::min(*len, size));
  *len = size;
}

RSocketRef lookup(int fd) {
  std::lock_guard lock(g_table_mu);
  auto it = table().find(fd);
  return it == table().end() ? nullptr : it->second;
}
void insert(const RSocketRef& rs) {
  std::lock_guard lock(g_table_mu);
  table()[rs->fd] = rs;
}
void erase(int fd) {
  std::lock_guard lock(g_table_mu);
  table().erase(fd);
}

RSocket::~RSocket() {
  free_iomaps(*this);
  if (id && id->qp) rdma_destroy_qp(id);
  if (cq) {
    if (unacked_events) ibv_ack_cq_events(cq, unacked_events);
    ibv_destroy_cq(cq);
  }
  if (cq_channel) ibv_destroy_comp_channel(cq_channel);
  for (ibv_mr* m : {smr, rmr, target_mr})
    if (m) ibv_dereg_mr(m);
  std::free(sbuf);
  std::free(rbuf);
  std::free(target_buf);
  if (id) rdma_destroy_id(id);
  if (channel) rdma_destroy_event_channel(channel);
}

void protocol_error(RSocket& rs, int code, const char* why) {
  fail("rsocket", code, why);
  if (rs.state & (kConnected | kOpening)) {
    rs.state = kError;
    rs.err = code;
    // No more writes land in our buffers, no more sends leave.
    if (rs.id && rs.id->qp) {
      ibv_qp_attr a{};
      a.qp_state = IBV_QPS_ERR;
      ibv_modify_qp(rs.id->qp, &a, IBV_QP_STATE);
    }
    if (rs.id) rdma_disconnect(rs.id);
  }
}

void drain_cm_events(RSocket& rs) {
  rdma_cm_event* e;
  while (rs.state != kListening && rdma_get_cm_event(rs.channel, &e) == 0) {
    const rdma_cm_event_type type = e->event;
    rdma_ack_cm_event(e);
    if (type == RDMA_CM_EVENT_DISCONNECTED && (rs.state & kConnected)) {
      // The peer is gone (its DREQ), with or without its DISCONNECT message:
      // what it wrote stays readable (rrecv reads queued data first).
      rs.state = kDisconnected;
    }
  }
}

// rdma-core's rs_do_connect, driven by our channel's events.
int do_connect(RSocket& rs, std::unique_lock<std::mutex>& lock, bool nonblock) {
  for (;;) {
    switch (rs.state) {
      case kInit:
      case kBound: {
        if (rdma_resolve_addr(rs.id, nullptr, reinterpret_cast<sockaddr*>(&rs.dst), 2000)) goto failed;
        rs.state = kResolvingAddr;
        continue;
      }
      case kResolvingAddr:
      case kResolvingRoute:
      case kConnecting: {
        rdma_cm_event* e;
        if (rdma_get_cm_event(rs.channel, &e)) {
          if (errno != EAGAIN) goto failed;
          if (nonblock) {
            errno = EINPROGRESS;
            return -1;
          }
          wait_channel(rs, lock);
          continue;
        }
        const rdma_cm_event_type type = e->event;
        if (rs.state == kResolvingAddr && type == RDMA_CM_EVENT_ADDR_RESOLVED) {
          rdma_ack_cm_event(e);
          if (rdma_resolve_route(rs.id, 2000)) goto failed;
          rs.state = kResolvingRoute;
          continue;
        }
        if (rs.state == kResolvingRoute && type == RDMA_CM_EVENT_ROUTE_RESOLVED) {
          rdma_ack_cm_event(e);
          if (create_endpoint(rs)) goto failed;
          std::uint8_t pd[kConnDataBytes];
          rdma_conn_param param = conn_param(rs, pd);
          if (rdma_connect(rs.id, &param)) goto failed;
          rs.state = kConnecting;
          continue;
        }
        if (rs.state == kConnecting && type == RDMA_CM_EVENT_ESTABLISHED) {
          ConnData c;
          const char* why = nullptr;
          const bool ok = parse_conn_data(e->param.conn.private_data, e->param.conn.private_data_len, c, &why);
          rdma_ack_cm_event(e);
          if (!ok) {
            rs.state = kConnectError;
            protocol_error(rs, ECONNREFUSED, why);
            rs.state = kConnectError;
            rs.err = ECONNREFUSED;
            errno = ECONNREFUSED;
            return -1;
          }
          save_conn_data(rs, c);
          rs.state = kConnectRdwr;
          return 0;
        }
        const int code = errno_of_event(*e);
        rdma_ack_cm_event(e);
        rs.state = kConnectError;
        rs.err = code;
        return rs_fail("rconnect", code, "the connection was refused or failed");
      }
      case kConnectError:
      case kDisconnected:
      case kError:
        return rs_fail("rconnect", ENOTCONN, "the connection failed or ended");
      default:
        if (rs.state & kConnected) return 0;
        return rs_fail("rconnect", EINVAL, "not a connecting socket");
    }
  failed:
    rs.err = errno ? errno : ECONNREFUSED;
    rs.state = kConnectError;
    errno = rs.err;
    return -1;
  }
}

}  // namespace srdma::rdmacm::rs

using namespace srdma::rdmacm::rs;  // NOLINT: the C entry points below

extern "C" {

int rsocket(int domain, int type, int protocol) {
  const int base = type & ~(SOCK_CLOEXEC | SOCK_NONBLOCK);
  // AF_INET6 rsockets reach IPv4 peers only (ipv4_of), as a dual-stack
  // socket that is never given a real IPv6 address.
  if (domain != AF_INET && domain != AF_INET6)
    return rs_fail("rsocket", EAFNOSUPPORT, "AF_INET or AF_INET6 only (softrdma's CM is IPv4)");
  if (base != SOCK_STREAM && base != SOCK_DGRAM) return rs_fail("rsocket", ENOTSUP, "SOCK_STREAM or SOCK_DGRAM only");
  if (protocol && protocol != (base == SOCK_STREAM ? IPPROTO_TCP : IPPROTO_UDP))
    return rs_fail("rsocket", ENOTSUP, "protocol is not TCP (stream) or UDP (datagram)");
  if (base == SOCK_DGRAM) {
    auto ds = std::make_shared<RSocket>();
    ds->type = SOCK_DGRAM;
    ds->domain = domain;
    if (dgram_socket(*ds)) return -1;
    ds->fs_flags = (type & SOCK_NONBLOCK) ? O_NONBLOCK : 0;
    ds->fd_flags = (type & SOCK_CLOEXEC) ? FD_CLOEXEC : 0;
    insert(ds);
    return ds->fd;
  }
  RSocketRef rs = make_socket(domain);
  if (!rs) return -1;
  if (rdma_create_id(rs->channel, &rs->id, rs.get(), RDMA_PS_TCP)) return -1;
  rs->fs_flags = (type & SOCK_NONBLOCK) ? O_NONBLOCK : 0;
  rs->fd_flags = (type & SOCK_CLOEXEC) ? FD_CLOEXEC : 0;
  insert(rs);
  return rs->fd;
}

int rbind(int socket, const sockaddr* addr, socklen_t addrlen) {
  RSocketRef rs = lookup(socket);
  if (!rs) return rs_fail("rbind", EBADF, "not an rsocket");
  sockaddr_in v4;
  if (ipv4_of("rbind", addr, addrlen, v4)) return -1;
  if (rs->type == SOCK_DGRAM) return dgram_bind(*rs, addr, addrlen);
  std::lock_guard lock(rs->mu);
  if (rdma_bind_addr(rs->id, reinterpret_cast<sockaddr*>(&v4))) return -1;
  rs->state = kBound;
  return 0;
}

int rlisten(int socket, int backlog) {
  RSocketRef rs = lookup(socket);
  if (!rs) return rs_fail("rlisten", EBADF, "not an rsocket");
  if (rs->type == SOCK_DGRAM) return rs_fail("rlisten", EOPNOTSUPP, "a datagram rsocket does not listen");
  std::lock_guard lock(rs->mu);
  if (rs->state == kListening) return 0;
  if (rdma_listen(rs->id, backlog)) return -1;
  rs->state = kListening;
  return 0;
}

int raccept(int socket, sockaddr* addr, socklen_t* addrlen) {
  RSocketRef ls = lookup(socket);
  if (!ls) return rs_fail("raccept", EBADF, "not an rsocket");
  std::unique_lock lock(ls->mu);
  if (ls->state != kListening) return rs_fail("raccept", EINVAL, "not listening");
  for (;;) {
    rdma_cm_event* e;
    if (rdma_get_cm_event(ls->channel, &e)) {
      if (errno != EAGAIN) return -1;
      if (ls->fs_flags & O_NONBLOCK) return rs_fail("raccept", EAGAIN, "no connection request waits");
      wait_channel(*ls, lock);
      continue;
    }
    if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
      rdma_ack_cm_event(e);
      continue;
    }
    rdma_cm_id* id = e->id;
    ConnData c;
    const char* why = nullptr;
    const bool ok = parse_conn_data(e->param.conn.private_data, e->param.conn.private_data_len, c, &why);
    rdma_ack_cm_event(e);
    if (!ok) {
      // A peer that is not an rsocket of ours: refuse it, accept the next.
      rs_fail("raccept", EPROTO, why);
      rdma_reject(id, nullptr, 0);
      rdma_destroy_id(id);
      continue;
    }
    RSocketRef rs = make_socket(ls->domain);
    if (!rs) {
      rdma_reject(id, nullptr, 0);
      rdma_destroy_id(id);
      return -1;
    }
    rs->id = id;
    id->context = rs.get();
    // Inherited from the listener, as rdma-core's rs_alloc does.
    rs->sbuf_size = ls->sbuf_size;
    rs->rbuf_size = ls->rbuf_size;
    rs->sq_size = ls->sq_size;
    rs->rq_size = ls->rq_size;
    rs->sq_inline = ls->sq_inline;
    rs->target_iomap_size = ls->target_iomap_size;
    rs->fs_flags = ls->fs_flags;
    rs->fd_flags = ls->fd_flags;
    rs->so_opts = ls->so_opts;
    rs->tcp_opts = ls->tcp_opts;
    std::unique_lock nlock(rs->mu);
    if (rdma_migrate_id(id, rs->channel) || create_endpoint(*rs)) {
      const int err = errno;
      rdma_reject(id, nullptr, 0);
      errno = err;
      return -1;  // rs's destructor destroys the ID
    }
    save_conn_data(*rs, c);
    std::uint8_t pd[kConnDataBytes];
    rdma_conn_param param = conn_param(*rs, pd);
    if (rdma_accept(id, &param)) {
      const int err = errno;
      rdma_reject(id, nullptr, 0);
      errno = err;
      return -1;
    }
    // The QP is at RTS: the peer may write as soon as the REP reaches it.
    // ESTABLISHED (the RTU) comes on our channel and is drained later.
    rs->state = kConnectRdwr;
    nlock.unlock();
    insert(rs);
    if (addr && addrlen) present_addr(ls->domain, rdma_get_peer_addr(id), addr, addrlen);
    return rs->fd;
  }
}

int rconnect(int socket, const sockaddr* addr, socklen_t addrlen) {
  RSocketRef rs = lookup(socket);
  if (!rs) return rs_fail("rconnect", EBADF, "not an rsocket");
  if (rs->type == SOCK_DGRAM) return addr ? dgram_connect(*rs, addr, addrlen) : rs_fail("rconnect", EFAULT, "NULL address");
  sockaddr_in v4;
  if (ipv4_of("rconnect", addr, addrlen, v4)) return -1;
  std::unique_lock lock(rs->mu);
  if (rs->state & kOpening) {
    // A second rconnect while one is under way (non-blocking sockets).
    const int r = do_connect(*rs, lock, rs->fs_flags & O_NONBLOCK);
    if (r && errno == EINPROGRESS) errno = EALREADY;
    return r;
  }
  if (rs->state != kInit && rs->state != kBound) return rs_fail("rconnect", EISCONN, "connected or listening");
  std::memcpy(&rs->dst, &v4, sizeof v4);
  return do_connect(*rs, lock, rs->fs_flags & O_NONBLOCK);
}

// rdma-core's rshutdown: tell the peer (DISCONNECT, or SHUTDOWN while we
// still read), then wait until our sends are done.
int rshutdown(int socket, int how) {
  RSocketRef rs = lookup(socket);
  if (!rs) return rs_fail("rshutdown", EBADF, "not an rsocket");
  if (rs->type == SOCK_DGRAM) return 0;
  std::scoped_lock sl(rs->slock);
  std::unique_lock lock(rs->mu);
  if (!(rs->state & kConnected)) {
    if (rs->state & (kDisconnected | kError)) return 0;
    return rs_fail("rshutdown", ENOTCONN, "not connected");
  }
  std::uint32_t ctrl;
  if (how == SHUT_RDWR) {
    ctrl = kCtrlDisconnect;
    rs->state &= ~(kReadable | kWritable);
  } else if (how == SHUT_WR) {
    rs->state &= ~kWritable;
    ctrl = (rs->state & kReadable) ? kCtrlShutdown : kCtrlDisconnect;
  } else if (how == SHUT_RD) {
    rs->state &= ~kReadable;
    if (rs->state & kWritable) return 0;
    ctrl = kCtrlDisconnect;
  } else {
    return rs_fail("rshutdown", EINVAL, "how is not SHUT_RD, SHUT_WR or SHUT_RDWR");
  }
  int ret = 0;
  if (!ctrl_avail(*rs)) ret = wait_for(*rs, lock, false, [](RSocket& r) { return ctrl_avail(r) || !(r.state & kConnected); });
  if (!ret && (rs->state & kConnected) && ctrl_avail(*rs)) ret = post_ctrl(*rs, make_imm(kOpCtrl, ctrl));
  // The DISCONNECT's completion ends the connection (process_cq).
  if (rs->state & kConnected) wait_for(*rs, lock, false, all_sends_done);
  if (ctrl == kCtrlDisconnect && (rs->state & kConnected)) rs->state = kDisconnected;
  return ret;
}

int rclose(int socket) {
  RSocketRef rs = lookup(socket);
  if (!rs) return rs_fail("rclose", EBADF, "not an rsocket");
  if (rs->state & kConnected) rshutdown(socket, SHUT_RDWR);
  erase(socket);
  {
    std::lock_guard lock(rs->mu);
    if (rs->id && rs->id->qp && !(rs->state & (kListening | kBound)) && rs->state != kInit) rdma_disconnect(rs->id);
  }
  return 0;  // the last reference frees it (another thread's call may hold one)
}

int rgetpeername(int socket, sockaddr* addr, socklen_t* addrlen) {
  RSocketRef rs = lookup(socket);
  if (!rs) return rs_fail("rgetpeername", EBADF, "not an rsocket");
  if (!addr || !addrlen) return rs_fail("rgetpeername", EFAULT, "NULL address");
  if (rs->type == SOCK_DGRAM) return dgram_name(*rs, true, addr, addrlen);
  if (!(rs->state & (kConnected | kDisconnected | kError)))
    return rs_fail("rgetpeername", ENOTCONN, "not connected");
  present_addr(rs->domain, rdma_get_peer_addr(rs->id), addr, addrlen);
  return 0;
}

int rgetsockname(int socket, sockaddr* addr, socklen_t* addrlen) {
  RSocketRef rs = lookup(socket);
  if (!rs) return rs_fail("rgetsockname", EBADF, "not an rsocket");
  if (!addr || !addrlen) return rs_fail("rgetsockname", EFAULT, "NULL address");
  if (rs->type == SOCK_DGRAM) return dgram_name(*rs, false, addr, addrlen);
  const sockaddr* local = rdma_get_local_addr(rs->id);
  sockaddr_in any{};  // unbound: the any address, port 0
  any.sin_family = AF_INET;
  present_addr(rs->domain, local->sa_family == AF_INET ? local : reinterpret_cast<sockaddr*>(&any), addr, addrlen);
  return 0;
}

}  // extern "C"
