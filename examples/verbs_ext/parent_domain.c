/*
 * parent_domain: thread domains and parent domains (ibv_alloc_td,
 * ibv_alloc_parent_domain) on softrdma's libibverbs.so.1, data checked.
 *
 * Good path: a parent domain over a PD and a thread domain, with allocators
 * of our own; a CQ (ibv_create_cq_ex, MASK_PD), an RC QP pair and an MR made
 * through it. softrdma calls alloc for each QP's and CQ's memory, with the
 * resource type, size and alignment, and free for each when it is destroyed;
 * a SEND and a WRITE move the data. An allocator that answers
 * IBV_ALLOCATOR_USE_DEFAULT gets no free call. A parent domain without
 * allocators works too.
 * Refusals: a parent domain over a parent domain, or with no PD, or with
 * ALLOCATORS but no free; unknown comp_mask bits (td and parent domain);
 * a CQ with MASK_PD and a plain PD (EINVAL). Deallocating the PD while a
 * parent domain is on it, the parent domain while a QP made through it
 * remains, and the thread domain while a parent domain names it: EBUSY,
 * and each works after its users are gone. An allocator out of memory
 * fails the QP with ENOMEM.
 *
 * Run with LD_LIBRARY_PATH at softrdma's drop-in and SRDMA_ADDR set.
 */
#include "ext_common.h"

enum { BUF = 4096 };

static int allocs, frees, default_answers;
static int out_of_memory;
static uint64_t types_seen;
static void *my_context = &allocs;

static void *my_alloc(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment, uint64_t resource_type) {
  (void)pd;
  if (pd_context != my_context) return NULL;
  if (out_of_memory) return NULL;
  if (resource_type == 0 || resource_type > 63) return NULL;
  types_seen |= 1ull << resource_type;
  void *p = NULL;
  if (posix_memalign(&p, alignment < sizeof(void *) ? sizeof(void *) : alignment, size)) return NULL;
  memset(p, 0xA5, size); /* the provider must not rely on zeroed memory */
  allocs++;
  return p;
}

static void my_free(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type) {
  (void)pd;
  (void)resource_type;
  if (pd_context == my_context) frees++;
  free(ptr);
}

static void *default_alloc(struct ibv_pd *pd, void *c, size_t s, size_t a, uint64_t t) {
  (void)pd, (void)c, (void)s, (void)a, (void)t;
  default_answers++;
  return IBV_ALLOCATOR_USE_DEFAULT;
}

static void counting_free(struct ibv_pd *pd, void *c, void *ptr, uint64_t t) {
  (void)pd, (void)c, (void)ptr, (void)t;
  frees++;
}

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq) {
  struct ibv_qp_init_attr qi = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
  return ibv_create_qp(pd, &qi);
}

