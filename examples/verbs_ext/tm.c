/*
 * Tag-matching SRQs through the drop-in: ibv_create_srq_ex (IBV_SRQT_TM),
 * ibv_post_srq_ops (TAG_ADD / TAG_DEL / TAG_SYNC and their completions),
 * an extended CQ with IBV_WC_EX_WITH_TM_INFO, and the messages: an eager
 * one that matches (its TMH stripped), an unexpected one, NO_TAG, and the
 * phase synchronization in between; a rendezvous request that matches
 * (the device READs the sender's buffer into the tag's: two completions,
 * and the sender receives the FIN), and one whose RVH asks for more than
 * the tag holds (IBV_WC_TM_RNDV_INCOMPLETE, its headers in the tag).
 */
#include "ext_common.h"

#include <arpa/inet.h>
#include <endian.h>
#include <infiniband/tm_types.h>

enum { kLen = 256, kPlain = 4 };

static struct ibv_cq_ex *cq;

/* One CQE from the extended CQ, bounded; its fields in *wc, its TM info in *tm. */
static int poll_ex(struct ibv_wc *wc, struct ibv_wc_tm_info *tm) {
  struct ibv_poll_cq_attr attr = {0};
  int r = ENOENT;
  for (long i = 0; i < 200000000L && (r = ibv_start_poll(cq, &attr)) == ENOENT; i++) {
  }
  if (r != 0) return 0;
  wc->wr_id = cq->wr_id;
  wc->status = cq->status;
  wc->opcode = ibv_wc_read_opcode(cq);
  wc->wc_flags = ibv_wc_read_wc_flags(cq);
  wc->byte_len = ibv_wc_read_byte_len(cq);
  ibv_wc_read_tm_info(cq, tm);
  ibv_end_poll(cq);
  return 1;
}

static void put_tmh(uint8_t *p, uint8_t op, uint64_t tag) {
  struct ibv_tmh t = {.opcode = op, .app_ctx = htonl(0x1234u), .tag = htobe64(tag)};
  memcpy(p, &t, sizeof t);
}

