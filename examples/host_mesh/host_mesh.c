/* host_mesh: N processes on one host, each an ordinary verbs program on
 * softrdma's libibverbs.so.1, with no SRDMA_ADDR: every one opens the
 * host's device and they run RC traffic in every pairing, data checked.
 *
 *   host_mesh DIR RANK N [VICTIM]
 *
 * The ranks meet through files in DIR (each writes DIR/<rank> with its QPNs,
 * PSNs, GID, rkey and buffer address, renamed into place whole). Each rank
 * has one RC QP per peer; it RDMA WRITEs 64 KiB (a pattern of its rank and
 * the peer's) into its own slice of every peer's buffer, then SENDs its
 * rank. A rank that has received every peer's SEND checks every slice.
 *
 * VICTIM (a rank): that rank sets up and waits to be killed (kill -9, by the
 * test); the others then write 16 MiB to it and must see that QP end in
 * RETRY_EXC_ERR (or a flush) within a bound, while their traffic with each
 * other is unharmed. Exit 0 only if everything held; a message says what did not.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 32
#define SLICE (64 * 1024)
#define VICTIM_BYTES (16 * 1024 * 1024)
#define WAIT_MS 60000

static int rank, nranks, victim = -1;
static const char *dir;

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "host_mesh rank %d: ", rank);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void put_file(const char *name, const char *text) {
  char path[512], tmp[520];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) die("cannot write %s: %s", tmp, strerror(errno));
  if (rename(tmp, path) != 0) die("rename %s: %s", path, strerror(errno));
}

/* Waits (bounded) until DIR/<rank><suffix> exists for every rank but `skip`. */
static void barrier(const char *suffix, int skip) {
  char mine[64];
  snprintf(mine, sizeof mine, "%d%s", rank, suffix);
  put_file(mine, "x\n");
  double end = now_ms() + WAIT_MS;
  for (int r = 0; r < nranks; r++) {
    if (r == skip) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%d%s", dir, r, suffix);
    struct stat st;
    while (stat(path, &st) != 0) {
      if (now_ms() > end) die("rank %d never reached %s", r, suffix);
      usleep(2000);
    }
  }
}

