/*
 * What the extended-verbs test programs share: checks that print and count,
 * and an RC pair (two QPs of one device connected to each other, as
 * examples/verbs_errors does) on softrdma's libibverbs.so.1.
 */
#ifndef EXT_COMMON_H
#define EXT_COMMON_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <infiniband/verbs.h>

static int failures;

static void check(int ok, const char *what) {
  printf("%s: %s\n", ok ? "ok" : "FAIL", what);
  if (!ok) failures++;
}

/* A verb that returns a pointer failed with NULL and errno == want. */
static inline void check_null(const void *p, int want, const char *what) {
  int e = errno;
  char buf[240];
  snprintf(buf, sizeof buf, "%s -> NULL, errno %s (got %s, %s)", what, strerror(want), p ? "an object" : "NULL",
           strerror(e));
  check(p == NULL && e == want, buf);
}

/* A verb that returns an errno value returned want. */
static inline void check_ret(int r, int want, const char *what) {
  char buf[240];
  snprintf(buf, sizeof buf, "%s -> %s (got %d: %s)", what, want ? strerror(want) : "0", r, r > 0 ? strerror(r) : "");
  check(r == want, buf);
}

static uint32_t start_psn;

static inline struct ibv_context *open_srdma0(void) {
  while (getrandom(&start_psn, sizeof start_psn, 0) != sizeof start_psn) {
    if (errno != EINTR) return NULL;
  }
  start_psn &= 0xFFFFFF;
  int num = 0;
  struct ibv_device **list = ibv_get_device_list(&num);
  if (!list || num < 1) return NULL;
  struct ibv_context *ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  return ctx;
}

/* RESET -> INIT -> RTR -> RTS, connected to dest_qpn at our own GID. */
static inline int connect_rc(struct ibv_qp *qp, uint32_t dest_qpn, const union ibv_gid *gid) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                             IBV_ACCESS_REMOTE_ATOMIC};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return -1;
  struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest_qpn,
                          .rq_psn = start_psn, .max_dest_rd_atomic = 4, .min_rnr_timer = 12};
  r.ah_attr.is_global = 1;
  r.ah_attr.grh.dgid = *gid;
  r.ah_attr.grh.hop_limit = 1;
  r.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &r,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return -1;
  struct ibv_qp_attr s = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
                          .sq_psn = start_psn, .max_rd_atomic = 4};
  return ibv_modify_qp(qp, &s,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC);
}

/* Polls `cq` for one completion, bounded (a lost completion fails, never hangs). */
static inline int poll_one(struct ibv_cq *cq, struct ibv_wc *wc) {
  for (long i = 0; i < 200000000L; i++) {
    int n = ibv_poll_cq(cq, 1, wc);
    if (n != 0) return n;
  }
  return 0;
}

#endif
