/*
 * rdmacm_errors: drives softrdma's librdmacm.so.1 through the RDMA CM's
 * error paths and checks that each fails the way librdmacm documents (-1
 * or NULL with errno), then that a connect nobody answers ends in the event
 * librdmacm gives: REJECTED with the IB CM's reason 8 (invalid service ID),
 * and for a UD ID's SIDR_REQ UNREACHABLE with SIDR status 1; a multicast
 * join's event and its refusals; rdma_getaddrinfo's answers (from hints
 * alone, from a node, passive) and its refusals; a loopback address bound
 * to the device.
 *
 * Plain C against <rdma/rdma_cma.h>, linked with -lrdmacm, run with
 * LD_LIBRARY_PATH pointing at softrdma's drop-in and SRDMA_ADDR set (it
 * talks to its own device). Exits 0 when every check holds; prints each.
 *
 * Teardown as librdmacm does it: rdma_destroy_id waits for the ack of an
 * event another thread holds, returns at once when the caller holds it
 * itself, and a thread waiting on a destroyed channel stays waiting.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

static int failures;

static void check(int ok, const char *what) {
  printf("%s: %s\n", ok ? "ok" : "FAIL", what);
  if (!ok) failures++;
}

/* A call that returns -1 failed with errno == want. */
static void check_err(int r, int want, const char *what) {
  int e = errno;
  char buf[240];
  snprintf(buf, sizeof buf, "%s -> -1, errno %s (got %d, %s)", what, strerror(want), r, strerror(e));
  check(r == -1 && e == want, buf);
}

static struct sockaddr_in ipv4(const char *ip, unsigned short port) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}

/* The next event on `ch` within `ms`, or NULL (and a failed check). */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, int ms, const char *what) {
  struct pollfd p = {.fd = ch->fd, .events = POLLIN};
  struct rdma_cm_event *e = NULL;
  if (poll(&p, 1, ms) != 1 || rdma_get_cm_event(ch, &e) != 0) {
    char buf[200];
    snprintf(buf, sizeof buf, "%s: an event within %d ms", what, ms);
    check(0, buf);
    return NULL;
  }
  return e;
}

static void expect_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want, int status,
                         const char *what) {
  struct rdma_cm_event *e = next_event(ch, 5000, what);
  if (!e) return;
  char buf[240];
  snprintf(buf, sizeof buf, "%s -> %s status %d (got %s status %d)", what, rdma_event_str(want), status,
           rdma_event_str(e->event), e->status);
  check(e->event == want && e->status == status, buf);
  rdma_ack_cm_event(e);
}

/* A thread's state letter from /proc (R, S, ...), or 0 once it is gone. */
static char thread_state(pid_t tid) {
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')');
  return p && p[1] == ' ' ? p[2] : 0;
}

/* A thread that runs one blocking call and records that it returned. */
struct blocker {
  pthread_t thread;
  volatile pid_t tid;
  volatile int done;
  int ret;
  struct rdma_cm_id *id;
  struct rdma_event_channel *ch;
};

