/* A hostile rsockets peer: an rsocket server (a child process on
 * 127.X.Y.1, librdmacm's rsocket API) faces a fake peer (this process on
 * 127.X.Y.2) that speaks the RDMA CM and verbs directly and breaks
 * rdma-core's rsocket protocol on purpose. Each case must end the
 * connection with an error on the server's side, never a crash, a hang or
 * a byte outside the buffers it advertised; a well-behaved case in between
 * proves the fake peer speaks the protocol (so the others fail for the
 * reason they were built for):
 *   1. REQ private data of version 2            -> REJECTED, raccept goes on
 *   2. REQ private data of 8 bytes              -> REJECTED
 *   3. a good connection, "hello" as DATA       -> rrecv returns "hello"
 *   4. an immediate with a reserved operation   -> rrecv -1 EPROTO
 *   5. DATA claiming 1 MiB (64 KiB advertised)  -> rrecv -1 EPROTO
 *   6. an RDMA WRITE past the advertised buffer -> the fake peer's write
 *      fails (remote access error); rrecv returns no data (0 or -1)
 *   7. an unknown control code                  -> rrecv -1 EPROTO
 * The server reports each rrecv on a pipe; both processes must exit 0.
 * Run with softrdma's librdmacm.so.1 and libibverbs.so.1 on
 * LD_LIBRARY_PATH; argv[1] is the /24 to use ("127.X.Y"), argv[2] a port.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CONN_DATA 40
#define OP(op, data) (((uint32_t)(op) << 29) | (uint32_t)(data))

static int failures;
#define CHECK(cond, ...)                       \
  do {                                         \
    if (!(cond)) {                             \
      fprintf(stderr, "FAIL: " __VA_ARGS__);   \
      fprintf(stderr, "\n");                   \
      failures++;                              \
    }                                          \
  } while (0)

static char net[32];
static int port;

/* The server: accepts, reads once, reports "ret errno bytes" per
 * connection, for the connections that get through (cases 3..7). */
static int server(int report) {
  char addr[48];
  snprintf(addr, sizeof addr, "%s.1", net);
  setenv("SRDMA_ADDR", addr, 1);
  int l = rsocket(AF_INET, SOCK_STREAM, 0);
  if (l < 0) return perror("rsocket"), 1;
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, addr, &sin.sin_addr);
  if (rbind(l, (struct sockaddr*)&sin, sizeof sin) || rlisten(l, 4)) return perror("rbind/rlisten"), 1;
  if (write(report, "ready\n", 6) != 6) return 1;
  for (int c = 0; c < 5; c++) {
    int fd = raccept(l, NULL, NULL);
    if (fd < 0) return perror("raccept"), 1;
    char buf[256];
    memset(buf, 0, sizeof buf);
    errno = 0;
    ssize_t n = rrecv(fd, buf, sizeof buf - 1, 0);
    int e = n < 0 ? errno : 0;
    char line[320];
    int len = snprintf(line, sizeof line, "%zd %d %s\n", n, e, n > 0 ? buf : "-");
    if (write(report, line, (size_t)len) != len) return 1;
    rclose(fd);
  }
  rclose(l);
  return 0;
}

struct peer {
  struct rdma_event_channel* ch;
  struct rdma_cm_id* id;
  struct ibv_cq* cq;
  struct ibv_mr* mr;
  char buf[4096];
  /* The server's rs_conn_data, host order. */
  uint64_t sgl_addr, buf_addr;
  uint32_t sgl_key, buf_key, buf_len;
};

static struct rdma_cm_event* next_event(struct peer* p) {
  struct pollfd f = {.fd = p->ch->fd, .events = POLLIN};
  if (poll(&f, 1, 20000) != 1) return NULL; /* a bound against a hang, not a timer the test waits for */
  struct rdma_cm_event* e;
  return rdma_get_cm_event(p->ch, &e) ? NULL : e;
}

static uint64_t get64(const uint8_t* q) {
  uint64_t v;
  memcpy(&v, q, 8);
  return be64toh(v);
}
static uint32_t get32(const uint8_t* q) {
  uint32_t v;
  memcpy(&v, q, 4);
  return be32toh(v);
}

