/*
 * cq_ex: ibv_create_cq_ex, its polling (ibv_start_poll, ibv_next_poll,
 * ibv_end_poll), every ibv_wc_read_* this device fills, completion
 * timestamps against ibv_query_rt_values_ex's clock, ibv_poll_cq on the same
 * CQ; and the extended queries (ibv_query_device_ex, ibv_query_port,
 * ibv_query_gid_ex, ibv_query_gid_table, ibv_query_qp_data_in_order), on
 * softrdma's libibverbs.so.1.
 *
 * Good path: 24 SENDs with immediates between two RC QPs of one device,
 * both on one extended CQ: every completion read back field by field (wr_id,
 * status, opcode, byte_len, imm_data, qp_num, src_qp, wc_flags), timestamps
 * non-decreasing and inside the raw clock's readings before and after;
 * start_poll on an empty CQ is ENOENT; CQEs a poll session left are the
 * next ibv_poll_cq's, in order, none lost. Refusals: unknown comp_mask,
 * wc_flags the device cannot fill (CVLAN, flow tag), unknown create flags,
 * a parent domain, cqe 0, start_poll's attr comp_mask, rt_values other than
 * the raw clock.
 *
 * Run with LD_LIBRARY_PATH at softrdma's drop-in and SRDMA_ADDR set.
 */
#include <arpa/inet.h>
#include <time.h>

#include "ext_common.h"

enum { N = 24, MSG = 256 };

static uint64_t raw_ns(struct ibv_context *ctx) {
  struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
  if (ibv_query_rt_values_ex(ctx, &v)) return 0;
  return (uint64_t)v.raw_clock.tv_sec * 1000000000u + (uint64_t)v.raw_clock.tv_nsec;
}

