/*
 * xrc: XRC (eXtended Reliable Connection) on softrdma's libibverbs.so.1,
 * data checked.
 *
 * Good path: two opens of one file give one XRC domain (an SRQ made
 * through the first handle is found by a TGT QP made through the second);
 * an XRC SRQ (ibv_create_srq_ex) and its number (ibv_get_srq_num); an
 * XRC_RECV QP of the domain and an XRC_SEND QP of a PD, connected; a SEND
 * by ibv_post_send (wr.qp_type.xrc.remote_srqn) and one by ibv_wr_* with
 * ibv_wr_set_xrc_srqn land in the SRQ and complete on its CQ with the
 * XRC_RECV QP's number; an RDMA WRITE through it lands.
 * Refusals: a file without a domain and no O_CREAT (EAGAIN), O_EXCL on a
 * file that has one (EINVAL), an XRC SRQ without its CQ (EINVAL), a tag
 * matching SRQ (EOPNOTSUPP), an XRC_RECV QP without an XRCD (EINVAL),
 * receives posted to either XRC QP and sends to the XRC_RECV one (EINVAL),
 * a wr_* WR without its SRQN (EINVAL), closing a domain an SRQ uses
 * (EBUSY), a SEND naming an SRQ of another domain: the target NAKs it
 * (IBV_WC_REM_INV_REQ_ERR) and places nothing, ibv_open_qp through another
 * domain (ENOENT) or of another type (EINVAL).
 *
 * Run with LD_LIBRARY_PATH at softrdma's drop-in and SRDMA_ADDR set.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "ext_common.h"

enum { BUF = 8192 };

static struct ibv_xrcd *open_xrcd(struct ibv_context *ctx, int fd, int oflags) {
  struct ibv_xrcd_init_attr a = {.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = fd,
                                 .oflags = oflags};
  return ibv_open_xrcd(ctx, &a);
}

static struct ibv_srq *xrc_srq(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_xrcd *xrcd,
                               struct ibv_cq *cq) {
  struct ibv_srq_init_attr_ex a = {.attr = {.max_wr = 16, .max_sge = 1},
                                   .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                                                IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
                                   .srq_type = IBV_SRQT_XRC, .pd = pd, .xrcd = xrcd, .cq = cq};
  return ibv_create_srq_ex(ctx, &a);
}

static int post_srq(struct ibv_srq *srq, void *at, uint32_t lkey, uint64_t wr_id) {
  struct ibv_sge sge = {(uintptr_t)at, 256, lkey};
  struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
  return ibv_post_srq_recv(srq, &wr, &bad);
}

static int classic_send(struct ibv_qp *qp, void *src, uint32_t len, uint32_t lkey, uint32_t srqn) {
  struct ibv_sge sge = {(uintptr_t)src, len, lkey};
  struct ibv_send_wr wr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED}, *bad;
  wr.qp_type.xrc.remote_srqn = srqn;
  return ibv_post_send(qp, &wr, &bad);
}

int main(void) {
  struct ibv_context *ctx = open_srdma0();
  check(ctx != NULL, "ibv_open_device(srdma0)");
  if (!ctx) return 1;
  struct ibv_device_attr dattr;
  check(ibv_query_device(ctx, &dattr) == 0 && (dattr.device_cap_flags & IBV_DEVICE_XRC), "IBV_DEVICE_XRC");
  union ibv_gid gid;
  ibv_query_gid(ctx, 1, 0, &gid);

  char path[] = "/tmp/srdma-xrc-XXXXXX";
  int fd1 = mkstemp(path);
  int fd2 = open(path, O_RDONLY);
  check(fd1 >= 0 && fd2 >= 0, "a file, opened twice");
  check_null(open_xrcd(ctx, fd1, 0), EAGAIN, "ibv_open_xrcd(a file without a domain, no O_CREAT)");
  struct ibv_xrcd *x1 = open_xrcd(ctx, fd1, O_CREAT);
  struct ibv_xrcd *x2 = open_xrcd(ctx, fd2, 0);
  check(x1 != NULL && x2 != NULL, "ibv_open_xrcd(O_CREAT), then the same file again without it");
  check_null(open_xrcd(ctx, fd2, O_CREAT | O_EXCL), EINVAL, "ibv_open_xrcd(O_CREAT | O_EXCL) on a file with a domain");
  if (!x1 || !x2) return 1;

  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0), *rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  char *buf = aligned_alloc(4096, BUF);
  memset(buf, 0, BUF);
  struct ibv_mr *mr = ibv_reg_mr(pd, buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  check(pd && scq && rcq && mr, "a PD, two CQs, an MR");
  if (!pd || !scq || !rcq || !mr) return 1;

  struct ibv_srq *srq = xrc_srq(ctx, pd, x1, rcq);
  uint32_t srqn = 0;
  check(srq != NULL && ibv_get_srq_num(srq, &srqn) == 0, "ibv_create_srq_ex(XRC) and ibv_get_srq_num");
  if (!srq) return 1;
  check_null(xrc_srq(ctx, pd, x1, NULL), EINVAL, "an XRC SRQ without its CQ");
  struct ibv_srq_init_attr_ex tm = {.attr = {.max_wr = 4, .max_sge = 1},
                                    .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ,
                                    .srq_type = IBV_SRQT_TM, .pd = pd, .cq = rcq};
  check_null(ibv_create_srq_ex(ctx, &tm), EINVAL, "a tag matching SRQ without its tm_cap (IBV_SRQ_INIT_ATTR_TM; examples/verbs_ext/tm.c makes them)");

  struct ibv_qp_init_attr_ex ta = {.qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = x2};
  struct ibv_qp *tgt = ibv_create_qp_ex(ctx, &ta);
  struct ibv_qp_init_attr_ex na = {.qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd};
  check_null(ibv_create_qp_ex(ctx, &na), EINVAL, "an XRC_RECV QP without an XRCD");
  struct ibv_qp_init_attr_ex ia = {.send_cq = scq, .cap = {.max_send_wr = 8, .max_send_sge = 1},
                                   .qp_type = IBV_QPT_XRC_SEND, .sq_sig_all = 1,
                                   .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
                                   .send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE};
  struct ibv_qp *ini = ibv_create_qp_ex(ctx, &ia);
  check(tgt != NULL && ini != NULL && tgt->qp_type == IBV_QPT_XRC_RECV && ini->qp_type == IBV_QPT_XRC_SEND,
        "an XRC_RECV QP of the domain's second handle, an XRC_SEND QP of the PD");
  if (!tgt || !ini) return 1;
  check(connect_rc(ini, tgt->qp_num, &gid) == 0 && connect_rc(tgt, ini->qp_num, &gid) == 0,
        "both to RTS, connected to each other");

  struct ibv_sge s = {(uintptr_t)buf, 8, mr->lkey};
  struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &s, .num_sge = 1}, *rbad;
  check_ret(ibv_post_recv(ini, &rw, &rbad), EINVAL, "ibv_post_recv on the XRC_SEND QP");
  check_ret(ibv_post_recv(tgt, &rw, &rbad), EINVAL, "ibv_post_recv on the XRC_RECV QP");
  check_ret(classic_send(tgt, buf, 8, mr->lkey, srqn), EINVAL, "ibv_post_send on the XRC_RECV QP");

  /* The classic post: lands in the SRQ, completes on its CQ with the TGT's number. */
  struct ibv_wc wc;
  memcpy(buf + 4096, "xrc by post_send", 16);
  check(post_srq(srq, buf, mr->lkey, 11) == 0 && post_srq(srq, buf + 256, mr->lkey, 12) == 0, "two receives on the SRQ");
  check(classic_send(ini, buf + 4096, 16, mr->lkey, srqn) == 0, "ibv_post_send with remote_srqn");
  check(poll_one(scq, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "its send completes");
  check(poll_one(rcq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 11 && wc.qp_num == tgt->qp_num &&
            wc.byte_len == 16 && memcmp(buf, "xrc by post_send", 16) == 0,
        "the receive: on the SRQ's CQ, with the XRC_RECV QP's number, data placed");

  /* The ibv_wr_* post, with and without its SRQN. */
  struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(ini);
  memcpy(buf + 4096, "xrc by ibv_wr_*!", 16);
  ibv_wr_start(qx);
  qx->wr_id = 8;
  ibv_wr_send(qx);
  ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf + 4096, 16);
  check_ret(ibv_wr_complete(qx), EINVAL, "ibv_wr_complete of a WR without ibv_wr_set_xrc_srqn");
  ibv_wr_start(qx);
  qx->wr_id = 9;
  ibv_wr_send(qx);
  ibv_wr_set_xrc_srqn(qx, srqn);
  ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf + 4096, 16);
  qx->wr_id = 10;
  ibv_wr_rdma_write(qx, mr->rkey, (uintptr_t)buf + 1024);
  ibv_wr_set_xrc_srqn(qx, srqn);
  ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf + 4096, 16);
  check(ibv_wr_complete(qx) == 0, "ibv_wr_send and ibv_wr_rdma_write, each with ibv_wr_set_xrc_srqn");
  check(poll_one(scq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && poll_one(scq, &wc) == 1 &&
            wc.status == IBV_WC_SUCCESS,
        "both complete");
  check(poll_one(rcq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 12 && wc.qp_num == tgt->qp_num &&
            memcmp(buf + 256, "xrc by ibv_wr_*!", 16) == 0 && memcmp(buf + 1024, "xrc by ibv_wr_*!", 16) == 0,
        "the SEND in the SRQ's next receive, the WRITE in place");

  /* An SRQ of another domain (one of its own, no file): refused, nothing placed. */
  struct ibv_xrcd *x3 = open_xrcd(ctx, -1, O_CREAT);
  struct ibv_srq *foreign = x3 ? xrc_srq(ctx, pd, x3, rcq) : NULL;
  uint32_t foreign_srqn = 0;
  check(foreign != NULL && ibv_get_srq_num(foreign, &foreign_srqn) == 0 && foreign_srqn != srqn,
        "a second domain and an XRC SRQ in it");
  if (!foreign) return 1;
  check_ret(ibv_close_xrcd(x3), EBUSY, "ibv_close_xrcd of a domain its SRQ uses");
  check(post_srq(foreign, buf + 512, mr->lkey, 13) == 0, "a receive on it");
  check(classic_send(ini, buf + 4096, 16, mr->lkey, foreign_srqn) == 0, "a SEND naming it");
  check(poll_one(scq, &wc) == 1 && wc.status == IBV_WC_REM_INV_REQ_ERR,
        "the target refuses it: IBV_WC_REM_INV_REQ_ERR");
  check(buf[512] == 0 && ibv_poll_cq(rcq, 1, &wc) == 0, "nothing placed, no receive completed");

  /* ibv_open_qp: the same XRC_RECV QP through the other handle of its domain. */
  struct ibv_qp_open_attr oa = {.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE,
                                .qp_num = tgt->qp_num, .xrcd = x1, .qp_type = IBV_QPT_XRC_RECV};
  struct ibv_qp *opened = ibv_open_qp(ctx, &oa);
  check(opened != NULL && opened->qp_num == tgt->qp_num && opened->qp_type == IBV_QPT_XRC_RECV,
        "ibv_open_qp of the XRC_RECV QP through the domain's first handle");
  oa.xrcd = x3;
  check_null(ibv_open_qp(ctx, &oa), ENOENT, "ibv_open_qp through another domain");
  oa.xrcd = x1;
  oa.qp_type = IBV_QPT_RC;
  check_null(ibv_open_qp(ctx, &oa), EINVAL, "ibv_open_qp of an RC QP");
  check(ibv_destroy_qp(ini) == 0 && ibv_destroy_qp(tgt) == 0, "ibv_destroy_qp of both");
  struct ibv_qp_attr qa;
  struct ibv_qp_init_attr qi;
  check(opened != NULL && ibv_query_qp(opened, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_ERR,
        "the opened handle outlives its creator (the QP, in ERR since the refused SEND)");
  check(opened != NULL && ibv_destroy_qp(opened) == 0, "ibv_destroy_qp of the opened handle: the QP goes");
  check(ibv_destroy_srq(foreign) == 0 && ibv_close_xrcd(x3) == 0, "the second domain closes once its SRQ is gone");
  check(ibv_close_xrcd(x2) == 0, "ibv_close_xrcd of one handle while the other remains");
  check_ret(ibv_close_xrcd(x1), EBUSY, "ibv_close_xrcd of the last handle while its SRQ lives");
  check(ibv_destroy_srq(srq) == 0 && ibv_close_xrcd(x1) == 0, "then it closes");
  ibv_dereg_mr(mr);
  ibv_destroy_cq(scq);
  ibv_destroy_cq(rcq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  close(fd1);
  close(fd2);
  unlink(path);
  free(buf);
  printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