static uint8_t pattern(int from, int to, size_t i) { return (uint8_t)(from * 31 + to * 7 + i * 13 + (i >> 8)); }

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: host_mesh DIR RANK N [VICTIM]\n");
    return 2;
  }
  dir = argv[1];
  rank = atoi(argv[2]);
  nranks = atoi(argv[3]);
  if (argc > 4) victim = atoi(argv[4]);
  if (nranks < 2 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) die("bad RANK/N");
  setvbuf(stdout, NULL, _IOLBF, 0);

  struct ibv_device **list = ibv_get_device_list(NULL);
  if (!list || !list[0]) die("no RDMA device");
  struct ibv_context *ctx = ibv_open_device(list[0]);
  if (!ctx) die("ibv_open_device: %s", strerror(errno));
  union ibv_gid gid;
  if (ibv_query_gid(ctx, 1, 0, &gid)) die("ibv_query_gid");
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  size_t bytes = (size_t)nranks * SLICE;
  if (bytes < VICTIM_BYTES) bytes = VICTIM_BYTES;
  uint8_t *buf = aligned_alloc(4096, bytes), *src = aligned_alloc(4096, bytes);
  uint64_t *msgs = calloc(MAX_RANKS * 2, sizeof *msgs);
  if (!pd || !buf || !src || !msgs) die("alloc");
  memset(buf, 0, bytes);
  struct ibv_mr *mr = ibv_reg_mr(pd, buf, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  struct ibv_mr *smr = ibv_reg_mr(pd, src, bytes, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *mmr = ibv_reg_mr(pd, msgs, MAX_RANKS * 2 * sizeof *msgs, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_cq *cq = ibv_create_cq(ctx, 4 * MAX_RANKS + 8, NULL, NULL, 0);
  if (!mr || !smr || !mmr || !cq) die("reg_mr/create_cq: %s", strerror(errno));

  struct ibv_qp *qp[MAX_RANKS] = {0};
  uint32_t psn[MAX_RANKS];
  char info[4096];
  int off = snprintf(info, sizeof info, "%u %llx", mr->rkey, (unsigned long long)(uintptr_t)buf);
  for (int i = 0; i < 16; i++) off += snprintf(info + off, sizeof info - off, " %02x", gid.raw[i]);
  off += snprintf(info + off, sizeof info - off, "\n");
  for (int p = 0; p < nranks; p++) {
    if (p == rank) {
      off += snprintf(info + off, sizeof info - off, "0 0\n");
      continue;
    }
    struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 4, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1}};
    qp[p] = ibv_create_qp(pd, &ia);
    if (!qp[p]) die("ibv_create_qp: %s", strerror(errno));
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
    if (ibv_modify_qp(qp[p], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      die("INIT");
    psn[p] = (uint32_t)((rank * 7919u + p * 104729u) & 0xffffff);
    off += snprintf(info + off, sizeof info - off, "%u %u\n", qp[p]->qp_num, psn[p]);
    struct ibv_sge s = {(uintptr_t)&msgs[MAX_RANKS + p], 8, mmr->lkey};
    struct ibv_recv_wr rw = {.wr_id = (uint64_t)p, .sg_list = &s, .num_sge = 1}, *bad;
    if (ibv_post_recv(qp[p], &rw, &bad)) die("post_recv");
  }
  char name[32];
  snprintf(name, sizeof name, "%d", rank);
  put_file(name, info);
  barrier(".up", -1);  /* every rank's file is there */

  uint32_t peer_rkey[MAX_RANKS];
  uint64_t peer_addr[MAX_RANKS];
  for (int p = 0; p < nranks; p++) {
    if (p == rank) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%d", dir, p);
    FILE *f = fopen(path, "r");
    if (!f) die("open %s", path);
    unsigned long long addr;
    union ibv_gid pg;
    if (fscanf(f, "%u %llx", &peer_rkey[p], &addr) != 2) die("parse %s", path);
    for (int i = 0; i < 16; i++) {
      unsigned v;
      if (fscanf(f, " %x", &v) != 1) die("parse gid %s", path);
      pg.raw[i] = (uint8_t)v;
    }
    peer_addr[p] = addr;
    unsigned qpn = 0, ppsn = 0;
    for (int r = 0; r <= rank; r++)
      if (fscanf(f, "%u %u", &qpn, &ppsn) != 2) die("parse qpn %s", path);
    fclose(f);
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = qpn,
                            .rq_psn = ppsn, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
                            .ah_attr = {.is_global = 1, .port_num = 1,
                                        .grh = {.dgid = pg, .sgid_index = 0, .hop_limit = 64}}};
    if (ibv_modify_qp(qp[p], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      die("RTR");
    /* timeout 10 (4 ms) x retry_cnt 3: a dead peer shows within a second */
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = psn[p], .timeout = 14, .retry_cnt = 7,
                             .rnr_retry = 7, .max_rd_atomic = 1};
    if (ibv_modify_qp(qp[p], &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
      die("RTS");
  }
  barrier(".rts", -1);
  printf("rank %d: slot %u, %d QPs ready\n", rank, qp[(rank + 1) % nranks]->qp_num >> 16, nranks - 1);
  if (rank == victim) {
    printf("rank %d: victim waiting\n", rank);
    for (;;) pause();
  }
  int live = nranks - 1 - (victim >= 0 ? 1 : 0);
  if (victim >= 0) {  /* the test kills the victim once the others say "sending" */
    char path[512];
    snprintf(path, sizeof path, "%s/killed", dir);
    printf("rank %d: sending\n", rank);
    double end = now_ms() + WAIT_MS;
    struct stat st;
    while (stat(path, &st) != 0) {
      if (now_ms() > end) die("the victim was never killed");
      usleep(2000);
    }
  }
  /* Every peer's WRITE and SEND at once, each from a source of its own. */
  for (int p = 0; p < nranks; p++) {
    if (p == rank) continue;
    uint8_t *from = p == victim ? src : src + (size_t)p * SLICE;
    size_t len = p == victim ? VICTIM_BYTES : SLICE;
    if (p != victim)
      for (size_t i = 0; i < SLICE; i++) from[i] = pattern(rank, p, i);
    struct ibv_sge ws = {(uintptr_t)from, (uint32_t)len, smr->lkey};
    struct ibv_send_wr w = {.wr_id = 1000 + p, .sg_list = &ws, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                            .send_flags = IBV_SEND_SIGNALED,
                            .wr.rdma = {.remote_addr = peer_addr[p] + (p == victim ? 0 : (uint64_t)rank * SLICE),
                                        .rkey = peer_rkey[p]}};
    msgs[p] = (uint64_t)rank;
    struct ibv_sge ss = {(uintptr_t)&msgs[p], 8, mmr->lkey};
    struct ibv_send_wr s = {.wr_id = 2000 + p, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
                            .send_flags = IBV_SEND_SIGNALED};
    w.next = &s;
    struct ibv_send_wr *bad;
    if (ibv_post_send(qp[p], &w, &bad)) die("post_send to %d", p);
  }
  const double start = now_ms();
  int sent = 0, received = 0, victim_seen = victim < 0;
  while (sent < live || received < live || !victim_seen) {
    struct ibv_wc wc;
    int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) die("ibv_poll_cq");
    if (n == 0) {
      if (now_ms() - start > WAIT_MS)
        die("stuck: %d of %d SENDs done, %d of %d received, victim %s", sent, live, received, live,
            victim_seen ? "seen" : "not seen");
      continue;
    }
    int p = (int)(wc.wr_id % 1000);
    if (p == victim) {
      if (wc.status == IBV_WC_SUCCESS) die("a WR to the killed rank %d succeeded", victim);
      if (wc.status != IBV_WC_RETRY_EXC_ERR && wc.status != IBV_WC_WR_FLUSH_ERR)
        die("the QP to the killed rank ended in %s", ibv_wc_status_str(wc.status));
      if (!victim_seen)
        printf("rank %d: QP to killed rank %d: %s after %.0f ms\n", rank, victim, ibv_wc_status_str(wc.status),
               now_ms() - start);
      victim_seen = 1;
      continue;
    }
    if (wc.status != IBV_WC_SUCCESS) die("wr %llu (peer %d): %s", (unsigned long long)wc.wr_id, p,
                                          ibv_wc_status_str(wc.status));
    if (wc.wr_id >= 2000) {
      sent++;
    } else if (wc.wr_id < 1000) {
      if (wc.opcode != IBV_WC_RECV || wc.byte_len != 8 || msgs[MAX_RANKS + p] != (uint64_t)p)
        die("the SEND from %d is wrong", p);
      /* RC: its WRITE landed before its SEND */
      for (size_t i = 0; i < SLICE; i++)
        if (buf[(size_t)p * SLICE + i] != pattern(p, rank, i)) die("byte %zu from rank %d is wrong", i, p);
      received++;
    }
  }
  printf("rank %d: ok, %d peers, every byte checked\n", rank, live);
  barrier(".done", victim);  /* nobody tears down while another still sends */
  for (int p = 0; p < nranks; p++)
    if (qp[p]) ibv_destroy_qp(qp[p]);
  ibv_destroy_cq(cq);
  ibv_dereg_mr(mr);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(mmr);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return 0;
}
