/* Plain BSD sockets, nothing of RDMA: run under librdmacm's librspreload.so
 * it goes over rsockets unchanged. The client sends BYTES of a pattern in
 * writes of varying sizes (poll() before each, half of them non-blocking),
 * the server checks every byte as it reads and answers the count and an
 * FNV-1a hash of what it read; the client compares both with its own. Exits
 * 0 only when they match.
 *
 *   stream_check server ADDR PORT BYTES
 *   stream_check client ADDR PORT BYTES
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static uint8_t pattern(uint64_t i) { return (uint8_t)(i * 131 + (i >> 9) + 7); }
static uint64_t fnv(uint64_t h, uint8_t b) { return (h ^ b) * 1099511628211ull; }

static int full_write(int fd, const void* p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p = (const char*)p + w;
    n -= (size_t)w;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 5) return fprintf(stderr, "usage: stream_check server|client ADDR PORT BYTES\n"), 2;
  const int is_server = !strcmp(argv[1], "server");
  const uint64_t total = strtoull(argv[4], NULL, 0);
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3]))};
  if (inet_pton(AF_INET, argv[2], &sin.sin_addr) != 1) return fprintf(stderr, "bad address\n"), 2;
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return perror("socket"), 1;
  int one = 1;
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  static uint8_t buf[1 << 20];
  if (is_server) {
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, (struct sockaddr*)&sin, sizeof sin) || listen(s, 1)) return perror("bind/listen"), 1;
    int c = accept(s, NULL, NULL);
    if (c < 0) return perror("accept"), 1;
    uint64_t got = 0, h = 1469598103934665603ull;
    while (got < total) {
      ssize_t r = read(c, buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return fprintf(stderr, "server: read %zd after %llu bytes: %s\n", r, (unsigned long long)got, strerror(errno)), 1;
      for (ssize_t i = 0; i < r; i++, got++) {
        if (buf[i] != pattern(got))
          return fprintf(stderr, "server: byte %llu is %#x, not %#x\n", (unsigned long long)got, buf[i], pattern(got)), 1;
        h = fnv(h, buf[i]);
      }
    }
    uint64_t answer[2] = {got, h};
    if (full_write(c, answer, sizeof answer)) return perror("server: write"), 1;
    char eof;
    (void)!read(c, &eof, 1); /* the client closes first */
    close(c);
    close(s);
    printf("server: %llu bytes checked\n", (unsigned long long)got);
    return 0;
  }
  if (connect(s, (struct sockaddr*)&sin, sizeof sin)) return perror("connect"), 1;
  uint64_t sent = 0, h = 1469598103934665603ull;
  size_t step = 1;
  int flags = fcntl(s, F_GETFL);
  while (sent < total) {
    size_t n = step < total - sent ? step : (size_t)(total - sent);
    step = step * 3 + 1 > sizeof buf ? 1 : step * 3 + 1; /* 1, 4, 13, ... up to 1 MiB */
    for (size_t i = 0; i < n; i++) buf[i] = pattern(sent + i);
    const int nonblock = (sent / 7) & 1;
    fcntl(s, F_SETFL, nonblock ? flags | O_NONBLOCK : flags);
    size_t off = 0;
    while (off < n) {
      struct pollfd p = {.fd = s, .events = POLLOUT};
      if (poll(&p, 1, 10000) != 1) return fprintf(stderr, "client: poll: not writable\n"), 1;
      ssize_t w = write(s, buf + off, n - off);
      if (w < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (w <= 0) return perror("client: write"), 1;
      off += (size_t)w;
    }
    for (size_t i = 0; i < n; i++) h = fnv(h, buf[i]);
    sent += n;
  }
  fcntl(s, F_SETFL, flags);
  uint64_t answer[2];
  size_t got = 0;
  while (got < sizeof answer) {
    ssize_t r = read(s, (char*)answer + got, sizeof answer - got);
    if (r <= 0) return fprintf(stderr, "client: no answer (%zd)\n", r), 1;
    got += (size_t)r;
  }
  close(s);
  if (answer[0] != sent || answer[1] != h)
    return fprintf(stderr, "client: server read %llu bytes hash %llx, sent %llu hash %llx\n", (unsigned long long)answer[0],
                   (unsigned long long)answer[1], (unsigned long long)sent, (unsigned long long)h), 1;
  printf("client: %llu bytes sent and confirmed\n", (unsigned long long)sent);
  return 0;
}