/* Connects with `pd` (len bytes); returns the final CM event type. */
static int peer_connect(struct peer* p, const uint8_t* pd, uint8_t len) {
  memset(p, 0, sizeof *p);
  char addr[48];
  snprintf(addr, sizeof addr, "%s.1", net);
  struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, addr, &dst.sin_addr);
  p->ch = rdma_create_event_channel();
  if (!p->ch || rdma_create_id(p->ch, &p->id, NULL, RDMA_PS_TCP)) return -1;
  if (rdma_resolve_addr(p->id, NULL, (struct sockaddr*)&dst, 2000)) return -1;
  struct rdma_cm_event* e = next_event(p);
  if (!e || e->event != RDMA_CM_EVENT_ADDR_RESOLVED) return -1;
  rdma_ack_cm_event(e);
  if (rdma_resolve_route(p->id, 2000)) return -1;
  e = next_event(p);
  if (!e || e->event != RDMA_CM_EVENT_ROUTE_RESOLVED) return -1;
  rdma_ack_cm_event(e);
  p->cq = ibv_create_cq(p->id->verbs, 16, NULL, NULL, 0);
  struct ibv_qp_init_attr qa = {.send_cq = p->cq, .recv_cq = p->cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
  if (!p->cq || rdma_create_qp(p->id, NULL, &qa)) return -1;
  p->mr = ibv_reg_mr(p->id->pd, p->buf, sizeof p->buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!p->mr) return -1;
  struct rdma_conn_param param = {.private_data = pd, .private_data_len = len, .retry_count = 7, .rnr_retry_count = 7};
  if (rdma_connect(p->id, &param)) return -1;
  e = next_event(p);
  if (!e) return -1;
  int type = e->event;
  if (type == RDMA_CM_EVENT_ESTABLISHED && e->param.conn.private_data_len >= CONN_DATA) {
    const uint8_t* c = e->param.conn.private_data;
    p->sgl_addr = get64(c + 8);
    p->sgl_key = get32(c + 16);
    p->buf_addr = get64(c + 24);
    p->buf_key = get32(c + 32);
    p->buf_len = get32(c + 36);
  }
  rdma_ack_cm_event(e);
  return type;
}

static void peer_close(struct peer* p) {
  if (p->id && p->id->qp) {
    rdma_disconnect(p->id);
    rdma_destroy_qp(p->id);
  }
  if (p->mr) ibv_dereg_mr(p->mr);
  if (p->cq) ibv_destroy_cq(p->cq);
  if (p->id) rdma_destroy_id(p->id);
  if (p->ch) rdma_destroy_event_channel(p->ch);
}

/* One RDMA WRITE (with an immediate when with_imm) of len bytes of buf;
 * returns its completion status. */
static int peer_write(struct peer* p, uint64_t addr, uint32_t key, uint32_t len, int with_imm, uint32_t imm) {
  struct ibv_sge sge = {.addr = (uintptr_t)p->buf, .length = len, .lkey = p->mr->lkey};
  struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = len ? 1 : 0, .send_flags = IBV_SEND_SIGNALED,
                           .opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE};
  wr.imm_data = htobe32(imm);
  wr.wr.rdma.remote_addr = addr;
  wr.wr.rdma.rkey = key;
  struct ibv_send_wr* bad;
  if (ibv_post_send(p->id->qp, &wr, &bad)) return -1;
  struct ibv_wc wc;
  for (long spins = 0; spins < 200000000L; spins++) {
    int n = ibv_poll_cq(p->cq, 1, &wc);
    if (n < 0) return -1;
    if (n == 1) return wc.status;
  }
  return -1;
}

/* A good rs_conn_data of ours (a target SGL and buffer in our MR: the
 * server's credit updates land there). */
static void good_conn_data(struct peer* p, uint8_t* out) {
  memset(out, 0, CONN_DATA);
  out[0] = 1;
  out[1] = 2;                 /* little-endian, iomap area */
  out[2] = 0, out[3] = 16;    /* 16 credits */
  uint64_t a = htobe64((uintptr_t)p->buf);
  memcpy(out + 8, &a, 8);     /* target SGL: our buffer (key filled after reg) */
  uint32_t two = htobe32(2);
  memcpy(out + 20, &two, 4);
  memcpy(out + 24, &a, 8);
  uint32_t len = htobe32(1024);
  memcpy(out + 36, &len, 4);
}

static int read_report(FILE* f, long* n, int* e, char* text) {
  char line[400];
  if (!fgets(line, sizeof line, f)) return -1;
  return sscanf(line, "%ld %d %255s", n, e, text) == 3 ? 0 : -1;
}

