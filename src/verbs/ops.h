// The verbs that <infiniband/verbs.h> calls inline through
// ibv_context::ops (the data path), and the table that holds them.
#pragma once

#include <infiniband/verbs.h>

namespace srdma::verbs {

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int req_notify_cq(ibv_cq* cq, int solicited_only);

// Every slot verbs.h calls is set, memory windows' included.
void fill_context_ops(ibv_context_ops& ops);

}  // namespace srdma::verbs
