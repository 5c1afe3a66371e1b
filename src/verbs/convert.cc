#include "convert.h"

#include <arpa/inet.h>

#include "srdma/access.h"
#include "srdma/net.h"
#include <cstring>

namespace srdma::verbs {

std::uint32_t mtu_bytes(int mtu) {
  if (mtu < IBV_MTU_256 || mtu > IBV_MTU_4096) return 0;
  return 128u << mtu;
}

ibv_mtu mtu_enum(std::uint32_t bytes) {
  int e = IBV_MTU_256;
  while (e < IBV_MTU_4096 && (128u << (e + 1)) <= bytes) ++e;
  return static_cast<ibv_mtu>(e);
}

Result<std::uint32_t> access_flags(unsigned int a) {
  a &= ~static_cast<unsigned int>(IBV_ACCESS_OPTIONAL_RANGE);
  a &= ~static_cast<unsigned int>(IBV_ACCESS_HUGETLB);
  // As rxe: zero-based addressing is for device memory (ibv_reg_dm_mr,
  // which takes the flag off before it comes here), not for process memory.
  if (a & IBV_ACCESS_ZERO_BASED)
    return make_error(EOPNOTSUPP, "zero-based MRs are for device memory (ibv_reg_dm_mr) only");
  constexpr unsigned int known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ON_DEMAND;
  if (a & ~known) return make_error(EINVAL, "unknown access flags");
  std::uint32_t out = 0;
  if (a & IBV_ACCESS_ON_DEMAND) out |= ACCESS_ON_DEMAND;
  if (a & IBV_ACCESS_MW_BIND) out |= ACCESS_MW_BIND;
  if (a & IBV_ACCESS_LOCAL_WRITE) out |= ACCESS_LOCAL_WRITE;
  if (a & IBV_ACCESS_REMOTE_WRITE) out |= ACCESS_REMOTE_WRITE;
  if (a & IBV_ACCESS_REMOTE_READ) out |= ACCESS_REMOTE_READ;
  if (a & IBV_ACCESS_REMOTE_ATOMIC) out |= ACCESS_REMOTE_ATOMIC;
  return out;
}

Result<std::uint32_t> mw_access_flags(unsigned int a) {
  // LOCAL_WRITE is taken and means nothing, as rxe and mlx5 take it (a
  // window grants remote access; local access goes through the region).
  constexpr unsigned int known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED;
  if (a & ~known) return make_error(EINVAL, "a window grants remote access (and ZERO_BASED) only");
  std::uint32_t out = 0;
  if (a & IBV_ACCESS_REMOTE_WRITE) out |= ACCESS_REMOTE_WRITE;
  if (a & IBV_ACCESS_REMOTE_READ) out |= ACCESS_REMOTE_READ;
  if (a & IBV_ACCESS_REMOTE_ATOMIC) out |= ACCESS_REMOTE_ATOMIC;
  if (a & IBV_ACCESS_ZERO_BASED) out |= ACCESS_ZERO_BASED;
  return out;
}

Result<QpState> qp_state(int s) {
  if (s < IBV_QPS_RESET || s > IBV_QPS_ERR) return make_error(EINVAL, "qp_state out of range");
  return static_cast<QpState>(s);
}

Result<std::uint64_t> peer_address(std::uint32_t own_ipv4, const ibv_ah_attr& ah) {
  if (ah.port_num > 1) return make_error(EINVAL, "ah_attr.port_num: the device has one port");
  if (ah.is_global) {
    if (ah.grh.sgid_index != 0) return make_error(EINVAL, "ah_attr.grh.sgid_index: the GID table has one entry, 0");
    Gid gid;
    std::memcpy(gid.data(), ah.grh.dgid.raw, gid.size());
    const bool v4 = is_ipv4_mapped(gid);
    if (v4 != (own_ipv4 != 0))
      return make_error(EINVAL, v4 ? "ah_attr.grh.dgid is IPv4-mapped, the device is on IPv6"
                                   : "ah_attr.grh.dgid is an IPv6 GID, the device is on IPv4 (::ffff:a.b.c.d)");
    // An IPv6 GID this process names: its address enters the IPv6 table.
    return roce_address_of_gid(gid);
  }
  if (own_ipv4 == 0) return make_error(EINVAL, "ah_attr: a device on IPv6 needs a GRH (is_global) naming the peer");
  if (ah.dlid == 0) return make_error(EINVAL, "ah_attr: neither a GRH nor a LID names the peer");
  return roce_address((own_ipv4 & 0xFFFF0000u) | ah.dlid);
}

namespace {

ibv_wc_status wc_status(WcStatus s) {
  switch (s) {
    case WcStatus::kSuccess: return IBV_WC_SUCCESS;
    case WcStatus::kLocLenErr: return IBV_WC_LOC_LEN_ERR;
    case WcStatus::kLocQpOpErr: return IBV_WC_LOC_QP_OP_ERR;
    case WcStatus::kLocProtErr: return IBV_WC_LOC_PROT_ERR;
    case WcStatus::kWrFlushErr: return IBV_WC_WR_FLUSH_ERR;
    case WcStatus::kRemInvReqErr: return IBV_WC_REM_INV_REQ_ERR;
    case WcStatus::kRemAccessErr: return IBV_WC_REM_ACCESS_ERR;
    case WcStatus::kRemOpErr: return IBV_WC_REM_OP_ERR;
    case WcStatus::kRetryExcErr: return IBV_WC_RETRY_EXC_ERR;
    case WcStatus::kRnrRetryExcErr: return IBV_WC_RNR_RETRY_EXC_ERR;
    case WcStatus::kMemMgmtOpErr: return IBV_WC_MW_BIND_ERR;  // verbs' memory-management error
    case WcStatus::kMwBindErr: return IBV_WC_MW_BIND_ERR;
    case WcStatus::kGeneralErr: return IBV_WC_GENERAL_ERR;
    case WcStatus::kTmErr: return IBV_WC_TM_ERR;
    case WcStatus::kTmRndvIncomplete: return IBV_WC_TM_RNDV_INCOMPLETE;
  }
  return IBV_WC_GENERAL_ERR;
}

ibv_wc_opcode wc_opcode(WcOpcode o) {
  switch (o) {
    case WcOpcode::kSend: return IBV_WC_SEND;
    case WcOpcode::kRdmaWrite: return IBV_WC_RDMA_WRITE;
    case WcOpcode::kRdmaRead: return IBV_WC_RDMA_READ;
    case WcOpcode::kCompSwap: return IBV_WC_COMP_SWAP;
    case WcOpcode::kFetchAdd: return IBV_WC_FETCH_ADD;
    case WcOpcode::kLocalInv: return IBV_WC_LOCAL_INV;
    case WcOpcode::kRegMr: return IBV_WC_BIND_MW;  // verbs has no REG_MR completion of its own
    case WcOpcode::kBindMw: return IBV_WC_BIND_MW;
    case WcOpcode::kAtomicWrite: return IBV_WC_ATOMIC_WRITE;
    case WcOpcode::kRecv: return IBV_WC_RECV;
    case WcOpcode::kRecvRdmaWithImm: return IBV_WC_RECV_RDMA_WITH_IMM;
    case WcOpcode::kTmAdd: return IBV_WC_TM_ADD;
    case WcOpcode::kTmDel: return IBV_WC_TM_DEL;
    case WcOpcode::kTmSync: return IBV_WC_TM_SYNC;
    case WcOpcode::kTmRecv: return IBV_WC_TM_RECV;
    case WcOpcode::kTmNoTag: return IBV_WC_TM_NO_TAG;
  }
  return IBV_WC_SEND;
}

}  // namespace

void to_ibv_wc(const Wc& in, ibv_wc& out) {
  out.wr_id = in.wr_id;
  out.status = wc_status(in.status);
  out.opcode = wc_opcode(in.opcode);
  out.vendor_err = in.vendor_err;
  out.byte_len = in.byte_len;
  out.wc_flags = 0;
  out.imm_data = 0;
  if (in.wc_flags & WC_WITH_IMM) {
    out.imm_data = htonl(in.imm_data);
    out.wc_flags |= IBV_WC_WITH_IMM;
  } else if (in.wc_flags & WC_WITH_INVALIDATE) {
    out.invalidated_rkey = in.invalidated_rkey;
    out.wc_flags |= IBV_WC_WITH_INV;
  }
  if (in.wc_flags & WC_GRH) out.wc_flags |= IBV_WC_GRH;
  if (in.wc_flags & WC_TM_SYNC_REQ) out.wc_flags |= IBV_WC_TM_SYNC_REQ;
  if (in.wc_flags & WC_TM_MATCH) out.wc_flags |= IBV_WC_TM_MATCH;
  if (in.wc_flags & WC_TM_DATA_VALID) out.wc_flags |= IBV_WC_TM_DATA_VALID;
  out.qp_num = in.qp_num;
  out.src_qp = in.src_qp;
  out.pkey_index = in.pkey_index;
  out.slid = in.slid;
  // RoCE has no SL. A UD receive's sl says what its 40-byte GRH area holds,
  // as mlx5 reports it (bits 2:0, the L3 header type: 2 is IPv4, which ours
  // always is): UCX's ud_verbs reads the destination address from the GRH
  // area at the offset this names and drops the datagram on a mismatch.
  out.sl = (in.wc_flags & WC_GRH) ? kWcSlRoceIpv4 : 0;
  out.dlid_path_bits = 0;
}

}  // namespace srdma::verbs
