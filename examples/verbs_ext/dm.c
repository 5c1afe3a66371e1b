/*
 * dm: device memory on softrdma's libibverbs.so.1, with the data checked.
 *
 * Good path: ibv_query_device_ex reports max_dm_size; ibv_alloc_dm,
 * ibv_memcpy_to_dm / ibv_memcpy_from_dm; ibv_reg_dm_mr (zero-based: the
 * MR's address 0 is dm_offset) whose rkey takes a WRITE and a READ and an
 * atomic at offsets from the MR's start, and whose lkey is a SEND's source.
 * Refusals: a size beyond max_dm_size, an unknown comp_mask (EINVAL);
 * copies unaligned to 4 bytes (EINVAL) or beyond the buffer (EFAULT);
 * ibv_reg_dm_mr without ZERO_BASED or beyond the buffer (EINVAL);
 * ibv_free_dm while an MR is on it (EBUSY); ibv_reg_mr with ZERO_BASED on
 * process memory (EOPNOTSUPP, as rxe).
 *
 * Run with LD_LIBRARY_PATH at softrdma's drop-in and SRDMA_ADDR set.
 */
#include <stdint.h>

#include "ext_common.h"

static struct ibv_cq *cq;

static int post(struct ibv_qp *qp, struct ibv_send_wr *wr) {
  struct ibv_send_wr *bad;
  wr->wr_id = 1;
  wr->send_flags = IBV_SEND_SIGNALED;
  if (ibv_post_send(qp, wr, &bad)) return -1;
  struct ibv_wc wc;
  for (;;) {
    if (poll_one(cq, &wc) != 1) return -1;
    if (wc.wr_id == 1) return wc.status;
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
  check(ibv_query_device_ex(ctx, NULL, &attr) == 0 && attr.max_dm_size >= 8192, "max_dm_size reported");

  struct ibv_alloc_dm_attr da = {.length = attr.max_dm_size + 1};
  errno = 0;
  check_null(ibv_alloc_dm(ctx, &da), EINVAL, "ibv_alloc_dm(max_dm_size + 1)");
  da.length = 8192;
  da.comp_mask = 1;
  errno = 0;
  check_null(ibv_alloc_dm(ctx, &da), EINVAL, "ibv_alloc_dm(unknown comp_mask)");
  da.comp_mask = 0;
  struct ibv_dm *dm = ibv_alloc_dm(ctx, &da);
  check(dm != NULL, "ibv_alloc_dm(8 KiB)");
  if (!dm) return 1;

  char in[64], out[64];
  memset(in, 'D', sizeof in);
  check_ret(ibv_memcpy_to_dm(dm, 4096, in, sizeof in), 0, "ibv_memcpy_to_dm");
  check(ibv_memcpy_from_dm(out, dm, 4096, sizeof out) == 0 && memcmp(in, out, sizeof in) == 0,
        "ibv_memcpy_from_dm returns the bytes");
  check_ret(ibv_memcpy_to_dm(dm, 2, in, 4), EINVAL, "ibv_memcpy_to_dm(offset 2)");
  check_ret(ibv_memcpy_from_dm(out, dm, 0, 3), EINVAL, "ibv_memcpy_from_dm(length 3)");
  check_ret(ibv_memcpy_to_dm(dm, 8192 - 4, in, 8), EFAULT, "ibv_memcpy_to_dm(beyond the end)");

  const unsigned rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                      IBV_ACCESS_REMOTE_ATOMIC;
  errno = 0;
  check_null(ibv_reg_dm_mr(pd, dm, 0, 64, rw), EINVAL, "ibv_reg_dm_mr without ZERO_BASED");
  errno = 0;
  check_null(ibv_reg_dm_mr(pd, dm, 4096, 8192, rw | IBV_ACCESS_ZERO_BASED), EINVAL,
             "ibv_reg_dm_mr(beyond the buffer)");
  char plain[64];
  errno = 0;
  check_null(ibv_reg_mr(pd, plain, sizeof plain, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED), EOPNOTSUPP,
             "ibv_reg_mr(ZERO_BASED) on process memory");
  /* Zero-based from dm byte 4096: address 0 of the MR is where `in` went. */
  struct ibv_mr *dmr = ibv_reg_dm_mr(pd, dm, 4096, 4096, rw | IBV_ACCESS_ZERO_BASED);
  check(dmr != NULL, "ibv_reg_dm_mr(offset 4096, zero-based)");
  if (!dmr) return 1;
  check_ret(ibv_free_dm(dm), EBUSY, "ibv_free_dm while an MR is on it");

  char *buf = aligned_alloc(4096, 4096);
  memset(buf, 0, 4096);
  struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, rw);
  struct ibv_qp_init_attr qi = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp *a = ibv_create_qp(pd, &qi);
  /* b's receives complete on a CQ of their own: post() drains `cq` up to its WR. */
  struct ibv_cq *rcq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
  qi.recv_cq = rcq;
  struct ibv_qp *b = rcq ? ibv_create_qp(pd, &qi) : NULL;
  if (!mr || !a || !b || connect_rc(a, b->qp_num, &gid) || connect_rc(b, a->qp_num, &gid)) return 1;

  struct ibv_sge sge = {(uintptr_t)buf, 64, mr->lkey};
  struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ};
  wr.wr.rdma.remote_addr = 0; /* an offset: the MR is zero-based */
  wr.wr.rdma.rkey = dmr->rkey;
  check(post(a, &wr) == IBV_WC_SUCCESS && memcmp(buf, in, 64) == 0, "a READ at MR offset 0 returns dm byte 4096");
  memset(buf, 'W', 64);
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = 128;
  check(post(a, &wr) == IBV_WC_SUCCESS && ibv_memcpy_from_dm(out, dm, 4096 + 128, 64) == 0 && memcmp(buf, out, 64) == 0,
        "a WRITE at MR offset 128 lands at dm byte 4224");
  struct ibv_sge asge = {(uintptr_t)buf, 8, mr->lkey};
  struct ibv_send_wr aw = {.sg_list = &asge, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD};
  aw.wr.atomic.remote_addr = 256;
  aw.wr.atomic.rkey = dmr->rkey;
  aw.wr.atomic.compare_add = 7;
  uint64_t v = 0;
  check(post(a, &aw) == IBV_WC_SUCCESS && post(a, &aw) == IBV_WC_SUCCESS &&
            ibv_memcpy_from_dm(&v, dm, 4096 + 256, 8) == 0 && v == 14,
        "two FETCH_AND_ADDs of 7 at MR offset 256 leave 14");
  /* The DM MR's lkey as a SEND's source. */
  struct ibv_sge rs = {(uintptr_t)buf + 1024, 64, mr->lkey};
  struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = &rs, .num_sge = 1}, *rbad;
  struct ibv_sge ss = {0, 64, dmr->lkey};
  struct ibv_send_wr sw = {.sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND};
  struct ibv_wc wc;
  check(ibv_post_recv(b, &rwr, &rbad) == 0 && post(a, &sw) == IBV_WC_SUCCESS && poll_one(rcq, &wc) == 1 &&
            wc.status == IBV_WC_SUCCESS && memcmp(buf + 1024, in, 64) == 0,
        "a SEND from the DM MR's lkey delivers dm byte 4096 on");
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = 4096 - 32;
  check(post(a, &wr) == IBV_WC_REM_ACCESS_ERR, "a WRITE past the DM MR's end -> remote access error");

  ibv_destroy_qp(a);
  ibv_destroy_qp(b);
  ibv_destroy_cq(rcq);
  ibv_dereg_mr(mr);
  check(ibv_dereg_mr(dmr) == 0 && ibv_free_dm(dm) == 0, "ibv_free_dm once its MR is gone");
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  printf("%s: %d check(s) failed\n", failures ? "FAIL" : "ok", failures);
  return failures ? 1 : 0;
}