static void *destroy_id_thread(void *arg) {
  struct blocker *b = arg;
  b->tid = (pid_t)syscall(SYS_gettid);
  b->ret = rdma_destroy_id(b->id);
  __atomic_store_n(&b->done, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

static void *get_event_thread(void *arg) {
  struct blocker *b = arg;
  struct rdma_cm_event *e = NULL;
  b->tid = (pid_t)syscall(SYS_gettid);
  b->ret = rdma_get_cm_event(b->ch, &e);
  __atomic_store_n(&b->done, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

/* Until the thread has returned or sleeps in its call (10 s at most). */
static void wait_blocked(struct blocker *b) {
  for (int i = 0; i < 100000 && !__atomic_load_n(&b->done, __ATOMIC_SEQ_CST); i++) {
    if (b->tid && thread_state(b->tid) == 'S') return;
    usleep(100);
  }
}

/* An ID with its ADDR_RESOLVED event taken and not acked. */
static struct rdma_cm_id *id_holding_event(struct rdma_event_channel *ch, const char *self,
                                           struct rdma_cm_event **held) {
  struct rdma_cm_id *id = NULL;
  struct sockaddr_in dst = ipv4(self, 7473);
  *held = NULL;
  if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) || rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
    return id;
  *held = next_event(ch, 5000, "rdma_resolve_addr");
  return id;
}

/* UD IDs (RDMA_PS_UDP): the QP type they take, the SIDR_REQ's room for
   private data, and a SIDR_REQ nobody listens for: UNREACHABLE with SIDR
   status 1 (service ID not supported), as the kernel's cma reports it. */
static void ud_checks(struct rdma_event_channel *ch, const char *self) {
  struct rdma_cm_id *ud = NULL;
  check(rdma_create_id(ch, &ud, NULL, RDMA_PS_UDP) == 0 && ud != NULL, "rdma_create_id (UDP port space)");
  if (!ud) return;
  check(ud->qp_type == IBV_QPT_UD, "an RDMA_PS_UDP ID's qp_type is UD");
  struct sockaddr_in nobody = ipv4(self, 7475);
  check(rdma_resolve_addr(ud, NULL, (struct sockaddr *)&nobody, 2000) == 0, "rdma_resolve_addr (UD)");
  expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0, "rdma_resolve_addr (UD)");
  check(rdma_resolve_route(ud, 2000) == 0, "rdma_resolve_route (UD)");
  expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, "rdma_resolve_route (UD)");
  struct ibv_qp_init_attr qa;
  memset(&qa, 0, sizeof qa);
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  check_err(rdma_create_qp(ud, NULL, &qa), EINVAL, "rdma_create_qp of an RC QP on a UD ID");
  qa.qp_type = IBV_QPT_UD;
  check(rdma_create_qp(ud, NULL, &qa) == 0, "rdma_create_qp of a UD QP");
  struct ibv_qp_attr attr;
  struct ibv_qp_init_attr init;
  check(ud->qp && ibv_query_qp(ud->qp, &attr, IBV_QP_STATE | IBV_QP_QKEY, &init) == 0 && attr.qp_state == IBV_QPS_RTS &&
            attr.qkey == RDMA_UDP_QKEY,
        "the UD QP is at RTS with Q_Key RDMA_UDP_QKEY");
  struct rdma_conn_param cp;
  memset(&cp, 0, sizeof cp);
  char big[181];
  memset(big, 0x5a, sizeof big);
  cp.private_data = big;
  cp.private_data_len = sizeof big;
  check_err(rdma_connect(ud, &cp), EINVAL, "rdma_connect (UD) with 181 bytes of private data (180 fit)");
  cp.private_data_len = 180;
  check(rdma_connect(ud, &cp) == 0, "rdma_connect (UD) with 180 bytes of private data");
  expect_event(ch, RDMA_CM_EVENT_UNREACHABLE, 1, "the SIDR_REQ to a port nobody listens on");

  rdma_destroy_qp(ud);
  check(rdma_destroy_id(ud) == 0, "rdma_destroy_id of the UD ID");

  /* SIDR to ourselves: a UD listener rejects the first request (UNREACHABLE,
     SIDR status 2, its private data) and accepts the second (ESTABLISHED
     with the listener's QPN, RDMA_UDP_QKEY and an AH to it). */
  struct rdma_cm_id *l = NULL, *c = NULL;
  struct sockaddr_in where = ipv4(self, 7476);
  check(rdma_create_id(ch, &l, NULL, RDMA_PS_UDP) == 0 && rdma_bind_addr(l, (struct sockaddr *)&where) == 0 &&
            rdma_listen(l, 1) == 0,
        "a UD listener");
  for (int round = 0; round < 2 && l; round++) {
    c = NULL;
    check(rdma_create_id(ch, &c, NULL, RDMA_PS_UDP) == 0 && rdma_resolve_addr(c, NULL, (struct sockaddr *)&where, 2000) == 0,
          "a UD requester");
    expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0, "rdma_resolve_addr (UD requester)");
    rdma_resolve_route(c, 2000);
    expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, "rdma_resolve_route (UD requester)");
    struct ibv_qp_init_attr cqa = qa;
    cqa.send_cq = cqa.recv_cq = NULL;
    check(rdma_create_qp(c, NULL, &cqa) == 0, "the requester's UD QP");
    memset(&cp, 0, sizeof cp);
    cp.private_data = "hello";
    cp.private_data_len = 6;
    check(rdma_connect(c, &cp) == 0, "rdma_connect (UD, to our own listener)");
    struct rdma_cm_event *req = next_event(ch, 5000, "the SIDR_REQ's CONNECT_REQUEST");
    if (!req) break;
    struct rdma_cm_id *n = req->id;
    check(req->event == RDMA_CM_EVENT_CONNECT_REQUEST && req->listen_id == l && n->qp_type == IBV_QPT_UD &&
              req->param.ud.private_data_len == 180 && memcmp(req->param.ud.private_data, "hello", 6) == 0,
          "CONNECT_REQUEST on a new UD ID with the requester's private data (180 bytes)");
    rdma_ack_cm_event(req);
    if (round == 0) {
      check(rdma_reject(n, "no", 3) == 0, "rdma_reject (UD)");
      struct rdma_cm_event *e = next_event(ch, 5000, "the SIDR_REP's answer");
      if (e) {
        check(e->event == RDMA_CM_EVENT_UNREACHABLE && e->status == 2 && e->id == c &&
                  memcmp(e->param.ud.private_data, "no", 3) == 0,
              "rdma_reject -> UNREACHABLE status 2 (SIDR rejected) with the reject's private data");
        rdma_ack_cm_event(e);
      }
    } else {
      struct ibv_qp_init_attr nqa = qa;
      nqa.send_cq = nqa.recv_cq = NULL;
      check(rdma_create_qp(n, NULL, &nqa) == 0, "the listener's UD QP");
      memset(&cp, 0, sizeof cp);
      check(rdma_accept(n, &cp) == 0, "rdma_accept (UD) returns at once");
      struct rdma_cm_event *e = next_event(ch, 5000, "the SIDR_REP's answer");
      if (e) {
        static const uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        check(e->event == RDMA_CM_EVENT_ESTABLISHED && e->id == c && n->qp && e->param.ud.qp_num == n->qp->qp_num &&
                  e->param.ud.qkey == RDMA_UDP_QKEY && e->param.ud.ah_attr.is_global &&
                  memcmp(e->param.ud.ah_attr.grh.dgid.raw, gid, 12) == 0,
              "ESTABLISHED with the listener's QPN, RDMA_UDP_QKEY and an AH to its IPv4-mapped GID");
        rdma_ack_cm_event(e);
      }
      rdma_destroy_qp(n);
    }
    rdma_destroy_id(n);
    rdma_destroy_qp(c);
    rdma_destroy_id(c);
  }
  if (l) rdma_destroy_id(l);

  /* Multicast: a UD ID only, a group address only, leave only what was joined. */
  ud = NULL;
  struct sockaddr_in group = ipv4("239.201.0.7", 0), unicast = ipv4(self, 0);
  check(rdma_create_id(ch, &ud, NULL, RDMA_PS_UDP) == 0 && ud, "a UD ID for multicast");
  if (!ud) return;
  check(rdma_bind_addr(ud, (struct sockaddr *)&unicast) == 0, "rdma_bind_addr (UD)");
  qa.send_cq = qa.recv_cq = NULL; /* the last call wrote back the CQs it made, gone with its QP */
  check(rdma_create_qp(ud, NULL, &qa) == 0, "rdma_create_qp of a UD QP for multicast");
  check_err(rdma_join_multicast(ud, (struct sockaddr *)&unicast, NULL), EINVAL, "rdma_join_multicast of a unicast address");
  check_err(rdma_leave_multicast(ud, (struct sockaddr *)&group), EADDRNOTAVAIL, "rdma_leave_multicast of a group not joined");
  int tag = 0;
  check(rdma_join_multicast(ud, (struct sockaddr *)&group, &tag) == 0, "rdma_join_multicast of 239.201.0.7");
  struct rdma_cm_event *e = next_event(ch, 5000, "rdma_join_multicast");
  if (e) {
    static const uint8_t mgid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 201, 0, 7};
    check(e->event == RDMA_CM_EVENT_MULTICAST_JOIN && e->param.ud.qp_num == 0xFFFFFF &&
              e->param.ud.qkey == RDMA_UDP_QKEY && e->param.ud.private_data == &tag &&
              memcmp(e->param.ud.ah_attr.grh.dgid.raw, mgid, 16) == 0,
          "MULTICAST_JOIN: QPN 0xFFFFFF, RDMA_UDP_QKEY, the MGID ::ffff:239.201.0.7, the join's context");
    rdma_ack_cm_event(e);
  }
  check_err(rdma_join_multicast(ud, (struct sockaddr *)&group, NULL), EADDRINUSE, "rdma_join_multicast of a group joined");
  check(rdma_leave_multicast(ud, (struct sockaddr *)&group) == 0, "rdma_leave_multicast");
  struct rdma_cm_id *rc = NULL;
  if (rdma_create_id(ch, &rc, NULL, RDMA_PS_TCP) == 0) {
    check_err(rdma_resolve_addr(rc, NULL, (struct sockaddr *)&group, 2000), EINVAL,
              "rdma_resolve_addr of a group on an RC ID");
    rdma_destroy_id(rc);
  }

  rdma_destroy_qp(ud);
  check(rdma_destroy_id(ud) == 0, "rdma_destroy_id of the UD ID");
}

