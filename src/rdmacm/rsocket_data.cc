// The stream data path of rsockets, rdma-core 44's protocol: data goes as
// RDMA WRITE WITH IMM (DATA, the byte count) into the half of the peer's
// receive buffer it last advertised; the receiver advertises a half again
// (an SGL message: a 16-byte write into the sender's target SGL, the new
// credit limit in the immediate) once the application has read it.
// Every completion the peer causes is checked (RecvLedger, decode_imm):
// a violation ends the connection with EPROTO (protocol_error), nothing
// is written outside our buffers, and the peer gets nothing more.
#include <arpa/inet.h>
#include <byteswap.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <sys/uio.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "rsocket.h"
#include "srdma_cm_private.h"
#include "rsocket_dgram.h"

namespace srdma::rdmacm::rs {
namespace {

constexpr std::uint64_t kRecvFlag = std::uint64_t{1} << 63;
constexpr unsigned kPollTimeUs = 10;  // spin before blocking (rdma-core's polling_time)

std::uint64_t now_us() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return std::uint64_t(t.tv_sec) * 1000000 + std::uint64_t(t.tv_nsec) / 1000;
}

void* alloc_pages(std::size_t len) {
  len = (len + 4095) & ~std::size_t{4095};
  void* p = std::aligned_alloc(4096, len);
  if (p) std::memset(p, 0, len);
  return p;
}

std::uint32_t half(const RSocket& rs) { return rs.rbuf_size >> 1; }

int post_recv(RSocket& rs) {
  ibv_recv_wr wr{}, *bad;
  wr.wr_id = kRecvFlag;
  return ibv_post_recv(rs.id->qp, &wr, &bad) ? (errno = ENOMEM, -1) : 0;
}

// Where the data to send comes from: a buffer, or an iovec walked in order.
struct Source {
  const iovec* iov;
  int iovcnt;
  int idx = 0;
  std::size_t off = 0;
  bool contiguous() const { return iovcnt == 1; }
  const std::uint8_t* here() const { return static_cast<const std::uint8_t*>(iov[idx].iov_base) + off; }
  void copy(std::uint8_t* dst, std::size_t n) {
    while (n) {
      while (off == iov[idx].iov_len) {
        ++idx;
        off = 0;
      }
      const std::size_t k = std::min(n, iov[idx].iov_len - off);
      std::memcpy(dst, here(), k);
      dst += k;
      off += k;
      n -= k;
    }
  }
  void skip(std::size_t n) {
    while (n) {
      while (off == iov[idx].iov_len) {
        ++idx;
        off = 0;
      }
      const std::size_t k = std::min(n, iov[idx].iov_len - off);
      off += k;
      n -= k;
    }
  }
};

std::uint32_t sbuf_left(const RSocket& rs) {
  return static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(rs.sbuf + rs.sbuf_size) - rs.ssgl[0].addr);
}

// One RDMA WRITE (with or without immediate) from `src`: inline when it
// fits, else through the send buffer's ring (two SGEs where it wraps).
int post_from(RSocket& rs, Source& src, std::uint32_t len, std::uint32_t imm, bool with_imm, std::uint64_t addr,
              std::uint32_t rkey) {
  ibv_send_wr wr{}, *bad;
  ibv_sge sge[2];
  wr.wr_id = imm;
  wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = addr;
  wr.wr.rdma.rkey = rkey;
  wr.sg_list = sge;
  if (len <= rs.sq_inline && src.contiguous()) {
    sge[0].addr = reinterpret_cast<std::uintptr_t>(src.here());
    sge[0].length = len;
    sge[0].lkey = 0;
    wr.num_sge = len ? 1 : 0;
    wr.send_flags = IBV_SEND_INLINE;
    src.skip(len);
  } else {
    const std::uint32_t left = sbuf_left(rs);
    if (len <= left) {
      src.copy(reinterpret_cast<std::uint8_t*>(rs.ssgl[0].addr), len);
      sge[0] = {rs.ssgl[0].addr, len, rs.smr->lkey};
      wr.num_sge = 1;
      rs.ssgl[0].addr = len < left ? rs.ssgl[0].addr + len : reinterpret_cast<std::uintptr_t>(rs.sbuf);
    } else {
      src.copy(reinterpret_cast<std::uint8_t*>(rs.ssgl[0].addr), left);
      src.copy(rs.sbuf, len - left);
      sge[0] = {rs.ssgl[0].addr, left, rs.smr->lkey};
      sge[1] = {reinterpret_cast<std::uintptr_t>(rs.sbuf), len - left, rs.smr->lkey};
      wr.num_sge = 2;
      rs.ssgl[0].addr = reinterpret_cast<std::uintptr_t>(rs.sbuf) + (len - left);
    }
    wr.send_flags = len <= rs.sq_inline ? IBV_SEND_INLINE : 0;
  }
  if (ibv_post_send(rs.id->qp, &wr, &bad)) {
    protocol_error(rs, EIO, "ibv_post_send failed");
    errno = EIO;
    return -1;
  }
  return 0;
}

