/*
 * verbs_errors: drives softrdma's libibverbs.so.1 through the verbs' error
 * paths and checks that each fails the way libibverbs documents (NULL or -1
 * with errno, or the errno value returned), then that the data path's
 * protection errors come back as completions: a bad rkey, a write past an
 * MR's end, a bad lkey. Then completion events: O_NONBLOCK on a channel's fd
 * makes ibv_get_cq_event return EAGAIN, and ibv_destroy_cq waits until the
 * CQ's events are acknowledged.
 *
 * Plain C against <infiniband/verbs.h>, linked with -libverbs, run with
 * LD_LIBRARY_PATH pointing at softrdma's drop-in and SRDMA_ADDR set (it
 * talks to itself: one RC QP connected to a second one on the same device).
 * Exits 0 when every check holds; prints each check.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <infiniband/verbs.h>

static int failures;
/* Both QPs start at this PSN (each one's sq_psn is the other's rq_psn):
 * random, from getrandom(2), as every connection's should be. */
static uint32_t start_psn;

static void check(int ok, const char *what) {
  printf("%s: %s\n", ok ? "ok" : "FAIL", what);
  if (!ok) failures++;
}

/* A verb that returns a pointer failed with NULL and errno == want. */
static void check_null(const void *p, int want, const char *what) {
  int e = errno;
  char buf[200];
  snprintf(buf, sizeof buf, "%s -> NULL, errno %s (got %s, %s)", what, strerror(want), p ? "an object" : "NULL",
           strerror(e));
  check(p == NULL && e == want, buf);
}

/* A verb that returns an errno value returned want. */
static void check_ret(int r, int want, const char *what) {
  char buf[200];
  snprintf(buf, sizeof buf, "%s -> %s (got %d)", what, strerror(want), r);
  check(r == want, buf);
}

enum { BUF = 4096 };

struct side {
  struct ibv_qp *qp;
  struct ibv_cq *cq;
};

static int to_init(struct ibv_qp *qp) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static int to_rtr(struct ibv_qp *qp, uint32_t dest_qpn, const union ibv_gid *gid) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest_qpn,
                          .rq_psn = start_psn, .max_dest_rd_atomic = 1, .min_rnr_timer = 12};
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = *gid;
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int to_rts(struct ibv_qp *qp) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
                          .sq_psn = start_psn, .max_rd_atomic = 1};
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC);
}

/* Polls `cq` for one completion, bounded. */
/* A CQ destroyed on another thread while its event is not acknowledged. */
struct destroyer {
  struct ibv_cq *cq;
  volatile int acked; /* set by the main thread just before it acks */
  int ret, acked_before_return;
};
static void *destroy_cq_thread(void *arg) {
  struct destroyer *d = arg;
  d->ret = ibv_destroy_cq(d->cq);
  d->acked_before_return = __atomic_load_n(&d->acked, __ATOMIC_SEQ_CST);
  return NULL;
}

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc) {
  for (long i = 0; i < 200000000L; i++) {
    int n = ibv_poll_cq(cq, 1, wc);
    if (n != 0) return n;
  }
  return 0;
}

/* Posts one signaled RDMA WRITE and returns its completion's status. */
static int write_status(struct ibv_qp *qp, struct ibv_cq *cq, uint64_t laddr, uint32_t len, uint32_t lkey,
                        uint64_t raddr, uint32_t rkey) {
  struct ibv_sge sge = {.addr = laddr, .length = len, .lkey = lkey};
  struct ibv_send_wr wr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                           .send_flags = IBV_SEND_SIGNALED};
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  struct ibv_send_wr *bad = NULL;
  if (ibv_post_send(qp, &wr, &bad)) return -1;
  struct ibv_wc wc;
  if (poll_one(cq, &wc) != 1) return -2;
  return wc.status;
}