/* A loopback address binds to the device, as the kernel's CM binds one to
 * its first device; the ID then names the device's own address, one a peer
 * can reach. */
static void loopback_bind_checks(struct rdma_event_channel *ch, const char *self) {
  struct rdma_cm_id *lo = NULL;
  check(rdma_create_id(ch, &lo, NULL, RDMA_PS_TCP) == 0, "rdma_create_id for a loopback bind");
  if (!lo) return;
  struct sockaddr_in any_lo = ipv4("127.250.250.250", 0);
  check(rdma_bind_addr(lo, (struct sockaddr *)&any_lo) == 0, "rdma_bind_addr of a loopback address");
  const struct sockaddr_in *name = (const struct sockaddr_in *)rdma_get_local_addr(lo);
  struct sockaddr_in want = ipv4(self, 0);
  check(name->sin_family == AF_INET && name->sin_addr.s_addr == want.sin_addr.s_addr,
        "a loopback-bound ID names the device's address");
  check(rdma_get_src_port(lo) != 0, "a loopback-bound ID on port 0 gets a port");
  check(rdma_listen(lo, 1) == 0, "rdma_listen on a loopback-bound ID");
  rdma_destroy_id(lo);

  /* IPv6 addresses that are IPv4 ones in disguise bind as a dual-stack
   * socket's would (::, ::1, ::ffff:a.b.c.d); a real IPv6 one is refused. */
  const char *six[] = {"::", "::1", NULL};
  char mapped[64];
  snprintf(mapped, sizeof mapped, "::ffff:%s", self);
  for (int i = 0; i < 3; i++) {
    const char *text = six[i] ? six[i] : mapped;
    struct sockaddr_in6 a = {.sin6_family = AF_INET6};
    inet_pton(AF_INET6, text, &a.sin6_addr);
    struct rdma_cm_id *v6 = NULL;
    check(rdma_create_id(ch, &v6, NULL, RDMA_PS_TCP) == 0, "rdma_create_id for an IPv6 bind");
    if (!v6) continue;
    char what[96];
    snprintf(what, sizeof what, "rdma_bind_addr of [%s]", text);
    check(rdma_bind_addr(v6, (struct sockaddr *)&a) == 0, what);
    rdma_destroy_id(v6);
  }
  struct rdma_cm_id *real6 = NULL;
  check(rdma_create_id(ch, &real6, NULL, RDMA_PS_TCP) == 0, "rdma_create_id for a real IPv6 bind");
  if (real6) {
    struct sockaddr_in6 a = {.sin6_family = AF_INET6};
    inet_pton(AF_INET6, "2001:db8::1", &a.sin6_addr);
    check_err(rdma_bind_addr(real6, (struct sockaddr *)&a), EAFNOSUPPORT, "rdma_bind_addr of [2001:db8::1]");
    rdma_destroy_id(real6);
  }
}

