// One NVMe-oF queue on the target: its QP, its CQ, and a slot per queue
// entry (a posted receive for the command capsule, the response, a data
// buffer), like nvmet_rdma_queue and its nvmet_rdma_rsp array.
//
// Receive buffers and command slots are apart, as nvmet_rdma_cmd and
// nvmet_rdma_rsp are: a capsule that arrives is copied into a free slot and
// its receive buffer is posted again at once; the slot lives on until its
// response SEND completes. The host sends a command as soon as a response
// frees one of its entries, which can be before the target has seen that
// SEND complete (the ACK is coalesced): tying the receive to the slot would
// meet that command with no receive posted, an RNR NAK and a retry.
// A slot's life: capsule copied in -> (RDMA READ of the write data) ->
// namespace I/O -> (RDMA WRITE of the read data) + SEND of the response ->
// the SEND completes -> free. There are twice as many slots as receives
// (like nvmet's rsps); when none is free the capsule waits in its receive
// buffer, not reposted, until one is.
//
// Admission (docs/DESIGN.md, threat model): a CM REQ costs the target a
// QP, a CQ lease and one receive with one command slot of a few KiB (the
// admission slot), enough for the Fabrics Connect and nothing else. The
// receive ring, the slots and their data buffers (megabytes, thousands of
// MTT entries) are allocated and registered only once a valid Connect from
// an allowed host has bound the queue to a controller (grow()). The
// admission slot is never handed out again after that. When the host has
// a DH-HMAC-CHAP secret on the subsystem, the Connect's response asks for
// authentication (AUTHREQ ATR) and the queue grows only once the exchange
// over AUTH_Send/AUTH_Receive (auth.h) has authenticated the host; until
// then every other command is answered Authentication Required.
//
// Teardown (close, then drain_and_destroy on the target's reaper thread):
// the QP goes to ERR and nothing more is posted; a drain receive and a
// drain send are posted and their flush completions awaited (everything
// before them has completed then, the CQ being processed in order by one
// thread); then outstanding namespace I/O is awaited; then the QP, the CQ
// and the memory go.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "nvmf/auth_dhchap.h"
#include "nvmf/capsule_parser.h"
#include "nvmf/clock.h"
#include "nvmf/controller.h"
#include "nvmf/rdma_cm.h"
#include "srdma/cq_pool.h"
#include "srdma/device.h"
#include "srdma/mr.h"
#include "srdma/qp.h"

namespace srdma::nvmf {

class RdmaTarget;

class TargetQueue {
 public:
  TargetQueue(RdmaTarget& target, std::uint16_t qid, std::uint32_t size, std::shared_ptr<CmConnection> conn);
  ~TargetQueue();
  TargetQueue(const TargetQueue&) = delete;
  TargetQueue& operator=(const TargetQueue&) = delete;

  // Creates the CQ, the QP and the admission slot, posts its receive and
  // connects the QP to the host's (its QPN, its first PSN `req.psn`, ours
  // `local_psn`), at the path MTU of the host's CM request.
  Result<void> init(const CmRequest& req, std::uint32_t local_psn);
  std::uint32_t qpn() const;
  std::uint16_t qid() const { return qid_; }
  // The host's device (for the target's per-source limits).
  std::uint64_t host_addr() const { return host_addr_; }
  // When the CM request arrived (the target's clock): a queue that has not
  // connected within TargetOptions::connect_timeout is reaped.
  Clock::time_point created() const { return created_; }
  // Its place in the order queues were admitted (the target's, set once
  // under its lock): eviction closes the oldest.
  std::uint64_t admitted_seq = 0;
  // Whether its CM handshake finished (the RTU came: not a spoofed source).
  bool cm_established() const { return conn_->established(); }
  // Whether close() ran (any thread).
  bool closing() const { return closed_.load(std::memory_order_acquire); }
  // Whether the queue is admitted (any thread): a Connect bound it to a
  // controller, the host authenticated where it must, and the queue grew.
  bool connected() const { return admitted_.load(std::memory_order_acquire); }
  // Any thread: the controller once Connect succeeded, else null.
  const Controller* controller_if_connected() const { return ctrl_raw_.load(std::memory_order_acquire); }

  // Stops the queue (idempotent, any thread): the QP to ERR, nothing more
  // posted; the target reaps it.
  void close();
  // The reaper's part of teardown (see above). Then the queue may be deleted.
  void drain_and_destroy();

 private:
  struct Slot;
  struct SlotCqe {
    WrCqe cqe;
    Slot* slot;
  };
  struct Slot {
    TargetQueue* q = nullptr;
    std::byte* capsule = nullptr;  // NvmeCommand + in-capsule data
    NvmeCompletion* rsp = nullptr;
    std::byte* data = nullptr;     // data_bytes: max_io_size (the admission slot: kAdmissionDataBytes)
    std::uint32_t data_bytes = 0;
    std::uint32_t lkey = 0;        // of the region holding capsule, rsp and data
    bool admission = false;        // the admission slot: retired once the queue grew
    Command cmd;
    std::shared_ptr<Namespace> ns;  // held while its I/O is in flight
    bool invalidate = false;       // answer with SEND_WITH_INV of invalidate_rkey
    std::uint32_t invalidate_rkey = 0;
    SlotCqe read_cqe, send_cqe;
  };
  struct RecvBuf {
    WrCqe cqe;
    TargetQueue* q = nullptr;
    std::byte* capsule = nullptr;
    std::uint32_t lkey = 0;
    std::uint32_t byte_len = 0;  // while waiting for a slot
  };

