/*
 * mw: memory windows on softrdma's libibverbs.so.1, two QPs of one process
 * connected to each other (the "target" owns the memory and binds windows,
 * the "peer" uses them), data checked.
 *
 * Good path: the device reports MEM_WINDOW and MEM_WINDOW_TYPE_2B and
 * max_mw; a type 1 window bound with ibv_bind_mw (IBV_WC_BIND_MW, the key
 * byte advanced in mw->rkey), the peer WRITEs and READs through it; a type
 * 2 window bound with IBV_WR_BIND_MW in ibv_post_send and another with
 * ibv_wr_bind_mw on an ibv_qp_ex, used likewise; the peer's SEND_WITH_INV
 * invalidates the first (IBV_WC_WITH_INV, invalidated_rkey) and LOCAL_INV
 * the second; a type 1 window is rebound and unbound (length 0); a bound
 * window is deallocated.
 * Refusals: an access outside a window, and one through an invalidated
 * window key, are remote access errors that move no byte; ibv_dereg_mr of
 * an MR with windows bound is EINVAL; ibv_bind_mw of a type 2 window,
 * a zero-based type 1 window, an MR of another PD (EPERM); IBV_WR_BIND_MW
 * of a type 1 window; ibv_alloc_mw of an unknown type.
 *
 * Run with LD_LIBRARY_PATH at softrdma's drop-in and SRDMA_ADDR set.
 */
#include "ext_common.h"

enum { PAGE = 4096, BUF = 8 * PAGE };

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *tcq, *pcq; /* the target's CQ, the peer's */
static union ibv_gid gid;
static unsigned char *tbuf, *pbuf;
static struct ibv_mr *tmr, *pmr; /* tmr: MW_BIND over the target's buffer */

struct pair {
  struct ibv_qp *t, *p;
  struct ibv_qp_ex *tx; /* the target's, for ibv_wr_bind_mw */
};

static struct pair make_pair(void) {
  struct ibv_qp_init_attr_ex qi = {
      .send_cq = tcq, .recv_cq = tcq, .qp_type = IBV_QPT_RC,
      .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1},
      .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
      .send_ops_flags = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV |
                        IBV_QP_EX_WITH_RDMA_WRITE};
  struct pair r = {0};
  r.t = ibv_create_qp_ex(ctx, &qi);
  struct ibv_qp_init_attr pi = {.send_cq = pcq, .recv_cq = pcq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
  r.p = ibv_create_qp(pd, &pi);
  if (!r.t || !r.p || connect_rc(r.t, r.p->qp_num, &gid) || connect_rc(r.p, r.t->qp_num, &gid)) {
    check(0, "a connected RC pair (the target's an ibv_qp_ex with BIND_MW)");
    exit(1);
  }
  r.tx = ibv_qp_to_qp_ex(r.t);
  return r;
}

static void destroy_pair(struct pair *r) {
  ibv_destroy_qp(r->t);
  ibv_destroy_qp(r->p);
}

/* The next completion on `cq` (status -1 and opcode -1: none came). */
static struct ibv_wc next_wc(struct ibv_cq *cq) {
  struct ibv_wc wc;
  if (poll_one(cq, &wc) != 1) {
    memset(&wc, 0xff, sizeof wc);
    wc.status = (enum ibv_wc_status) - 1;
  }
  return wc;
}

/* One signaled RDMA op from the peer; its completion status. */
static int rdma(struct ibv_qp *qp, enum ibv_wr_opcode op, void *local, void *remote, uint32_t rkey, uint32_t len) {
  struct ibv_sge sge = {(uintptr_t)local, len, pmr->lkey};
  struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  wr.wr.rdma.remote_addr = (uintptr_t)remote;
  wr.wr.rdma.rkey = rkey;
  if (ibv_post_send(qp, &wr, &bad)) return -1;
  return next_wc(pcq).status;
}

