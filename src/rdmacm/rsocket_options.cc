// rsetsockopt, rgetsockopt and rfcntl: what rdma-core 44's rsockets take,
// with its answers (buffer sizes doubled as Linux's are, SO_LINGER kept
// inverted, TCP_MAXSEG from the path MTU), everything else ENOTSUP. A
// value shorter than its option needs is EINVAL rather than a read past it.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <rdma/rsocket.h>
#include <sys/socket.h>

#include <cstdarg>
#include <cstring>

#include "rsocket.h"

namespace srdma::rdmacm::rs {
namespace {

void set_bit(std::uint64_t& opts, int optname, bool on) {
  if (optname < 0 || optname >= 64) return;
  if (on)
    opts |= std::uint64_t{1} << optname;
  else
    opts &= ~(std::uint64_t{1} << optname);
}
bool bit(std::uint64_t opts, int optname) { return optname >= 0 && optname < 64 && (opts >> optname) & 1; }

int put_int(void* optval, socklen_t* optlen, int v) {
  if (!optval || !optlen || *optlen < sizeof(int)) return rs_fail("rgetsockopt", EINVAL, "optlen too short for an int");
  std::memcpy(optval, &v, sizeof v);
  *optlen = sizeof(int);
  return 0;
}

}  // namespace
}  // namespace srdma::rdmacm::rs

using namespace srdma::rdmacm::rs;  // NOLINT: the C entry points below

extern "C" {

int rsetsockopt(int socket, int level, int optname, const void* optval, socklen_t optlen) {
  RSocketRef rs = lookup(socket);
  if (!rs) return rs_fail("rsetsockopt", EBADF, "not an rsocket");
  const bool is_linger = level == SOL_SOCKET && optname == SO_LINGER;
  const socklen_t need = is_linger ? sizeof(linger) : (level == SOL_RDMA && optname == RDMA_ROUTE ? 1 : sizeof(int));
  if (!optval || optlen < need) return rs_fail("rsetsockopt", EINVAL, "option value missing or too short");
  int v = 0;
  if (!is_linger && optlen >= sizeof(int)) std::memcpy(&v, optval, sizeof v);
  // A datagram rsocket's socket options are its UDP socket's, as rdma-core
  // passes them on (its buffers are fixed: 64 slots of 2 KiB each way).
  // Its UDP socket is IPv4 (rsocket_dgram.cc): an AF_INET6 one's
  // IPV6_V6ONLY is kept here, as a stream rsocket's is.
  if (rs->type == SOCK_DGRAM && level != SOL_RDMA && level != IPPROTO_IPV6)
    return setsockopt(rs->fd, level, optname, optval, optlen);
  std::lock_guard lock(rs->mu);
  switch (level) {
    case SOL_SOCKET:
      switch (optname) {
        case SO_REUSEADDR:
          if (rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &v, sizeof v) && rs->state == kInit)
            return -1;
          set_bit(rs->so_opts, optname, v);
          return 0;
        case SO_RCVBUF:
          if (!rs->rbuf) rs->rbuf_size = static_cast<std::uint32_t>(v) << 1;
          return 0;
        case SO_SNDBUF:
          if (!rs->sbuf) rs->sbuf_size = static_cast<std::uint32_t>(v) << 1;
          if (rs->sbuf_size < kSndLowat) rs->sbuf_size = kSndLowat << 1;
          return 0;
        case SO_LINGER: {
          linger l;
          std::memcpy(&l, optval, sizeof l);
          set_bit(rs->so_opts, optname, !l.l_onoff);  // inverted: the default (0) is on
          return 0;
        }
        case SO_KEEPALIVE:
          set_bit(rs->so_opts, optname, v);
          watch_keepalive(rs, v != 0);  // takes the service's lock, never ours
          return 0;
        case SO_OOBINLINE:
          set_bit(rs->so_opts, optname, v);
          return 0;
      }
      break;
    case IPPROTO_IP:
      if (optname == IP_TOS) {
        std::uint8_t tos = static_cast<std::uint8_t>(v);
        if (rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos)) return -1;
        rs->ip_tos = v;
        return 0;
      }
      break;
    case IPPROTO_TCP:
      switch (optname) {
        case TCP_KEEPCNT:
        case TCP_KEEPINTVL:
        case TCP_MAXSEG:
        case TCP_CONGESTION:
          return 0;  // nothing to do on a reliable connection, as rdma-core
        case TCP_KEEPIDLE:
          if (v <= 0) return rs_fail("rsetsockopt", EINVAL, "TCP_KEEPIDLE must be positive");
          rs->keepalive_time = static_cast<unsigned>(v);
          if (bit(rs->so_opts, SO_KEEPALIVE)) watch_keepalive(rs, true);  // the new period from now
          return 0;
        case TCP_NODELAY:
          set_bit(rs->tcp_opts, optname, v);
          return 0;
      }
      break;
    case IPPROTO_IPV6:
      if (optname == IPV6_V6ONLY) {
        set_bit(rs->ipv6_opts, optname, v);
        return 0;
      }
      break;
    case SOL_RDMA:
      if (rs->state >= kOpening) return rs_fail("rsetsockopt", EINVAL, "SOL_RDMA options before connecting only");
      switch (optname) {
        case RDMA_SQSIZE:
          rs->sq_size = static_cast<std::uint16_t>(std::min<std::uint32_t>(static_cast<std::uint32_t>(v), kQpMaxSize));
          return 0;
        case RDMA_RQSIZE:
          rs->rq_size = static_cast<std::uint16_t>(std::min<std::uint32_t>(static_cast<std::uint32_t>(v), kQpMaxSize));
          return 0;
        case RDMA_INLINE:
          rs->sq_inline = static_cast<std::uint16_t>(std::min<std::uint32_t>(static_cast<std::uint32_t>(v), kQpMaxSize));
          return 0;
        case RDMA_IOMAPSIZE:
          if (v < 0) return rs_fail("rsetsockopt", EINVAL, "negative RDMA_IOMAPSIZE");
          rs->target_iomap_size = static_cast<std::uint16_t>(
              scale_to_value(static_cast<std::uint8_t>(value_to_scale(std::min(v, 0x7FFF), 8)), 8));
          return 0;
        case RDMA_ROUTE:
          // Our CM resolves the one path itself; the path is kept for
          // rgetsockopt as rdma-core keeps it.
          rs->route.assign(static_cast<const std::uint8_t*>(optval), static_cast<const std::uint8_t*>(optval) + optlen);
          return 0;
      }
      break;
  }
  return rs_fail("rsetsockopt", ENOTSUP, "option not supported by rsockets");
}

