// Datagram rsockets: see rsocket_dgram.h. Everything a peer sends is
// checked: a UDP datagram without the tag, version 4, length 16 and a
// QPN, or a UD message shorter than its GRH and ds_header or of another
// version, is dropped (a datagram socket drops, it does not fail).
#include "rsocket_dgram.h"
#include "srdma_cm_private.h"

#include "errors.h"
#include "objects.h"

#include <arpa/inet.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <fcntl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace srdma::rdmacm::rs {
namespace {

constexpr std::uint64_t kRecvFlag = std::uint64_t{1} << 63;
constexpr std::uint8_t kOpDataUdp = 0;  // RS_OP_DATA
constexpr std::uint8_t kOpCtrlUdp = 7;  // RS_OP_CTRL

std::uint64_t key_of(const sockaddr_in& a) {
  return std::uint64_t{ntohl(a.sin_addr.s_addr)} << 16 | ntohs(a.sin_port);
}

void* alloc_pages(std::size_t len) {
  len = (len + 4095) & ~std::size_t{4095};
  void* p = std::aligned_alloc(4096, len);
  if (p) std::memset(p, 0, len);
  return p;
}

int post_recv(Dgram& d, int slot) {
  ibv_sge sge[2] = {{reinterpret_cast<std::uintptr_t>(d.rbuf + std::size_t(d.rq_size) * kDsSlot), kGrhBytes, d.rmr->lkey},
                    {reinterpret_cast<std::uintptr_t>(d.rbuf + std::size_t(slot) * kDsSlot), kDsSlot, d.rmr->lkey}};
  ibv_recv_wr wr{}, *bad;
  wr.wr_id = kRecvFlag | static_cast<std::uint64_t>(slot);
  wr.sg_list = sge;
  wr.num_sge = 2;
  return ibv_post_recv(d.id->qp, &wr, &bad) ? -1 : 0;
}

// The UD QP, its buffers and receives, on the device's address; the UDP
// socket bound there too unless the application bound it.
int setup(RSocket& rs) {
  Dgram& d = *rs.dg;
  if (d.id) return 0;
  if (rdma_create_id(nullptr, &d.id, &rs, RDMA_PS_UDP)) return -1;
  sockaddr_in any{};
  any.sin_family = AF_INET;
  if (rdma_bind_addr(d.id, reinterpret_cast<sockaddr*>(&any))) return -1;
  ibv_gid gid{};
  if (!d.id->verbs || ibv_query_gid(d.id->verbs, 1, 0, &gid)) return rs_fail("rsocket", ENODEV, "no device address");
  std::uint32_t dev_ip;
  std::memcpy(&dev_ip, gid.raw + 12, 4);  // the IPv4-mapped GID's address
  sockaddr_in local{};
  socklen_t len = sizeof local;
  if (getsockname(d.udp, reinterpret_cast<sockaddr*>(&local), &len)) return -1;
  if (local.sin_port == 0) {  // unbound: at the device's address, as its datagrams leave from there
    local.sin_family = AF_INET;
    local.sin_addr.s_addr = dev_ip;
    if (bind(d.udp, reinterpret_cast<sockaddr*>(&local), sizeof local)) return -1;
    len = sizeof local;
    getsockname(d.udp, reinterpret_cast<sockaddr*>(&local), &len);
  }
  d.ip = local.sin_addr.s_addr == INADDR_ANY ? dev_ip : local.sin_addr.s_addr;
  d.port = local.sin_port;

  d.channel = ibv_create_comp_channel(d.id->verbs);
  if (!d.channel) return -1;
  fcntl(d.channel->fd, F_SETFL, fcntl(d.channel->fd, F_GETFL) | O_NONBLOCK);
  d.cq = ibv_create_cq(d.id->verbs, d.sq_size + d.rq_size, &rs, d.channel, 0);
  if (!d.cq) return -1;
  ibv_qp_init_attr qa{};
  qa.send_cq = d.cq;
  qa.recv_cq = d.cq;
  qa.qp_type = IBV_QPT_UD;
  qa.sq_sig_all = 1;
  qa.cap.max_send_wr = static_cast<std::uint32_t>(d.sq_size);
  qa.cap.max_recv_wr = static_cast<std::uint32_t>(d.rq_size);
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 2;
  qa.cap.max_inline_data = rs.sq_inline;
  if (rdma_create_qp(d.id, nullptr, &qa)) return -1;
  rs.sq_inline = static_cast<std::uint16_t>(std::min<std::uint32_t>(qa.cap.max_inline_data, kQpMaxSize));
  const std::size_t rlen = std::size_t(d.rq_size) * kDsSlot + kGrhBytes;
  const std::size_t slen = std::size_t(d.sq_size) * kDsSlot;
  d.rbuf = static_cast<std::uint8_t*>(alloc_pages(rlen));
  d.sbuf = static_cast<std::uint8_t*>(alloc_pages(slen));
  if (!d.rbuf || !d.sbuf) return errno = ENOMEM, -1;
  d.rmr = ibv_reg_mr(d.id->pd, d.rbuf, rlen, IBV_ACCESS_LOCAL_WRITE);
  d.smr = ibv_reg_mr(d.id->pd, d.sbuf, slen, IBV_ACCESS_LOCAL_WRITE);
  if (!d.rmr || !d.smr) return -1;
  for (int i = 0; i < d.sq_size; ++i) d.free_slots.push_back(i);
  for (int i = 0; i < d.rq_size; ++i)
    if (post_recv(d, i)) return -1;
  return 0;
}

DgramPeer& peer_of(Dgram& d, const sockaddr_in& a) { return d.peers[key_of(a)]; }

// An AH to `ip` (network order): a GRH naming the peer by its
// IPv4-mapped GID, as the drop-in's UD address vectors do.
ibv_ah* make_ah(Dgram& d, std::uint32_t ip) {
  ibv_ah_attr a{};
  a.is_global = 1;
  a.grh.dgid.raw[10] = 0xff;
  a.grh.dgid.raw[11] = 0xff;
  std::memcpy(a.grh.dgid.raw + 12, &ip, 4);
  a.grh.hop_limit = 64;
  a.dlid = static_cast<std::uint16_t>(ntohl(ip) & 0xffff);
  a.port_num = 1;
  return ibv_create_ah(d.id->pd, &a);
}

ssize_t send_udp(Dgram& d, const sockaddr_in& to, std::uint8_t op, const void* data, std::size_t len, int flags) {
  std::uint8_t h[kDsUdpHeaderBytes] = {};
  const std::uint32_t tag = htonl(kDsUdpTag), qpn = htonl(d.id->qp->qp_num & 0xFFFFFF);
  std::memcpy(h, &tag, 4);
  h[4] = 4;
  h[5] = op;
  h[6] = kDsUdpHeaderBytes;
  std::memcpy(h + 8, &qpn, 4);
  std::memcpy(h + 12, &d.ip, 4);
  iovec v[2] = {{h, sizeof h}, {const_cast<void*>(data), len}};
  msghdr m{};
  m.msg_name = const_cast<sockaddr_in*>(&to);
  m.msg_namelen = sizeof to;
  m.msg_iov = v;
  m.msg_iovlen = len ? 2 : 1;
  const ssize_t r = sendmsg(d.udp, &m, flags & MSG_DONTWAIT);
  return r < 0 ? r : r - static_cast<ssize_t>(sizeof h);
}

// Reads what waits on the UDP socket and the CQ. Never blocks.
void progress(RSocket& rs) {
  Dgram& d = *rs.dg;
  if (!d.id) return;
  std::uint8_t buf[kDsSlot + kDsUdpHeaderBytes];
  for (;;) {
    sockaddr_in from{};
    socklen_t flen = sizeof from;
    const ssize_t n = recvfrom(d.udp, buf, sizeof buf, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &flen);
    if (n < 0) break;
    std::uint32_t tag, qpn;
    std::memcpy(&tag, buf, 4);
    std::memcpy(&qpn, buf + 8, 4);
    qpn = ntohl(qpn) & 0xFFFFFF;
    if (n < static_cast<ssize_t>(kDsUdpHeaderBytes) || ntohl(tag) != kDsUdpTag || buf[4] != 4 ||
        buf[6] != kDsUdpHeaderBytes || from.sin_family != AF_INET || (buf[5] != kOpDataUdp && buf[5] != kOpCtrlUdp) ||
        qpn == 0) {
      fail("rrecvfrom", EPROTO, "dropped a UDP datagram that is not an rsocket's");
      continue;
    }
    DgramPeer& p = peer_of(d, from);
    if (buf[5] == kOpDataUdp) (void)send_udp(d, from, kOpCtrlUdp, nullptr, 0, MSG_DONTWAIT);  // our QPN back
    if (!p.ah || p.qpn != qpn) {
      if (p.ah) ibv_destroy_ah(p.ah);
      p.ah = make_ah(d, from.sin_addr.s_addr);
      p.qpn = qpn;
    }
    if (buf[5] == kOpDataUdp && d.ready.size() < static_cast<std::size_t>(d.rq_size)) {
      DgramMsg m;
      m.from = from;
      m.data.assign(buf + kDsUdpHeaderBytes, buf + n);
      m.length = static_cast<std::uint32_t>(m.data.size());
      d.ready.push_back(std::move(m));
    }
  }
  ibv_wc wc[16];
  int n;
  while ((n = ibv_poll_cq(d.cq, 16, wc)) > 0) {
    for (int i = 0; i < n; ++i) {
      if (!(wc[i].wr_id & kRecvFlag)) {
        d.free_slots.push_back(static_cast<int>(wc[i].wr_id));
        continue;
      }
      const int slot = static_cast<int>(wc[i].wr_id & 0xFFFF);
      const std::uint8_t* h = d.rbuf + std::size_t(slot) * kDsSlot;
      const bool ok = wc[i].status == IBV_WC_SUCCESS && wc[i].byte_len >= kGrhBytes + kDsHeaderBytes &&
                      wc[i].byte_len <= kGrhBytes + kDsSlot && h[0] == 4 && h[1] == kDsHeaderBytes;
      if (!ok) {
        if (wc[i].status == IBV_WC_SUCCESS) fail("rrecvfrom", EPROTO, "dropped a UD message without a ds_header");
        if (wc[i].status != IBV_WC_WR_FLUSH_ERR) post_recv(d, slot);
        continue;
      }
      DgramMsg m;
      m.from.sin_family = AF_INET;
      std::memcpy(&m.from.sin_port, h + 2, 2);
      std::memcpy(&m.from.sin_addr.s_addr, h + 4, 4);
      m.slot = slot;
      m.offset = kDsHeaderBytes;
      m.length = wc[i].byte_len - static_cast<std::uint32_t>(kGrhBytes + kDsHeaderBytes);
      d.ready.push_back(std::move(m));
    }
  }
}

// Sleeps until the UDP socket or the CQ has something (bounded).
void wait_any(RSocket& rs, std::unique_lock<std::mutex>& lock) {
  Dgram& d = *rs.dg;
  if (!d.armed) {
    ibv_req_notify_cq(d.cq, 0);
    d.armed = true;
    return;  // the caller polls once more: CQEs from before the arming
  }
  pollfd p[2] = {{d.udp, POLLIN, 0}, {d.channel->fd, POLLIN, 0}};
  lock.unlock();
  (void)srdma_poll_receiving(d.channel->context, p, 2, 5000);  // receiving meanwhile, as wait_for
  lock.lock();
  dgram_after_wait(rs);
}

}  // namespace

