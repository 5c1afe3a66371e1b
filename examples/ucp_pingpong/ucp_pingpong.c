/*
 * ucp_pingpong: a UCP program (UCX 1.13's API, nothing softrdma-specific)
 * between two processes, with its data checked: the client PUTs 1 MiB into
 * a buffer the server registered (ucp_mem_map, an rkey sent over TCP), then
 * tags the pattern's checksum to the server, which checks every byte; then
 * N tagged 4 KiB messages go back and forth, each one's bytes checked on
 * both sides. Workers' addresses and the rkey travel over one TCP
 * connection; everything else goes over UCX's transports (UCX_TLS,
 * UCX_NET_DEVICES: rc_verbs/ud_verbs on srdma0 when run on softrdma's
 * libibverbs.so.1).
 *
 *   ucp_pingpong -a ADDR -p PORT [-n N]            server: listens on ADDR:PORT (TCP)
 *   ucp_pingpong -a ADDR -p PORT [-n N] SERVER     client
 *
 * Exits 0 when every check holds, printing "ucp_pingpong: ok ...".
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

enum { PUT_BYTES = 1 << 20, MSG = 4096 };
static const ucp_tag_t TAG_SUM = 1, TAG_PING = 2, TAG_PONG = 3;

static ucp_worker_h worker;

static int die(const char *what) {
  fprintf(stderr, "ucp_pingpong: FAIL: %s\n", what);
  exit(1);
}

static void tcp_all(int fd, void *buf, size_t len, int send_it) {
  char *p = buf;
  while (len) {
    ssize_t n = send_it ? send(fd, p, len, 0) : recv(fd, p, len, MSG_WAITALL);
    if (n <= 0) die(send_it ? "TCP send" : "TCP recv");
    p += n;
    len -= (size_t)n;
  }
}
static void tcp_blob_send(int fd, const void *buf, uint32_t len) {
  tcp_all(fd, &len, sizeof len, 1);
  tcp_all(fd, (void *)buf, len, 1);
}
static void *tcp_blob_recv(int fd, uint32_t *len) {
  tcp_all(fd, len, sizeof *len, 0);
  if (*len > (1u << 20)) die("TCP blob too large");
  void *b = malloc(*len);
  tcp_all(fd, b, *len, 0);
  return b;
}

/* Waits for a request (or an immediate status), bounded by progress count. */
static void wait_req(void *req, const char *what) {
  if (req == NULL) return;
  if (UCS_PTR_IS_ERR(req)) die(what);
  ucs_status_t st;
  long spins = 0;
  while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
    ucp_worker_progress(worker);
    if (++spins > 2000000000L) die(what);
  }
  ucp_request_free(req);
  if (st != UCS_OK) die(what);
}

static void tag_send(ucp_ep_h ep, const void *buf, size_t len, ucp_tag_t tag) {
  ucp_request_param_t p = {0};
  wait_req(ucp_tag_send_nbx(ep, buf, len, tag, &p), "ucp_tag_send_nbx");
}
static void tag_recv(void *buf, size_t len, ucp_tag_t tag) {
  ucp_request_param_t p = {0};
  wait_req(ucp_tag_recv_nbx(worker, buf, len, tag, (ucp_tag_t)-1, &p), "ucp_tag_recv_nbx");
}

static uint64_t pattern_sum(const uint8_t *b, size_t len) {
  uint64_t s = 1469598103934665603ull;
  for (size_t i = 0; i < len; i++) s = (s ^ b[i]) * 1099511628211ull;
  return s;
}

