/*
 * qp_ex: ibv_create_qp_ex with send_ops_flags and the ibv_wr_* posting API
 * on softrdma's libibverbs.so.1, with every byte moved checked.
 *
 * Good path, on two RC QPs of one device connected to each other:
 * wr_rdma_write, wr_rdma_write_imm, wr_send with wr_set_sge_list, wr_send_imm
 * with wr_set_inline_data (the buffer changed right after: the data sent is
 * what it held at the call), wr_send with wr_set_inline_data_list,
 * wr_rdma_read, wr_atomic_fetch_add, wr_atomic_cmp_swp, wr_atomic_write, three WRs in one
 * wr_start..wr_complete; UD: wr_send with wr_set_ud_addr.
 * Refusals: at create (TSO: EOPNOTSUPP; an
 * opcode the QP type does not send (ATOMIC_WRITE on UC too), unknown comp_mask, an XRCD on an
 * RC QP: EINVAL; create_flags: EOPNOTSUPP), ibv_qp_to_qp_ex on a classic QP (NULL), and in
 * a batch (an opcode not in send_ops_flags -- bind_mw on a QP created
 * without BIND_MW too --, unknown wr_flags, too many SGEs, inline data over
 * the limit, a UD WR without an address, atomic_write on a QP without it:
 * EINVAL; set_xrc_srqn on an RC QP: EINVAL; XRC itself: examples/verbs_ext/xrc.c). Memory windows themselves: examples/verbs_ext/mw.c. After each refusal and after
 * wr_abort, the next completion is the next good WR's: nothing was posted.
 *
 * Run with LD_LIBRARY_PATH at softrdma's drop-in and SRDMA_ADDR set.
 */
#include <arpa/inet.h>

#include "ext_common.h"

enum { KB = 1024, MEM = 64 * KB, SRC = 0, DST = 4 * KB, RCV = 8 * KB, ATOM = 12 * KB, BACK = 16 * KB };
enum { MAX_INLINE = 64 };

static char *mem;
static struct ibv_mr *mr;
static struct ibv_cq *cq;

/* Completions polled but not yet expected: a SEND's receive may complete
 * before the SEND itself (its ACK comes after), so each expectation takes
 * the completion with its wr_id if it was already polled. */
static struct ibv_wc pending[4];
static int npending;
static int next_wc(uint64_t wr_id, struct ibv_wc *wc) {
  for (int i = 0; i < npending; i++) {
    if (pending[i].wr_id == wr_id) {
      *wc = pending[i];
      pending[i] = pending[--npending];
      return 1;
    }
  }
  for (;;) {
    if (poll_one(cq, wc) != 1) return 0;
    if (wc->wr_id == wr_id || npending == 4) return 1;
    pending[npending++] = *wc;
  }
}

/* The completion of wr_id: its opcode and status must be these. */
static void expect(uint64_t wr_id, enum ibv_wc_opcode op, const char *what) {
  struct ibv_wc wc;
  char buf[240];
  int n = next_wc(wr_id, &wc);
  snprintf(buf, sizeof buf, "%s: completion wr_id %llu opcode %d status %s (got n=%d wr_id %llu opcode %d %s)", what,
           (unsigned long long)wr_id, op, ibv_wc_status_str(IBV_WC_SUCCESS), n, (unsigned long long)wc.wr_id,
           n == 1 ? (int)wc.opcode : -1, n == 1 ? ibv_wc_status_str(wc.status) : "-");
  check(n == 1 && wc.wr_id == wr_id && wc.opcode == op && wc.status == IBV_WC_SUCCESS, buf);
}

/* Strictly the next completion on the CQ (none polled ahead): how a
 * refusal or an abort is shown to have posted nothing. */