// rs_send_credits: a buffer half when one is free (an SGL write), else
// only the new credit limit.
void send_credits(RSocket& rs) {
  ++rs.ctrl_seqno;
  rs.rseq_comp = static_cast<std::uint16_t>(rs.rseq_no + (rs.rq_size >> 1));
  const std::uint32_t imm = make_imm(kOpSgl, static_cast<std::uint32_t>(rs.rseq_no) + rs.rq_size);
  if (rs.rbuf_bytes_avail < half(rs)) {
    post_ctrl(rs, imm);
    return;
  }
  Sge sge{reinterpret_cast<std::uintptr_t>(rs.rbuf + rs.rbuf_free_offset), rs.rmr->rkey, half(rs)};
  if (rs.swap) sge = Sge{bswap_64(sge.addr), bswap_32(sge.key), bswap_32(sge.length)};
  // From a control slot at the send buffer's tail: the write may complete
  // after this frame is gone.
  auto* slot = rs.sbuf + rs.sbuf_size + sizeof(Sge) * (rs.ctrl_seqno % kCtrlQueue);
  std::memcpy(slot, &sge, sizeof sge);
  ibv_send_wr wr{}, *bad;
  ibv_sge s{reinterpret_cast<std::uintptr_t>(slot), sizeof sge, rs.smr->lkey};
  wr.wr_id = imm;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.imm_data = htonl(imm);
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.send_flags = rs.sq_inline >= sizeof sge ? IBV_SEND_INLINE : 0;
  wr.wr.rdma.remote_addr = rs.remote_sgl.addr + std::uint64_t{rs.remote_sge} * sizeof(Sge);
  wr.wr.rdma.rkey = rs.remote_sgl.key;
  if (ibv_post_send(rs.id->qp, &wr, &bad)) {
    protocol_error(rs, EIO, "ibv_post_send of credits failed");
    return;
  }
  rs.ledger.grant(half(rs));
  rs.rbuf_bytes_avail -= half(rs);
  rs.rbuf_free_offset += half(rs);
  if (rs.rbuf_free_offset >= rs.rbuf_size) rs.rbuf_free_offset = 0;
  if (++rs.remote_sge == rs.remote_sgl.length) rs.remote_sge = 0;
}

void update_credits(RSocket& rs) {
  const bool due = rs.rbuf_bytes_avail >= half(rs) || static_cast<std::int16_t>(rs.rseq_no - rs.rseq_comp) >= 0;
  if (due && ctrl_avail(rs) && (rs.state & kConnected)) send_credits(rs);
}