int main(void) {
  struct ibv_context *ctx = open_srdma0();
  if (!ctx) {
    check(0, "open srdma0");
    return 1;
  }
  union ibv_gid gid;
  ibv_query_gid(ctx, 1, 0, &gid);
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  struct ibv_td_init_attr tda = {0};
  struct ibv_td *td = ibv_alloc_td(ctx, &tda);
  check(pd && td, "ibv_alloc_pd, ibv_alloc_td");
  if (!pd || !td) return 1;

  struct ibv_parent_domain_init_attr pa = {
      .pd = pd, .td = td,
      .comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
      .alloc = my_alloc, .free = my_free, .pd_context = my_context};
  struct ibv_pd *par = ibv_alloc_parent_domain(ctx, &pa);
  check(par != NULL, "ibv_alloc_parent_domain(pd, td, allocators, pd_context)");
  if (!par) return 1;

  struct ibv_cq_init_attr_ex ca = {.cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS,
                                   .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD, .parent_domain = par};
  struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &ca);
  check(cqx != NULL, "ibv_create_cq_ex(MASK_PD, the parent domain)");
  if (!cqx) return 1;
  struct ibv_cq *cq = ibv_cq_ex_to_cq(cqx);
  struct ibv_qp *a = rc_qp(par, cq), *b = rc_qp(par, cq);
  check(a && b && a->pd == par, "two RC QPs made through the parent domain (qp->pd is the parent domain)");
  if (!a || !b) return 1;
  char line[200];
  snprintf(line, sizeof line, "alloc was called for the CQ and both QPs (%d calls, resource types mask %#llx)",
           allocs, (unsigned long long)types_seen);
  check(allocs == 3 && __builtin_popcountll(types_seen) == 2, line);
  check(connect_rc(a, b->qp_num, &gid) == 0 && connect_rc(b, a->qp_num, &gid) == 0, "connect the pair");

  char *src = calloc(1, BUF), *dst = calloc(1, BUF);
  struct ibv_mr *smr = ibv_reg_mr(par, src, BUF, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = ibv_reg_mr(par, dst, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  check(smr && dmr, "ibv_reg_mr through the parent domain");
  if (!smr || !dmr) return 1;
  memset(src, 'P', BUF);
  struct ibv_sge rs = {(uintptr_t)dst, BUF, dmr->lkey};
  struct ibv_recv_wr rw = {.wr_id = 7, .sg_list = &rs, .num_sge = 1}, *bad_r;
  check(ibv_post_recv(b, &rw, &bad_r) == 0, "post a receive");
  struct ibv_sge ss = {(uintptr_t)src, 64, smr->lkey};
  struct ibv_send_wr sw = {.wr_id = 8, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED}, *bad_s;
  check(ibv_post_send(a, &sw, &bad_s) == 0, "post a SEND");
  struct ibv_wc wc[2];
  int got = 0;
  for (int i = 0; i < 2; i++) got += poll_one(cq, &wc[i]);
  check(got == 2 && wc[0].status == IBV_WC_SUCCESS && wc[1].status == IBV_WC_SUCCESS && dst[0] == 'P' &&
            dst[63] == 'P' && dst[64] == 0,
        "the SEND landed: 64 bytes, both completions successful");
  sw.opcode = IBV_WR_RDMA_WRITE;
  sw.wr_id = 9;
  ss.length = BUF;
  sw.wr.rdma.remote_addr = (uintptr_t)dst;
  sw.wr.rdma.rkey = dmr->rkey;
  check(ibv_post_send(a, &sw, &bad_s) == 0 && poll_one(cq, &wc[0]) == 1 && wc[0].status == IBV_WC_SUCCESS &&
            dst[BUF - 1] == 'P',
        "an RDMA WRITE through the parent domain's MR keys");

  /* Refusals. */
  struct ibv_parent_domain_init_attr bad = pa;
  bad.pd = par;
  check_null(ibv_alloc_parent_domain(ctx, &bad), EINVAL, "a parent domain over a parent domain");
  bad = pa;
  bad.pd = NULL;
  check_null(ibv_alloc_parent_domain(ctx, &bad), EINVAL, "a parent domain with no PD");
  bad = pa;
  bad.free = NULL;
  check_null(ibv_alloc_parent_domain(ctx, &bad), EINVAL, "ALLOCATORS without free");
  bad = pa;
  bad.comp_mask |= 1u << 7;
  check_null(ibv_alloc_parent_domain(ctx, &bad), EINVAL, "unknown comp_mask bits");
  struct ibv_td_init_attr tdb = {.comp_mask = 1};
  check_null(ibv_alloc_td(ctx, &tdb), EINVAL, "ibv_alloc_td(unknown comp_mask)");
  struct ibv_cq_init_attr_ex cb = ca;
  cb.parent_domain = pd;
  check_null(ibv_create_cq_ex(ctx, &cb), EINVAL, "ibv_create_cq_ex(MASK_PD, a plain PD)");
  out_of_memory = 1;
  check_null(rc_qp(par, cq), ENOMEM, "a QP whose allocator has no memory");
  out_of_memory = 0;

  check_ret(ibv_dealloc_pd(pd), EBUSY, "ibv_dealloc_pd(the PD under a parent domain)");
  check_ret(ibv_dealloc_td(td), EBUSY, "ibv_dealloc_td(named by a parent domain)");
  check_ret(ibv_dealloc_pd(par), EBUSY, "ibv_dealloc_pd(the parent domain, QPs remain)");

  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  check(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0 && ibv_destroy_cq(cq) == 0, "destroy the QPs and the CQ");
  snprintf(line, sizeof line, "free was called for each (%d allocs, %d frees)", allocs, frees);
  check(frees == allocs, line);
  check_ret(ibv_dealloc_pd(par), 0, "ibv_dealloc_pd(the parent domain, now unused)");
  check_ret(ibv_dealloc_td(td), 0, "ibv_dealloc_td");

  /* USE_DEFAULT: the provider's own memory, and no free call for it. */
  struct ibv_parent_domain_init_attr da = {.pd = pd, .comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS,
                                           .alloc = default_alloc, .free = counting_free};
  struct ibv_pd *dpar = ibv_alloc_parent_domain(ctx, &da);
  struct ibv_cq *cq2 = ibv_create_cq(ctx, 4, NULL, NULL, 0);
  struct ibv_qp *c = dpar && cq2 ? rc_qp(dpar, cq2) : NULL;
  const int frees_before = frees;
  check(c && default_answers == 1, "a QP through a parent domain whose allocator answers USE_DEFAULT");
  if (c) ibv_destroy_qp(c);
  check(frees == frees_before, "no free call for memory the provider allocated itself");
  check_ret(dpar ? ibv_dealloc_pd(dpar) : -1, 0, "ibv_dealloc_pd(that parent domain)");
  /* No allocators at all. */
  struct ibv_parent_domain_init_attr na = {.pd = pd};
  struct ibv_pd *npar = ibv_alloc_parent_domain(ctx, &na);
  struct ibv_qp *d = npar ? rc_qp(npar, cq2) : NULL;
  check(d != NULL, "a QP through a parent domain without allocators");
  if (d) ibv_destroy_qp(d);
  check_ret(npar ? ibv_dealloc_pd(npar) : -1, 0, "ibv_dealloc_pd(that parent domain)");
  ibv_destroy_cq(cq2);
  check_ret(ibv_dealloc_pd(pd), 0, "ibv_dealloc_pd(the PD, its parent domains gone)");
  ibv_close_device(ctx);
  free(src);
  free(dst);
  printf("%s: %d check(s) failed\n", failures ? "FAIL" : "ok", failures);
  return failures ? 1 : 0;
}