/* rdma_getaddrinfo as librdmacm answers it. */
static void addrinfo_checks(const char *self) {
  struct rdma_addrinfo *res = NULL;
  check_err(rdma_getaddrinfo(NULL, NULL, NULL, &res), EINVAL, "rdma_getaddrinfo with no node, service or hints");
  struct sockaddr_in dst = ipv4(self, 7471), src = ipv4(self, 0);
  struct rdma_addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_port_space = RDMA_PS_TCP;
  hints.ai_dst_addr = (struct sockaddr *)&dst;
  hints.ai_dst_len = sizeof dst;
  hints.ai_src_addr = (struct sockaddr *)&src;
  hints.ai_src_len = sizeof src;
  /* Neither node nor service: the hints' addresses are the answer. */
  if (rdma_getaddrinfo(NULL, NULL, &hints, &res) == 0 && res) {
    check(res->ai_dst_addr && res->ai_dst_len == sizeof dst && memcmp(res->ai_dst_addr, &dst, sizeof dst) == 0,
          "rdma_getaddrinfo from hints alone gives the hints' destination");
    check(res->ai_src_addr && memcmp(res->ai_src_addr, &src, sizeof src) == 0,
          "rdma_getaddrinfo from hints alone gives the hints' source");
    check(res->ai_qp_type == IBV_QPT_RC && res->ai_port_space == RDMA_PS_TCP, "RC in the TCP port space by default");
    rdma_freeaddrinfo(res);
  } else {
    check(0, "rdma_getaddrinfo from hints alone");
  }
  /* A node: the destination is looked up, the hints' source kept. */
  res = NULL;
  if (rdma_getaddrinfo(self, "7471", &hints, &res) == 0 && res) {
    check(res->ai_dst_addr && memcmp(res->ai_dst_addr, &dst, sizeof dst) == 0, "rdma_getaddrinfo of node and service");
    check(res->ai_src_addr && memcmp(res->ai_src_addr, &src, sizeof src) == 0, "the hints' source is copied");
    rdma_freeaddrinfo(res);
  } else {
    check(0, "rdma_getaddrinfo of node and service");
  }
  /* Passive: the node is the source. */
  struct rdma_addrinfo passive;
  memset(&passive, 0, sizeof passive);
  passive.ai_flags = RAI_PASSIVE;
  res = NULL;
  if (rdma_getaddrinfo(self, "7471", &passive, &res) == 0 && res) {
    check(res->ai_src_addr && memcmp(res->ai_src_addr, &dst, sizeof dst) == 0 && !res->ai_dst_addr,
          "rdma_getaddrinfo with RAI_PASSIVE gives the source only");
    rdma_freeaddrinfo(res);
  } else {
    check(0, "rdma_getaddrinfo with RAI_PASSIVE");
  }
  /* Hints that are not whole IPv4 addresses are refused. */
  struct sockaddr_in6 six;
  memset(&six, 0, sizeof six);
  six.sin6_family = AF_INET6;
  hints.ai_src_addr = (struct sockaddr *)&six;
  hints.ai_src_len = sizeof six;
  check_err(rdma_getaddrinfo(NULL, NULL, &hints, &res), EAFNOSUPPORT, "rdma_getaddrinfo with an IPv6 source hint");
  hints.ai_src_addr = (struct sockaddr *)&src;
  hints.ai_src_len = 4;
  check_err(rdma_getaddrinfo(NULL, NULL, &hints, &res), EAFNOSUPPORT, "rdma_getaddrinfo with a truncated source hint");
}