void handle_recv(RSocket& rs, const ibv_wc& wc) {
  if (!(wc.wc_flags & IBV_WC_WITH_IMM)) return protocol_error(rs, EPROTO, "a message without an immediate");
  const Decoded d = decode_imm(ntohl(wc.imm_data), rs.target_iomap_size);
  const char* why = nullptr;
  switch (d.action) {
    case Action::kData:
      if (!rs.ledger.accept_data(d.value, &why)) return protocol_error(rs, EPROTO, why);
      rs.rmsg[rs.rmsg_tail] = d.value;
      if (++rs.rmsg_tail == rs.rmsg.size()) rs.rmsg_tail = 0;
      return;
    case Action::kCredits:
      rs.sseq_comp = static_cast<std::uint16_t>(d.value);
      return;
    case Action::kIomapUpdated:
    case Action::kKeepalive:
      return;
    case Action::kDisconnect:
      rs.state = kDisconnected;
      return;
    case Action::kShutdown:
      if (rs.state & kWritable)
        rs.state &= ~kReadable;
      else
        rs.state = kDisconnected;
      return;
    case Action::kError:
      return protocol_error(rs, EPROTO, d.why);
  }
}

void handle_send(RSocket& rs, const ibv_wc& wc) {
  const auto imm = static_cast<std::uint32_t>(wc.wr_id);
  switch (imm_op(imm)) {
    case kOpSgl:
      ++rs.ctrl_max_seqno;
      break;
    case kOpCtrl:
      ++rs.ctrl_max_seqno;
      if (imm_data(imm) == kCtrlDisconnect) rs.state = kDisconnected;
      break;
    case kOpIomapSgl:
      ++rs.sqe_avail;
      rs.sbuf_bytes_avail += sizeof(Iomap);
      break;
    default:  // DATA, WRITE
      ++rs.sqe_avail;
      rs.sbuf_bytes_avail += imm_data(imm);
      break;
  }
  if (wc.status != IBV_WC_SUCCESS && (rs.state & kConnected)) {
    rs.state = kError;
    rs.err = EIO;
  }
}

}  // namespace

bool ctrl_avail(const RSocket& rs) { return rs.ctrl_seqno != rs.ctrl_max_seqno; }

bool can_send(RSocket& rs) {
  if (!rs.target_sgl) return false;
  return rs.sqe_avail > 0 && rs.sbuf_bytes_avail >= kSndLowat && rs.sseq_no != rs.sseq_comp &&
         rs.target_sgl[rs.target_sge].length != 0;
}
bool conn_can_send(RSocket& rs) { return can_send(rs) || !(rs.state & kWritable); }
bool have_rdata(RSocket& rs) { return rs.rmsg_head != rs.rmsg_tail; }
bool conn_have_rdata(RSocket& rs) { return have_rdata(rs) || !(rs.state & kReadable); }
bool all_sends_done(RSocket& rs) {
  return int(rs.ctrl_max_seqno) - int(rs.ctrl_seqno) + rs.sqe_avail == rs.sq_size || !(rs.state & kConnected);
}