int main(int argc, char **argv) {
  const char *addr = "127.0.0.1", *server = NULL;
  int port = 0, n = 200, opt;
  while ((opt = getopt(argc, argv, "a:p:n:")) != -1) {
    if (opt == 'a') addr = optarg;
    else if (opt == 'p') port = atoi(optarg);
    else if (opt == 'n') n = atoi(optarg);
    else return 2;
  }
  if (optind < argc) server = argv[optind];
  if (port <= 0 || n <= 0) return 2;

  ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA};
  ucp_context_h ctx;
  if (ucp_init(&params, NULL, &ctx) != UCS_OK) die("ucp_init");
  ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE, .thread_mode = UCS_THREAD_MODE_SINGLE};
  if (ucp_worker_create(ctx, &wp, &worker) != UCS_OK) die("ucp_worker_create");
  ucp_address_t *my_addr;
  size_t my_len;
  if (ucp_worker_get_address(worker, &my_addr, &my_len) != UCS_OK) die("ucp_worker_get_address");

  /* One TCP connection for the addresses and the rkey. */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, server ? server : addr, &sa.sin_addr) != 1) die("address");
  if (!server) {
    int one = 1, lfd = fd;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, 1)) die("bind/listen");
    printf("ucp_pingpong: waiting for a client on %s:%d\n", addr, port);
    fflush(stdout);
    fd = accept(lfd, NULL, NULL);
    close(lfd);
    if (fd < 0) die("accept");
  } else if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
    die("connect");
  }
  tcp_blob_send(fd, my_addr, (uint32_t)my_len);
  uint32_t peer_len;
  void *peer_addr = tcp_blob_recv(fd, &peer_len);
  ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = peer_addr};
  ucp_ep_h ep;
  if (ucp_ep_create(worker, &ep_params, &ep) != UCS_OK) die("ucp_ep_create");

  uint8_t *msg = malloc(MSG), *back = malloc(MSG);
  if (!server) {
    /* The PUT target: registered, its rkey and address to the client. */
    uint8_t *target = calloc(1, PUT_BYTES);
    ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                               .address = target, .length = PUT_BYTES};
    ucp_mem_h memh;
    void *rkey_buf;
    size_t rkey_len;
    if (ucp_mem_map(ctx, &mp, &memh) != UCS_OK || ucp_rkey_pack(ctx, memh, &rkey_buf, &rkey_len) != UCS_OK)
      die("ucp_mem_map / ucp_rkey_pack");
    uint64_t where = (uintptr_t)target;
    tcp_blob_send(fd, rkey_buf, (uint32_t)rkey_len);
    tcp_all(fd, &where, sizeof where, 1);
    uint64_t sum = 0;
    tag_recv(&sum, sizeof sum, TAG_SUM);
    if (sum != pattern_sum(target, PUT_BYTES)) die("the PUT's 1 MiB differs from the client's pattern");
    for (int i = 0; i < n; i++) {
      tag_recv(msg, MSG, TAG_PING);
      for (int k = 0; k < MSG; k++)
        if (msg[k] != (uint8_t)(i * 31 + k)) die("a ping's bytes");
      for (int k = 0; k < MSG; k++) msg[k] = (uint8_t)~msg[k];
      tag_send(ep, msg, MSG, TAG_PONG);
    }
    ucp_rkey_buffer_release(rkey_buf);
    ucp_mem_unmap(ctx, memh);
    printf("ucp_pingpong: ok: 1 MiB PUT checked, %d x %d B tagged round trips checked\n", n, MSG);
  } else {
    uint32_t rkey_len;
    void *rkey_buf = tcp_blob_recv(fd, &rkey_len);
    uint64_t where;
    tcp_all(fd, &where, sizeof where, 0);
    ucp_rkey_h rkey;
    if (ucp_ep_rkey_unpack(ep, rkey_buf, &rkey) != UCS_OK) die("ucp_ep_rkey_unpack");
    uint8_t *src = malloc(PUT_BYTES);
    for (size_t i = 0; i < PUT_BYTES; i++) src[i] = (uint8_t)(i * 7 + (i >> 12));
    ucp_request_param_t p = {0};
    wait_req(ucp_put_nbx(ep, src, PUT_BYTES, where, rkey, &p), "ucp_put_nbx");
    wait_req(ucp_ep_flush_nbx(ep, &p), "ucp_ep_flush_nbx");
    uint64_t sum = pattern_sum(src, PUT_BYTES);
    tag_send(ep, &sum, sizeof sum, TAG_SUM);
    for (int i = 0; i < n; i++) {
      for (int k = 0; k < MSG; k++) msg[k] = (uint8_t)(i * 31 + k);
      ucp_request_param_t rp = {0};
      void *r = ucp_tag_recv_nbx(worker, back, MSG, TAG_PONG, (ucp_tag_t)-1, &rp);
      tag_send(ep, msg, MSG, TAG_PING);
      wait_req(r, "ucp_tag_recv_nbx (pong)");
      for (int k = 0; k < MSG; k++) {
        const uint8_t want = (uint8_t)(msg[k] ^ 0xFFu);
        if (back[k] != want) die("a pong's bytes");
      }
    }
    ucp_rkey_destroy(rkey);
    printf("ucp_pingpong: ok: 1 MiB PUT, %d x %d B tagged round trips checked\n", n, MSG);
  }
  /* Both sides done before either closes: one byte each way on TCP. */
  char done = 1;
  tcp_all(fd, &done, 1, 1);
  tcp_all(fd, &done, 1, 0);
  ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
  void *cr = ucp_ep_close_nbx(ep, &cp);
  if (cr && !UCS_PTR_IS_ERR(cr)) {
    while (ucp_request_check_status(cr) == UCS_INPROGRESS) ucp_worker_progress(worker);
    ucp_request_free(cr);
  }
  close(fd);
  ucp_worker_release_address(worker, my_addr);
  ucp_worker_destroy(worker);
  ucp_cleanup(ctx);
  return 0;
}
