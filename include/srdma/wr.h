// Work requests (like ib_send_wr / ib_recv_wr) and scatter/gather entries.
#pragma once

#include <cstdint>

#include "srdma/wc.h"

namespace srdma {

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
};

enum SendFlags : std::uint32_t {
  SEND_SIGNALED = 1u << 0,
  SEND_SOLICITED = 1u << 1,
  SEND_INLINE = 1u << 2,
  SEND_FENCE = 1u << 3,
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
  std::uint32_t invalidate_rkey = 0; // kSendWithInv
  std::uint64_t remote_addr = 0;     // RDMA and atomics
  std::uint32_t rkey = 0;
  std::uint64_t compare_add = 0;     // atomics: compare (CMP_AND_SWP) or add (FETCH_AND_ADD)
  std::uint64_t swap = 0;
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

}  // namespace srdma