static void expect_next(uint64_t wr_id, enum ibv_wc_opcode op, const char *what) {
  struct ibv_wc wc;
  char buf[240];
  int n = npending ? 0 : poll_one(cq, &wc);
  snprintf(buf, sizeof buf, "%s: the next completion is wr_id %llu (got n=%d wr_id %llu, %d pending)", what,
           (unsigned long long)wr_id, n, n == 1 ? (unsigned long long)wc.wr_id : 0ull, npending);
  check(n == 1 && wc.wr_id == wr_id && wc.opcode == op && wc.status == IBV_WC_SUCCESS, buf);
}

/* A receive completion carrying imm (or none when has_imm is 0) and len bytes. */
static void expect_recv(uint64_t wr_id, uint32_t len, int has_imm, uint32_t imm_host, enum ibv_wc_opcode op,
                        const char *what) {
  struct ibv_wc wc;
  char buf[240];
  int n = next_wc(wr_id, &wc);
  int ok = n == 1 && wc.wr_id == wr_id && wc.status == IBV_WC_SUCCESS && wc.opcode == op && wc.byte_len == len &&
           (!has_imm || ((wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == imm_host));
  snprintf(buf, sizeof buf, "%s: receive wr_id %llu, %u bytes%s (got n=%d wr_id %llu, %u bytes, %s)", what,
           (unsigned long long)wr_id, len, has_imm ? ", with imm" : "", n, (unsigned long long)wc.wr_id, wc.byte_len,
           n == 1 ? ibv_wc_status_str(wc.status) : "-");
  check(ok, buf);
}

static void post_recv(struct ibv_qp *qp, uint64_t wr_id) {
  struct ibv_sge sge = {.addr = (uintptr_t)(mem + RCV), .length = 4 * KB, .lkey = mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
  if (ibv_post_recv(qp, &wr, &bad)) check(0, "ibv_post_recv");
}

static void fill(int off, int len, int seed) {
  for (int i = 0; i < len; i++) mem[off + i] = (char)(seed + i * 7);
}
static int same(int a, int b, int len) { return memcmp(mem + a, mem + b, (size_t)len) == 0; }

static struct ibv_qp *create_ex(struct ibv_context *ctx, struct ibv_pd *pd, enum ibv_qp_type type, uint64_t ops) {
  struct ibv_qp_init_attr_ex a = {
      .send_cq = cq, .recv_cq = cq, .qp_type = type,
      .cap = {.max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 4, .max_recv_sge = 1,
              .max_inline_data = MAX_INLINE},
      .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd, .send_ops_flags = ops};
  return ibv_create_qp_ex(ctx, &a);
}

/* A batch the device must refuse whole: wr_complete returns want, and the
 * next completion is a good WRITE's (nothing of the batch was posted). */
static void refused_batch(struct ibv_qp_ex *qx, struct ibv_qp_ex *good, int want, const char *what,
                          void (*build)(struct ibv_qp_ex *)) {
  ibv_wr_start(qx);
  build(qx);
  int r = ibv_wr_complete(qx);
  check_ret(r, want, what);
  ibv_wr_start(good);
  good->wr_id = 900;
  good->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(good, mr->rkey, (uintptr_t)(mem + DST));
  ibv_wr_set_sge(good, mr->lkey, (uintptr_t)(mem + SRC), 8);
  if (ibv_wr_complete(good)) check(0, "the good WRITE after a refusal");
  expect_next(900, IBV_WC_RDMA_WRITE, "after the refusal, nothing of it was posted");
}

static uint32_t g_rkey;
static uint64_t g_raddr;
static void build_write(struct ibv_qp_ex *qx) {
  qx->wr_id = 1;
  qx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(qx, g_rkey, g_raddr);
  ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)(mem + SRC), 8);
}
static void build_bad_flags(struct ibv_qp_ex *qx) {
  qx->wr_id = 2;
  qx->wr_flags = 1u << 20;
  ibv_wr_rdma_write(qx, g_rkey, g_raddr);
  ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)(mem + SRC), 8);
}
static void build_too_many_sges(struct ibv_qp_ex *qx) {
  struct ibv_sge s[5];
  for (int i = 0; i < 5; i++) s[i] = (struct ibv_sge){(uintptr_t)(mem + SRC + 8 * i), 8, mr->lkey};
  qx->wr_id = 3;
  qx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(qx, g_rkey, g_raddr);
  ibv_wr_set_sge_list(qx, 5, s);
}
static void build_big_inline(struct ibv_qp_ex *qx) {
  qx->wr_id = 4;
  qx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(qx, g_rkey, g_raddr);
  ibv_wr_set_inline_data(qx, mem + SRC, MAX_INLINE + 1);
}
static void build_good_then_bind_mw(struct ibv_qp_ex *qx) {
  build_write(qx); /* a good WR first: the whole batch is refused */
  struct ibv_mw_bind_info info = {0};
  ibv_wr_bind_mw(qx, NULL, 0, &info);
}
static void build_xrc(struct ibv_qp_ex *qx) {
  build_write(qx);
  ibv_wr_set_xrc_srqn(qx, 1);
}
static void build_atomic_write(struct ibv_qp_ex *qx) {
  uint64_t v = 1;
  qx->wr_id = 5;
  qx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_atomic_write(qx, g_rkey, g_raddr, &v);
}
static void build_ud_no_addr(struct ibv_qp_ex *qx) {
  qx->wr_id = 6;
  qx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qx);
  ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)(mem + SRC), 8);
}