Dgram::~Dgram() {
  for (auto& [k, p] : peers)
    if (p.ah) ibv_destroy_ah(p.ah);
  if (id && id->qp) rdma_destroy_qp(id);
  if (cq) ibv_destroy_cq(cq);
  if (channel) ibv_destroy_comp_channel(channel);
  if (rmr) ibv_dereg_mr(rmr);
  if (smr) ibv_dereg_mr(smr);
  std::free(rbuf);
  std::free(sbuf);
  if (id) rdma_destroy_id(id);
  if (udp >= 0) close(udp);
}

int dgram_socket(RSocket& rs) {
  rs.dg = std::make_unique<Dgram>();
  rs.dg->udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (rs.dg->udp < 0) return -1;
  rs.fd = rs.dg->udp;
  return 0;
}

// The UDP socket is IPv4 whatever the rsocket's domain (the ds_ headers
// we send carry IPv4 addresses, version 4): an AF_INET6 rsocket's
// addresses are converted on the way in (ipv4_of) and out (present_addr).
int dgram_bind(RSocket& rs, const sockaddr* addr, socklen_t len) {
  sockaddr_in v4;
  if (ipv4_of("rbind", addr, len, v4)) return -1;
  std::lock_guard lock(rs.mu);
  // The loopback address is the device's, as rdma_bind_addr takes it (the
  // kernel's CM binds loopback to its first device): peers send to the
  // device's address, and our datagrams name it as their source. (udpong's
  // server binds what getaddrinfo(NULL) gives: ::1 or 127.0.0.1.)
  if (v4.sin_addr.s_addr == htonl(INADDR_LOOPBACK) && !device_stands_for_host()) {
    DeviceRef* dev = device();
    if (!dev) return -1;
    v4.sin_addr.s_addr = htonl(dev->ipv4);
  }
  if (bind(rs.dg->udp, reinterpret_cast<const sockaddr*>(&v4), sizeof v4)) return -1;
  return setup(rs);
}