int main(void) {
  struct ibv_context *ctx = open_srdma0();
  check(ctx != NULL, "ibv_open_device(srdma0)");
  if (!ctx) return 1;

  /* The extended queries. */
  struct ibv_device_attr_ex dx;
  check_ret(ibv_query_device_ex(ctx, NULL, &dx), 0, "ibv_query_device_ex");
  check(dx.orig_attr.phys_port_cnt == 1 && dx.phys_port_cnt_ex == 1 && dx.hca_core_clock == 1000000 &&
            dx.completion_timestamp_mask == UINT64_MAX && dx.orig_attr.max_qp > 0 &&
            dx.device_cap_flags_ex == ((uint64_t)(unsigned)dx.orig_attr.device_cap_flags | (1ull << 40)),
        "ibv_query_device_ex: one port, a 1 GHz completion clock, a 64-bit timestamp mask, the same capabilities "
        "and ATOMIC WRITE (bit 40)");
  struct ibv_query_device_ex_input in = {.comp_mask = 1};
  check_ret(ibv_query_device_ex(ctx, &in, &dx), EINVAL, "ibv_query_device_ex(input comp_mask)");
  struct ibv_port_attr pa;
  check_ret(ibv_query_port(ctx, 1, &pa), 0, "ibv_query_port(1)");
  check(pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET && pa.gid_tbl_len == 16 &&
            (pa.port_cap_flags & IBV_PORT_CM_SUP),
        "ibv_query_port: ACTIVE, Ethernet, a GID table of 16, CM supported");
  check_ret(ibv_query_port(ctx, 0, &pa), EINVAL, "ibv_query_port(0)");
  struct ibv_gid_entry ge, table[4];
  check_ret(ibv_query_gid_ex(ctx, 1, 0, &ge, 0), 0, "ibv_query_gid_ex(1, 0)");
  check(ge.gid_type == IBV_GID_TYPE_ROCE_V2 && ge.port_num == 1 && ge.gid_index == 0 && ge.gid.raw[10] == 0xff,
        "ibv_query_gid_ex: RoCE v2, an IPv4-mapped GID");
  check_ret(ibv_query_gid_ex(ctx, 1, 1, &ge, 0), ENODATA, "ibv_query_gid_ex(index 1, an empty slot)");
  check_ret(ibv_query_gid_ex(ctx, 1, 16, &ge, 0), EINVAL, "ibv_query_gid_ex(index 16, past the table)");
  ssize_t rows = ibv_query_gid_table(ctx, table, 4, 0);
  check(rows == 1 && memcmp(&table[0], &ge, sizeof ge) == 0, "ibv_query_gid_table: one entry, the same");
  check(ibv_query_gid_table(ctx, table, 0, 0) < 0, "ibv_query_gid_table(room for none) -> an error");

  /* Refusals at create. */
  struct ibv_cq_init_attr_ex ca = {.cqe = 64, .wc_flags = IBV_WC_STANDARD_FLAGS};
  ca.comp_mask = 1u << 10;
  check_null(ibv_create_cq_ex(ctx, &ca), EINVAL, "ibv_create_cq_ex(unknown comp_mask bit)");
  ca.comp_mask = 0;
  ca.wc_flags = IBV_WC_EX_WITH_CVLAN;
  check_null(ibv_create_cq_ex(ctx, &ca), EOPNOTSUPP, "ibv_create_cq_ex(WITH_CVLAN)");
  ca.wc_flags = IBV_WC_EX_WITH_FLOW_TAG;
  check_null(ibv_create_cq_ex(ctx, &ca), EOPNOTSUPP, "ibv_create_cq_ex(WITH_FLOW_TAG)");
  ca.wc_flags = IBV_WC_STANDARD_FLAGS;
  ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  ca.flags = 1u << 5;
  check_null(ibv_create_cq_ex(ctx, &ca), EOPNOTSUPP, "ibv_create_cq_ex(unknown create flag)");
  ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  ca.flags = 0;
  check_null(ibv_create_cq_ex(ctx, &ca), EINVAL, "ibv_create_cq_ex(MASK_PD without a parent domain)");
  ca.comp_mask = 0;
  ca.cqe = 0;
  check_null(ibv_create_cq_ex(ctx, &ca), EINVAL, "ibv_create_cq_ex(cqe 0)");

  /* The CQ under test: every flag this device fills. */
  struct ibv_cq_init_attr_ex good = {
      .cqe = 4 * N,
      .wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                  IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
      .comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
      .flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED};
  struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &good);
  check(cqx != NULL && ibv_cq_ex_to_cq(cqx)->cqe >= 4 * N, "ibv_create_cq_ex: standard flags and both timestamps");
  if (!cqx) return 1;
  struct ibv_cq *cq = ibv_cq_ex_to_cq(cqx);
  struct ibv_poll_cq_attr pattr = {0};
  check_ret(ibv_start_poll(cqx, &pattr), ENOENT, "ibv_start_poll on an empty CQ");
  pattr.comp_mask = 1;
  check_ret(ibv_start_poll(cqx, &pattr), EINVAL, "ibv_start_poll(attr comp_mask)");
  pattr.comp_mask = 0;
  struct ibv_values_ex vbad = {.comp_mask = 1u << 4};
  check_ret(ibv_query_rt_values_ex(ctx, &vbad), EOPNOTSUPP, "ibv_query_rt_values_ex(not the raw clock)");

  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  char *mem = aligned_alloc(4096, 2 * N * MSG);
  memset(mem, 0, 2 * N * MSG);
  struct ibv_mr *mr = ibv_reg_mr(pd, mem, 2 * N * MSG, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_qp_init_attr qi = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = N, .max_recv_wr = N, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp *a = ibv_create_qp(pd, &qi), *b = ibv_create_qp(pd, &qi);
  union ibv_gid gid;
  if (!pd || !mr || !a || !b || ibv_query_gid(ctx, 1, 0, &gid) || connect_rc(a, b->qp_num, &gid) ||
      connect_rc(b, a->qp_num, &gid)) {
    check(0, "two connected RC QPs on the extended CQ");
    return 1;
  }
  check(ibv_query_qp_data_in_order(a, IBV_WR_RDMA_WRITE, 0) == 0,
        "ibv_query_qp_data_in_order: 0 (data is placed in order, but nothing is promised before the CQE)");

  /* N receives on b, N SENDs with immediates from a: 2N completions. */
  for (int i = 0; i < N; i++) {
    struct ibv_sge s = {(uintptr_t)(mem + N * MSG + i * MSG), MSG, mr->lkey};
    struct ibv_recv_wr w = {.wr_id = 1000 + (uint64_t)i, .sg_list = &s, .num_sge = 1}, *bad;
    if (ibv_post_recv(b, &w, &bad)) check(0, "ibv_post_recv");
  }
  const uint64_t t0 = raw_ns(ctx);
  struct timespec w0;
  clock_gettime(CLOCK_REALTIME, &w0);
  for (int i = 0; i < N; i++) {
    for (int k = 0; k < MSG; k++) mem[i * MSG + k] = (char)(i + k);
    struct ibv_sge s = {(uintptr_t)(mem + i * MSG), (uint32_t)(16 + i), mr->lkey};
    struct ibv_send_wr w = {.wr_id = (uint64_t)i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
                            .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(0xABC000 + (uint32_t)i)},
                       *bad;
    if (ibv_post_send(a, &w, &bad)) check(0, "ibv_post_send");
  }

  /* Poll everything with start/next/end, except what the last session leaves. */
  int sends = 0, recvs = 0, bad_fields = 0, order_bad = 0, ts_bad = 0, got = 0;
  uint64_t last_ts = 0, next_send = 0, next_recv = 1000;
  for (long spin = 0; got < 2 * N - 3 && spin < 200000000L; spin++) {
    if (ibv_start_poll(cqx, &pattr) != 0) continue;
    int r = 0;
    do {
      uint64_t id = cqx->wr_id;
      uint64_t ts = ibv_wc_read_completion_ts(cqx), wall = ibv_wc_read_completion_wallclock_ns(cqx);
      if (ts < last_ts || ts < t0 || wall < (uint64_t)w0.tv_sec * 1000000000u) ts_bad++;
      last_ts = ts;
      if (cqx->status != IBV_WC_SUCCESS || ibv_wc_read_vendor_err(cqx) != 0) bad_fields++;
      if (id < 1000) {
        sends++;
        if (id != next_send++) order_bad++;
        if (ibv_wc_read_opcode(cqx) != IBV_WC_SEND || ibv_wc_read_qp_num(cqx) != a->qp_num) bad_fields++;
      } else {
        recvs++;
        uint32_t i = (uint32_t)(id - 1000);
        if (id != next_recv++) order_bad++;
        if (ibv_wc_read_opcode(cqx) != IBV_WC_RECV || ibv_wc_read_byte_len(cqx) != 16 + i ||
            !(ibv_wc_read_wc_flags(cqx) & IBV_WC_WITH_IMM) || ntohl(ibv_wc_read_imm_data(cqx)) != 0xABC000 + i ||
            ibv_wc_read_qp_num(cqx) != b->qp_num || ibv_wc_read_src_qp(cqx) != a->qp_num ||
            memcmp(mem + N * MSG + i * MSG, mem + i * MSG, 16 + i) != 0)
          bad_fields++;
      }
      got++;
      if (got == 2 * N - 3) break; /* leave the last three to ibv_poll_cq */
      r = ibv_next_poll(cqx);
    } while (r == 0);
    ibv_end_poll(cqx);
  }
  const uint64_t t1 = raw_ns(ctx);
  check(got == 2 * N - 3, "start_poll/next_poll: all but the last three completions");
  check(bad_fields == 0, "every ibv_wc_read_* as posted: status, opcode, byte_len, imm_data, qp_num, src_qp, data");
  check(order_bad == 0, "sends and receives each complete in posting order");
  check(ts_bad == 0 && last_ts <= t1, "completion timestamps non-decreasing, within the raw clock's readings");

  /* The three left: ibv_poll_cq on the same CQ, none lost. */
  struct ibv_wc wc[4];
  int left = 0;
  for (long spin = 0; left < 3 && spin < 200000000L; spin++) left += ibv_poll_cq(cq, 4 - left, wc + left);
  int left_ok = left == 3;
  for (int i = 0; i < left; i++) {
    if (wc[i].status != IBV_WC_SUCCESS) left_ok = 0;
    if (wc[i].wr_id < 1000) {
      if (wc[i].wr_id != next_send++) left_ok = 0;
      sends++;
    } else {
      if (wc[i].wr_id != next_recv++ || wc[i].byte_len != 16 + (wc[i].wr_id - 1000)) left_ok = 0;
      recvs++;
    }
  }
  check(left_ok && sends == N && recvs == N, "ibv_poll_cq after a poll session: the rest, in order, none lost");
  check_ret(ibv_start_poll(cqx, &pattr), ENOENT, "ibv_start_poll once all are polled");

  ibv_destroy_qp(a);
  ibv_destroy_qp(b);
  check_ret(ibv_destroy_cq(cq), 0, "ibv_destroy_cq(an extended CQ)");
  printf("%s: %d check(s) failed\n", failures ? "FAIL" : "ok", failures);
  return failures ? 1 : 0;
}