int rgetsockopt(int socket, int level, int optname, void* optval, socklen_t* optlen) {
  RSocketRef rs = lookup(socket);
  if (!rs) return rs_fail("rgetsockopt", EBADF, "not an rsocket");
  if (!optval || !optlen) return rs_fail("rgetsockopt", EFAULT, "NULL option value or length");
  if (rs->type == SOCK_DGRAM && level != SOL_RDMA && level != IPPROTO_IPV6)
    return getsockopt(rs->fd, level, optname, optval, optlen);
  std::lock_guard lock(rs->mu);
  switch (level) {
    case SOL_SOCKET:
      switch (optname) {
        case SO_REUSEADDR:
        case SO_KEEPALIVE:
        case SO_OOBINLINE:
          return put_int(optval, optlen, bit(rs->so_opts, optname));
        case SO_RCVBUF:
          return put_int(optval, optlen, static_cast<int>(rs->rbuf_size));
        case SO_SNDBUF:
          return put_int(optval, optlen, static_cast<int>(rs->sbuf_size));
        case SO_LINGER: {
          if (*optlen < sizeof(linger)) return rs_fail("rgetsockopt", EINVAL, "optlen too short for a linger");
          linger l{!bit(rs->so_opts, optname), 0};
          std::memcpy(optval, &l, sizeof l);
          *optlen = sizeof l;
          return 0;
        }
        case SO_ERROR: {
          const int e = rs->err;
          rs->err = 0;
          return put_int(optval, optlen, e);
        }
        case SO_TYPE:
          return put_int(optval, optlen, SOCK_STREAM);
      }
      break;
    case IPPROTO_IP:
      if (optname == IP_TOS) return put_int(optval, optlen, rs->ip_tos);
      break;
    case IPPROTO_TCP:
      switch (optname) {
        case TCP_KEEPCNT:
        case TCP_KEEPINTVL:
          return put_int(optval, optlen, 1);
        case TCP_KEEPIDLE:
          return put_int(optval, optlen, static_cast<int>(rs->keepalive_time));
        case TCP_NODELAY:
          return put_int(optval, optlen, bit(rs->tcp_opts, optname));
        case TCP_MAXSEG: {
          const rdma_route& r = rs->id->route;
          return put_int(optval, optlen, r.num_paths && r.path_rec ? 1 << (7 + r.path_rec->mtu) : 2048);
        }
        case TCP_INFO: {
          tcp_info info{};
          info.tcpi_state = (rs->state & kConnected) ? TCP_ESTABLISHED : TCP_CLOSE;
          info.tcpi_snd_cwnd = rs->sq_size;
          const socklen_t n = std::min<socklen_t>(*optlen, sizeof info);
          std::memcpy(optval, &info, n);
          *optlen = n;
          return 0;
        }
      }
      break;
    case IPPROTO_IPV6:
      if (optname == IPV6_V6ONLY) return put_int(optval, optlen, bit(rs->ipv6_opts, optname));
      break;
    case SOL_RDMA:
      switch (optname) {
        case RDMA_SQSIZE:
          return put_int(optval, optlen, rs->sq_size);
        case RDMA_RQSIZE:
          return put_int(optval, optlen, rs->rq_size);
        case RDMA_INLINE:
          return put_int(optval, optlen, rs->sq_inline);
        case RDMA_IOMAPSIZE:
          return put_int(optval, optlen, rs->target_iomap_size);
        case RDMA_ROUTE:
          if (*optlen < rs->route.size()) return rs_fail("rgetsockopt", EINVAL, "optlen too short for the route");
          std::memcpy(optval, rs->route.data(), rs->route.size());
          *optlen = static_cast<socklen_t>(rs->route.size());
          return 0;
      }
      break;
  }
  return rs_fail("rgetsockopt", ENOTSUP, "option not supported by rsockets");
}

int rfcntl(int socket, int cmd, ...) {
  RSocketRef rs = lookup(socket);
  if (!rs) return rs_fail("rfcntl", EBADF, "not an rsocket");
  va_list ap;
  va_start(ap, cmd);
  int ret = 0;
  std::lock_guard lock(rs->mu);
  switch (cmd) {
    case F_GETFL:
      ret = rs->fs_flags;
      break;
    case F_SETFL:
      rs->fs_flags = va_arg(ap, int);  // only O_NONBLOCK matters: our fds never block underneath
      break;
    case F_GETFD:
      ret = rs->fd_flags;
      break;
    case F_SETFD:
      rs->fd_flags = va_arg(ap, int);
      break;
    default:
      ret = rs_fail("rfcntl", ENOTSUP, "F_GETFL, F_SETFL, F_GETFD and F_SETFD only");
  }
  va_end(ap);
  return ret;
}

}  // extern "C"
