// rsockets (<rdma/rsocket.h>) over this librdmacm and libibverbs, speaking
// rdma-core 44's protocol (rsocket_wire.h) so that either end may be
// rdma-core's. One RSocket per rsocket() call; its number is the fd of the
// RDMA CM event channel it owns (as rdma-core's is), so it is a real open
// descriptor that no other file shares (librspreload maps its own fds onto
// these).
//
// Locks: `slock` serializes senders and `rlock` receivers (stream order);
// `mu` guards the state, the counters and the CQ. One thread at a time
// sleeps in poll() on the channels (`polling`); others wait on `changed`,
// which is signalled whenever completions were handled. Order:
// slock/rlock, then mu.
#pragma once

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

#include "rsocket_wire.h"

namespace srdma::rdmacm::rs {

// rdma-core's state bits: passive, opening, connected (readable and
// writable apart), then the ends.
enum : int {
  kInit = 0,
  kBound = 0x0001,
  kListening = 0x0002,
  kOpening = 0x0004,
  kResolvingAddr = kOpening | 0x0010,
  kResolvingRoute = kOpening | 0x0020,
  kConnecting = kOpening | 0x0040,
  kAccepting = kOpening | 0x0080,
  kConnected = 0x0100,
  kWritable = 0x0200,
  kReadable = 0x0400,
  kConnectRdwr = kConnected | kReadable | kWritable,
  kConnectError = 0x0800,
  kDisconnected = 0x1000,
  kError = 0x2000,
};

// Defaults as rdma-core's (no /etc/rdma/rsocket files read).
constexpr std::uint32_t kDefaultMem = 1 << 17;
constexpr std::uint16_t kDefaultQpSize = 384;
constexpr std::uint16_t kDefaultInline = 64;

// One riomap'd region of ours: registered, and (writable ones) offered to
// the peer at an iomap index.
struct IomapMr {
  std::uint64_t offset = 0;
  ibv_mr* mr = nullptr;
  int index = -1;      // -1: local only
  bool sent = false;   // its entry was written to the peer
};

struct Dgram;  // rsocket_dgram.h

struct RSocket {
  int fd = -1;  // the index: channel->fd (a datagram socket's: its UDP socket)
  int type = SOCK_STREAM;
  std::unique_ptr<Dgram> dg;  // SOCK_DGRAM's
  int domain = AF_INET;
  std::mutex slock, rlock, mu;
  std::condition_variable changed;  // with mu: completions handled, look again
  bool polling = false;             // a thread sleeps on the channels

  rdma_event_channel* channel = nullptr;
  rdma_cm_id* id = nullptr;
  int state = kInit;
  int err = 0;        // SO_ERROR
  int fs_flags = 0;   // O_NONBLOCK (rfcntl F_SETFL)
  int fd_flags = 0;   // FD_CLOEXEC (F_SETFD)
  sockaddr_storage dst{};

  // Options (rsetsockopt): sizes before the connection exists.
  std::uint32_t sbuf_size = kDefaultMem;
  std::uint32_t rbuf_size = kDefaultMem;
  std::uint16_t sq_size = kDefaultQpSize;
  std::uint16_t rq_size = kDefaultQpSize;
  std::uint16_t sq_inline = kDefaultInline;
  std::uint16_t target_iomap_size = 0;
  std::uint64_t so_opts = 0, tcp_opts = 0, ipv6_opts = 0;
  int ip_tos = 0;
  unsigned keepalive_time = 0;  // seconds (TCP_KEEPIDLE)
  std::vector<std::uint8_t> route;  // RDMA_ROUTE's path data, kept for rgetsockopt

  // Verbs.
  ibv_comp_channel* cq_channel = nullptr;
  ibv_cq* cq = nullptr;
  bool cq_armed = false;
  unsigned unacked_events = 0;

  // Send side: our bounce buffer (its tail holds control messages), the
  // peer's buffer advertisements in target_sgl, its credits.
  std::uint8_t* sbuf = nullptr;
  ibv_mr* smr = nullptr;
  ibv_sge ssgl[2]{};
  std::uint32_t sbuf_bytes_avail = 0;
  int sqe_avail = 0;
  std::uint16_t sseq_no = 0, sseq_comp = 0;
  unsigned ctrl_seqno = 0, ctrl_max_seqno = kCtrlQueue;
  unsigned ctrl_slot = 0;
  bool swap = false;  // the peer's byte order differs: swap what we write it
  Sge remote_sgl{};   // the peer's target SGL (length: entries)
  std::uint32_t remote_sge = 0;
  Sge remote_iomap{};  // the peer's iomap area (length: entries)

  // What the peer writes into: our target SGL and iomap entries.
  std::uint8_t* target_buf = nullptr;
  ibv_mr* target_mr = nullptr;
  volatile Sge* target_sgl = nullptr;
  volatile Iomap* target_iomap = nullptr;
  int target_sge = 0;

  // Receive side: the ring buffer the peer writes into, the ring of DATA
  // messages (bytes each) not yet read.
  std::uint8_t* rbuf = nullptr;
  ibv_mr* rmr = nullptr;
  std::uint32_t rbuf_offset = 0, rbuf_bytes_avail = 0, rbuf_free_offset = 0;
  std::uint16_t rseq_no = 0, rseq_comp = 0;
  std::vector<std::uint32_t> rmsg;
  std::size_t rmsg_head = 0, rmsg_tail = 0;
  RecvLedger ledger;