int main(void) {
  struct ibv_context *ctx = open_srdma0();
  check(ctx != NULL, "ibv_open_device(srdma0)");
  if (!ctx) return 1;
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  mem = aligned_alloc(4096, MEM);
  memset(mem, 0, MEM);
  mr = ibv_reg_mr(pd, mem, MEM,
                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
  check(pd && mr && cq, "a PD, an MR and a CQ");
  if (!pd || !mr || !cq) return 1;
  union ibv_gid gid;
  if (ibv_query_gid(ctx, 1, 0, &gid)) return 1;

  /* Refusals at create. */
  const uint64_t rc_ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
                          IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                          IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV;
  struct ibv_qp *with_bind = create_ex(ctx, pd, IBV_QPT_RC, rc_ops | IBV_QP_EX_WITH_BIND_MW);
  check(with_bind != NULL, "ibv_create_qp_ex(send_ops_flags with BIND_MW): memory windows are supported");
  if (with_bind) ibv_destroy_qp(with_bind);
  check_null(create_ex(ctx, pd, IBV_QPT_RC, IBV_QP_EX_WITH_TSO), EOPNOTSUPP, "ibv_create_qp_ex(TSO)");
  check_null(create_ex(ctx, pd, IBV_QPT_UC, IBV_QP_EX_WITH_ATOMIC_WRITE), EINVAL,
             "ibv_create_qp_ex(UC with ATOMIC_WRITE: RC only)");
  check_null(create_ex(ctx, pd, IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE), EINVAL,
             "ibv_create_qp_ex(UD with RDMA_WRITE)");
  check_null(create_ex(ctx, pd, IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_READ), EINVAL, "ibv_create_qp_ex(UC with RDMA_READ)");
  struct ibv_qp_init_attr_ex bad = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                    .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
                                    .comp_mask = IBV_QP_INIT_ATTR_PD | (1u << 30), .pd = pd};
  check_null(ibv_create_qp_ex(ctx, &bad), EINVAL, "ibv_create_qp_ex(unknown comp_mask bit)");
  bad.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD;
  check_null(ibv_create_qp_ex(ctx, &bad), EINVAL, "ibv_create_qp_ex(an RC QP with an XRCD)");
  bad.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  bad.create_flags = IBV_QP_CREATE_SCATTER_FCS;
  check_null(ibv_create_qp_ex(ctx, &bad), EOPNOTSUPP, "ibv_create_qp_ex(create_flags)");
  struct ibv_qp_init_attr classic = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                     .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp *plain = ibv_create_qp(pd, &classic);
  check(plain && ibv_qp_to_qp_ex(plain) == NULL, "ibv_qp_to_qp_ex(a QP without send_ops_flags) -> NULL");
  if (plain) ibv_destroy_qp(plain);

  /* Two RC QPs with every RC opcode, connected to each other. */
  struct ibv_qp *a = create_ex(ctx, pd, IBV_QPT_RC, rc_ops | IBV_QP_EX_WITH_ATOMIC_WRITE);
  struct ibv_qp *b = create_ex(ctx, pd, IBV_QPT_RC, rc_ops | IBV_QP_EX_WITH_ATOMIC_WRITE);
  check(a && b, "ibv_create_qp_ex: two RC QPs with every RC opcode");
  if (!a || !b) return 1;
  struct ibv_qp_ex *ax = ibv_qp_to_qp_ex(a);
  check(ax != NULL && &ax->qp_base == a, "ibv_qp_to_qp_ex: the QP's ibv_qp_ex");
  if (!ax || connect_rc(a, b->qp_num, &gid) || connect_rc(b, a->qp_num, &gid)) {
    check(0, "connect the pair");
    return 1;
  }
  g_rkey = mr->rkey;
  g_raddr = (uintptr_t)(mem + DST);

  /* RDMA WRITE. */
  fill(SRC, 4 * KB, 1);
  ibv_wr_start(ax);
  ax->wr_id = 10;
  ax->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(ax, mr->rkey, (uintptr_t)(mem + DST));
  ibv_wr_set_sge(ax, mr->lkey, (uintptr_t)(mem + SRC), 4 * KB);
  check_ret(ibv_wr_complete(ax), 0, "ibv_wr_rdma_write + set_sge: wr_complete");
  expect(10, IBV_WC_RDMA_WRITE, "ibv_wr_rdma_write");
  check(same(SRC, DST, 4 * KB), "ibv_wr_rdma_write: 4 KiB arrived");

  /* RDMA WRITE with immediate: the data and a receive with the immediate. */
  post_recv(b, 11);
  fill(SRC, 1000, 2);
  ibv_wr_start(ax);
  ax->wr_id = 12;
  ax->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write_imm(ax, mr->rkey, (uintptr_t)(mem + DST), htonl(0xC0FFEE));
  ibv_wr_set_sge(ax, mr->lkey, (uintptr_t)(mem + SRC), 1000);
  check_ret(ibv_wr_complete(ax), 0, "ibv_wr_rdma_write_imm: wr_complete");
  expect(12, IBV_WC_RDMA_WRITE, "ibv_wr_rdma_write_imm (sender)");
  expect_recv(11, 1000, 1, 0xC0FFEE, IBV_WC_RECV_RDMA_WITH_IMM, "ibv_wr_rdma_write_imm (receiver)");
  check(same(SRC, DST, 1000), "ibv_wr_rdma_write_imm: the data arrived");

  /* SEND with a list of three SGEs: the receive holds them in order. */
  post_recv(b, 13);
  fill(SRC, 3000, 3);
  struct ibv_sge list[3] = {{(uintptr_t)(mem + SRC + 2000), 1000, mr->lkey},
                            {(uintptr_t)(mem + SRC), 1000, mr->lkey},
                            {(uintptr_t)(mem + SRC + 1000), 1000, mr->lkey}};
  ibv_wr_start(ax);
  ax->wr_id = 14;
  ax->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(ax);
  ibv_wr_set_sge_list(ax, 3, list);
  check_ret(ibv_wr_complete(ax), 0, "ibv_wr_send + set_sge_list: wr_complete");
  expect(14, IBV_WC_SEND, "ibv_wr_send");
  expect_recv(13, 3000, 0, 0, IBV_WC_RECV, "ibv_wr_send (receiver)");
  check(memcmp(mem + RCV, mem + SRC + 2000, 1000) == 0 && memcmp(mem + RCV + 1000, mem + SRC, 2000) == 0,
        "ibv_wr_set_sge_list: the receive holds the three pieces in list order");

  /* SEND with immediate and inline data, the buffer changed after the setter. */
  post_recv(b, 15);
  char msg[MAX_INLINE];
  for (int i = 0; i < MAX_INLINE; i++) msg[i] = (char)(100 + i);
  char want[MAX_INLINE];
  memcpy(want, msg, sizeof msg);
  ibv_wr_start(ax);
  ax->wr_id = 16;
  ax->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_imm(ax, htonl(77));
  ibv_wr_set_inline_data(ax, msg, sizeof msg);
  memset(msg, 0, sizeof msg); /* inline: copied at the setter */
  check_ret(ibv_wr_complete(ax), 0, "ibv_wr_send_imm + set_inline_data: wr_complete");
  expect(16, IBV_WC_SEND, "ibv_wr_send_imm");
  expect_recv(15, MAX_INLINE, 1, 77, IBV_WC_RECV, "ibv_wr_send_imm (receiver)");
  check(memcmp(mem + RCV, want, MAX_INLINE) == 0, "ibv_wr_set_inline_data: the data as it was at the setter");

  /* SEND of an inline list. */
  post_recv(b, 17);
  struct ibv_data_buf bufs[2] = {{(void *)"hello, ", 7}, {(void *)"inline list", 11}};
  ibv_wr_start(ax);
  ax->wr_id = 18;
  ax->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(ax);
  ibv_wr_set_inline_data_list(ax, 2, bufs);
  check_ret(ibv_wr_complete(ax), 0, "ibv_wr_send + set_inline_data_list: wr_complete");
  expect(18, IBV_WC_SEND, "ibv_wr_send (inline list)");
  expect_recv(17, 18, 0, 0, IBV_WC_RECV, "ibv_wr_send inline list (receiver)");
  check(memcmp(mem + RCV, "hello, inline list", 18) == 0, "ibv_wr_set_inline_data_list: the buffers concatenated");

  /* RDMA READ back what the WRITE put there. */
  fill(DST, 4 * KB, 4);
  memset(mem + BACK, 0, 4 * KB);
  ibv_wr_start(ax);
  ax->wr_id = 19;
  ax->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_read(ax, mr->rkey, (uintptr_t)(mem + DST));
  ibv_wr_set_sge(ax, mr->lkey, (uintptr_t)(mem + BACK), 4 * KB);
  check_ret(ibv_wr_complete(ax), 0, "ibv_wr_rdma_read: wr_complete");
  expect(19, IBV_WC_RDMA_READ, "ibv_wr_rdma_read");
  check(same(DST, BACK, 4 * KB), "ibv_wr_rdma_read: 4 KiB read back");

  /* Atomics: the old value comes back, the remote one changes. */
  uint64_t *remote = (uint64_t *)(mem + ATOM), *old = (uint64_t *)(mem + ATOM + 8);
  *remote = 40;
  ibv_wr_start(ax);
  ax->wr_id = 20;
  ax->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_atomic_fetch_add(ax, mr->rkey, (uintptr_t)remote, 2);
  ibv_wr_set_sge(ax, mr->lkey, (uintptr_t)old, 8);
  check_ret(ibv_wr_complete(ax), 0, "ibv_wr_atomic_fetch_add: wr_complete");
  expect(20, IBV_WC_FETCH_ADD, "ibv_wr_atomic_fetch_add");
  check(*old == 40 && *remote == 42, "ibv_wr_atomic_fetch_add: 40 returned, 42 left");
  ibv_wr_start(ax);
  ax->wr_id = 21;
  ax->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_atomic_cmp_swp(ax, mr->rkey, (uintptr_t)remote, 42, 7);
  ibv_wr_set_sge(ax, mr->lkey, (uintptr_t)old, 8);
  check_ret(ibv_wr_complete(ax), 0, "ibv_wr_atomic_cmp_swp: wr_complete");
  expect(21, IBV_WC_COMP_SWAP, "ibv_wr_atomic_cmp_swp");
  check(*old == 42 && *remote == 7, "ibv_wr_atomic_cmp_swp: 42 returned, 7 swapped in");
  /* ATOMIC WRITE (IBA 1.5): 8 bytes given at the call, stored as one. */
  uint64_t word = 0x0123456789abcdefull;
  ibv_wr_start(ax);
  ax->wr_id = 22;
  ax->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_atomic_write(ax, mr->rkey, (uintptr_t)remote, &word);
  word = 0; /* copied at the call */
  check_ret(ibv_wr_complete(ax), 0, "ibv_wr_atomic_write: wr_complete");
  expect(22, IBV_WC_ATOMIC_WRITE, "ibv_wr_atomic_write");
  check(*remote == 0x0123456789abcdefull, "ibv_wr_atomic_write: the 8 bytes given at the call landed");

  /* Three WRITEs in one batch, only the last signaled: all arrive. */
  fill(SRC, 3 * KB, 5);
  ibv_wr_start(ax);
  for (int i = 0; i < 3; i++) {
    ax->wr_id = 30 + (uint64_t)i;
    ax->wr_flags = i == 2 ? IBV_SEND_SIGNALED : 0;
    ibv_wr_rdma_write(ax, mr->rkey, (uintptr_t)(mem + DST + i * KB));
    ibv_wr_set_sge(ax, mr->lkey, (uintptr_t)(mem + SRC + i * KB), KB);
  }
  check_ret(ibv_wr_complete(ax), 0, "three WRITEs in one batch: wr_complete");
  expect(32, IBV_WC_RDMA_WRITE, "three WRITEs in one batch: the signaled last one");
  check(same(SRC, DST, 3 * KB), "three WRITEs in one batch: all 3 KiB arrived");

  /* wr_abort: nothing of the batch reaches the wire. */
  memset(mem + DST, 0, 4 * KB);
  fill(SRC, 4 * KB, 6);
  ibv_wr_start(ax);
  ax->wr_id = 40;
  ax->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(ax, mr->rkey, (uintptr_t)(mem + DST + KB));
  ibv_wr_set_sge(ax, mr->lkey, (uintptr_t)(mem + SRC), KB);
  ibv_wr_abort(ax);
  ibv_wr_start(ax);
  ax->wr_id = 41;
  ax->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(ax, mr->rkey, (uintptr_t)(mem + DST + 2 * KB));
  ibv_wr_set_sge(ax, mr->lkey, (uintptr_t)(mem + SRC), KB);
  check_ret(ibv_wr_complete(ax), 0, "after wr_abort, the next batch: wr_complete");
  expect_next(41, IBV_WC_RDMA_WRITE, "after wr_abort: the next batch's WRITE (41), not the aborted 40");
  int untouched = 1;
  for (int i = KB; i < 2 * KB; i++) untouched &= mem[DST + i] == 0;
  check(untouched, "wr_abort: the aborted WRITE's target is untouched");

  /* Refusals in a batch: wr_complete returns them and posts nothing. */
  struct ibv_qp *c = create_ex(ctx, pd, IBV_QPT_RC, IBV_QP_EX_WITH_SEND);
  struct ibv_qp_ex *cx = c ? ibv_qp_to_qp_ex(c) : NULL;
  check(cx != NULL, "a QP that only sends");
  if (cx) refused_batch(cx, ax, EINVAL, "ibv_wr_rdma_write on a QP without RDMA_WRITE in send_ops_flags", build_write);
  refused_batch(ax, ax, EINVAL, "unknown wr_flags", build_bad_flags);
  refused_batch(ax, ax, EINVAL, "ibv_wr_set_sge_list above max_send_sge", build_too_many_sges);
  refused_batch(ax, ax, EINVAL, "ibv_wr_set_inline_data above max_inline_data", build_big_inline);
  refused_batch(ax, ax, EINVAL, "ibv_wr_bind_mw without BIND_MW in send_ops_flags (a good WR before it)",
                build_good_then_bind_mw);
  refused_batch(ax, ax, EINVAL, "ibv_wr_set_xrc_srqn on an RC QP", build_xrc);
  if (cx) refused_batch(cx, ax, EINVAL, "ibv_wr_atomic_write on a QP without ATOMIC_WRITE", build_atomic_write);
  check_ret(ibv_wr_complete(ax), EINVAL, "ibv_wr_complete without wr_start");

  /* UD: wr_send with wr_set_ud_addr, and without it. */
  struct ibv_qp *u = create_ex(ctx, pd, IBV_QPT_UD, IBV_QP_EX_WITH_SEND);
  struct ibv_qp_init_attr ud_init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
                                     .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp *v = ibv_create_qp(pd, &ud_init);
  struct ibv_qp_ex *ux = u ? ibv_qp_to_qp_ex(u) : NULL;
  check(ux && v, "a UD QP with SEND and a classic UD QP");
  if (ux && v) {
    int ok = 1;
    for (int k = 0; k < 2; k++) {
      struct ibv_qp *q = k ? v : u;
      struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = 0x11111111};
      ok &= !ibv_modify_qp(q, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
      at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR};
      ok &= !ibv_modify_qp(q, &at, IBV_QP_STATE);
      at = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = 1};
      ok &= !ibv_modify_qp(q, &at, IBV_QP_STATE | IBV_QP_SQ_PSN);
    }
    check(ok, "both UD QPs to RTS");
    refused_batch(ux, ax, EINVAL, "a UD WR without ibv_wr_set_ud_addr", build_ud_no_addr);
    struct ibv_ah_attr ah_attr = {.is_global = 1, .port_num = 1};
    ah_attr.grh.dgid = gid;
    ah_attr.grh.hop_limit = 1;
    struct ibv_ah *ah = ibv_create_ah(pd, &ah_attr);
    struct ibv_sge rs = {.addr = (uintptr_t)(mem + RCV), .length = 40 + 512, .lkey = mr->lkey};
    struct ibv_recv_wr rw = {.wr_id = 50, .sg_list = &rs, .num_sge = 1}, *rbad;
    ok = ah && !ibv_post_recv(v, &rw, &rbad);
    fill(SRC, 512, 7);
    ibv_wr_start(ux);
    ux->wr_id = 51;
    ux->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(ux);
    ibv_wr_set_ud_addr(ux, ah, v->qp_num, 0x11111111);
    ibv_wr_set_sge(ux, mr->lkey, (uintptr_t)(mem + SRC), 512);
    check_ret(ibv_wr_complete(ux), 0, "UD ibv_wr_send + set_ud_addr: wr_complete");
    struct ibv_wc w1, w2;
    int n1 = poll_one(cq, &w1), n2 = poll_one(cq, &w2);
    struct ibv_wc *snd = w1.wr_id == 51 ? &w1 : &w2, *rcv = w1.wr_id == 51 ? &w2 : &w1;
    check(ok && n1 == 1 && n2 == 1 && snd->wr_id == 51 && snd->status == IBV_WC_SUCCESS && rcv->wr_id == 50 &&
              rcv->status == IBV_WC_SUCCESS && rcv->byte_len == 40 + 512 && rcv->src_qp == u->qp_num,
          "UD ibv_wr_send: both completions, the receive from the sending QP with 40 + 512 bytes");
    check(memcmp(mem + RCV + 40, mem + SRC, 512) == 0, "UD ibv_wr_send: the datagram's data behind the GRH area");
    if (ah) ibv_destroy_ah(ah);
  }

  printf("%s: %d check(s) failed\n", failures ? "FAIL" : "ok", failures);
  return failures ? 1 : 0;
}