static void teardown_checks(struct rdma_event_channel *ch, const char *self) {
  struct rdma_cm_event *held = NULL;

  /* Another thread's rdma_destroy_id waits for our ack. */
  struct blocker b = {.ch = ch};
  b.id = id_holding_event(ch, self, &held);
  check(held && held->event == RDMA_CM_EVENT_ADDR_RESOLVED, "an ADDR_RESOLVED event, held");
  if (!held) return;
  pthread_create(&b.thread, NULL, destroy_id_thread, &b);
  wait_blocked(&b);
  check(!__atomic_load_n(&b.done, __ATOMIC_SEQ_CST), "rdma_destroy_id waits while another thread holds its event");
  check(rdma_ack_cm_event(held) == 0, "rdma_ack_cm_event of the held event");
  pthread_join(b.thread, NULL);
  check(b.done && b.ret == 0, "rdma_destroy_id returns 0 after the ack");
  check_err(rdma_ack_cm_event(held), EINVAL, "rdma_ack_cm_event of an event acked already");

  /* The thread holding the event destroys the ID itself: no wait, and its ack still works. */
  struct rdma_cm_id *own = id_holding_event(ch, self, &held);
  check(held != NULL, "a second ADDR_RESOLVED event, held");
  if (!held) return;
  check(rdma_destroy_id(own) == 0, "rdma_destroy_id by the thread holding the ID's event");
  check(rdma_ack_cm_event(held) == 0, "rdma_ack_cm_event after the ID was destroyed");

  /* A thread waiting on a channel that is destroyed keeps waiting (as a read() on librdmacm's closed fd). */
  struct blocker w = {.ch = rdma_create_event_channel()};
  check(w.ch != NULL, "a second event channel");
  if (!w.ch) return;
  pthread_create(&w.thread, NULL, get_event_thread, &w);
  wait_blocked(&w);
  check(!__atomic_load_n(&w.done, __ATOMIC_SEQ_CST), "rdma_get_cm_event waits on an empty channel");
  rdma_destroy_event_channel(w.ch);
  check(thread_state(w.tid) == 'S' && !__atomic_load_n(&w.done, __ATOMIC_SEQ_CST),
        "a thread waiting on a destroyed channel is not woken with an error");
  pthread_detach(w.thread); /* it waits until the process exits */
}

