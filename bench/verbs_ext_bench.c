/*
 * verbs_ext_bench: the ibv_wr_* path and ibv_cq_ex polling against
 * ibv_post_send and ibv_poll_cq, perftest-style, in one process on
 * softrdma's libibverbs.so.1: two RC QPs of one device connected to each
 * other, 64-byte RDMA WRITEs, 64 in flight, every 16th signaled, the same
 * number of WRITEs per round. Each way posts one WR per call (perftest's
 * default: one ibv_post_send, or one wr_start..wr_complete) and, again, all
 * the WRs the window has room for per call (a chained ibv_send_wr list, or
 * one batch of builders). The four alternate round by round and the
 * medians are compared (docs/BENCHMARKS.md has the command).
 *
 *   LD_LIBRARY_PATH=build/<dir>/lib/softrdma SRDMA_ADDR=127.0.0.1 verbs_ext_bench [WRITES-PER-ROUND] [ROUNDS]
 */
#include <time.h>

#include "../examples/verbs_ext/ext_common.h"

enum { DEPTH = 64, SIGNAL_EVERY = 16, SIZE = 64 };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One round: n WRITEs, DEPTH in flight, up to `batch` per post; returns
 * WRITEs per second. */
static double round_classic(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *mr, char *buf, long n, int batch) {
  struct ibv_sge sge = {(uintptr_t)buf, SIZE, mr->lkey};
  struct ibv_send_wr wr[DEPTH], *bad;
  for (int i = 0; i < DEPTH; i++) {
    wr[i] = (struct ibv_send_wr){.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE};
    wr[i].wr.rdma.remote_addr = (uintptr_t)(buf + 4096);
    wr[i].wr.rdma.rkey = mr->rkey;
  }
  long posted = 0, done = 0;
  struct ibv_wc wc[16];
  double t0 = now_s();
  while (done < n) {
    while (posted < n && posted - done < DEPTH) {
      int k = 0;
      while (k < batch && posted < n && posted - done < DEPTH) {
        wr[k].wr_id = (uint64_t)posted;
        wr[k].send_flags = (posted % SIGNAL_EVERY == SIGNAL_EVERY - 1) ? IBV_SEND_SIGNALED : 0;
        wr[k].next = NULL;
        if (k) wr[k - 1].next = &wr[k];
        k++;
        posted++;
      }
      if (ibv_post_send(qp, &wr[0], &bad)) return -1;
    }
    int k = ibv_poll_cq(cq, 16, wc);
    for (int i = 0; i < k; i++) {
      if (wc[i].status != IBV_WC_SUCCESS) return -1;
      done += SIGNAL_EVERY;
    }
  }
  return (double)n / (now_s() - t0);
}

static double round_ext(struct ibv_qp_ex *qx, struct ibv_cq_ex *cqx, struct ibv_mr *mr, char *buf, long n,
                        int batch) {
  long posted = 0, done = 0;
  struct ibv_poll_cq_attr attr = {0};
  double t0 = now_s();
  while (done < n) {
    while (posted < n && posted - done < DEPTH) {
      ibv_wr_start(qx);
      for (int k = 0; k < batch && posted < n && posted - done < DEPTH; k++) {
        qx->wr_id = (uint64_t)posted;
        qx->wr_flags = (posted % SIGNAL_EVERY == SIGNAL_EVERY - 1) ? IBV_SEND_SIGNALED : 0;
        ibv_wr_rdma_write(qx, mr->rkey, (uintptr_t)(buf + 4096));
        ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf, SIZE);
        posted++;
      }
      if (ibv_wr_complete(qx)) return -1;
    }
    if (ibv_start_poll(cqx, &attr) == 0) {
      do {
        if (cqx->status != IBV_WC_SUCCESS) return -1;
        done += SIGNAL_EVERY;
      } while (ibv_next_poll(cqx) == 0);
      ibv_end_poll(cqx);
    }
  }
  return (double)n / (now_s() - t0);
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 200000;
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  n -= n % SIGNAL_EVERY;
  if (n <= 0 || rounds <= 0 || rounds > 50) return 2;
  struct ibv_context *ctx = open_srdma0();
  if (!ctx) return 1;
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  char *buf = aligned_alloc(4096, 8192);
  struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  struct ibv_cq *cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
  struct ibv_cq_init_attr_ex ca = {.cqe = 256, .wc_flags = IBV_WC_STANDARD_FLAGS};
  struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &ca);
  if (!pd || !mr || !cq || !cqx) return 1;
  struct ibv_qp_init_attr_ex qa = {.qp_type = IBV_QPT_RC,
                                   .cap = {.max_send_wr = DEPTH, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
                                   .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
                                   .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE};
  /* Classic: a -> b on cq; extended: c -> d on cqx. */
  qa.send_cq = qa.recv_cq = cq;
  struct ibv_qp *a = ibv_create_qp_ex(ctx, &qa), *b = ibv_create_qp_ex(ctx, &qa);
  qa.send_cq = qa.recv_cq = ibv_cq_ex_to_cq(cqx);
  struct ibv_qp *c = ibv_create_qp_ex(ctx, &qa), *d = ibv_create_qp_ex(ctx, &qa);
  union ibv_gid gid;
  if (!a || !b || !c || !d || ibv_query_gid(ctx, 1, 0, &gid) || connect_rc(a, b->qp_num, &gid) ||
      connect_rc(b, a->qp_num, &gid) || connect_rc(c, d->qp_num, &gid) || connect_rc(d, c->qp_num, &gid))
    return 1;
  double c1[50], e1[50], cl[50], eb[50];
  for (int r = 0; r < rounds; r++) {
    c1[r] = round_classic(a, cq, mr, buf, n, 1);
    e1[r] = round_ext(ibv_qp_to_qp_ex(c), cqx, mr, buf, n, 1);
    cl[r] = round_classic(a, cq, mr, buf, n, DEPTH);
    eb[r] = round_ext(ibv_qp_to_qp_ex(c), cqx, mr, buf, n, DEPTH);
    if (c1[r] < 0 || e1[r] < 0 || cl[r] < 0 || eb[r] < 0) return 1;
    printf("round %d: one WR per post: ibv_post_send+ibv_poll_cq %.0f/s, ibv_wr_*+ibv_cq_ex %.0f/s; "
           "a window per post: %.0f/s, %.0f/s\n",
           r + 1, c1[r], e1[r], cl[r], eb[r]);
  }
  qsort(c1, (size_t)rounds, sizeof c1[0], cmp_double);
  qsort(e1, (size_t)rounds, sizeof e1[0], cmp_double);
  qsort(cl, (size_t)rounds, sizeof cl[0], cmp_double);
  qsort(eb, (size_t)rounds, sizeof eb[0], cmp_double);
  const int m = rounds / 2;
  printf("median of %d rounds of %ld 64-byte WRITEs (WRITEs/s):\n", rounds, n);
  printf("  one WR per post:    ibv_post_send+ibv_poll_cq %.0f, ibv_wr_*+ibv_cq_ex %.0f, ratio %.2f\n", c1[m], e1[m],
         e1[m] / c1[m]);
  printf("  a window per post:  ibv_post_send+ibv_poll_cq %.0f, ibv_wr_*+ibv_cq_ex %.0f, ratio %.2f\n", cl[m], eb[m],
         eb[m] / cl[m]);
  return 0;
}