int create_endpoint(RSocket& rs) {
  ibv_device_attr da{};
  int max_wr = kQpMaxSize;
  if (rs.id->verbs && !ibv_query_device(rs.id->verbs, &da)) max_wr = std::min(max_wr, da.max_qp_wr);
  rs.sq_size = static_cast<std::uint16_t>(std::clamp<int>(rs.sq_size, kQpMinSize, max_wr));
  rs.rq_size = static_cast<std::uint16_t>(std::clamp<int>(rs.rq_size, kQpMinSize, max_wr));
  // Halves that a DATA immediate can count, and room for two sends.
  rs.rbuf_size = std::clamp<std::uint32_t>(rs.rbuf_size & ~1u, 2 * kSndLowat, 1u << 30);
  rs.sbuf_size = std::clamp<std::uint32_t>(rs.sbuf_size, 2 * kSndLowat, 1u << 30);

  rs.cq_channel = ibv_create_comp_channel(rs.id->verbs);
  if (!rs.cq_channel) return -1;
  fcntl(rs.cq_channel->fd, F_SETFL, fcntl(rs.cq_channel->fd, F_GETFL) | O_NONBLOCK);
  rs.cq = ibv_create_cq(rs.id->verbs, rs.sq_size + rs.rq_size, &rs, rs.cq_channel, 0);
  if (!rs.cq) return -1;

  ibv_qp_init_attr qa{};
  qa.qp_context = &rs;
  qa.send_cq = rs.cq;
  qa.recv_cq = rs.cq;
  qa.qp_type = IBV_QPT_RC;
  qa.sq_sig_all = 1;
  qa.cap.max_send_wr = rs.sq_size;
  qa.cap.max_recv_wr = rs.rq_size;
  qa.cap.max_send_sge = 2;
  qa.cap.max_recv_sge = 1;
  qa.cap.max_inline_data = rs.sq_inline;
  if (rdma_create_qp(rs.id, nullptr, &qa)) return -1;
  rs.sq_inline = static_cast<std::uint16_t>(std::min<std::uint32_t>(qa.cap.max_inline_data, kQpMaxSize));

  ibv_pd* pd = rs.id->pd;
  rs.rmsg.assign(rs.rq_size + 1u, 0);
  const std::size_t sbuf_total = rs.sbuf_size + sizeof(Sge) * kCtrlQueue;
  rs.sbuf = static_cast<std::uint8_t*>(alloc_pages(sbuf_total));
  const std::size_t target_len = sizeof(Sge) * kSglSize + sizeof(Iomap) * rs.target_iomap_size;
  rs.target_buf = static_cast<std::uint8_t*>(alloc_pages(target_len));
  rs.rbuf = static_cast<std::uint8_t*>(alloc_pages(rs.rbuf_size));
  if (!rs.sbuf || !rs.target_buf || !rs.rbuf) return errno = ENOMEM, -1;
  rs.smr = ibv_reg_mr(pd, rs.sbuf, sbuf_total, IBV_ACCESS_LOCAL_WRITE);
  rs.target_mr = ibv_reg_mr(pd, rs.target_buf, target_len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  rs.rmr = ibv_reg_mr(pd, rs.rbuf, rs.rbuf_size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!rs.smr || !rs.target_mr || !rs.rmr) return -1;
  rs.target_sgl = reinterpret_cast<volatile Sge*>(rs.target_buf);
  if (rs.target_iomap_size)
    rs.target_iomap = reinterpret_cast<volatile Iomap*>(rs.target_buf + sizeof(Sge) * kSglSize);

  rs.ssgl[0].addr = rs.ssgl[1].addr = reinterpret_cast<std::uintptr_t>(rs.sbuf);
  rs.ssgl[0].lkey = rs.ssgl[1].lkey = rs.smr->lkey;
  rs.sbuf_bytes_avail = rs.sbuf_size;
  rs.rbuf_free_offset = half(rs);
  rs.rbuf_bytes_avail = half(rs);
  rs.sqe_avail = rs.sq_size - static_cast<int>(rs.ctrl_max_seqno);
  rs.rseq_comp = rs.rq_size >> 1;
  rs.ledger.reset(half(rs), rs.rq_size);
  for (int i = 0; i < rs.rq_size; ++i)
    if (post_recv(rs)) return -1;
  return 0;
}

ConnData local_conn_data(const RSocket& rs) {
  ConnData c;
  c.version = kVersion;
  c.flags = kFlagIomap | (__BYTE_ORDER == __BIG_ENDIAN ? kFlagNet : 0);
  c.credits = rs.rq_size;
  c.target_iomap_size = static_cast<std::uint8_t>(value_to_scale(rs.target_iomap_size, 8));
  c.target_sgl = Sge{reinterpret_cast<std::uintptr_t>(rs.target_sgl), rs.target_mr->rkey, kSglSize};
  c.data_buf = Sge{reinterpret_cast<std::uintptr_t>(rs.rbuf), rs.rmr->rkey, half(rs)};
  return c;
}

rdma_conn_param conn_param(const RSocket& rs, std::uint8_t (&pd)[kConnDataBytes]) {
  format_conn_data(local_conn_data(rs), pd);
  rdma_conn_param param{};
  param.private_data = pd;
  param.private_data_len = sizeof pd;
  param.flow_control = 1;
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  return param;
}

void save_conn_data(RSocket& rs, const ConnData& c) {
  rs.remote_sgl = c.target_sgl;
  rs.remote_sge = 1;
  rs.swap = ((c.flags & kFlagNet) != 0) != (__BYTE_ORDER == __BIG_ENDIAN);
  if (c.flags & kFlagIomap) {
    rs.remote_iomap.addr = c.target_sgl.addr + sizeof(Sge) * std::uint64_t{c.target_sgl.length};
    rs.remote_iomap.length = static_cast<std::uint32_t>(scale_to_value(c.target_iomap_size, 8));
    rs.remote_iomap.key = c.target_sgl.key;
  }
  rs.target_sgl[0].addr = c.data_buf.addr;
  rs.target_sgl[0].key = c.data_buf.key;
  rs.target_sgl[0].length = c.data_buf.length;
  rs.sseq_comp = c.credits;
}

int post_ctrl(RSocket& rs, std::uint32_t imm) {
  ibv_send_wr wr{}, *bad;
  wr.wr_id = imm;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.imm_data = htonl(imm);
  if (imm_op(imm) == kOpCtrl) ++rs.ctrl_seqno;
  if (ibv_post_send(rs.id->qp, &wr, &bad)) {
    protocol_error(rs, EIO, "ibv_post_send of a control message failed");
    errno = EIO;
    return -1;
  }
  return 0;
}

int post_payload(RSocket& rs, const void* src, std::uint32_t len, std::uint32_t op_imm, bool with_imm,
                 std::uint64_t addr, std::uint32_t rkey) {
  iovec v{const_cast<void*>(src), len};
  Source s{&v, 1};
  return post_from(rs, s, len, op_imm, with_imm, addr, rkey);
}

void process_cq(RSocket& rs) {
  if (!rs.cq) return;
  update_credits(rs);
  ibv_wc wc[16];
  int received = 0, n;
  bool any = false;
  while ((n = ibv_poll_cq(rs.cq, 16, wc)) > 0) {
    any = true;
    for (int i = 0; i < n; ++i) {
      if (wc[i].wr_id & kRecvFlag) {
        if (wc[i].status != IBV_WC_SUCCESS) {
          // Flushed or failed while connected: the QP died under us (a
          // peer's bad access, a retry limit), the connection is gone.
          if (rs.state & kConnected) protocol_error(rs, ECONNRESET, "a receive failed: the QP is in error");
          continue;
        }
        ++received;
        handle_recv(rs, wc[i]);
      } else {
        handle_send(rs, wc[i]);
      }
    }
  }
  if (any) rs.changed.notify_all();  // a thread waiting in wait_for may be satisfied now
  if (rs.state & kConnected) {
    while (received--)
      if (post_recv(rs)) {
        protocol_error(rs, EIO, "cannot repost a receive");
        break;
      }
  }
  update_credits(rs);
}

void take_cq_event(RSocket& rs) {
  if (!rs.cq_channel) return;
  ibv_cq* cq;
  void* ctx;
  while (ibv_get_cq_event(rs.cq_channel, &cq, &ctx) == 0) {
    rs.cq_armed = false;
    if (++rs.unacked_events >= 64u) {
      ibv_ack_cq_events(rs.cq, rs.unacked_events);
      rs.unacked_events = 0;
    }
  }
}

int wait_for(RSocket& rs, std::unique_lock<std::mutex>& lock, bool nonblock, Test test) {
  std::uint64_t start = 0;
  for (;;) {
    process_cq(rs);
    if (test(rs)) return 0;
    if (!rs.cq) return rs_fail("rsocket", ENOTCONN, "not connected");
    if (nonblock) {
      errno = EWOULDBLOCK;
      return -1;
    }
    if (!start) start = now_us();
    if (now_us() - start <= kPollTimeUs) continue;
    if (!rs.cq_armed) {
      ibv_req_notify_cq(rs.cq, 0);
      rs.cq_armed = true;
      continue;  // poll once more: CQEs from before the arming make no event
    }
    // One thread at a time sleeps on the channels; the others wait for it
    // (or for any thread that handles completions) on the condition
    // variable and look again, so none sleeps through what another read.
    if (rs.polling) {
      rs.changed.wait_for(lock, std::chrono::seconds(5));
      continue;
    }
    // The CM channel too: a peer that goes away without a word sends DREQ.
    pollfd p[2] = {{rs.cq_channel->fd, POLLIN, 0}, {rs.channel->fd, POLLIN, 0}};
    rs.polling = true;
    lock.unlock();
    // Receiving from the wire meanwhile (srdma_poll_receiving): a plain
    // poll() here waited for the device's receive thread, which stands
    // aside for a while after the empty CQ polls just made.
    (void)srdma_poll_receiving(rs.cq_channel->context, p, 2, 5000);  // bounded: rpoll in another thread may take the event
    lock.lock();
    rs.polling = false;
    take_cq_event(rs);
    if (p[1].revents) drain_cm_events(rs);
    rs.changed.notify_all();
  }
}

namespace {

RSocketRef open_for_data(int socket, const char* call, int flags) {
  RSocketRef rs = lookup(socket);
  if (!rs) {
    rs_fail(call, EBADF, "not an rsocket");
    return nullptr;
  }
  std::unique_lock lock(rs->mu);
  if (rs->state & kOpening) {
    if (do_connect(*rs, lock, nonblocking(*rs, flags))) {
      if (errno == EINPROGRESS) errno = EAGAIN;
      return nullptr;
    }
  }
  if (!rs->cq) {
    rs_fail(call, ENOTCONN, "not connected");
    return nullptr;
  }
  return rs;
}

ssize_t send_common(RSocket& rs, Source src, std::size_t len, int flags) {
  std::scoped_lock sl(rs.slock);
  std::unique_lock lock(rs.mu);
  int ret = 0;
  if (rs.iomap_pending) {
    ret = send_iomaps(rs, lock, flags);
    if (ret) return ret;
  }
  std::size_t left = len;
  while (left) {
    if (!can_send(rs)) {
      ret = wait_for(rs, lock, nonblocking(rs, flags), conn_can_send);
      if (ret) break;
      if (!(rs.state & kWritable)) {
        ret = rs_fail("rsend", (rs.state & kError) && rs.err ? rs.err : ECONNRESET, "the connection is closed for sending");
        break;
      }
    }
    // Whole WRITEs of up to 64 KiB from the start. rdma-core starts a send
    // at 2 KiB and doubles (RS_OLAP_START_SIZE) so that a NIC's DMA of one
    // WRITE overlaps the copy of the next; a post here sends in this very
    // thread, so there is nothing to overlap, and every extra WRITE is a
    // CQE, an ACK asked for and a credit on each side (six WRITEs for
    // each 64 KiB rsend). The peer sees DATA of any size it advertised.
    std::uint32_t xfer = static_cast<std::uint32_t>(std::min<std::size_t>(left, kMaxTransfer));
    Sge t{rs.target_sgl[rs.target_sge].addr, rs.target_sgl[rs.target_sge].key,
          rs.target_sgl[rs.target_sge].length};
    if (!valid_target_sge(t)) {
      protocol_error(rs, EPROTO, "the peer advertised a buffer over 2^29 bytes or wrapping");
      ret = rs_fail("rsend", EPROTO, "bad buffer advertisement");
      break;
    }
    xfer = std::min({xfer, rs.sbuf_bytes_avail, t.length});
    ++rs.sseq_no;
    --rs.sqe_avail;
    rs.sbuf_bytes_avail -= xfer;
    rs.target_sgl[rs.target_sge].addr = t.addr + xfer;
    rs.target_sgl[rs.target_sge].length = t.length - xfer;
    if (t.length == xfer && ++rs.target_sge == kSglSize) rs.target_sge = 0;
    ret = post_from(rs, src, xfer, make_imm(kOpData, xfer), true, t.addr, t.key);
    if (ret) break;
    left -= xfer;
  }
  return (ret && left == len) ? ret : static_cast<ssize_t>(len - left);
}

// Copies up to len queued bytes; consumes them unless peek.
std::size_t copy_out(RSocket& rs, std::uint8_t* buf, std::size_t len, bool peek) {
  std::size_t head = rs.rmsg_head, done = 0;
  std::uint32_t off = rs.rbuf_offset;
  while (done < len && head != rs.rmsg_tail) {
    const std::uint32_t avail = rs.rmsg[head];  // what is left of this message
    const std::uint32_t n = static_cast<std::uint32_t>(std::min<std::size_t>(len - done, avail));
    const std::uint32_t end = rs.rbuf_size - off;
    if (n > end) {
      std::memcpy(buf + done, rs.rbuf + off, end);
      std::memcpy(buf + done + end, rs.rbuf, n - end);
      off = n - end;
    } else {
      std::memcpy(buf + done, rs.rbuf + off, n);
      off += n;
      if (off == rs.rbuf_size) off = 0;
    }
    done += n;
    if (!peek) {
      rs.rbuf_bytes_avail += n;
      if (n < avail) {
        rs.rmsg[head] -= n;
      } else {
        ++rs.rseq_no;
        rs.ledger.consumed();
        if (++head == rs.rmsg.size()) head = 0;
      }
    } else if (n == avail) {
      if (++head == rs.rmsg.size()) head = 0;
    }
    if (!peek) rs.rmsg_head = head;
  }
  if (!peek) rs.rbuf_offset = off;
  return done;
}

ssize_t recv_common(RSocket& rs, std::uint8_t* buf, std::size_t len, int flags) {
  std::scoped_lock rl(rs.rlock);
  std::unique_lock lock(rs.mu);
  std::size_t left = len;
  int ret = 0;
  do {
    if (!have_rdata(rs)) {
      ret = wait_for(rs, lock, nonblocking(rs, flags), conn_have_rdata);
      if (ret) break;
      if (!have_rdata(rs) && (rs.state & kError)) {
        ret = rs_fail("rrecv", rs.err ? rs.err : ECONNRESET, "the connection failed");
        break;
      }
    }
    const std::size_t got = copy_out(rs, buf + (len - left), left, flags & MSG_PEEK);
    left -= got;
    if (flags & MSG_PEEK) break;
  } while (left && (flags & MSG_WAITALL) && (rs.state & kReadable));
  update_credits(rs);  // the peer may be waiting for the room we just made
  return (ret && left == len) ? ret : static_cast<ssize_t>(len - left);
}

}  // namespace
}  // namespace srdma::rdmacm::rs