int main(void) {
  const char *self = getenv("SRDMA_ADDR");
  if (!self) {
    fprintf(stderr, "rdmacm_errors: set SRDMA_ADDR (the device's address)\n");
    return 2;
  }
  struct rdma_event_channel *ch = rdma_create_event_channel();
  check(ch != NULL, "rdma_create_event_channel");
  if (!ch) return 1;

  addrinfo_checks(self);

  /* Creating IDs. */
  check_err(rdma_create_id(ch, NULL, NULL, RDMA_PS_TCP), EINVAL, "rdma_create_id with no ID pointer");
  struct rdma_cm_id *bad = NULL;
  check_err(rdma_create_id(ch, &bad, NULL, (enum rdma_port_space)0x7777), EINVAL,
            "rdma_create_id in an unknown port space");

  struct rdma_cm_id *id = NULL;
  check(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0 && id != NULL, "rdma_create_id (TCP port space)");
  if (!id) return 1;

  /* Binding. */
  check_err(rdma_bind_addr(id, NULL), EINVAL, "rdma_bind_addr of NULL");
  struct sockaddr_un unix_addr = {.sun_family = AF_UNIX};
  check_err(rdma_bind_addr(id, (struct sockaddr *)&unix_addr), EAFNOSUPPORT, "rdma_bind_addr of an AF_UNIX address");
  struct sockaddr_in elsewhere = ipv4("192.0.2.250", 7471);
  check_err(rdma_bind_addr(id, (struct sockaddr *)&elsewhere), EADDRNOTAVAIL,
            "rdma_bind_addr of an address no device has");
  loopback_bind_checks(ch, self);
  struct sockaddr_in mine = ipv4(self, 7471);
  check(rdma_bind_addr(id, (struct sockaddr *)&mine) == 0, "rdma_bind_addr of the device's address");
  check_err(rdma_bind_addr(id, (struct sockaddr *)&mine), EINVAL, "rdma_bind_addr of an ID already bound");
  struct rdma_cm_id *twin = NULL;
  check(rdma_create_id(ch, &twin, NULL, RDMA_PS_TCP) == 0, "a second rdma_create_id");
  check_err(rdma_bind_addr(twin, (struct sockaddr *)&mine), EADDRINUSE, "rdma_bind_addr of a port in use");
  check(rdma_get_src_port(id) == htons(7471), "rdma_get_src_port gives the bound port");

  /* Calls in the wrong state. */
  struct rdma_conn_param cp;
  memset(&cp, 0, sizeof cp);
  check_err(rdma_connect(id, &cp), EINVAL, "rdma_connect before the route is resolved");
  check_err(rdma_accept(id, &cp), EINVAL, "rdma_accept on an ID that has no connection request");
  check_err(rdma_resolve_route(twin, 1000), EINVAL, "rdma_resolve_route before the address is resolved");
  check_err(rdma_resolve_addr(twin, NULL, NULL, 1000), EINVAL, "rdma_resolve_addr with no destination");
  check_err(rdma_get_cm_event(ch, NULL), EINVAL, "rdma_get_cm_event with no event pointer");
  check_err(rdma_ack_cm_event(NULL), EINVAL, "rdma_ack_cm_event of NULL");
  /* As the kernel's ucma: an unknown level is ENOSYS, a TOS not a uint8_t EINVAL. */
  int tos = 0;
  check_err(rdma_set_option(id, 0x7777, RDMA_OPTION_ID_TOS, &tos, sizeof tos), ENOSYS,
            "rdma_set_option at an unknown level");
  check_err(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos), EINVAL,
            "rdma_set_option of a TOS that is an int");
  unsigned char tos8 = 0;
  check(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos8, sizeof tos8) == 0, "rdma_set_option of a TOS");
  check(strcmp(rdma_event_str((enum rdma_cm_event_type)0x7777), "UNKNOWN EVENT") == 0,
        "rdma_event_str of an unknown event");

  /* A connect nobody answers: our own device, a port nobody listens on. */
  struct sockaddr_in nobody = ipv4(self, 7472);
  check(rdma_resolve_addr(twin, NULL, (struct sockaddr *)&nobody, 2000) == 0, "rdma_resolve_addr of our own address");
  expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0, "rdma_resolve_addr");
  check(rdma_resolve_route(twin, 2000) == 0, "rdma_resolve_route");
  expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, "rdma_resolve_route");
  /* No QP on the ID: the REQ names the QP in qp_num (a QP-less connect). */
  check_err(rdma_connect(twin, &cp), EINVAL, "rdma_connect with no QP and no qp_num");
  cp.qp_num = 0x123;
  char big[57];
  memset(big, 0x5a, sizeof big);
  cp.private_data = big;
  cp.private_data_len = sizeof big;
  check_err(rdma_connect(twin, &cp), EINVAL, "rdma_connect with 57 bytes of private data (56 fit on RoCE)");
  cp.private_data_len = 56;
  check(rdma_connect(twin, &cp) == 0, "rdma_connect with 56 bytes of private data");
  expect_event(ch, RDMA_CM_EVENT_REJECTED, 8, "the connect to a port nobody listens on");

  ud_checks(ch, self);
  teardown_checks(ch, self);

  check(rdma_destroy_id(twin) == 0, "rdma_destroy_id of the refused ID");
  check(rdma_destroy_id(id) == 0, "rdma_destroy_id of the bound ID");
  rdma_destroy_event_channel(ch);
  if (failures) {
    printf("FAILED: %d\n", failures);
    return 1;
  }
  printf("PASS\n");
  return 0;
}
