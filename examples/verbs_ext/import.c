/*
 * import: ibv_import_device, ibv_import_pd, ibv_import_mr and ibv_import_dm
 * on softrdma's libibverbs.so.1, data checked.
 *
 * Good path: a second context opened on a dup of the first's cmd_fd shares
 * its objects: a PD imported by handle makes QPs whose WRITE, through the
 * imported MR's keys, lands in the original MR's buffer; a DM imported by
 * handle reads what the original wrote. Closing the first context leaves
 * them working through the second (the objects belong to the command
 * file); unimport frees only the wrappers.
 * Refusals: a closed fd (EBADF), an fd that is not a command fd (EINVAL),
 * handles nobody has (ENOENT), an MR imported into another PD (EINVAL),
 * and a forked child importing its parent's context (EOPNOTSUPP: a
 * context's objects live in the process that made them).
 *
 * Run with LD_LIBRARY_PATH at softrdma's drop-in and SRDMA_ADDR set.
 */
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ext_common.h"

enum { BUF = 4096 };

static int rdma_write(struct ibv_qp *qp, struct ibv_cq *cq, void *src, uint32_t lkey, uint64_t dst, uint32_t rkey) {
  struct ibv_sge sge = {(uintptr_t)src, 64, lkey};
  struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                           .send_flags = IBV_SEND_SIGNALED}, *bad;
  wr.wr.rdma.remote_addr = dst;
  wr.wr.rdma.rkey = rkey;
  struct ibv_wc wc;
  if (ibv_post_send(qp, &wr, &bad) || poll_one(cq, &wc) != 1) return -1;
  return wc.status;
}

int main(void) {
  struct ibv_context *ctx = open_srdma0();
  check(ctx != NULL, "ibv_open_device(srdma0)");
  if (!ctx) return 1;
  union ibv_gid gid;
  ibv_query_gid(ctx, 1, 0, &gid);
  struct ibv_pd *pd = ibv_alloc_pd(ctx), *other = ibv_alloc_pd(ctx);
  char *buf = aligned_alloc(4096, BUF), *src = aligned_alloc(4096, BUF);
  memset(buf, 0, BUF);
  memset(src, 'I', BUF);
  struct ibv_mr *mr = ibv_reg_mr(pd, buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  struct ibv_alloc_dm_attr da = {.length = 4096};
  struct ibv_dm *dm = ibv_alloc_dm(ctx, &da);
  check(pd && other && mr && dm, "a PD, an MR and a DM in the first context");
  if (!pd || !other || !mr || !dm) return 1;

  check_null(ibv_import_device(-1), EBADF, "ibv_import_device(-1)");
  int devnull = open("/dev/null", O_RDWR);
  check_null(ibv_import_device(devnull), EINVAL, "ibv_import_device(/dev/null)");
  close(devnull);

  struct ibv_context *ictx = ibv_import_device(dup(ctx->cmd_fd));
  check(ictx != NULL && ictx != ctx, "ibv_import_device(dup(cmd_fd)): a second context");
  if (!ictx) return 1;
  struct ibv_pd *ipd = ibv_import_pd(ictx, pd->handle);
  check(ipd != NULL && ipd->context == ictx && ipd->handle == pd->handle, "ibv_import_pd(the PD's handle)");
  check_null(ibv_import_pd(ictx, 0xdead), ENOENT, "ibv_import_pd(a handle nobody has)");
  struct ibv_mr *imr = ipd ? ibv_import_mr(ipd, mr->handle) : NULL;
  check(imr != NULL && imr->lkey == mr->lkey && imr->rkey == mr->rkey && imr->addr == mr->addr && imr->pd == ipd,
        "ibv_import_mr: the same keys and range, on the imported PD");
  struct ibv_pd *iother = ibv_import_pd(ictx, other->handle);
  check_null(iother ? ibv_import_mr(iother, mr->handle) : NULL, EINVAL, "ibv_import_mr into another PD");
  if (iother) ibv_unimport_pd(iother);
  check_null(ibv_import_mr(ipd, 0xdead), ENOENT, "ibv_import_mr(a handle nobody has)");
  struct ibv_dm *idm = ibv_import_dm(ictx, dm->handle);
  check(idm != NULL, "ibv_import_dm(the DM's handle)");
  check_null(ibv_import_dm(ictx, 0xdead), ENOENT, "ibv_import_dm(a handle nobody has)");
  if (!ipd || !imr || !idm) return 1;
  uint32_t words[16], back[16] = {0};
  for (int i = 0; i < 16; i++) words[i] = 0xd00d0000u + i;
  check(ibv_memcpy_to_dm(dm, 0, words, sizeof words) == 0 && ibv_memcpy_from_dm(back, idm, 0, sizeof back) == 0 &&
            memcmp(words, back, sizeof words) == 0,
        "the imported DM reads what the original wrote");

  /* A forked child: the fd is inherited, the objects are not (EOPNOTSUPP). */
  pid_t child = fork();
  if (child == 0) {
    errno = 0;
    struct ibv_context *c = ibv_import_device(ctx->cmd_fd);
    _exit(c == NULL && errno == EOPNOTSUPP ? 0 : 1);
  }
  int st = 0;
  check(child > 0 && waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0,
        "a forked child's ibv_import_device of its parent's context -> NULL, EOPNOTSUPP");

  /* Close the first context: the objects stay for the second. */
  check_ret(ibv_close_device(ctx), 0, "ibv_close_device(the first context)");
  struct ibv_cq *cq = ibv_create_cq(ictx, 16, NULL, NULL, 0);
  struct ibv_qp_init_attr qi = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp *a = cq ? ibv_create_qp(ipd, &qi) : NULL, *b = cq ? ibv_create_qp(ipd, &qi) : NULL;
  check(a && b, "two RC QPs on the imported PD");
  if (!a || !b || connect_rc(a, b->qp_num, &gid) || connect_rc(b, a->qp_num, &gid)) return 1;
  struct ibv_mr *smr = ibv_reg_mr(ipd, src, BUF, IBV_ACCESS_LOCAL_WRITE);
  check(smr && rdma_write(a, cq, src, smr->lkey, (uintptr_t)buf + 128, imr->rkey) == IBV_WC_SUCCESS &&
            buf[128] == 'I' && buf[191] == 'I' && buf[192] == 0,
        "after the first context closed: a WRITE through the imported MR's rkey lands in its buffer");
  ibv_unimport_dm(idm);
  ibv_dereg_mr(smr);
  ibv_unimport_mr(imr);
  ibv_destroy_qp(a);
  ibv_destroy_qp(b);
  ibv_destroy_cq(cq);
  ibv_unimport_pd(ipd);
  check_ret(ibv_close_device(ictx), 0, "ibv_close_device(the second): the shared objects go with it");
  free(buf);
  free(src);
  printf("%s: %d check(s) failed\n", failures ? "FAIL" : "ok", failures);
  return failures ? 1 : 0;
}
