// Work completions (like ib_wc / ibv_wc) and the completion callback (ib_cqe).
#pragma once

#include <cstdint>
#include <string_view>

namespace srdma {

class CompletionQueue;
struct Wc;

// Put one of these in a work request instead of a wr_id to have poll
// contexts call `done` for its completion (like struct ib_cqe). Embed it in
// your request structure and recover the container in `done`.
struct WrCqe {
  void (*done)(CompletionQueue& cq, const Wc& wc) = nullptr;
};

// IBA 11.4.2.1 completion statuses (the ones an RC QP can produce).
enum class WcStatus : std::uint8_t {
  kSuccess,
  kLocLenErr,        // a receive too short for the message, or a WR beyond a limit
  kLocQpOpErr,       // the QP cannot execute this WR
  kLocProtErr,       // a local key, PD, access or bound check failed
  kWrFlushErr,       // the QP is in the error state: the WR was not executed
  kRemInvReqErr,     // the responder refused the request as invalid (e.g. length, opcode)
  kRemAccessErr,     // the responder's key, PD, access or bound check failed
  kRemOpErr,         // the responder could not complete the operation
  kRetryExcErr,      // transport retries exhausted
  kRnrRetryExcErr,   // receiver-not-ready retries exhausted
  kMemMgmtOpErr,     // REG_MR / LOCAL_INV / an invalidation refused (IBA 10.6.3.3: wrong state, PD, key)
  kMwBindErr,        // a memory window bind refused (IBA 10.6.7.2: state, PD, region, access, bounds)
  kGeneralErr,
  kTmErr,            // a tag-matching list operation failed (a DEL of a tag already consumed)
  // A rendezvous request matched a tag but the device does not fetch its
  // data (its RVH asks for 0 bytes, or more than the tag's buffer holds):
  // the TMH and RVH are in the tag's buffer, and the consumer carries on.
  kTmRndvIncomplete,
};
std::string_view wc_status_str(WcStatus s);

enum class WcOpcode : std::uint8_t {
  kSend,
  kRdmaWrite,
  kRdmaRead,
  kCompSwap,
  kFetchAdd,
  kLocalInv,
  kRegMr,
  kBindMw,
  kAtomicWrite,      // IBA 1.5 ATOMIC WRITE: 8 bytes stored at once
  kRecv,             // a SEND arrived
  kRecvRdmaWithImm,  // an RDMA WRITE with immediate consumed a receive
  // A tag-matching SRQ (SrqInitAttr::max_num_tags): its list operations'
  // completions (on the SRQ's CQ), and a message that arrived on it: kTmRecv
  // for a tagged one (WC_TM_MATCH when it matched a posted tag, none when it
  // took an ordinary receive as unexpected; a rendezvous that matched
  // completes twice, WC_TM_MATCH and then WC_TM_DATA_VALID), kTmNoTag for
  // one whose TMH says it has no tag.
  kTmAdd,
  kTmDel,
  kTmSync,
  kTmRecv,
  kTmNoTag,
};

enum WcFlags : std::uint32_t {
  WC_WITH_IMM = 1u << 0,
  WC_WITH_INVALIDATE = 1u << 1,
  // UD: the receive buffer's first 40 bytes hold the GRH area (20 zero
  // bytes and the datagram's IPv4 header, as rxe on RoCEv2), counted in
  // byte_len.
  WC_GRH = 1u << 2,
  // Tag matching (kTm* opcodes): the SRQ needs a SYNC (its count of
  // unexpected messages is ahead of the consumer's); the message matched a
  // posted tag; the tag's buffer holds the data.
  WC_TM_SYNC_REQ = 1u << 3,
  WC_TM_MATCH = 1u << 4,
  WC_TM_DATA_VALID = 1u << 5,
};

struct Wc {
  union {
    std::uint64_t wr_id;
    WrCqe* wr_cqe;
  };
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kSend;
  std::uint32_t vendor_err = 0;
  std::uint32_t byte_len = 0;
  std::uint32_t imm_data = 0;          // host order; valid with WC_WITH_IMM
  std::uint32_t invalidated_rkey = 0;  // valid with WC_WITH_INVALIDATE
  std::uint32_t qp_num = 0;
  void* qp_context = nullptr;  // the QP's qp_context: how a pool CQ's user finds its queue
  std::uint32_t src_qp = 0;  // UD: the sender's QPN (DETH)
  std::uint32_t wc_flags = 0;
  std::uint16_t slid = 0;        // UD: the sender's LID (low 16 bits of its device address)
  std::uint16_t pkey_index = 0;  // UD: the one P_Key's index
  bool is_send_cqe = false;  // on the send queue (wr_cqe/wr_id belong to a send WR)
  // kTmRecv / kTmNoTag: the TMH's tag (with WC_TM_MATCH) and its app_ctx
  // (none on a rendezvous' WC_TM_DATA_VALID completion).
  std::uint64_t tm_tag = 0;
  std::uint32_t tm_priv = 0;

  Wc() : wr_id(0) {}
};

}  // namespace srdma