int dgram_connect(RSocket& rs, const sockaddr* addr, socklen_t len) {
  sockaddr_in v4;
  if (ipv4_of("rconnect", addr, len, v4)) return -1;
  std::lock_guard lock(rs.mu);
  if (setup(rs)) return -1;
  if (connect(rs.dg->udp, reinterpret_cast<const sockaddr*>(&v4), sizeof v4)) return -1;
  rs.dg->peer = v4;
  rs.dg->connected = true;
  return 0;
}

int dgram_name(RSocket& rs, bool peer, sockaddr* addr, socklen_t* len) {
  sockaddr_storage a{};
  socklen_t alen = sizeof a;
  const int r = peer ? getpeername(rs.dg->udp, reinterpret_cast<sockaddr*>(&a), &alen)
                     : getsockname(rs.dg->udp, reinterpret_cast<sockaddr*>(&a), &alen);
  if (r) return -1;
  present_addr(rs.domain, reinterpret_cast<const sockaddr*>(&a), addr, len);
  return 0;
}

ssize_t dgram_sendto(RSocket& rs, const void* buf, std::size_t len, int flags, const sockaddr* to, socklen_t tolen) {
  std::unique_lock lock(rs.mu);
  Dgram& d = *rs.dg;
  sockaddr_in dst{};
  if (to) {
    if (ipv4_of("rsendto", to, tolen, dst)) return -1;
  } else if (d.connected) {
    dst = d.peer;
  } else {
    return rs_fail("rsend", EDESTADDRREQ, "not connected");
  }
  if (len && !buf) return rs_fail("rsendto", EFAULT, "NULL buffer");
  if (len + kDsHeaderBytes > kDsSlot) return rs_fail("rsendto", EMSGSIZE, "over 2040 bytes (RS_SNDLOWAT less the ds_header)");
  if (setup(rs)) return -1;
  progress(rs);
  DgramPeer& p = peer_of(d, dst);
  if (!p.ah) return send_udp(d, dst, kOpDataUdp, buf, len, flags);
  while (d.free_slots.empty()) {
    progress(rs);
    if (!d.free_slots.empty()) break;
    if (nonblocking(rs, flags)) return errno = EWOULDBLOCK, -1;
    wait_any(rs, lock);
  }
  const int slot = d.free_slots.back();
  d.free_slots.pop_back();
  std::uint8_t* m = d.sbuf + std::size_t(slot) * kDsSlot;
  m[0] = 4;
  m[1] = kDsHeaderBytes;
  std::memcpy(m + 2, &d.port, 2);
  std::memcpy(m + 4, &d.ip, 4);
  if (len) std::memcpy(m + kDsHeaderBytes, buf, len);
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(m), static_cast<std::uint32_t>(len + kDsHeaderBytes), d.smr->lkey};
  ibv_send_wr wr{}, *bad;
  wr.wr_id = static_cast<std::uint64_t>(slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = sge.length <= rs.sq_inline ? IBV_SEND_INLINE : 0;
  wr.wr.ud.ah = p.ah;
  wr.wr.ud.remote_qpn = p.qpn;
  wr.wr.ud.remote_qkey = RDMA_UDP_QKEY;
  if (ibv_post_send(d.id->qp, &wr, &bad)) {
    d.free_slots.push_back(slot);
    return rs_fail("rsendto", EIO, "ibv_post_send failed");
  }
  return static_cast<ssize_t>(len);
}