  static void on_recv(CompletionQueue& cq, const Wc& wc);
  static void on_read(CompletionQueue& cq, const Wc& wc);
  static void on_send(CompletionQueue& cq, const Wc& wc);
  static void on_drain(CompletionQueue& cq, const Wc& wc);
  static Slot& slot_of(const Wc& wc) { return *reinterpret_cast<const SlotCqe*>(wc.wr_cqe)->slot; }
  // A completion with an error other than a flush: the queue cannot go on.
  void fail(const Wc& wc);

  void execute(Slot& s, std::uint32_t byte_len);
  void execute_read_write(Slot& s);
  void finish_connect(Slot& s);
  // AUTH_Send's data is in s.data: hand it to the controller's side of
  // DH-HMAC-CHAP. AUTH_Receive: its next message to the host.
  void finish_auth_send(Slot& s);
  void auth_receive(Slot& s);
  // Connect (and authentication) done: grow, then answer `s` with `status`
  // and `result` (after an RDMA WRITE of `write_len` bytes). Answers
  // Controller Busy if the queue cannot grow.
  void admit(Slot& s, NvmeStatus status, std::uint64_t result, std::uint32_t write_len = 0);
  // After an authentication step: logs the outcome once.
  void log_auth_outcome();
  // After an accepted Connect: the receive ring, the slots and their data
  // buffers, registered, the receives posted. REQUIRES: called once, on the
  // queue's CQ thread, before the Connect's response goes out.
  Result<void> grow();
  void finish_write(Slot& s);
  // RDMA READ of the first `len` bytes the command's keyed SGL names into
  // the slot's data buffer; on_read continues.
  void fetch_from_host(Slot& s, std::uint32_t len);
  // Posts the response (after an RDMA WRITE of `write_len` data bytes when
  // non-zero). Dropped when the queue is closing.
  void respond(Slot& s, NvmeStatus status, std::uint64_t result = 0, std::uint32_t write_len = 0);
  void refuse(Slot& s, const Refusal& r);
  bool post_recv(RecvBuf& b);
  // A receive buffer at `capsule`; a slot at `base` laid out as capsule
  // (capsule_stride_), response (kRspStride), then `data_bytes` of data.
  void place_recv(RecvBuf& b, std::byte* capsule, std::uint32_t lkey);
  void place_slot(Slot& s, std::byte* base, std::uint32_t lkey, std::uint32_t data_bytes);
  // Copies `b`'s capsule into `s`, reposts `b` and runs the command.
  void start(Slot& s, RecvBuf& b, std::uint32_t byte_len);
  void release(Slot& s);
  // false if the queue is closing or the QP refused; a full send queue
  // defers the WRs (in order) until a send completion makes room.
  bool post_send(const SendWr& wr);
  // A WR chain waiting for room in the send queue, with its own SGEs.
  struct Deferred {
    std::vector<SendWr> wrs;
    std::vector<Sge> sges;
  };
  static Deferred copy_chain(const SendWr* wr);
  void defer(const SendWr* wr);  // REQUIRES post_mu_
  void post_deferred();
  // Namespace I/O in flight (the reaper waits for none).
  void io_begin() { ns_ops_.fetch_add(1, std::memory_order_acq_rel); }
  void io_end();

  RdmaTarget& target_;
  const std::uint16_t qid_;
  const std::uint32_t size_;
  const std::shared_ptr<CmConnection> conn_;
  std::shared_ptr<Controller> ctrl_;  // set by Connect (on the queue's CQ thread)
  std::atomic<const Controller*> ctrl_raw_{nullptr};  // ctrl_ for other threads
  std::atomic<bool> connected_{false};  // Connect done (the parser's "connected")
  std::atomic<bool> admitted_{false};   // grown: see connected()
  std::string hostnqn_;                 // from the Connect data
  // DH-HMAC-CHAP when the host has a secret; driven on the queue's CQ
  // thread only (the host waits for each AUTH command's completion).
  std::unique_ptr<auth::ControllerAuth> auth_;
  bool auth_logged_ = false;
  std::uint32_t in_capsule_size_ = 0;
  std::uint32_t capsule_stride_ = 0;
  std::atomic<std::uint16_t> sq_head_{0};
  std::uint64_t host_addr_ = 0;
  Clock::time_point created_{};

  std::unique_ptr<CompletionQueue> private_cq_;
  CqLease lease_;
  CompletionQueue* cq_ = nullptr;
  std::unique_ptr<QueuePair> qp_;
  // The admission slot and its receive buffer (init), then, once grown,
  // the receive buffers and the slots' capsules, responses and data.
  std::unique_ptr<std::byte[]> admission_buf_;
  MemoryRegion admission_mr_;
  RecvBuf admission_recv_;
  Slot admission_slot_;
  std::unique_ptr<std::byte[]> buf_;
  std::size_t buf_size_ = 0;
  std::vector<RecvBuf> recvs_;
  std::mutex slots_mu_;  // guards free_slots_ and waiting_
  std::vector<Slot*> free_slots_;
  std::vector<RecvBuf*> waiting_;  // capsules that found no free slot, oldest first
  MemoryRegion mr_;
  std::vector<Slot> slots_;

  std::mutex post_mu_;  // orders posts against close(); guards deferred_
  std::deque<Deferred> deferred_;  // oldest first
  bool closing_ = false;
  std::atomic<bool> closed_{false};  // closing_ for other threads
  std::atomic<int> ns_ops_{0};
  std::mutex drain_mu_;
  std::condition_variable drain_cv_;
  int drains_left_ = 0;
  WrCqe drain_cqe_{&TargetQueue::on_drain};
};

}  // namespace srdma::nvmf
