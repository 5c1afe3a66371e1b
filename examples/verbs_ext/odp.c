/*
 * odp: on-demand paging on softrdma's libibverbs.so.1, with the data and
 * the completions checked.
 *
 * Good path: ibv_query_device_ex reports ODP (explicit and implicit, RC's
 * SEND/RECV/WRITE/READ/ATOMIC); an ODP MR over an address range that is
 * mapped only after ibv_reg_mr carries a WRITE into it and a READ from it;
 * the implicit ODP MR (ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND)) takes
 * WRITEs into two separate buffers with one rkey; ibv_advise_mr prefetches.
 * Faults: a WRITE into an unmapped page of an ODP MR completes with a
 * remote access error, a SEND from one with a local protection error --
 * the process does not crash.
 * Refusals: ibv_advise_mr with an unknown advice (EOPNOTSUPP), unknown
 * flags (EINVAL), a non-ODP MR (EINVAL), PREFETCH_WRITE on a read-only MR
 * (EPERM), a range beyond the MR (EFAULT); the implicit form without
 * ON_DEMAND is refused.
 *
 * Run with LD_LIBRARY_PATH at softrdma's drop-in and SRDMA_ADDR set.
 */
#include <stdint.h>
#include <sys/mman.h>

#include "ext_common.h"

enum { PAGE = 4096 };

static struct ibv_cq *cq;

/* One signaled WR on qp; its completion status (-1: none). */
static int post(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t local, uint32_t len, uint32_t lkey, uint64_t remote,
                uint32_t rkey) {
  struct ibv_sge sge = {local, len, lkey};
  struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  wr.wr.rdma.remote_addr = remote;
  wr.wr.rdma.rkey = rkey;
  if (ibv_post_send(qp, &wr, &bad)) return -1;
  struct ibv_wc wc;
  for (;;) {
    if (poll_one(cq, &wc) != 1) return -1;
    if (wc.wr_id == 1) return wc.status;
  }
}

static int all(const char *p, char c, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != c) return 0;
  return 1;
}

static void pair(struct ibv_pd *pd, const union ibv_gid *gid, struct ibv_qp **a, struct ibv_qp **b) {
  struct ibv_qp_init_attr qi = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
  *a = ibv_create_qp(pd, &qi);
  *b = ibv_create_qp(pd, &qi);
  if (!*a || !*b || connect_rc(*a, (*b)->qp_num, gid) || connect_rc(*b, (*a)->qp_num, gid)) {
    check(0, "a connected RC pair");
    exit(1);
  }
}