int main(int argc, char** argv) {
  if (argc != 3) return fprintf(stderr, "usage: rsocket_hostile 127.X.Y PORT\n"), 2;
  snprintf(net, sizeof net, "%s", argv[1]);
  port = atoi(argv[2]);
  int pfd[2];
  if (pipe(pfd)) return 1;
  pid_t child = fork();
  if (child == 0) {
    close(pfd[0]);
    _exit(server(pfd[1]));
  }
  close(pfd[1]);
  FILE* rep = fdopen(pfd[0], "r");
  char line[64];
  if (!fgets(line, sizeof line, rep)) return fprintf(stderr, "FAIL: the server did not start\n"), 1;

  char addr[48];
  snprintf(addr, sizeof addr, "%s.2", net);
  setenv("SRDMA_ADDR", addr, 1);
  struct peer p;
  uint8_t pd[CONN_DATA];
  long n;
  int e;
  char text[256];

  /* 1, 2: refused before any connection exists. */
  good_conn_data(&p, pd);
  pd[0] = 2;
  CHECK(peer_connect(&p, pd, CONN_DATA) == RDMA_CM_EVENT_REJECTED, "version 2 private data was not rejected");
  peer_close(&p);
  CHECK(peer_connect(&p, pd, 8) == RDMA_CM_EVENT_REJECTED, "8 bytes of private data were not rejected");
  peer_close(&p);

  /* 3: the fake peer speaks the protocol. */
  memset(&p, 0, sizeof p);
  good_conn_data(&p, pd);
  int t = peer_connect(&p, pd, CONN_DATA);
  CHECK(t == RDMA_CM_EVENT_ESTABLISHED && p.buf_len >= 1024, "a good connect failed (event %d)", t);
  memcpy(p.buf, "hello", 5);
  CHECK(peer_write(&p, p.buf_addr, p.buf_key, 5, 1, OP(0, 5)) == IBV_WC_SUCCESS, "the DATA write failed");
  CHECK(read_report(rep, &n, &e, text) == 0 && n == 5 && !strcmp(text, "hello"),
        "the server did not read \"hello\" (%ld, errno %d, %s)", n, e, text);
  peer_close(&p);

  /* 4: a reserved operation in the immediate. */
  good_conn_data(&p, pd);
  t = peer_connect(&p, pd, CONN_DATA);
  CHECK(t == RDMA_CM_EVENT_ESTABLISHED, "connect 4 failed");
  peer_write(&p, p.buf_addr, p.buf_key, 0, 1, OP(5, 3));
  CHECK(read_report(rep, &n, &e, text) == 0 && n == -1 && e == EPROTO, "a reserved op: rrecv %ld errno %d", n, e);
  peer_close(&p);

  /* 5: DATA claiming more than the buffer advertised. */
  good_conn_data(&p, pd);
  t = peer_connect(&p, pd, CONN_DATA);
  CHECK(t == RDMA_CM_EVENT_ESTABLISHED, "connect 5 failed");
  peer_write(&p, p.buf_addr, p.buf_key, 0, 1, OP(0, 1 << 20));
  CHECK(read_report(rep, &n, &e, text) == 0 && n == -1 && e == EPROTO, "oversized DATA: rrecv %ld errno %d", n, e);
  peer_close(&p);

  /* 6: a write past the advertised buffer (the whole receive buffer is two
   * advertised halves): refused by the server's HCA, no data delivered. */
  good_conn_data(&p, pd);
  t = peer_connect(&p, pd, CONN_DATA);
  CHECK(t == RDMA_CM_EVENT_ESTABLISHED, "connect 6 failed");
  memset(p.buf, 0x5a, 64);
  int st = peer_write(&p, p.buf_addr + 2ull * p.buf_len, p.buf_key, 64, 1, OP(0, 64));
  CHECK(st == IBV_WC_REM_ACCESS_ERR, "a write past the buffer completed with status %d", st);
  peer_close(&p); /* DREQ: the server's rrecv ends */
  CHECK(read_report(rep, &n, &e, text) == 0 && n <= 0, "a write past the buffer: rrecv returned %ld (%s)", n, text);

  /* 7: an unknown control code. */
  good_conn_data(&p, pd);
  t = peer_connect(&p, pd, CONN_DATA);
  CHECK(t == RDMA_CM_EVENT_ESTABLISHED, "connect 7 failed");
  peer_write(&p, 0, 0, 0, 1, OP(7, 99));
  CHECK(read_report(rep, &n, &e, text) == 0 && n == -1 && e == EPROTO, "an unknown control code: rrecv %ld errno %d", n, e);
  peer_close(&p);

  int status = 0;
  CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "the server did not exit 0 (status %#x)", status);
  if (failures) return 1;
  printf("rsocket_hostile: 7 cases, all refused as they should be\n");
  return 0;
}
