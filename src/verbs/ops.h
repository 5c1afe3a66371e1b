// The verbs that <infiniband/verbs.h> calls inline through
// ibv_context::ops (the data path), and the table that holds them.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "srdma/mr.h"

namespace srdma::verbs {

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
// XRC (xrc.cc): the verbs_context slots.
ibv_xrcd* open_xrcd_op(ibv_context* context, ibv_xrcd_init_attr* attr);
int close_xrcd_op(ibv_xrcd* xrcd);
ibv_srq* create_srq_ex_op(ibv_context* context, ibv_srq_init_attr_ex* attr);
int get_srq_num_op(ibv_srq* srq, std::uint32_t* srq_num);
ibv_qp* open_qp_op(ibv_context* context, ibv_qp_open_attr* attr);
// ibv_create_srq's work, and ibv_create_srq_ex's with an XRCD and CQ (both
// or neither): the wrapper, or NULL with errno set.
// An XRC SRQ with `xrcd` and `cq`; a tag-matching one with `tm` and `cq`.
ibv_srq* make_srq(const char* verb, ibv_pd* pd, ibv_srq_init_attr* init, ibv_xrcd* xrcd, ibv_cq* cq,
                  const ibv_tm_cap* tm = nullptr);
// ibv_post_srq_ops (verbs_context's post_srq_ops) on a tag-matching SRQ.
int post_srq_ops_op(ibv_srq* srq, ibv_ops_wr* wr, ibv_ops_wr** bad_wr);
int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int req_notify_cq(ibv_cq* cq, int solicited_only);

// verbs_context slots for memory: advise_mr (memory.cc); alloc_dm, free_dm
// and reg_dm_mr (device_memory.cc).
int advise_mr_op(ibv_pd* pd, ibv_advise_mr_advice advice, std::uint32_t flags, ibv_sge* sg_list,
                 std::uint32_t num_sge);
ibv_dm* alloc_dm_op(ibv_context* context, ibv_alloc_dm_attr* attr);
int free_dm_op(ibv_dm* dm);
ibv_mr* reg_dm_mr_op(ibv_pd* pd, ibv_dm* dm, std::uint64_t dm_offset, size_t length, unsigned int access);

// An ibv_mr for `core`, owned by pd's context (memory.cc).
ibv_mr* adopt_mr(const char* verb, ibv_pd* pd, MemoryRegion core, void* addr, size_t length, unsigned access);

// Every slot verbs.h calls is set, memory windows' included.
void fill_context_ops(ibv_context_ops& ops);

}  // namespace srdma::verbs