ssize_t dgram_recvfrom(RSocket& rs, void* buf, std::size_t len, int flags, sockaddr* from, socklen_t* fromlen) {
  std::unique_lock lock(rs.mu);
  Dgram& d = *rs.dg;
  if (!d.id) return rs_fail("rrecvfrom", EINVAL, "neither bound nor connected");
  for (;;) {
    progress(rs);
    if (!d.ready.empty()) break;
    if (nonblocking(rs, flags)) return errno = EWOULDBLOCK, -1;
    wait_any(rs, lock);
  }
  DgramMsg& m = d.ready.front();
  const std::size_t n = std::min<std::size_t>(len, m.length);
  const std::uint8_t* src = m.slot >= 0 ? d.rbuf + std::size_t(m.slot) * kDsSlot + m.offset : m.data.data();
  if (n) std::memcpy(buf, src, n);
  if (from && fromlen) present_addr(rs.domain, reinterpret_cast<const sockaddr*>(&m.from), from, fromlen);
  if (!(flags & MSG_PEEK)) {
    if (m.slot >= 0) post_recv(d, m.slot);
    d.ready.pop_front();
  }
  return static_cast<ssize_t>(n);
}

short dgram_revents(RSocket& rs, short events) {
  Dgram& d = *rs.dg;
  progress(rs);
  short r = 0;
  if ((events & POLLIN) && !d.ready.empty()) r |= POLLIN;
  if ((events & POLLOUT) && (!d.id || !d.free_slots.empty())) r |= POLLOUT;
  return r;
}

bool dgram_arm(RSocket& rs) {
  Dgram& d = *rs.dg;
  if (!d.cq || d.armed) return false;
  ibv_req_notify_cq(d.cq, 0);
  d.armed = true;
  return true;
}

void dgram_wait_fds(RSocket& rs, std::vector<pollfd>& out) {
  Dgram& d = *rs.dg;
  out.push_back({d.udp, POLLIN, 0});
  if (d.channel) out.push_back({d.channel->fd, POLLIN, 0});
}

void dgram_after_wait(RSocket& rs) {
  Dgram& d = *rs.dg;
  if (!d.channel) return;
  ibv_cq* cq;
  void* ctx;
  while (ibv_get_cq_event(d.channel, &cq, &ctx) == 0) {
    ibv_ack_cq_events(cq, 1);
    d.armed = false;
  }
}

}  // namespace srdma::rdmacm::rs