static int all_zero(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

int main(void) {
  ctx = open_srdma0();
  if (!ctx) {
    check(0, "open the device");
    return 1;
  }
  struct ibv_device_attr da;
  check(ibv_query_device(ctx, &da) == 0, "ibv_query_device");
  check((da.device_cap_flags & IBV_DEVICE_MEM_WINDOW) && (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B),
        "device_cap_flags has MEM_WINDOW and MEM_WINDOW_TYPE_2B");
  check(da.max_mw > 0, "max_mw > 0");
  ibv_query_gid(ctx, 1, 0, &gid);
  pd = ibv_alloc_pd(ctx);
  tcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
  pcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
  tbuf = aligned_alloc(PAGE, BUF);
  pbuf = aligned_alloc(PAGE, BUF);
  memset(tbuf, 0, BUF);
  memset(pbuf, 0, BUF);
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  tmr = ibv_reg_mr(pd, tbuf, BUF, rw | IBV_ACCESS_MW_BIND);
  pmr = ibv_reg_mr(pd, pbuf, BUF, rw);
  if (!pd || !tcq || !pcq || !tmr || !pmr) {
    check(0, "PD, CQs and MRs (one with IBV_ACCESS_MW_BIND)");
    return 1;
  }
  struct pair q = make_pair();

  /* Type 1: ibv_bind_mw over the second page. */
  struct ibv_mw *mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
  check(mw1 && mw1->type == IBV_MW_TYPE_1, "ibv_alloc_mw(TYPE_1)");
  if (!mw1) return 1;
  uint32_t old = mw1->rkey;
  struct ibv_mw_bind b1 = {.wr_id = 11, .send_flags = IBV_SEND_SIGNALED,
                           .bind_info = {.mr = tmr, .addr = (uintptr_t)(tbuf + PAGE), .length = PAGE,
                                         .mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ}};
  check_ret(ibv_bind_mw(q.t, mw1, &b1), 0, "ibv_bind_mw(type 1)");
  struct ibv_wc wc = next_wc(tcq);
  check(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 11, "bind completes as BIND_MW");
  check(mw1->rkey == ibv_inc_rkey(old), "mw->rkey is the old key with the next key byte");
  for (int i = 0; i < PAGE; i++) pbuf[i] = (unsigned char)(i * 13 + 1);
  check(rdma(q.p, IBV_WR_RDMA_WRITE, pbuf, tbuf + PAGE, mw1->rkey, PAGE) == IBV_WC_SUCCESS,
        "RDMA WRITE through the type 1 window");
  check(memcmp(tbuf + PAGE, pbuf, PAGE) == 0 && all_zero(tbuf, PAGE) && all_zero(tbuf + 2 * PAGE, BUF - 2 * PAGE),
        "the window's bytes, and only them, written");
  check(rdma(q.p, IBV_WR_RDMA_READ, pbuf + PAGE, tbuf + PAGE + 100, mw1->rkey, 200) == IBV_WC_SUCCESS &&
            memcmp(pbuf + PAGE, tbuf + PAGE + 100, 200) == 0,
        "RDMA READ through the type 1 window");

  /* Type 2 through ibv_post_send: the third page. */
  struct ibv_mw *mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  check(mw2 && mw2->type == IBV_MW_TYPE_2, "ibv_alloc_mw(TYPE_2)");
  if (!mw2) return 1;
  uint32_t k2 = ibv_inc_rkey(mw2->rkey);
  struct ibv_send_wr bw = {.wr_id = 21, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED}, *bad;
  bw.bind_mw.mw = mw2;
  bw.bind_mw.rkey = k2;
  bw.bind_mw.bind_info = (struct ibv_mw_bind_info){.mr = tmr, .addr = (uintptr_t)(tbuf + 2 * PAGE), .length = PAGE,
                                                   .mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
  check_ret(ibv_post_send(q.t, &bw, &bad), 0, "ibv_post_send(IBV_WR_BIND_MW, type 2)");
  wc = next_wc(tcq);
  check(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 21, "type 2 bind completes");
  memcpy(pbuf, "type2-post-send", 15);
  check(rdma(q.p, IBV_WR_RDMA_WRITE, pbuf, tbuf + 2 * PAGE + 8, k2, 15) == IBV_WC_SUCCESS &&
            memcmp(tbuf + 2 * PAGE + 8, "type2-post-send", 15) == 0,
        "RDMA WRITE through the type 2 window");

  /* Type 2 through ibv_wr_bind_mw: the fourth page. */
  struct ibv_mw *mw3 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  if (!mw3) return 1;
  uint32_t k3 = ibv_inc_rkey(mw3->rkey);
  struct ibv_mw_bind_info bi3 = {.mr = tmr, .addr = (uintptr_t)(tbuf + 3 * PAGE), .length = PAGE,
                                 .mw_access_flags = IBV_ACCESS_REMOTE_READ};
  ibv_wr_start(q.tx);
  q.tx->wr_id = 31;
  q.tx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_bind_mw(q.tx, mw3, k3, &bi3);
  check_ret(ibv_wr_complete(q.tx), 0, "ibv_wr_bind_mw (type 2) and ibv_wr_complete");
  wc = next_wc(tcq);
  check(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 31, "ibv_wr_bind_mw completes");
  memcpy(tbuf + 3 * PAGE + 40, "qp-ex", 5);
  check(rdma(q.p, IBV_WR_RDMA_READ, pbuf + 2 * PAGE, tbuf + 3 * PAGE + 40, k3, 5) == IBV_WC_SUCCESS &&
            memcmp(pbuf + 2 * PAGE, "qp-ex", 5) == 0,
        "RDMA READ through the ibv_wr_bind_mw window");

  /* Refusals at post time (nothing reaches the QP). */
  check_ret(ibv_dereg_mr(tmr), EINVAL, "ibv_dereg_mr of an MR with windows bound");
  struct ibv_mw_bind b2 = b1;
  check_ret(ibv_bind_mw(q.t, mw2, &b2), EINVAL, "ibv_bind_mw of a type 2 window");
  b2.bind_info.mw_access_flags |= IBV_ACCESS_ZERO_BASED;
  check_ret(ibv_bind_mw(q.t, mw1, &b2), EINVAL, "ibv_bind_mw of a zero-based type 1 window");
  struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
  struct ibv_mr *omr = pd2 ? ibv_reg_mr(pd2, tbuf, PAGE, rw | IBV_ACCESS_MW_BIND) : NULL;
  b2 = b1;
  b2.bind_info.mr = omr;
  check(omr && ibv_bind_mw(q.t, mw1, &b2) == EPERM, "ibv_bind_mw with an MR of another PD -> EPERM");
  struct ibv_send_wr bad1 = bw;
  bad1.bind_mw.mw = mw1;
  check_ret(ibv_post_send(q.t, &bad1, &bad), EINVAL, "IBV_WR_BIND_MW of a type 1 window");
  errno = 0;
  check_null(ibv_alloc_mw(pd, (enum ibv_mw_type)3), EINVAL, "ibv_alloc_mw of type 3");

  /* The peer's SEND_WITH_INV frees mw2; LOCAL_INV frees mw3. */
  struct ibv_sge rs = {(uintptr_t)(tbuf + 7 * PAGE), 64, tmr->lkey};
  struct ibv_recv_wr rw_ = {.wr_id = 41, .sg_list = &rs, .num_sge = 1}, *rbad;
  check_ret(ibv_post_recv(q.t, &rw_, &rbad), 0, "post a receive");
  struct ibv_sge ss = {(uintptr_t)pbuf, 4, pmr->lkey};
  struct ibv_send_wr sw = {.wr_id = 42, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
                           .send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = k2};
  memcpy(pbuf, "inv!", 4);
  check_ret(ibv_post_send(q.p, &sw, &bad), 0, "post SEND_WITH_INV");
  wc = next_wc(pcq);
  check(wc.status == IBV_WC_SUCCESS, "SEND_WITH_INV completes at the sender");
  wc = next_wc(tcq);
  check(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && (wc.wc_flags & IBV_WC_WITH_INV) &&
            wc.invalidated_rkey == k2 && memcmp(tbuf + 7 * PAGE, "inv!", 4) == 0,
        "the receive carries IBV_WC_WITH_INV and the invalidated rkey");
  struct ibv_send_wr li = {.wr_id = 51, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED,
                           .invalidate_rkey = k3};
  check_ret(ibv_post_send(q.t, &li, &bad), 0, "post LOCAL_INV of the type 2 window");
  wc = next_wc(tcq);
  check(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV, "LOCAL_INV completes");
  /* The invalidated key: a remote access error, nothing written. */
  memset(pbuf, 0x77, 64);
  memset(tbuf + 2 * PAGE, 0, PAGE);
  check(rdma(q.p, IBV_WR_RDMA_WRITE, pbuf, tbuf + 2 * PAGE, k2, 64) == IBV_WC_REM_ACCESS_ERR &&
            all_zero(tbuf + 2 * PAGE, PAGE),
        "a WRITE with the remotely invalidated key: IBV_WC_REM_ACCESS_ERR, no byte moved");
  destroy_pair(&q);
  while (ibv_poll_cq(tcq, 1, &wc) > 0) {} /* the flushed receive of the dead pair */

  /* Outside the type 1 window (usable by any QP of its PD: a new pair). */
  q = make_pair();
  memset(tbuf, 0, BUF);
  check(rdma(q.p, IBV_WR_RDMA_WRITE, pbuf, tbuf + 2 * PAGE - 4, mw1->rkey, 8) == IBV_WC_REM_ACCESS_ERR &&
            all_zero(tbuf, BUF),
        "a WRITE straddling the window's end: IBV_WC_REM_ACCESS_ERR, no byte moved");
  destroy_pair(&q);
  q = make_pair();
  check(rdma(q.p, IBV_WR_RDMA_READ, pbuf, tbuf + PAGE - 1, mw1->rkey, 2) == IBV_WC_REM_ACCESS_ERR,
        "a READ starting before the window: IBV_WC_REM_ACCESS_ERR");
  destroy_pair(&q);
  q = make_pair();

  /* Rebind type 1 read-only, then unbind with length 0. */
  old = mw1->rkey;
  b2 = b1;
  b2.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
  b2.bind_info.addr = (uintptr_t)(tbuf + 5 * PAGE);
  check_ret(ibv_bind_mw(q.t, mw1, &b2), 0, "rebind the type 1 window");
  wc = next_wc(tcq);
  check(wc.status == IBV_WC_SUCCESS && mw1->rkey != old, "rebound under a new key");
  memcpy(tbuf + 5 * PAGE, "rebound", 7);
  check(rdma(q.p, IBV_WR_RDMA_READ, pbuf, tbuf + 5 * PAGE, mw1->rkey, 7) == IBV_WC_SUCCESS &&
            memcmp(pbuf, "rebound", 7) == 0,
        "READ through the rebound window");
  struct ibv_mw_bind unbind = {.wr_id = 61, .send_flags = IBV_SEND_SIGNALED};
  check_ret(ibv_bind_mw(q.t, mw1, &unbind), 0, "unbind (length 0)");
  wc = next_wc(tcq);
  check(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW, "unbind completes");
  check(rdma(q.p, IBV_WR_RDMA_READ, pbuf, tbuf + 5 * PAGE, old, 7) == IBV_WC_REM_ACCESS_ERR,
        "the key of before the rebind: IBV_WC_REM_ACCESS_ERR");
  destroy_pair(&q);

  /* A bound window deallocates; then the MR deregisters. */
  q = make_pair();
  struct ibv_mw *mw4 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
  check(mw4 && ibv_bind_mw(q.t, mw4, &b1) == 0 && next_wc(tcq).status == IBV_WC_SUCCESS, "bind another window");
  check_ret(ibv_dereg_mr(tmr), EINVAL, "ibv_dereg_mr while it is bound");
  check_ret(ibv_dealloc_mw(mw4), 0, "ibv_dealloc_mw of a bound window");
  check_ret(ibv_dealloc_mw(mw1), 0, "ibv_dealloc_mw (type 1)");
  check_ret(ibv_dealloc_mw(mw2), 0, "ibv_dealloc_mw (type 2, invalidated)");
  check_ret(ibv_dealloc_mw(mw3), 0, "ibv_dealloc_mw (type 2, invalidated)");
  check_ret(ibv_dereg_mr(tmr), 0, "ibv_dereg_mr once no window is bound");
  destroy_pair(&q);
  if (omr) ibv_dereg_mr(omr);
  if (pd2) ibv_dealloc_pd(pd2);
  ibv_dereg_mr(pmr);
  ibv_destroy_cq(tcq);
  ibv_destroy_cq(pcq);
  check_ret(ibv_dealloc_pd(pd), 0, "ibv_dealloc_pd at the end");
  ibv_close_device(ctx);
  free(tbuf);
  free(pbuf);
  printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
