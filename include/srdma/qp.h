// A queue pair (like ib_qp / ibv_qp) of one of three transports (QpType):
// RC, UC (no acknowledgements, a message with a lost packet is dropped) or
// UD (datagrams of one packet to any QP an address handle names, ah.h).
//
// A QueuePair is a stable object owned through std::unique_ptr; it keeps
// its PD, its CQs and its device alive. Posting and polling may happen on
// different threads; post_send executes the work in the poster's thread
// where the link allows (the in-process link does), keeping RC ordering.
#pragma once

#include <cstdint>
#include <memory>

#include "srdma/counters.h"
#include "srdma/poll_context.h"
#include "srdma/qp_attr.h"
#include "srdma/status.h"
#include "srdma/wr.h"

namespace srdma {

class CompletionQueue;
class SharedReceiveQueue;

namespace detail {
struct QpImpl;
struct MrPoolAccess;
}

enum QpCreateFlags : std::uint32_t {
  // The core takes the send and receive CQs from the device's CQ pool
  // (the earlier design of the shared CQ pool, seed 000): send_cq and
  // recv_cq must be null; the CQs come from the vector serving
  // `affinity_hint` (a CPU; round robin when negative), with exactly the
  // entries the QP's caps can produce reserved (max_send_wr on the send CQ,
  // max_recv_wr on the receive CQ), and go back when the QP is destroyed.
  QP_CREATE_ASSIGN_CQS = 1u << 0,
  // The device's GSI QP, QP1 (IBA 13.5.1, IB_QPT_GSI): a UD QP with the
  // well-known QPN 1 that carries the CM's MADs (kGsiQkey). One per
  // device: EBUSY while one exists.
  QP_CREATE_GSI = 1u << 1,
  // An RC or UC QP without congestion control (DCQCN) on a device that
  // has it: its requests are not ECN-capable, CNPs for it are dropped and
  // its rate is never paced. (No effect where the device has it off.)
  QP_CREATE_NO_CONGESTION_CONTROL = 1u << 2,
};


struct QpInitAttr {
  CompletionQueue* send_cq = nullptr;
  CompletionQueue* recv_cq = nullptr;
  QpCaps cap;
  bool sq_sig_all = false;  // every send WR completes with a CQE
  void* qp_context = nullptr;
  std::uint32_t create_flags = 0;  // QpCreateFlags
  int affinity_hint = -1;          // with QP_CREATE_ASSIGN_CQS: a CPU number
  PollContext assign_poll_ctx = PollContext::kSoftirq;
  // Receives come from this SRQ (of the same device) instead of the QP's
  // own queue: cap.max_recv_wr and max_recv_sge are ignored and post_recv
  // on the QP is EINVAL. Several QPs may share one.
  SharedReceiveQueue* srq = nullptr;
  // kXrcIni (through ProtectionDomain::create_qp): a send CQ only, no
  // receive CQ, SRQ or receive caps; each WR names the remote XRC SRQ
  // (wr.xrc.remote_srqn). kXrcTgt QPs are made by XrcDomain::create_tgt_qp.
  QpType qp_type = QpType::kRc;
};

// What QueuePair::connect needs to know about the other end, and the
// attributes an RC connection gets (those rdma_cm would pick).
struct RcConnection {
  std::uint64_t peer_addr = 0;  // Device::address() of the peer
  std::uint32_t peer_qpn = 0;
  std::uint32_t access = 0;     // qp_access_flags: what the peer may do to us
  std::uint32_t sq_psn = 0;     // our first PSN
  std::uint32_t rq_psn = 0;     // the peer's first PSN
  std::uint32_t path_mtu = 4096;
  std::uint8_t min_rnr_timer = 1;
  std::uint8_t rnr_retry = 7;
  std::uint8_t retry_cnt = 7;
  std::uint8_t timeout = 14;
};

class QueuePair {
 public:
  // Destroys the QP; its outstanding WRs are dropped with it, and its MR
  // pool (mr_pool.h) is freed, MRs handed out included.
  ~QueuePair();
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

  // IBA's transitions RESET -> INIT -> RTR -> RTS, RTS <-> SQD, SQE -> RTS,
  // any -> RESET or ERR, with the attributes each requires and allows.
  // EINVAL names the wrong transition or attribute; the QP is unchanged.
  Result<void> modify(const QpAttr& attr, std::uint32_t attr_mask);
  QpAttr query() const;
  QpState state() const;
  // RESET -> INIT -> RTR -> RTS in one call, with the attributes of `c`.
  // Stops at the first refusal and returns it (the QP is left where it got).
  Result<void> connect(const RcConnection& c);

  // Posts a list linked by `next`. On error, *bad_wr names the first WR not
  // posted: all before it are posted, none after it. ENOMEM when the queue
  // is full; EINVAL for a WR beyond the QP's caps or in a state that does
  // not accept sends (RESET, INIT, RTR). In ERR, WRs complete with flush.
  // UD: SEND and SEND_WITH_IMM only, with wr.ud naming an AH of this PD,
  // at most the port's active MTU (else EINVAL); a UD or UC send completes
  // once handed to the link (nothing answers it).
  Result<void> post_send(const SendWr& wr, const SendWr** bad_wr = nullptr);
  Result<void> post_recv(const RecvWr& wr, const RecvWr** bad_wr = nullptr);
  // The type 1 Bind Memory Window verb (IBA 10.6.7.2.4, ibv_bind_mw): posts
  // a bind of `mw` over `info` on the send queue, with the window's next
  // key byte, and returns that key (also mw.rkey() from now on). It
  // executes in QP order and completes as kBindMw when signaled; a rule it
  // breaks completes it with kMwBindErr (and the QP goes to error). A bind
  // of length 0 (no MR) unbinds. EINVAL: not a live type 1 window, unknown
  // access bits, an address or length without an MR, and what post_send
  // refuses; EPERM: the MR is of another PD than the window (verbs.h).
  Result<std::uint32_t> bind_mw(MemoryWindow& mw, const MwBindInfo& info, std::uint64_t wr_id = 0,
                                std::uint32_t send_flags = SEND_SIGNALED);

  std::uint32_t qp_num() const;
  // What the transport did on this QP: packets, retransmissions, NAKs,
  // drops by reason (counters.h). Any thread.
  TransportCounters counters() const;
  void* context() const;
  // The CQs it completes into (assigned ones included).
  CompletionQueue* send_cq() const;
  CompletionQueue* recv_cq() const;

 private:
  friend class ProtectionDomain;
  friend class XrcDomain;
  friend struct detail::MrPoolAccess;
  explicit QueuePair(std::unique_ptr<detail::QpImpl> s);
  std::unique_ptr<detail::QpImpl> state_;
};

}  // namespace srdma