int main(void) {
  struct ibv_context *ctx = open_srdma0();
  if (!ctx) {
    printf("FAIL: no softrdma device\n");
    return 1;
  }
  struct ibv_device_attr_ex dev;
  check(ibv_query_device_ex(ctx, NULL, &dev) == 0, "ibv_query_device_ex");
  check((dev.tm_caps.flags & IBV_TM_CAP_RC) && dev.tm_caps.max_num_tags > 0 && dev.tm_caps.max_ops > 0,
        "tm_caps: RC, max_num_tags and max_ops");
  check(dev.tm_caps.max_rndv_hdr_size >= sizeof(struct ibv_tmh) + sizeof(struct ibv_rvh),
        "tm_caps: rendezvous offload (max_rndv_hdr_size holds a TMH and an RVH)");
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  struct ibv_cq_init_attr_ex ca = {.cqe = 64, .wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_TM_INFO};
  cq = ibv_create_cq_ex(ctx, &ca);
  check(cq != NULL, "ibv_create_cq_ex with IBV_WC_EX_WITH_TM_INFO");
  if (!pd || !cq) return 1;
  struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  static uint8_t sbuf[kLen], rbuf[(kPlain + 4) * kLen];
  struct ibv_mr *smr = ibv_reg_mr(pd, sbuf, sizeof sbuf, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *rmr = ibv_reg_mr(pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
  /* Rendezvous: the sender's data (READ by the receiving device), the tag's buffer, the FIN's receive. */
  enum { kRndvLen = 3000 };
  static uint8_t data[kRndvLen], tagbuf[4096], finbuf[64];
  struct ibv_mr *dmr = ibv_reg_mr(pd, data, sizeof data, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  struct ibv_mr *tmr = ibv_reg_mr(pd, tagbuf, sizeof tagbuf, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *fmr = ibv_reg_mr(pd, finbuf, sizeof finbuf, IBV_ACCESS_LOCAL_WRITE);

  /* Refusals: a TM SRQ without its CQ, tm_cap without IBV_SRQT_TM. */
  struct ibv_srq_init_attr_ex sa = {.attr = {.max_wr = 16, .max_sge = 1},
                                    .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                                                 IBV_SRQ_INIT_ATTR_TM,
                                    .srq_type = IBV_SRQT_TM, .pd = pd, .tm_cap = {.max_num_tags = 4, .max_ops = 4}};
  errno = 0;
  check_null(ibv_create_srq_ex(ctx, &sa), EINVAL, "a TM SRQ without IBV_SRQ_INIT_ATTR_CQ");
  sa.comp_mask |= IBV_SRQ_INIT_ATTR_CQ;
  sa.cq = ibv_cq_ex_to_cq(cq);
  sa.srq_type = IBV_SRQT_BASIC;
  errno = 0;
  check_null(ibv_create_srq_ex(ctx, &sa), EINVAL, "IBV_SRQ_INIT_ATTR_TM on a basic SRQ");
  sa.srq_type = IBV_SRQT_TM;
  struct ibv_srq *srq = ibv_create_srq_ex(ctx, &sa);
  check(srq != NULL, "ibv_create_srq_ex(IBV_SRQT_TM)");
  struct ibv_srq_init_attr plain_attr = {.attr = {.max_wr = 4, .max_sge = 1}};
  struct ibv_srq *plain = ibv_create_srq(pd, &plain_attr);
  struct ibv_ops_wr sync = {.wr_id = 1, .opcode = IBV_WR_TAG_SYNC, .flags = IBV_OPS_SIGNALED}, *bad = NULL;
  check_ret(ibv_post_srq_ops(plain, &sync, &bad), EINVAL, "ibv_post_srq_ops on a basic SRQ");
  if (!srq || !scq) return 1;

  struct ibv_qp_init_attr qa = {.send_cq = scq, .recv_cq = ibv_cq_ex_to_cq(cq),
                                .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
                                .qp_type = IBV_QPT_RC};
  struct ibv_qp *client = ibv_create_qp(pd, &qa);
  qa.srq = srq;
  struct ibv_qp *server = ibv_create_qp(pd, &qa);
  union ibv_gid gid;
  ibv_query_gid(ctx, 1, 0, &gid);
  check(client && server && connect_rc(client, server->qp_num, &gid) == 0 &&
            connect_rc(server, client->qp_num, &gid) == 0,
        "an RC pair, the receiver on the TM SRQ");
  for (int i = 0; i < kPlain; i++) {
    struct ibv_sge s = {(uintptr_t)(rbuf + (4 + i) * kLen), kLen, rmr->lkey};
    struct ibv_recv_wr w = {.wr_id = 100 + i, .sg_list = &s, .num_sge = 1}, *b;
    ibv_post_srq_recv(srq, &w, &b);
  }

  struct ibv_wc wc;
  struct ibv_wc_tm_info tm;
  /* ADD tag 5 (buffer 0) and tag 6 (buffer 1). */
  uint32_t handle[2];
  for (int i = 0; i < 2; i++) {
    struct ibv_sge s = {(uintptr_t)(rbuf + i * kLen), kLen, rmr->lkey};
    struct ibv_ops_wr add = {.wr_id = 10 + i, .opcode = IBV_WR_TAG_ADD, .flags = IBV_OPS_SIGNALED};
    add.tm.add.recv_wr_id = 50 + i;
    add.tm.add.sg_list = &s;
    add.tm.add.num_sge = 1;
    add.tm.add.tag = 5 + i;
    add.tm.add.mask = ~0ull;
    check_ret(ibv_post_srq_ops(srq, &add, &bad), 0, "IBV_WR_TAG_ADD");
    handle[i] = add.tm.handle;
    check(poll_ex(&wc, &tm) && wc.opcode == IBV_WC_TM_ADD && wc.wr_id == (uint64_t)(10 + i) &&
              wc.status == IBV_WC_SUCCESS,
          "IBV_WC_TM_ADD completion");
  }
  check(handle[0] != handle[1], "distinct handles");

  struct ibv_sge ss = {(uintptr_t)sbuf, kLen, smr->lkey};
  struct ibv_send_wr sw = {.wr_id = 1, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED}, *sb;
  struct ibv_wc swc;
#define SEND(op, tag, fill)                                   \
  do {                                                        \
    memset(sbuf, fill, sizeof sbuf);                          \
    put_tmh(sbuf, op, tag);                                   \
    ibv_post_send(client, &sw, &sb);                          \
    check(poll_one(scq, &swc) == 1 && swc.status == IBV_WC_SUCCESS, "the SEND completed"); \
  } while (0)

  /* Eager, tag 5: lands in buffer 0 without its TMH. */
  SEND(IBV_TMH_EAGER, 5, 0xa5);
  check(poll_ex(&wc, &tm) && wc.opcode == IBV_WC_TM_RECV && wc.wr_id == 50 &&
            wc.wc_flags == (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID) && tm.tag == 5 && tm.priv == 0x1234u &&
            wc.byte_len == kLen - sizeof(struct ibv_tmh),
        "eager tag 5: IBV_WC_TM_RECV, MATCH | DATA_VALID, tag and app_ctx");
  check(rbuf[0] == 0xa5 && rbuf[kLen - sizeof(struct ibv_tmh) - 1] == 0xa5 && rbuf[kLen - sizeof(struct ibv_tmh)] == 0,
        "the tag's buffer holds the payload after the TMH");

  /* Unexpected, tag 9: an ordinary receive, whole; matching waits for a SYNC. */
  SEND(IBV_TMH_EAGER, 9, 0xb6);
  check(poll_ex(&wc, &tm) && wc.opcode == IBV_WC_TM_RECV && wc.wr_id == 100 && wc.wc_flags == 0 &&
            wc.byte_len == kLen && rbuf[4 * kLen] == IBV_TMH_EAGER,
        "unexpected tag 9: IBV_WC_TM_RECV without flags, TMH included");
  SEND(IBV_TMH_EAGER, 6, 0xc7);
  check(poll_ex(&wc, &tm) && wc.wr_id == 101 && wc.wc_flags == 0, "tag 6 before the SYNC: unexpected too");
  sync.flags = IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC;
  sync.tm.unexpected_cnt = 1;
  check_ret(ibv_post_srq_ops(srq, &sync, &bad), 0, "IBV_WR_TAG_SYNC, behind");
  check(poll_ex(&wc, &tm) && wc.opcode == IBV_WC_TM_SYNC && (wc.wc_flags & IBV_WC_TM_SYNC_REQ),
        "IBV_WC_TM_SYNC with IBV_WC_TM_SYNC_REQ while behind");
  sync.tm.unexpected_cnt = 2;
  ibv_post_srq_ops(srq, &sync, &bad);
  check(poll_ex(&wc, &tm) && wc.opcode == IBV_WC_TM_SYNC && wc.wc_flags == 0, "IBV_WC_TM_SYNC, caught up");

  /* NO_TAG: an ordinary receive, IBV_WC_TM_NO_TAG, not counted. */
  SEND(IBV_TMH_NO_TAG, 6, 0xd8);
  check(poll_ex(&wc, &tm) && wc.opcode == IBV_WC_TM_NO_TAG && wc.wr_id == 102 && wc.wc_flags == 0,
        "NO_TAG: IBV_WC_TM_NO_TAG");
  /* Synced: tag 6 matches now. */
  SEND(IBV_TMH_EAGER, 6, 0xe9);
  check(poll_ex(&wc, &tm) && wc.wr_id == 51 && wc.wc_flags == (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID) &&
            tm.tag == 6 && rbuf[kLen] == 0xe9,
        "after the SYNC tag 6 matches");
  /* DEL of a consumed tag: IBV_WC_TM_ERR. */
  struct ibv_ops_wr del = {.wr_id = 77, .opcode = IBV_WR_TAG_DEL, .flags = IBV_OPS_SIGNALED};
  del.tm.handle = handle[1];
  check_ret(ibv_post_srq_ops(srq, &del, &bad), 0, "IBV_WR_TAG_DEL");
  check(poll_ex(&wc, &tm) && wc.opcode == IBV_WC_TM_DEL && wc.wr_id == 77 && wc.status == IBV_WC_TM_ERR,
        "IBV_WR_TAG_DEL of a consumed tag: IBV_WC_TM_ERR");

  /* Rendezvous, tag 8: TMH and RVH naming `data`. The receiving device
   * READs it into the tag's buffer: IBV_WC_TM_RECV with MATCH (the tag's
   * info) at once, then with DATA_VALID; the client receives the FIN (the
   * TMH and RVH again, opcode FIN). */
  check(dmr && tmr && fmr, "the rendezvous buffers' MRs");
  for (int i = 0; i < kRndvLen; i++) data[i] = (uint8_t)(i * 13 + 5);
  struct ibv_sge ts = {(uintptr_t)tagbuf, sizeof tagbuf, tmr->lkey};
  struct ibv_ops_wr add = {.wr_id = 20, .opcode = IBV_WR_TAG_ADD, .flags = IBV_OPS_SIGNALED};
  add.tm.add.recv_wr_id = 80;
  add.tm.add.sg_list = &ts;
  add.tm.add.num_sge = 1;
  add.tm.add.tag = 8;
  add.tm.add.mask = ~0ull;
  check_ret(ibv_post_srq_ops(srq, &add, &bad), 0, "IBV_WR_TAG_ADD for the rendezvous");
  check(poll_ex(&wc, &tm) && wc.opcode == IBV_WC_TM_ADD && wc.wr_id == 20, "its IBV_WC_TM_ADD");
  struct ibv_sge fs = {(uintptr_t)finbuf, sizeof finbuf, fmr->lkey};
  struct ibv_recv_wr fr = {.wr_id = 300, .sg_list = &fs, .num_sge = 1}, *fb;
  check_ret(ibv_post_recv(client, &fr, &fb), 0, "the client's receive for the FIN");
  struct ibv_rvh rvh = {.va = htobe64((uintptr_t)data), .rkey = htonl(dmr->rkey), .len = htonl(kRndvLen)};
  memset(sbuf, 0, sizeof sbuf);
  put_tmh(sbuf, IBV_TMH_RNDV, 8);
  memcpy(sbuf + sizeof(struct ibv_tmh), &rvh, sizeof rvh);
  ss.length = sizeof(struct ibv_tmh) + sizeof rvh;
  ibv_post_send(client, &sw, &sb);
  check(poll_one(scq, &swc) == 1 && swc.status == IBV_WC_SUCCESS, "the rendezvous request's SEND completed");
  int matched = 0, valid = 0, fin = 0;
  for (int i = 0; i < 3 && poll_ex(&wc, &tm); i++) {
    if (wc.status != IBV_WC_SUCCESS) break;
    if (wc.opcode == IBV_WC_TM_RECV && wc.wr_id == 80 && wc.wc_flags == IBV_WC_TM_MATCH && tm.tag == 8 &&
        tm.priv == 0x1234u)
      matched = !valid;
    else if (wc.opcode == IBV_WC_TM_RECV && wc.wr_id == 80 && wc.wc_flags == IBV_WC_TM_DATA_VALID &&
             wc.byte_len == kRndvLen)
      valid = 1;
    else if (wc.opcode == IBV_WC_RECV && wc.wr_id == 300 && wc.byte_len == sizeof(struct ibv_tmh) + sizeof rvh)
      fin = 1;
  }
  check(matched && valid, "rendezvous: IBV_WC_TM_RECV with MATCH, then with DATA_VALID");
  check(memcmp(tagbuf, data, kRndvLen) == 0 && tagbuf[kRndvLen] == 0, "the tag's buffer holds the READ data");
  check(fin && finbuf[0] == IBV_TMH_FIN && memcmp(finbuf + 1, sbuf + 1, ss.length - 1) == 0,
        "the client received the FIN: the TMH and RVH again");
  /* An RVH asking for more than the tag holds: IBV_WC_TM_RNDV_INCOMPLETE, the headers in the tag. */
  ts.length = 1024;
  add.tm.add.recv_wr_id = 81;
  check_ret(ibv_post_srq_ops(srq, &add, &bad), 0, "IBV_WR_TAG_ADD of a 1024-byte buffer");
  check(poll_ex(&wc, &tm) && wc.opcode == IBV_WC_TM_ADD, "its IBV_WC_TM_ADD");
  memset(tagbuf, 0, sizeof tagbuf);
  ibv_post_send(client, &sw, &sb);
  check(poll_one(scq, &swc) == 1 && swc.status == IBV_WC_SUCCESS, "the second rendezvous request's SEND completed");
  check(poll_ex(&wc, &tm) && wc.status == IBV_WC_TM_RNDV_INCOMPLETE && wc.wr_id == 81 && tm.tag == 8 &&
            wc.byte_len == ss.length && memcmp(tagbuf, sbuf, ss.length) == 0 && tagbuf[ss.length] == 0,
        "too long for the tag: IBV_WC_TM_RNDV_INCOMPLETE, the TMH and RVH in its buffer");

  ibv_destroy_qp(client);
  ibv_destroy_qp(server);
  check(ibv_destroy_srq(srq) == 0, "ibv_destroy_srq");
  ibv_destroy_srq(plain);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(rmr);
  ibv_dereg_mr(dmr);
  ibv_dereg_mr(tmr);
  ibv_dereg_mr(fmr);
  ibv_destroy_cq(scq);
  check(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "ibv_destroy_cq");
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
