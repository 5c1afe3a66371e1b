/* Both directions at once on one rsocket, from two threads per side: a
 * sender thread rsends BYTES of its side's pattern in varying sizes while a
 * receiver thread rrecvs the peer's and checks every byte. rsend and rrecv
 * then wait on the same CQ and completion channel at the same time (each
 * side's credits come back only as the other side reads). A server (a
 * child on 127.X.Y.1) and a client (this process on 127.X.Y.2); both must
 * exit 0.
 *
 *   rsocket_duplex 127.X.Y PORT BYTES
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <rdma/rsocket.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t total;

struct side {
  int fd;
  int me; /* 1 server, 2 client */
  int failed;
};

static uint8_t pattern(int who, uint64_t i) { return (uint8_t)(i * 13 + (i >> 11) + (uint64_t)who * 101); }

static void* sender(void* arg) {
  struct side* s = arg;
  static __thread uint8_t buf[1 << 18];
  uint64_t sent = 0;
  size_t step = 1;
  while (sent < total) {
    size_t n = step < total - sent ? step : (size_t)(total - sent);
    step = step * 5 + 3 > sizeof buf ? 1 : step * 5 + 3;
    for (size_t i = 0; i < n; i++) buf[i] = pattern(s->me, sent + i);
    size_t off = 0;
    while (off < n) {
      ssize_t w = rsend(s->fd, buf + off, n - off, 0);
      if (w <= 0) {
        fprintf(stderr, "side %d: rsend: %zd (%s)\n", s->me, w, strerror(errno));
        s->failed = 1;
        return NULL;
      }
      off += (size_t)w;
    }
    sent += n;
  }
  return NULL;
}

static void* receiver(void* arg) {
  struct side* s = arg;
  static __thread uint8_t buf[1 << 18];
  const int peer = 3 - s->me;
  uint64_t got = 0;
  while (got < total) {
    ssize_t r = rrecv(s->fd, buf, sizeof buf, 0);
    if (r <= 0) {
      fprintf(stderr, "side %d: rrecv: %zd after %llu bytes (%s)\n", s->me, r, (unsigned long long)got, strerror(errno));
      s->failed = 1;
      return NULL;
    }
    for (ssize_t i = 0; i < r; i++, got++)
      if (buf[i] != pattern(peer, got)) {
        fprintf(stderr, "side %d: byte %llu is %#x, not %#x\n", s->me, (unsigned long long)got, buf[i], pattern(peer, got));
        s->failed = 1;
        return NULL;
      }
  }
  return NULL;
}

static int run(int fd, int me) {
  struct side s = {.fd = fd, .me = me};
  pthread_t a, b;
  pthread_create(&a, NULL, sender, &s);
  pthread_create(&b, NULL, receiver, &s);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  return s.failed;
}

int main(int argc, char** argv) {
  if (argc != 4) return fprintf(stderr, "usage: rsocket_duplex 127.X.Y PORT BYTES\n"), 2;
  total = strtoull(argv[3], NULL, 0);
  char a[48], b[48];
  snprintf(a, sizeof a, "%s.1", argv[1]);
  snprintf(b, sizeof b, "%s.2", argv[1]);
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
  inet_pton(AF_INET, a, &sin.sin_addr);
  int ready[2];
  if (pipe(ready)) return 1;
  pid_t child = fork();
  if (child == 0) {
    setenv("SRDMA_ADDR", a, 1);
    int l = rsocket(AF_INET, SOCK_STREAM, 0);
    if (l < 0 || rbind(l, (struct sockaddr*)&sin, sizeof sin) || rlisten(l, 1)) _exit((perror("server"), 1));
    if (write(ready[1], "r", 1) != 1) _exit(1);
    int fd = raccept(l, NULL, NULL);
    if (fd < 0) _exit((perror("raccept"), 1));
    int failed = run(fd, 1);
    rshutdown(fd, SHUT_RDWR);
    rclose(fd);
    rclose(l);
    if (!failed) printf("server: %llu bytes each way, checked\n", (unsigned long long)total);
    fflush(stdout);
    _exit(failed);
  }
  char c;
  if (read(ready[0], &c, 1) != 1) return 1;
  setenv("SRDMA_ADDR", b, 1);
  int fd = rsocket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || rconnect(fd, (struct sockaddr*)&sin, sizeof sin)) return perror("client"), 1;
  int failed = run(fd, 2);
  rshutdown(fd, SHUT_RDWR);
  rclose(fd);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status)) failed = 1;
  if (failed) return fprintf(stderr, "FAIL: server status %#x\n", status), 1;
  printf("client: %llu bytes each way, checked\n", (unsigned long long)total);
  return 0;
}