  // riomap.
  std::list<IomapMr> iomaps;
  std::vector<bool> remote_slots;  // the peer's iomap indexes in use
  bool iomap_pending = false;

  ~RSocket();
};

using RSocketRef = std::shared_ptr<RSocket>;

// The table of live rsockets by number.
RSocketRef lookup(int fd);
void insert(const RSocketRef& rs);
void erase(int fd);

// rsocket.cc: drives an opening socket's connection one step (or to the
// end when blocking); -1 with EINPROGRESS while it is under way. REQUIRES
// rs.mu held in `lock`.
int do_connect(RSocket& rs, std::unique_lock<std::mutex>& lock, bool nonblock);
// Reads and handles the socket's pending CM events without blocking
// (DISCONNECTED after the connection: the peer is gone). REQUIRES rs.mu.
void drain_cm_events(RSocket& rs);
// Marks the connection broken with errno `code`, reason under
// SRDMA_VERBS_DEBUG; moves the QP to ERR so the peer can write nothing more.
// REQUIRES rs.mu.
void protocol_error(RSocket& rs, int code, const char* why);

// rsocket_data.cc.
// The QP, CQ, buffers and posted receives of a connection (rdma-core's
// rs_create_ep). REQUIRES rs.mu.
int create_endpoint(RSocket& rs);
// Our private data for the REQ or REP.
ConnData local_conn_data(const RSocket& rs);
// The connect or accept parameters: our private data formatted into `pd`
// (which the result points at), rdma-core's flow control and retry counts.
rdma_conn_param conn_param(const RSocket& rs, std::uint8_t (&pd)[kConnDataBytes]);
// Takes the peer's private data (already parsed). REQUIRES rs.mu.
void save_conn_data(RSocket& rs, const ConnData& c);
// Polls the CQ, handling every completion, and gives credits when due.
// REQUIRES rs.mu.
void process_cq(RSocket& rs);
// Waits (unless nonblock: EWOULDBLOCK) until test(rs) holds, polling the
// CQ. REQUIRES rs.mu held in `lock`; releases it while blocked.
using Test = bool (*)(RSocket&);
int wait_for(RSocket& rs, std::unique_lock<std::mutex>& lock, bool nonblock, Test test);
// Reads one completion event off the channel if there is one (rpoll's fd
// fired). REQUIRES rs.mu.
void take_cq_event(RSocket& rs);
bool can_send(RSocket& rs);
bool conn_can_send(RSocket& rs);
bool have_rdata(RSocket& rs);
bool conn_have_rdata(RSocket& rs);
bool all_sends_done(RSocket& rs);
bool ctrl_avail(const RSocket& rs);
// Posts a zero-length control message. REQUIRES rs.mu.
int post_ctrl(RSocket& rs, std::uint32_t imm);
// One RDMA WRITE of `len` bytes from `src` (copied through the send buffer
// unless inline), to the peer's addr/rkey, with `imm` (kOpData, kOpIomapSgl)
// or without (kOpWrite). REQUIRES rs.mu.
int post_payload(RSocket& rs, const void* src, std::uint32_t len, std::uint32_t op_imm, bool with_imm,
                 std::uint64_t addr, std::uint32_t rkey);
inline bool nonblocking(const RSocket& rs, int flags) { return (rs.fs_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT); }

// rsocket_iomap.cc: writes the queued iomap entries to the peer. REQUIRES
// rs.slock and rs.mu (in `lock`).
int send_iomaps(RSocket& rs, std::unique_lock<std::mutex>& lock, int flags);
// Deregisters every mapping (rclose).
void free_iomaps(RSocket& rs);

// rsocket_keepalive.cc: starts or stops SO_KEEPALIVE's writes for the
// socket (a watched socket that is freed drops out by itself). REQUIRES
// rs->mu; takes the service's lock after it.
void watch_keepalive(const RSocketRef& rs, bool on);

// Logs (under SRDMA_VERBS_DEBUG) and sets errno; returns -1.
int rs_fail(const char* call, int code, const char* reason);

// Addresses of AF_INET6 rsockets. Our CM and wire are IPv4, so an AF_INET6
// rsocket takes the IPv6 addresses that stand for IPv4 ones (::, ::1 and
// ::ffff:a.b.c.d: ipv4_view) and hands the program back AF_INET6 names.
// The IPv4 address and port an address of `len` bytes names, in `out`;
// -1 with errno EINVAL (too short) or EAFNOSUPPORT (a real IPv6 address, or
// another family), the reason under SRDMA_VERBS_DEBUG.
int ipv4_of(const char* call, const sockaddr* addr, socklen_t len, sockaddr_in& out);
// Writes `v4` to `out` (at most *len bytes, *len set to the whole size) as
// the socket's domain names it: AF_INET as it is, AF_INET6 as
// ::ffff:a.b.c.d (INADDR_ANY as ::, what a dual-stack socket bound to ::
// reports).
void present_addr(int domain, const sockaddr* v4, sockaddr* out, socklen_t* len);

}  // namespace srdma::rdmacm::rs
