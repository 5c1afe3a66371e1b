#include "hca/packet.h"

namespace srdma::hca {

std::string_view opcode_str(Opcode op) {
  switch (op) {
    case Opcode::kSendFirst: return "SEND_FIRST";
    case Opcode::kSendMiddle: return "SEND_MIDDLE";
    case Opcode::kSendLast: return "SEND_LAST";
    case Opcode::kSendLastImm: return "SEND_LAST_WITH_IMMEDIATE";
    case Opcode::kSendOnly: return "SEND_ONLY";
    case Opcode::kSendOnlyImm: return "SEND_ONLY_WITH_IMMEDIATE";
    case Opcode::kWriteFirst: return "RDMA_WRITE_FIRST";
    case Opcode::kWriteMiddle: return "RDMA_WRITE_MIDDLE";
    case Opcode::kWriteLast: return "RDMA_WRITE_LAST";
    case Opcode::kWriteLastImm: return "RDMA_WRITE_LAST_WITH_IMMEDIATE";
    case Opcode::kWriteOnly: return "RDMA_WRITE_ONLY";
    case Opcode::kWriteOnlyImm: return "RDMA_WRITE_ONLY_WITH_IMMEDIATE";
    case Opcode::kReadRequest: return "RDMA_READ_REQUEST";
    case Opcode::kReadResponseFirst: return "RDMA_READ_RESPONSE_FIRST";
    case Opcode::kReadResponseMiddle: return "RDMA_READ_RESPONSE_MIDDLE";
    case Opcode::kReadResponseLast: return "RDMA_READ_RESPONSE_LAST";
    case Opcode::kReadResponseOnly: return "RDMA_READ_RESPONSE_ONLY";
    case Opcode::kAck: return "ACKNOWLEDGE";
    case Opcode::kAtomicAck: return "ATOMIC_ACKNOWLEDGE";
    case Opcode::kCmpSwap: return "COMPARE_SWAP";
    case Opcode::kFetchAdd: return "FETCH_ADD";
    case Opcode::kSendLastInv: return "SEND_LAST_WITH_INVALIDATE";
    case Opcode::kSendOnlyInv: return "SEND_ONLY_WITH_INVALIDATE";
  }
  return "UNKNOWN";
}

}  // namespace srdma::hca
