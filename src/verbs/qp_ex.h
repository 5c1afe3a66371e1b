// Extended QPs: ibv_create_qp_ex with send_ops_flags, and the ibv_wr_*
// builders (wr_start ... wr_complete / wr_abort) over the core's post_send.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "srdma/wr.h"

namespace srdma::verbs {

// The WRs an application builds between wr_start and wr_complete. Nothing
// reaches the core before wr_complete, so wr_abort (or a refused builder,
// whose error wr_complete returns) leaves nothing posted.
struct QpExPost {
  struct Staged {
    SendWr wr;               // sg_list set at wr_complete (the arrays below move while growing)
    std::uint32_t sge_first = 0;
    bool inline_data = false;  // its one SGE's addr is an offset into `inline_bytes`
    bool has_data = false;
    bool xrc_srqn_set = false;  // XRC_SEND: ibv_wr_set_xrc_srqn named the remote SRQ
  };
  std::mutex mu;  // held from wr_start to wr_complete / wr_abort
  bool started = false;
  std::vector<Staged> wrs;
  std::vector<Sge> sges;
  std::vector<std::byte> inline_bytes;
  int err = 0;  // the first refusal since wr_start (wr_complete returns it)
  const char* why = nullptr;
  std::uint64_t ops = 0;  // send_ops_flags
  bool ud = false;
  bool xrc = false;  // an XRC_SEND QP: each WR names its remote SRQ
  std::uint32_t max_send_wr = 0, max_send_sge = 0, max_inline = 0;
};

ibv_qp* create_qp_ex_op(ibv_context* context, ibv_qp_init_attr_ex* attr);
// ibv_create_qp_ex of an XRC_RECV QP (xrc.cc): in the XRCD attr names.
ibv_qp* create_xrc_recv_qp(ibv_context* context, ibv_qp_init_attr_ex* attr);

}  // namespace srdma::verbs
