// exp1: SO_REUSEPORT + SO_ATTACH_REUSEPORT_CBPF on UDP 127.0.0.1:PORT.
// One process, N sockets in one reuseport group (join order = index).
//  A. program "return payload[5]" : does payload byte 5 (BTH DestQP top byte)
//     pick the socket?  -> the cBPF input starts at the UDP payload.
//  B. program "return len - 100"  : payload length 100+i -> socket i?
//     -> `len` is the UDP payload length (no UDP header).
//  C. index >= N: where do packets go (hash fallback?), from 64 source ports.
// Usage: exp1_cbpf [N] [port]
#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef SO_ATTACH_REUSEPORT_CBPF
#define SO_ATTACH_REUSEPORT_CBPF 51
#endif

static int port = 4791;

static int member(void) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0), on = 1;
  if (setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on)) { perror("SO_REUSEPORT"); exit(1); }
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(0x7f000001)};
  if (bind(s, (void *)&a, sizeof a)) { perror("bind"); exit(1); }
  return s;
}

static int attach(int s, struct sock_filter *f, int n) {
  struct sock_fprog p = {.len = n, .filter = f};
  if (setsockopt(s, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &p, sizeof p)) { perror("SO_ATTACH_REUSEPORT_CBPF"); return -1; }
  return 0;
}

static void sendp(int sport, const unsigned char *buf, int len) {
  int c = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in me = {.sin_family = AF_INET, .sin_port = htons(sport), .sin_addr.s_addr = htonl(0x7f000001)};
  if (sport && bind(c, (void *)&me, sizeof me)) perror("bind src");
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(0x7f000001)};
  if (sendto(c, buf, len, 0, (void *)&a, sizeof a) != len) perror("sendto");
  close(c);
}

// Which socket got a datagram? returns index or -1; *len = its length.
static int who(int *s, int n, int *len, unsigned char *out) {
  for (int tries = 0; tries < 1000; tries++) {
    for (int i = 0; i < n; i++) {
      int r = recv(s[i], out, 8192, 0);
      if (r >= 0) { *len = r; return i; }
    }
    usleep(100);
  }
  return -1;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 4;
  if (argc > 2) port = atoi(argv[2]);
  int s[64];
  printf("uid=%d euid=%d n=%d port=%d\n", getuid(), geteuid(), n, port);
  for (int i = 0; i < n; i++) s[i] = member();
  unsigned char buf[8192], out[8192];
  int len, ok = 1;

  // A: return payload[5]
  struct sock_filter fa[] = {
      BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 5),
      BPF_STMT(BPF_RET | BPF_A, 0),
  };
  if (attach(s[0], fa, 2)) return 2;
  printf("A (ret payload[5]):");
  for (int i = 0; i < n; i++) {
    memset(buf, 0, 12);
    buf[0] = 0x04;       // BTH opcode RC SEND_ONLY
    buf[5] = i;          // DestQP top byte
    sendp(0, buf, 12);
    int r = who(s, n, &len, out);
    printf(" payload[5]=%d->sock%d", i, r);
    ok &= r == i;
  }
  printf("  %s\n", ok ? "OK: input starts at UDP payload (BTH)" : "MISMATCH");

  // B: return len - 100
  struct sock_filter fb[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_LEN, 0),
      BPF_STMT(BPF_ALU | BPF_SUB | BPF_K, 100),
      BPF_STMT(BPF_RET | BPF_A, 0),
  };
  if (attach(s[1 % n], fb, 3)) return 2;  // any member may (re)attach
  printf("B (ret len-100):");
  int okb = 1;
  for (int i = 0; i < n; i++) {
    memset(buf, 0, sizeof buf);
    sendp(0, buf, 100 + i);
    int r = who(s, n, &len, out);
    printf(" len=%d->sock%d", 100 + i, r);
    okb &= r == i;
  }
  printf("  %s\n", okb ? "OK: len = UDP payload length" : "MISMATCH");

  // C: index out of range, from 64 source ports, and repeated from one port
  attach(s[0], fa, 2);
  int hist[64] = {0}, same[64] = {0}, lost = 0;
  for (int p = 0; p < 64; p++) {
    memset(buf, 0, 12);
    buf[5] = n + 7;  // >= n
    sendp(40000 + p, buf, 12);
    int r = who(s, n, &len, out);
    if (r < 0) lost++; else hist[r]++;
  }
  for (int k = 0; k < 32; k++) {
    buf[5] = 200;
    sendp(40001, buf, 12);
    int r = who(s, n, &len, out);
    if (r < 0) lost++; else same[r]++;
  }
  printf("C (ret %d >= n): 64 src ports ->", n + 7);
  for (int i = 0; i < n; i++) printf(" sock%d:%d", i, hist[i]);
  printf(" | 32x one src port ->");
  for (int i = 0; i < n; i++) printf(" sock%d:%d", i, same[i]);
  printf(" | lost %d\n", lost);
  return !(ok && okb);
}
