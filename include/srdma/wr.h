// Work requests (like ib_send_wr / ib_recv_wr) and scatter/gather entries.
#pragma once

#include <cstdint>

#include "srdma/wc.h"

namespace srdma {

class MemoryRegion;
class MemoryWindow;
class AddressHandle;

struct Sge {
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
};

enum class WrOpcode : std::uint8_t {
  kSend,
  kSendWithImm,
  kSendWithInv,
  kRdmaWrite,
  kRdmaWriteWithImm,
  kRdmaRead,
  kAtomicCmpAndSwp,
  kAtomicFetchAndAdd,
  // Local operations (fast registration): executed in QP order at their
  // turn, no message on the wire; completions kRegMr / kLocalInv.
  kRegMr,     // mr, key, access: make a free kMemReg MR valid under `key`
  kLocalInv,  // invalidate_rkey: make that kMemReg MR, or type 2 window, free again
  // Memory windows (IBA 10.6.7.2.4): bind_mw binds a type 2 window under
  // bind_mw.rkey; completion kBindMw, or kMwBindErr when a rule refuses.
  // (A type 1 window is bound by QueuePair::bind_mw, which posts this too.)
  kBindMw,
  // IBA 1.5 ATOMIC WRITE (RC): the WR's 8 bytes (one SGE or inline) stored
  // at once at wr.rdma.remote_addr, 8-byte aligned; the peer's MR and QP
  // need remote write access. Ordered as an RDMA WRITE; completion
  // kAtomicWrite.
  kAtomicWrite,
};

enum SendFlags : std::uint32_t {
  SEND_SIGNALED = 1u << 0,
  SEND_SOLICITED = 1u << 1,
  SEND_INLINE = 1u << 2,
  // Wait until every earlier WR of the QP has completed before this one
  // executes (IBA 10.8.3.3; use it on a LOCAL_INV after RDMA READs).
  SEND_FENCE = 1u << 3,
};
inline constexpr std::uint32_t kSendFlagsAll = SEND_SIGNALED | SEND_SOLICITED | SEND_INLINE | SEND_FENCE;

// Where a memory window is bound (like ibv_mw_bind_info): [addr, addr +
// length) of `mr`, which must have ACCESS_MW_BIND, with `access` (remote
// rights, ACCESS_ZERO_BASED for a type 2 window). Length 0 and no MR
// unbinds a type 1 window.
struct MwBindInfo {
  MemoryRegion* mr = nullptr;
  std::uint64_t addr = 0;
  std::uint64_t length = 0;
  std::uint32_t access = 0;
};

struct SendWr {
  union {
    std::uint64_t wr_id = 0;
    WrCqe* wr_cqe;  // completion dispatched to wr_cqe->done by poll contexts
  };
  SendWr* next = nullptr;
  const Sge* sg_list = nullptr;
  int num_sge = 0;
  WrOpcode opcode = WrOpcode::kSend;
  std::uint32_t send_flags = 0;
  std::uint32_t imm_data = 0;        // kSendWithImm, kRdmaWriteWithImm
  std::uint32_t invalidate_rkey = 0; // kSendWithInv, kLocalInv
  std::uint64_t remote_addr = 0;     // RDMA and atomics
  std::uint32_t rkey = 0;
  std::uint64_t compare_add = 0;     // atomics: compare (CMP_AND_SWP) or add (FETCH_AND_ADD)
  std::uint64_t swap = 0;
  // kRegMr (like ib_reg_wr): the MR's page list, iova, length and page
  // size are copied at post time, so the MR may be re-mapped right after.
  MemoryRegion* mr = nullptr;
  std::uint32_t key = 0;     // the key to install (only its key byte may differ from the MR's)
  std::uint32_t access = 0;  // AccessFlags of the registration
  // kBindMw (like ibv_send_wr.bind_mw): the type 2 window, the rkey it is
  // to carry (its key with a new key byte: MemoryWindow::next_rkey), and
  // where. The window and the MR are resolved to keys at post time.
  struct BindMw {
    MemoryWindow* mw = nullptr;
    std::uint32_t rkey = 0;
    MwBindInfo info;
  } bind_mw;
  // UD (like ib_ud_wr): where the datagram goes. A remote_qkey with the
  // high bit set sends the QP's own qkey instead (IBA 10.2.4).
  struct Ud {
    AddressHandle* ah = nullptr;
    std::uint32_t remote_qpn = 0;
    std::uint32_t remote_qkey = 0;
  } ud;
  // XRC INI (like ibv_send_wr's qp_type.xrc): the XRC SRQ on the target
  // the message lands in (24 bits), carried in each packet's XRCETH.
  struct Xrc {
    std::uint32_t remote_srqn = 0;
  } xrc;
};

struct RecvWr {
  union {
    std::uint64_t wr_id = 0;
    WrCqe* wr_cqe;
  };
  RecvWr* next = nullptr;
  const Sge* sg_list = nullptr;
  int num_sge = 0;
};

// A tag-matching SRQ's list operation (like struct ibv_ops_wr): ADD posts
// a tagged buffer (its handle is written back), DEL removes one by handle,
// SYNC only reports the consumer's count of unexpected messages. With
// TM_OP_SYNC the op carries that count (unexpected_cnt); with
// TM_OP_SIGNALED it completes on the SRQ's CQ (kTmAdd/kTmDel/kTmSync).
enum class TmOpcode : std::uint8_t { kAdd, kDel, kSync };
enum TmOpFlags : std::uint32_t {
  TM_OP_SIGNALED = 1u << 0,
  TM_OP_SYNC = 1u << 1,
};
struct TmOpWr {
  std::uint64_t wr_id = 0;
  TmOpWr* next = nullptr;
  TmOpcode opcode = TmOpcode::kAdd;
  std::uint32_t flags = 0;
  std::uint32_t unexpected_cnt = 0;
  std::uint32_t handle = 0;  // DEL's input, ADD's output
  std::uint64_t recv_wr_id = 0;  // ADD: the wr_id of the message's completion
  const Sge* sg_list = nullptr;  // ADD: the tagged buffer
  int num_sge = 0;
  std::uint64_t tag = 0;   // ADD: a message matches if (its tag & mask) == (tag & mask)
  std::uint64_t mask = 0;
};

// The tag-matching header (like struct ibv_tmh) at the start of a message
// sent to a tag-matching SRQ, big-endian on the wire: opcode (byte 0),
// 3 reserved, app_ctx (4..7), tag (8..15); a rendezvous request follows it
// with the RVH (like struct ibv_rvh): va (16..23), rkey (24..27), len
// (28..31).
enum class TmhOpcode : std::uint8_t { kNoTag = 0, kRndv = 1, kFin = 2, kEager = 3 };
inline constexpr std::uint32_t kTmhSize = 16;
inline constexpr std::uint32_t kRvhSize = 16;

}  // namespace srdma
