/*
 * rereg_mr: ibv_rereg_mr on softrdma's libibverbs.so.1, with the data and
 * the keys checked.
 *
 * Good path: the keys stay (as mlx5 and rxe keep them); CHANGE_TRANSLATION
 * (a WRITE with the rkey lands in the new buffer, the old one stays
 * untouched), CHANGE_ACCESS (a READ through the rkey), CHANGE_PD (the MR
 * serves a QP of the new PD), no flags (a no-op). The old translation dies:
 * after each change a WRITE to the old buffer, or one the new access does
 * not allow, fails with a remote access error and moves no byte, and an lkey
 * used on a QP of the PD the MR left fails with a local protection error.
 * Under traffic: a thread WRITEs through the rkey in a loop while the MR
 * moves to another buffer; once ibv_rereg_mr returns, the old buffer takes
 * no byte more and the new one never one through the old key (the WRITEs
 * after the move fail with a remote access error).
 * Refusals: unknown flags, CHANGE_TRANSLATION to NULL or length 0,
 * CHANGE_PD to NULL, access flags that cannot be (REMOTE_WRITE without
 * LOCAL_WRITE): IBV_REREG_MR_ERR_INPUT with EINVAL, and the MR still works
 * with its keys.
 *
 * Run with LD_LIBRARY_PATH at softrdma's drop-in and SRDMA_ADDR set.
 */
#include <pthread.h>

#include "ext_common.h"

enum { BUF = 4096 };

static struct ibv_context *ctx;
static struct ibv_cq *cq;
static union ibv_gid gid;

struct pair {
  struct ibv_qp *a, *b;
};

static struct pair make_pair(struct ibv_pd *pd) {
  struct ibv_qp_init_attr qi = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
  struct pair p = {ibv_create_qp(pd, &qi), ibv_create_qp(pd, &qi)};
  if (!p.a || !p.b || connect_rc(p.a, p.b->qp_num, &gid) || connect_rc(p.b, p.a->qp_num, &gid)) {
    check(0, "a connected RC pair");
    exit(1);
  }
  return p;
}

/* One signaled RDMA op; returns its completion status (-1: none). */
static int rdma(struct ibv_qp *qp, enum ibv_wr_opcode op, void *local, uint32_t lkey, void *remote, uint32_t rkey,
                uint32_t len) {
  struct ibv_sge sge = {(uintptr_t)local, len, lkey};
  struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  wr.wr.rdma.remote_addr = (uintptr_t)remote;
  wr.wr.rdma.rkey = rkey;
  if (ibv_post_send(qp, &wr, &bad)) return -1;
  struct ibv_wc wc;
  for (;;) {
    if (poll_one(cq, &wc) != 1) return -1;
    if (wc.wr_id == 1) return wc.status; /* a flushed WR of the peer has another wr_id */
  }
}

/* The traffic: WRITEs of 'Q' through one rkey until one fails. */
struct writer {
  struct ibv_qp *qp;
  struct ibv_cq *cq;
  char *src;
  uint32_t lkey, rkey;
  char *remote;
  volatile int started;
  long ok;
  volatile int last_status;
};
static void *write_loop(void *arg) {
  struct writer *w = arg;
  for (;;) {
    struct ibv_sge sge = {(uintptr_t)w->src, BUF, w->lkey};
    struct ibv_send_wr wr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    wr.wr.rdma.remote_addr = (uintptr_t)w->remote;
    wr.wr.rdma.rkey = w->rkey;
    if (ibv_post_send(w->qp, &wr, &bad)) {
      w->last_status = -1;
      return NULL;
    }
    struct ibv_wc wc;
    if (poll_one(w->cq, &wc) != 1) {
      w->last_status = -2;
      return NULL;
    }
    w->last_status = wc.status;
    if (wc.status != IBV_WC_SUCCESS) return NULL;
    w->ok++;
    __atomic_store_n(&w->started, 1, __ATOMIC_RELEASE);
  }
}

static int all(const char *p, char v, int n) {
  for (int i = 0; i < n; i++)
    if (p[i] != v) return 0;
  return 1;
}