using namespace srdma::rdmacm::rs;  // NOLINT: the C entry points below

extern "C" {

// A datagram rsocket, or null.
static RSocketRef dgram(int socket) {
  RSocketRef rs = lookup(socket);
  return rs && rs->type == SOCK_DGRAM ? rs : nullptr;
}

ssize_t rsend(int socket, const void* buf, size_t len, int flags) {
  if (RSocketRef ds = dgram(socket)) return dgram_sendto(*ds, buf, len, flags, nullptr, 0);
  RSocketRef rs = open_for_data(socket, "rsend", flags);
  if (!rs) return -1;
  if (len && !buf) return rs_fail("rsend", EFAULT, "NULL buffer");
  iovec v{const_cast<void*>(buf), len};
  return send_common(*rs, Source{&v, 1}, len, flags);
}

ssize_t rsendto(int socket, const void* buf, size_t len, int flags, const sockaddr* dest_addr, socklen_t addrlen) {
  if (RSocketRef ds = dgram(socket)) return dgram_sendto(*ds, buf, len, flags, dest_addr, addrlen);
  if (dest_addr || addrlen) return rs_fail("rsendto", EISCONN, "a stream rsocket takes no address");
  return rsend(socket, buf, len, flags);
}

static ssize_t rsendv(int socket, const iovec* iov, int iovcnt, int flags) {
  if (iovcnt < 0 || (iovcnt && !iov)) return rs_fail("rsendv", EINVAL, "bad iovec");
  RSocketRef rs = open_for_data(socket, "rsendv", flags);
  if (!rs) return -1;
  std::size_t len = 0;
  for (int i = 0; i < iovcnt; ++i) len += iov[i].iov_len;
  if (!len) return 0;
  return send_common(*rs, Source{iov, iovcnt}, len, flags);
}

ssize_t rsendmsg(int socket, const msghdr* msg, int flags) {
  if (!msg) return rs_fail("rsendmsg", EFAULT, "NULL msghdr");
  if (msg->msg_control && msg->msg_controllen) return rs_fail("rsendmsg", ENOTSUP, "no control messages");
  if (RSocketRef ds = dgram(socket)) {  // one datagram: the iovec gathered
    std::vector<std::uint8_t> all;
    for (std::size_t i = 0; i < msg->msg_iovlen; ++i) {
      const auto* b = static_cast<const std::uint8_t*>(msg->msg_iov[i].iov_base);
      all.insert(all.end(), b, b + msg->msg_iov[i].iov_len);
    }
    return dgram_sendto(*ds, all.data(), all.size(), flags, static_cast<const sockaddr*>(msg->msg_name), msg->msg_namelen);
  }
  return rsendv(socket, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags);
}

ssize_t rwrite(int socket, const void* buf, size_t count) { return rsend(socket, buf, count, 0); }
ssize_t rwritev(int socket, const iovec* iov, int iovcnt) { return rsendv(socket, iov, iovcnt, 0); }

ssize_t rrecv(int socket, void* buf, size_t len, int flags) {
  if (RSocketRef ds = dgram(socket)) return dgram_recvfrom(*ds, buf, len, flags, nullptr, nullptr);
  RSocketRef rs = open_for_data(socket, "rrecv", flags);
  if (!rs) return -1;
  if (len && !buf) return rs_fail("rrecv", EFAULT, "NULL buffer");
  return recv_common(*rs, static_cast<std::uint8_t*>(buf), len, flags);
}

ssize_t rrecvfrom(int socket, void* buf, size_t len, int flags, sockaddr* src_addr, socklen_t* addrlen) {
  if (RSocketRef ds = dgram(socket)) return dgram_recvfrom(*ds, buf, len, flags, src_addr, addrlen);
  const ssize_t ret = rrecv(socket, buf, len, flags);
  if (ret > 0 && src_addr && addrlen) rgetpeername(socket, src_addr, addrlen);
  return ret;
}

// As rdma-core's: the first vector only.
ssize_t rrecvmsg(int socket, msghdr* msg, int flags) {
  if (!msg) return rs_fail("rrecvmsg", EFAULT, "NULL msghdr");
  if (msg->msg_control && msg->msg_controllen) return rs_fail("rrecvmsg", ENOTSUP, "no control messages");
  if (!msg->msg_iovlen) return 0;
  if (RSocketRef ds = dgram(socket))
    return dgram_recvfrom(*ds, msg->msg_iov[0].iov_base, msg->msg_iov[0].iov_len, flags,
                          static_cast<sockaddr*>(msg->msg_name), &msg->msg_namelen);
  return rrecv(socket, msg->msg_iov[0].iov_base, msg->msg_iov[0].iov_len, flags);
}

ssize_t rread(int socket, void* buf, size_t count) { return rrecv(socket, buf, count, 0); }
ssize_t rreadv(int socket, const iovec* iov, int iovcnt) {
  if (iovcnt <= 0 || !iov) return rs_fail("rreadv", EINVAL, "bad iovec");
  return rrecv(socket, iov[0].iov_base, iov[0].iov_len, 0);
}

}  // extern "C"