int main(void) {
  struct ibv_context *ctx = open_srdma0();
  check(ctx != NULL, "ibv_open_device(srdma0)");
  if (!ctx) return 1;
  union ibv_gid gid;
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
  if (!pd || !cq || ibv_query_gid(ctx, 1, 0, &gid)) return 1;

  struct ibv_device_attr_ex attr;
  check(ibv_query_device_ex(ctx, NULL, &attr) == 0 &&
            (attr.odp_caps.general_caps & (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT)) ==
                (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT) &&
            (attr.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_ATOMIC) &&
            (attr.xrc_odp_caps & (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_SRQ_RECV)) ==
                (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_SRQ_RECV) &&
            !(attr.xrc_odp_caps & IBV_ODP_SUPPORT_RECV),
        "ibv_query_device_ex: ODP, implicit ODP, RC atomics; XRC sends and SRQ receives, no RECV of its own");

  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  char *src = aligned_alloc(PAGE, PAGE);
  memset(src, 'S', PAGE);
  struct ibv_mr *smr = ibv_reg_mr(pd, src, PAGE, rw);
  struct ibv_qp *a, *b;
  if (!smr) return 1;
  pair(pd, &gid, &a, &b);

  /* An ODP MR over a range that is not mapped yet (taken and given back). */
  char *range = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  munmap(range, 2 * PAGE);
  errno = 0;
  check_null(ibv_reg_mr(pd, range, 2 * PAGE, rw), EFAULT, "ibv_reg_mr(unmapped range, no ON_DEMAND)");
  struct ibv_mr *odp = ibv_reg_mr(pd, range, 2 * PAGE, rw | IBV_ACCESS_ON_DEMAND);
  check(odp != NULL, "ibv_reg_mr(unmapped range, ON_DEMAND) succeeds");
  if (!odp) return 1;
  check(mmap(range, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == range,
        "the range mapped after registration");
  check(post(a, IBV_WR_RDMA_WRITE, (uintptr_t)src, PAGE, smr->lkey, (uintptr_t)range + 100, odp->rkey) ==
                IBV_WC_SUCCESS &&
            all(range + 100, 'S', PAGE),
        "a WRITE into the ODP MR, across a page, lands");
  memset(range, 'R', 64);
  check(post(a, IBV_WR_RDMA_READ, (uintptr_t)src, 64, smr->lkey, (uintptr_t)range, odp->rkey) == IBV_WC_SUCCESS &&
            all(src, 'R', 64),
        "a READ from the ODP MR returns its bytes");

  /* ibv_advise_mr: the good path and its refusals. */
  struct ibv_sge sge = {(uintptr_t)range, 2 * PAGE, odp->lkey};
  check_ret(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1), 0,
            "ibv_advise_mr(PREFETCH_WRITE, FLUSH)");
  check_ret(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &sge, 1), 0,
            "ibv_advise_mr(PREFETCH_NO_FAULT)");
  check_ret(ibv_advise_mr(pd, (enum ibv_advise_mr_advice)7, 0, &sge, 1), EOPNOTSUPP, "ibv_advise_mr(advice 7)");
  check_ret(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 1u << 4, &sge, 1), EINVAL,
            "ibv_advise_mr(unknown flags)");
  struct ibv_sge plain = {(uintptr_t)src, 64, smr->lkey};
  check_ret(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &plain, 1), EINVAL, "ibv_advise_mr(a non-ODP MR)");
  struct ibv_mr *ro = ibv_reg_mr(pd, range, PAGE, IBV_ACCESS_ON_DEMAND);
  struct ibv_sge rosge = {(uintptr_t)range, 64, ro ? ro->lkey : 0};
  check_ret(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &rosge, 1), EPERM,
            "ibv_advise_mr(PREFETCH_WRITE, read-only MR)");
  struct ibv_sge beyond = {(uintptr_t)range + PAGE, 2 * PAGE, odp->lkey};
  check_ret(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &beyond, 1), EFAULT, "ibv_advise_mr(beyond the MR)");
  if (ro) ibv_dereg_mr(ro);

  /* Implicit ODP: one rkey for two separate buffers. */
  errno = 0;
  check_null(ibv_reg_mr(pd, NULL, SIZE_MAX, rw), ENOMEM, "ibv_reg_mr(NULL, SIZE_MAX) without ON_DEMAND");
  struct ibv_mr *imr = ibv_reg_mr(pd, NULL, SIZE_MAX, rw | IBV_ACCESS_ON_DEMAND);
  check(imr != NULL && imr->addr == NULL && imr->length == SIZE_MAX, "implicit ODP MR: addr NULL, length SIZE_MAX");
  if (!imr) return 1;
  char *one = aligned_alloc(PAGE, PAGE), *two = aligned_alloc(PAGE, 4 * PAGE);
  memset(one, 0, PAGE);
  memset(two, 0, 4 * PAGE);
  memset(src, 'I', PAGE);
  check(post(a, IBV_WR_RDMA_WRITE, (uintptr_t)src, 64, smr->lkey, (uintptr_t)one, imr->rkey) == IBV_WC_SUCCESS &&
            post(a, IBV_WR_RDMA_WRITE, (uintptr_t)src, 64, smr->lkey, (uintptr_t)two + 3 * PAGE, imr->rkey) ==
                IBV_WC_SUCCESS &&
            all(one, 'I', 64) && all(two + 3 * PAGE, 'I', 64),
        "the implicit rkey reaches two separate buffers");

  /* Faults: a page unmapped under the ODP MR. The QP errors; the process lives. */
  munmap(range + PAGE, PAGE);
  check(post(a, IBV_WR_RDMA_WRITE, (uintptr_t)src, 64, smr->lkey, (uintptr_t)range + PAGE, odp->rkey) ==
            IBV_WC_REM_ACCESS_ERR,
        "a WRITE into an unmapped page of an ODP MR -> remote access error");
  struct ibv_qp *c, *d;
  pair(pd, &gid, &c, &d);
  struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = &plain, .num_sge = 1}, *rbad;
  ibv_post_recv(d, &rwr, &rbad);
  check(post(c, IBV_WR_SEND, (uintptr_t)range + PAGE, 16, odp->lkey, 0, 0) == IBV_WC_LOC_PROT_ERR,
        "a SEND from an unmapped page of an ODP MR -> local protection error");

  ibv_destroy_qp(a);
  ibv_destroy_qp(b);
  ibv_destroy_qp(c);
  ibv_destroy_qp(d);
  ibv_dereg_mr(imr);
  ibv_dereg_mr(odp);
  ibv_dereg_mr(smr);
  munmap(range, PAGE);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  printf("%s: %d check(s) failed\n", failures ? "FAIL" : "ok", failures);
  return failures ? 1 : 0;
}