int main(void) {
  ctx = open_srdma0();
  check(ctx != NULL, "ibv_open_device(srdma0)");
  if (!ctx) return 1;
  struct ibv_pd *pd = ibv_alloc_pd(ctx), *pd2 = ibv_alloc_pd(ctx);
  cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
  if (!pd || !pd2 || !cq || ibv_query_gid(ctx, 1, 0, &gid)) return 1;
  char *src = aligned_alloc(4096, BUF), *buf1 = aligned_alloc(4096, BUF), *buf2 = aligned_alloc(4096, BUF);
  memset(src, 'S', BUF);
  memset(buf1, 0, BUF);
  memset(buf2, 0, BUF);
  struct ibv_mr *smr = ibv_reg_mr(pd, src, BUF, IBV_ACCESS_LOCAL_WRITE);
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  struct ibv_mr *mr = ibv_reg_mr(pd, buf1, BUF, rw);
  if (!smr || !mr) return 1;
  struct pair p = make_pair(pd);

  check(rdma(p.a, IBV_WR_RDMA_WRITE, src, smr->lkey, buf1, mr->rkey, BUF) == IBV_WC_SUCCESS && all(buf1, 'S', BUF),
        "before: a WRITE lands in buf1");

  /* Refusals: ERR_INPUT with EINVAL, the MR unchanged. */
  const uint32_t k0 = mr->rkey;
  errno = 0;
  check(ibv_rereg_mr(mr, 1 << 7, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
        "ibv_rereg_mr(unknown flags) -> ERR_INPUT, EINVAL");
  errno = 0;
  check(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, BUF, 0) == IBV_REREG_MR_ERR_INPUT &&
            errno == EINVAL,
        "ibv_rereg_mr(CHANGE_TRANSLATION to NULL) -> ERR_INPUT, EINVAL");
  errno = 0;
  check(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf2, 0, 0) == IBV_REREG_MR_ERR_INPUT &&
            errno == EINVAL,
        "ibv_rereg_mr(CHANGE_TRANSLATION, length 0) -> ERR_INPUT, EINVAL");
  errno = 0;
  check(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
        "ibv_rereg_mr(CHANGE_PD to NULL) -> ERR_INPUT, EINVAL");
  errno = 0;
  check(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE) ==
                IBV_REREG_MR_ERR_INPUT &&
            errno == EINVAL,
        "ibv_rereg_mr(REMOTE_WRITE without LOCAL_WRITE) -> ERR_INPUT, EINVAL");
  check_ret(ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0), 0, "ibv_rereg_mr(no flags): nothing to change");
  memset(buf1, 0, BUF);
  check(mr->rkey == k0 && mr->addr == buf1 &&
            rdma(p.a, IBV_WR_RDMA_WRITE, src, smr->lkey, buf1, mr->rkey, BUF) == IBV_WC_SUCCESS && all(buf1, 'S', BUF),
        "after the refusals: the same keys, and a WRITE still lands in buf1");

  /* CHANGE_TRANSLATION: buf1 -> buf2. */
  memset(buf1, 0, BUF);
  memset(src, 'T', BUF);
  check_ret(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf2, BUF, 0), 0,
            "ibv_rereg_mr(CHANGE_TRANSLATION to buf2)");
  const uint32_t k1 = mr->rkey;
  check(mr->addr == buf2 && mr->length == BUF && k1 == k0, "the MR now names buf2 and keeps its rkey (as mlx5, rxe)");
  check(rdma(p.a, IBV_WR_RDMA_WRITE, src, smr->lkey, buf2, k1, BUF) == IBV_WC_SUCCESS && all(buf2, 'T', BUF) &&
            all(buf1, 0, BUF),
        "a WRITE with the rkey lands in buf2; buf1 untouched");

  /* CHANGE_ACCESS: read only. */
  check_ret(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ),
            0, "ibv_rereg_mr(CHANGE_ACCESS to LOCAL_WRITE | REMOTE_READ)");
  const uint32_t k2 = mr->rkey;
  memset(src, 0, BUF);
  check(rdma(p.a, IBV_WR_RDMA_READ, src, smr->lkey, buf2, k2, BUF) == IBV_WC_SUCCESS && all(src, 'T', BUF),
        "a READ through the new rkey returns buf2");

  /* The translations from before are dead: each on a pair of its own (the
   * error moves the QP to ERR). */
  memset(src, 'X', BUF);
  struct pair q = make_pair(pd);
  check(rdma(q.a, IBV_WR_RDMA_WRITE, src, smr->lkey, buf2, k1, BUF) == IBV_WC_REM_ACCESS_ERR &&
            all(buf2, 'T', BUF) && all(buf1, 0, BUF),
        "a WRITE after CHANGE_ACCESS to read-only: remote access error, no byte moved");
  q = make_pair(pd);
  check(rdma(q.a, IBV_WR_RDMA_WRITE, src, smr->lkey, buf1, k0, BUF) == IBV_WC_REM_ACCESS_ERR && all(buf1, 0, BUF) &&
            all(buf2, 'T', BUF),
        "a WRITE to buf1, the translation from before: remote access error, no byte moved");
  q = make_pair(pd);
  check(rdma(q.a, IBV_WR_RDMA_WRITE, src, smr->lkey, buf2, k2, BUF) == IBV_WC_REM_ACCESS_ERR && all(buf2, 'T', BUF),
        "a WRITE with the read-only MR's rkey: remote access error, no byte moved");

  /* CHANGE_PD: the MR serves pd2's QPs, no longer pd's. */
  check_ret(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS, pd2, NULL, 0, rw), 0,
            "ibv_rereg_mr(CHANGE_PD to pd2, read-write again)");
  check(mr->pd == pd2, "the MR is pd2's");
  struct ibv_mr *dmr = ibv_reg_mr(pd2, buf1, BUF, rw);
  struct pair r = make_pair(pd2);
  memset(buf2, 'P', BUF);
  check(dmr && rdma(r.a, IBV_WR_RDMA_WRITE, buf2, mr->lkey, buf1, dmr->rkey, BUF) == IBV_WC_SUCCESS &&
            all(buf1, 'P', BUF),
        "a pd2 QP sends from the MR with its new lkey");
  memset(buf1, 0, BUF);
  q = make_pair(pd);
  check(rdma(q.a, IBV_WR_RDMA_WRITE, buf2, mr->lkey, buf1, dmr ? dmr->rkey : 0, BUF) == IBV_WC_LOC_PROT_ERR &&
            all(buf1, 0, BUF),
        "a QP of the PD the MR left, with its lkey: local protection error, no byte moved");

  check_ret(ibv_dereg_mr(mr), 0, "ibv_dereg_mr after rereg");

  /* Under traffic: the MR moves from tbuf1 to tbuf2 while a thread WRITEs. */
  char *tsrc = aligned_alloc(4096, BUF), *tbuf1 = aligned_alloc(4096, BUF), *tbuf2 = aligned_alloc(4096, BUF);
  memset(tsrc, 'Q', BUF);
  memset(tbuf1, 0, BUF);
  memset(tbuf2, 0, BUF);
  struct ibv_cq *wcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  struct ibv_mr *tsmr = ibv_reg_mr(pd, tsrc, BUF, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *tmr = ibv_reg_mr(pd, tbuf1, BUF, rw);
  if (!wcq || !tsmr || !tmr) return 1;
  struct ibv_cq *main_cq = cq;
  cq = wcq; /* the writer's pair completes on its own CQ */
  struct pair t = make_pair(pd);
  cq = main_cq;
  struct writer w = {.qp = t.a, .cq = wcq, .src = tsrc, .lkey = tsmr->lkey, .rkey = tmr->rkey, .remote = tbuf1};
  pthread_t th;
  if (pthread_create(&th, NULL, write_loop, &w)) return 1;
  while (!__atomic_load_n(&w.started, __ATOMIC_ACQUIRE) && w.last_status == 0) {
    /* the writer's first WRITE completes: the move happens under traffic */
  }
  check_ret(ibv_rereg_mr(tmr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, tbuf2, BUF, 0), 0,
            "ibv_rereg_mr(CHANGE_TRANSLATION) while a thread WRITEs through the rkey");
  memset(tbuf1, 'Z', BUF); /* no stale WRITE may land here from now on */
  pthread_join(th, NULL);
  char line[200];
  snprintf(line, sizeof line,
           "under traffic: %ld WRITEs before the move, then a remote access error (status %d); the old buffer takes "
           "no byte after ibv_rereg_mr returns, the new one none through the old key",
           w.ok, w.last_status);
  check(w.ok > 0 && w.last_status == IBV_WC_REM_ACCESS_ERR && all(tbuf1, 'Z', BUF) && all(tbuf2, 0, BUF), line);
  printf("%s: %d check(s) failed\n", failures ? "FAIL" : "ok", failures);
  return failures ? 1 : 0;
}