int main(void) {
  while (getrandom(&start_psn, sizeof start_psn, 0) != sizeof start_psn) {
    if (errno != EINTR) return 1;
  }
  start_psn &= 0xFFFFFF;
  int num = 0;
  struct ibv_device **list = ibv_get_device_list(&num);
  check(list && num >= 1 && strcmp(ibv_get_device_name(list[0]), "srdma0") == 0, "ibv_get_device_list: srdma0");
  if (!list || num < 1) return 1;
  struct ibv_context *ctx = ibv_open_device(list[0]);
  check(ctx != NULL, "ibv_open_device");
  if (!ctx) return 1;

  struct ibv_device_attr dev;
  check(ibv_query_device(ctx, &dev) == 0 && dev.phys_port_cnt == 1, "ibv_query_device: one port");
  struct ibv_port_attr port;
  check_ret(ibv_query_port(ctx, 2, &port), EINVAL, "ibv_query_port(port 2)");
  check(ibv_query_port(ctx, 1, &port) == 0 && port.link_layer == IBV_LINK_LAYER_ETHERNET && port.lid != 0,
        "ibv_query_port(port 1): Ethernet, a non-zero LID");
  union ibv_gid gid;
  errno = 0;
  check(ibv_query_gid(ctx, 1, 16, &gid) == -1 && errno == EINVAL, "ibv_query_gid(index 16, past the table) -> -1, EINVAL");
  check(ibv_query_gid(ctx, 1, 1, &gid) == 0 && gid.raw[10] == 0 && gid.raw[15] == 0, "ibv_query_gid(index 1): an empty slot reads as zero");
  check(ibv_query_gid(ctx, 1, 0, &gid) == 0 && gid.raw[10] == 0xff && gid.raw[11] == 0xff,
        "ibv_query_gid(index 0): IPv4-mapped");
  struct ibv_gid_entry ge;
  check_ret(ibv_query_gid_ex(ctx, 1, 0, &ge, 1), EINVAL, "ibv_query_gid_ex(unknown flags)");
  check_ret(ibv_query_gid_ex(ctx, 1, 1, &ge, 0), ENODATA, "ibv_query_gid_ex(an empty slot)");
  check(ibv_query_gid_ex(ctx, 1, 0, &ge, 0) == 0 && ge.gid_type == IBV_GID_TYPE_ROCE_V2, "ibv_query_gid_ex: RoCE v2");
  check_null(ibv_alloc_pd(NULL), EINVAL, "ibv_alloc_pd(NULL)");

  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  check(pd != NULL, "ibv_alloc_pd");
  if (!pd) return 1;
  char *buf = aligned_alloc(4096, 2 * BUF);
  memset(buf, 0, 2 * BUF);
  check_null(ibv_reg_mr(pd, buf, 0, IBV_ACCESS_LOCAL_WRITE), EINVAL, "ibv_reg_mr(length 0)");
  check_null(ibv_reg_mr(pd, buf, BUF, IBV_ACCESS_REMOTE_WRITE), EINVAL,
             "ibv_reg_mr(REMOTE_WRITE without LOCAL_WRITE)");
  check_null(ibv_reg_mr(pd, buf, BUF, 1 << 15), EINVAL, "ibv_reg_mr(unknown access bit)");
  check_null(ibv_reg_mr(pd, buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED), EOPNOTSUPP,
             "ibv_reg_mr(ZERO_BASED)");
  struct ibv_mr *ro = ibv_reg_mr(pd, buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
  check(ro != NULL, "ibv_reg_mr(RELAXED_ORDERING): accepted and ignored");
  if (ro) ibv_dereg_mr(ro);
  struct ibv_mr *src = ibv_reg_mr(pd, buf, BUF, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dst =
      ibv_reg_mr(pd, buf + BUF, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  check(src && dst, "ibv_reg_mr: a source and a remotely writable destination");
  if (!src || !dst) return 1;

  check_null(ibv_create_cq(ctx, 0, NULL, NULL, 0), EINVAL, "ibv_create_cq(cqe 0)");
  check_null(ibv_create_cq(ctx, dev.max_cqe + 1, NULL, NULL, 0), EINVAL, "ibv_create_cq(cqe above max_cqe)");
  check_null(ibv_create_cq(ctx, 16, NULL, NULL, ctx->num_comp_vectors), EINVAL,
             "ibv_create_cq(comp_vector out of range)");
  struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
  check(ch != NULL && ch->fd >= 0, "ibv_create_comp_channel: a file descriptor");
  struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, ch, 0);
  check(cq != NULL, "ibv_create_cq");
  if (!cq) return 1;
  check_ret(ibv_destroy_comp_channel(ch), EBUSY, "ibv_destroy_comp_channel(a CQ uses it)");

  struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp_init_attr too_big = init;
  too_big.cap.max_send_wr = dev.max_qp_wr + 1;
  check_null(ibv_create_qp(pd, &too_big), EINVAL, "ibv_create_qp(max_send_wr above max_qp_wr)");
  struct ibv_qp_init_attr no_cq = init;
  no_cq.send_cq = NULL;
  check_null(ibv_create_qp(pd, &no_cq), EINVAL, "ibv_create_qp(no send CQ)");
  struct ibv_qp *a = ibv_create_qp(pd, &init);
  struct ibv_qp *b = ibv_create_qp(pd, &init);
  check(a && b, "ibv_create_qp: two RC QPs");
  if (!a || !b) return 1;
  check_ret(ibv_destroy_cq(cq), EBUSY, "ibv_destroy_cq(QPs use it)");

  /* A shared receive queue: its limits, and a QP that takes its receives. */
  struct ibv_srq_init_attr sinit = {.attr = {.max_wr = dev.max_srq_wr + 1, .max_sge = 1}};
  check_null(ibv_create_srq(pd, &sinit), EINVAL, "ibv_create_srq(max_wr above max_srq_wr)");
  sinit.attr.max_wr = 16;
  struct ibv_srq *srq = ibv_create_srq(pd, &sinit);
  check(srq != NULL && dev.max_srq > 0, "ibv_create_srq");
  if (!srq) return 1;
  struct ibv_qp_init_attr with_srq = init;
  with_srq.srq = srq;
  struct ibv_qp *s = ibv_create_qp(pd, &with_srq);
  check(s != NULL, "ibv_create_qp(with an SRQ)");
  if (!s) return 1;
  struct ibv_sge rsge = {.addr = (uintptr_t)buf, .length = 8, .lkey = 0};
  struct ibv_recv_wr rwr = {.wr_id = 3, .sg_list = &rsge, .num_sge = 1};
  struct ibv_recv_wr *rbad = NULL;
  check(ibv_post_recv(s, &rwr, &rbad) == EINVAL && rbad == &rwr, "ibv_post_recv(a QP with an SRQ) -> EINVAL, bad_wr");
  struct ibv_srq_attr sattr = {.srq_limit = 17};
  check_ret(ibv_modify_srq(srq, &sattr, IBV_SRQ_LIMIT), EINVAL, "ibv_modify_srq(srq_limit above max_wr)");
  check_ret(ibv_modify_srq(srq, &sattr, 1 << 5), EINVAL, "ibv_modify_srq(unknown mask bit)");
  check_ret(ibv_destroy_srq(srq), EBUSY, "ibv_destroy_srq(a QP uses it)");
  check(ibv_destroy_qp(s) == 0 && ibv_destroy_srq(srq) == 0, "ibv_destroy_srq once its QP is gone");

  /* Address handles: the peer must be named by an IPv4-mapped GID (index 0)
   * or a LID; the way back from a datagram needs its GRH area's IPv4 header. */
  check_null(ibv_create_ah(pd, NULL), EINVAL, "ibv_create_ah(NULL attr)");
  struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1};
  aa.grh.dgid = (union ibv_gid){.raw = {0xfe, 0x80, [15] = 1}};
  check_null(ibv_create_ah(pd, &aa), EINVAL, "ibv_create_ah(a GID that is not IPv4-mapped)");
  aa.grh.dgid = gid;
  aa.grh.sgid_index = 1;
  check_null(ibv_create_ah(pd, &aa), EINVAL, "ibv_create_ah(sgid_index 1)");
  aa.grh.sgid_index = 0;
  aa.port_num = 2;
  check_null(ibv_create_ah(pd, &aa), EINVAL, "ibv_create_ah(port 2)");
  struct ibv_ah_attr no_peer = {.port_num = 1};
  check_null(ibv_create_ah(pd, &no_peer), EINVAL, "ibv_create_ah(neither a GRH nor a LID)");
  aa.port_num = 1;
  struct ibv_ah *ah = ibv_create_ah(pd, &aa);
  check(ah != NULL, "ibv_create_ah(GID 0 of this device)");
  struct ibv_wc uwc = {.wc_flags = IBV_WC_GRH, .slid = port.lid};
  struct ibv_ah_attr back;
  errno = 0;
  check(ibv_init_ah_from_wc(ctx, 2, &uwc, NULL, &back) == -1 && errno == EINVAL,
        "ibv_init_ah_from_wc(port 2) -> -1, EINVAL");
  errno = 0;
  check(ibv_init_ah_from_wc(ctx, 1, &uwc, NULL, &back) == -1 && errno == EINVAL,
        "ibv_init_ah_from_wc(IBV_WC_GRH, NULL GRH) -> -1, EINVAL");
  struct ibv_grh grh;
  memset(&grh, 0, sizeof grh);
  errno = 0;
  check(ibv_init_ah_from_wc(ctx, 1, &uwc, &grh, &back) == -1 && errno == EINVAL,
        "ibv_init_ah_from_wc(a GRH area with no IPv4 header) -> -1, EINVAL");
  errno = 0;
  check_null(ibv_create_ah_from_wc(pd, &uwc, &grh, 1), EINVAL, "ibv_create_ah_from_wc(no IPv4 header)");
  /* rxe's layout: 20 zero bytes, then the IPv4 header (version 4, IHL 5). */
  uint8_t *ip = (uint8_t *)&grh + 20;
  ip[0] = 0x45;
  ip[1] = 0x20;
  memcpy(ip + 12, &gid.raw[12], 4); /* the source: this device */
  check(ibv_init_ah_from_wc(ctx, 1, &uwc, &grh, &back) == 0 && back.is_global &&
            memcmp(back.grh.dgid.raw, gid.raw, 16) == 0 && back.grh.traffic_class == 0x20,
        "ibv_init_ah_from_wc: the sender's GID and traffic class from the IPv4 header");
  struct ibv_ah *ah2 = ibv_create_ah_from_wc(pd, &uwc, &grh, 1);
  check(ah2 != NULL, "ibv_create_ah_from_wc");
  uwc.wc_flags = 0;
  check(ibv_init_ah_from_wc(ctx, 1, &uwc, NULL, &back) == 0 && !back.is_global && back.dlid == port.lid,
        "ibv_init_ah_from_wc(no GRH): the sender's LID");
  check(ah && ibv_destroy_ah(ah) == 0 && ah2 && ibv_destroy_ah(ah2) == 0, "ibv_destroy_ah");
  check_ret(ibv_dealloc_pd(pd), EBUSY, "ibv_dealloc_pd(MRs and QPs use it)");

  /* modify_qp: bad states, masks, transitions and attributes change nothing. */
  struct ibv_qp_attr attr = {.qp_state = IBV_QPS_RTR};
  check_ret(ibv_modify_qp(a, &attr, IBV_QP_STATE), EINVAL, "ibv_modify_qp(RESET -> RTR)");
  attr.qp_state = 42;
  check_ret(ibv_modify_qp(a, &attr, IBV_QP_STATE), EINVAL, "ibv_modify_qp(qp_state 42)");
  attr.qp_state = IBV_QPS_INIT;
  check_ret(ibv_modify_qp(a, &attr, IBV_QP_STATE | (1 << 30)), EINVAL, "ibv_modify_qp(unknown attr_mask bit)");
  check_ret(ibv_modify_qp(a, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS), EINVAL,
            "ibv_modify_qp(RESET -> INIT without IBV_QP_PORT)");
  struct ibv_qp_attr qa;
  struct ibv_qp_init_attr qi;
  check(ibv_query_qp(a, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_RESET,
        "ibv_query_qp: still RESET after the refusals");

  struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = src->lkey};
  struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED};
  struct ibv_send_wr *bad = NULL;
  check(ibv_post_send(a, &wr, &bad) == EINVAL && bad == &wr, "ibv_post_send(QP in RESET) -> EINVAL, bad_wr");

  check(to_init(a) == 0 && to_init(b) == 0, "RESET -> INIT");
  attr = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = 9, .dest_qp_num = b->qp_num};
  attr.ah_attr.is_global = 1;
  attr.ah_attr.grh.dgid = gid;
  attr.ah_attr.port_num = 1;
  check_ret(ibv_modify_qp(a, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            EINVAL, "ibv_modify_qp(path_mtu 9)");
  union ibv_gid v6 = {.raw = {0xfe, 0x80, [15] = 1}};
  check_ret(to_rtr(a, b->qp_num, &v6), EINVAL, "ibv_modify_qp(AV with a GID that is not IPv4-mapped)");
  check(to_rtr(a, b->qp_num, &gid) == 0 && to_rtr(b, a->qp_num, &gid) == 0, "INIT -> RTR");
  check(to_rts(a) == 0 && to_rts(b) == 0, "RTR -> RTS");

  wr.num_sge = 2;
  check(ibv_post_send(a, &wr, &bad) == EINVAL && bad == &wr, "ibv_post_send(num_sge above max_send_sge) -> EINVAL");
  wr.num_sge = 1;
  wr.sg_list = NULL;
  check(ibv_post_send(a, &wr, &bad) == EINVAL && bad == &wr, "ibv_post_send(NULL sg_list) -> EINVAL");
  wr.sg_list = &sge;
  wr.opcode = IBV_WR_BIND_MW;
  check(ibv_post_send(a, &wr, &bad) == EINVAL && bad == &wr, "ibv_post_send(BIND_MW without a window) -> EINVAL");

  /* The data path: one good write, then each protection error as a completion. */
  strcpy(buf, "softrdma");
  uintptr_t raddr = (uintptr_t)(buf + BUF);
  check(write_status(a, cq, (uintptr_t)buf, 9, src->lkey, raddr, dst->rkey) == IBV_WC_SUCCESS &&
            strcmp(buf + BUF, "softrdma") == 0,
        "RDMA WRITE: lands");
  check(write_status(a, cq, (uintptr_t)buf, 8, src->lkey, raddr + BUF - 4, dst->rkey) == IBV_WC_REM_ACCESS_ERR,
        "RDMA WRITE past the MR's end -> IBV_WC_REM_ACCESS_ERR");
  /* The QP is in ERR now: what follows is flushed. */
  check(write_status(a, cq, (uintptr_t)buf, 8, src->lkey, raddr, dst->rkey) == IBV_WC_WR_FLUSH_ERR,
        "a WR after the error -> IBV_WC_WR_FLUSH_ERR");

  /* Fresh QPs for the other two protection errors. */
  struct ibv_qp *c = ibv_create_qp(pd, &init);
  struct ibv_qp *d = ibv_create_qp(pd, &init);
  check(c && d && to_init(c) == 0 && to_init(d) == 0 && to_rtr(c, d->qp_num, &gid) == 0 &&
            to_rtr(d, c->qp_num, &gid) == 0 && to_rts(c) == 0 && to_rts(d) == 0,
        "a second pair connected");
  check(write_status(c, cq, (uintptr_t)buf, 8, src->lkey, raddr, dst->rkey ^ 0x100) == IBV_WC_REM_ACCESS_ERR,
        "RDMA WRITE with a bad rkey -> IBV_WC_REM_ACCESS_ERR");
  struct ibv_qp *e = ibv_create_qp(pd, &init);
  struct ibv_qp *f = ibv_create_qp(pd, &init);
  check(e && f && to_init(e) == 0 && to_init(f) == 0 && to_rtr(e, f->qp_num, &gid) == 0 &&
            to_rtr(f, e->qp_num, &gid) == 0 && to_rts(e) == 0 && to_rts(f) == 0,
        "a third pair connected");
  check(write_status(e, cq, (uintptr_t)buf, 8, src->lkey ^ 0x100, raddr, dst->rkey) == IBV_WC_LOC_PROT_ERR,
        "RDMA WRITE with a bad lkey -> IBV_WC_LOC_PROT_ERR");

  /* Completion events on a CQ of their own. */
  struct ibv_cq *ecq = ibv_create_cq(ctx, 4, NULL, ch, 0);
  check(ecq != NULL && ecq->cqe >= 4, "ibv_create_cq on the channel: at least the entries asked for");
  if (!ecq) return 1;
  struct ibv_qp_init_attr einit = init;
  einit.send_cq = einit.recv_cq = ecq;
  struct ibv_qp *g = ibv_create_qp(pd, &einit);
  struct ibv_qp *h = ibv_create_qp(pd, &einit);
  check(g && h && to_init(g) == 0 && to_init(h) == 0 && to_rtr(g, h->qp_num, &gid) == 0 &&
            to_rtr(h, g->qp_num, &gid) == 0 && to_rts(g) == 0 && to_rts(h) == 0,
        "a pair on the event CQ connected");
  check(ibv_req_notify_cq(ecq, 0) == 0, "ibv_req_notify_cq");
  check(write_status(g, ecq, (uintptr_t)buf, 8, src->lkey, raddr, dst->rkey) == IBV_WC_SUCCESS,
        "RDMA WRITE on the armed CQ");
  struct ibv_cq *ev_cq = NULL;
  void *ev_ctx = NULL;
  check(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == ecq, "ibv_get_cq_event: the armed CQ's event");
  const int fl = fcntl(ch->fd, F_GETFL);
  check(fl >= 0 && fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK on the channel's fd");
  errno = 0;
  check(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN,
        "ibv_get_cq_event on a non-blocking channel with no event: -1, EAGAIN");
  check(fcntl(ch->fd, F_SETFL, fl) == 0, "the channel's fd blocking again");
  check(ibv_destroy_qp(g) == 0 && ibv_destroy_qp(h) == 0, "ibv_destroy_qp (the event CQ's pair)");
  struct destroyer dz = {.cq = ecq};
  pthread_t t;
  check(pthread_create(&t, NULL, destroy_cq_thread, &dz) == 0, "a thread destroys the CQ");
  __atomic_store_n(&dz.acked, 1, __ATOMIC_SEQ_CST);
  ibv_ack_cq_events(ecq, 1);
  pthread_join(t, NULL);
  check(dz.ret == 0 && dz.acked_before_return, "ibv_destroy_cq waits for the event's acknowledgement, then succeeds");

  /* Drain what the errors flushed, then tear down in order. */
  struct ibv_wc wc;
  while (ibv_poll_cq(cq, 1, &wc) > 0) {
  }
  struct ibv_qp *qps[] = {a, b, c, d, e, f};
  for (int i = 0; i < 6; i++) check(ibv_destroy_qp(qps[i]) == 0, "ibv_destroy_qp");
  check(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
  check(ibv_destroy_comp_channel(ch) == 0, "ibv_destroy_comp_channel");
  check(ibv_dereg_mr(src) == 0 && ibv_dereg_mr(dst) == 0, "ibv_dereg_mr");
  check(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
  check(ibv_close_device(ctx) == 0, "ibv_close_device");
  ibv_free_device_list(list);
  free(buf);
  printf("%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
