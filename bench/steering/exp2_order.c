// exp2: the order of a UDP reuseport group across processes, and what
// happens to it when a member closes its socket, is SIGKILLed, and when a
// newcomer joins. Each member is its own process with one socket bound to
// 127.0.0.1:PORT (SO_REUSEPORT); member 0 attaches "return payload[5]".
// The parent learns the order by probing: a datagram whose payload[5] = i
// goes to the socket at index i; the member that receives it reports.
// Usage: exp2_order [K=5] [port=4791]
#include <arpa/inet.h>
#include <linux/filter.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SO_ATTACH_REUSEPORT_CBPF
#define SO_ATTACH_REUSEPORT_CBPF 51
#endif

static int port = 4791;
static int report[2];  // members -> parent: "member id got probe i"
static pid_t pids[16];
static int cmd[16][2];  // parent -> member: 'c' = close your socket

static void run_member(int id, int attach, int ready) {
  int s = socket(AF_INET, SOCK_DGRAM, 0), on = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(0x7f000001)};
  if (bind(s, (void *)&a, sizeof a)) { perror("bind"); _exit(1); }
  if (attach) {
    struct sock_filter f[] = {BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 5), BPF_STMT(BPF_RET | BPF_A, 0)};
    struct sock_fprog p = {.len = 2, .filter = f};
    if (setsockopt(s, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &p, sizeof p)) perror("attach");
  }
  char c = 'r';
  write(ready, &c, 1);
  for (;;) {
    struct pollfd p[2] = {{.fd = s, .events = POLLIN}, {.fd = cmd[id][0], .events = POLLIN}};
    poll(p, s >= 0 ? 2 : 1 + 0, -1);
    if (s < 0) p[1] = p[0];
    if (s >= 0 && (p[0].revents & POLLIN)) {
      unsigned char b[64];
      if (recv(s, b, sizeof b, 0) >= 6) {
        int msg[2] = {id, b[5]};
        write(report[1], msg, sizeof msg);
      }
    }
    if (p[1].revents & POLLIN) {
      read(cmd[id][0], &c, 1);
      if (c == 'c') { close(s); s = -1; }
    }
    if (s < 0) { pause(); }
  }
}

static void start(int id, int attach) {
  int r[2];
  pipe(r);
  pipe(cmd[id]);
  pid_t p = fork();
  if (p == 0) { close(r[0]); run_member(id, attach, r[1]); _exit(0); }
  close(r[1]);
  char c;
  read(r[0], &c, 1);
  close(r[0]);
  pids[id] = p;
}

static void probe(const char *what, int upto) {
  int c = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(0x7f000001)};
  printf("%-44s", what);
  int seen[16];
  memset(seen, -1, sizeof seen);
  for (int i = 0; i < upto; i++) {
    unsigned char b[12] = {0x04};
    b[5] = i;
    sendto(c, b, sizeof b, 0, (void *)&a, sizeof a);
    struct pollfd p = {.fd = report[0], .events = POLLIN};
    if (poll(&p, 1, 300) <= 0) { printf(" [%d]=none", i); continue; }
    int msg[2];
    read(report[0], msg, sizeof msg);
    int dup = 0;
    for (int j = 0; j < i; j++) dup |= seen[j] == msg[0];
    seen[i] = msg[0];
    printf(" [%d]=m%d%s", i, msg[0], dup ? "(dup:hash)" : "");
  }
  printf("\n");
  close(c);
}

int main(int argc, char **argv) {
  int k = argc > 1 ? atoi(argv[1]) : 5;
  if (argc > 2) port = atoi(argv[2]);
  pipe(report);
  for (int i = 0; i < k; i++) start(i, i == 0);
  char line[128];
  snprintf(line, sizeof line, "joined m0..m%d in order:", k - 1);
  probe(line, k + 1);
  write(cmd[1][1], "c", 1);
  usleep(100000);
  probe("m1 close()s its socket (alive):", k + 1);
  kill(pids[2], SIGKILL);
  waitpid(pids[2], NULL, 0);
  probe("m2 SIGKILLed:", k);
  kill(pids[0], SIGKILL);
  waitpid(pids[0], NULL, 0);
  probe("m0 (which attached the prog) SIGKILLed:", k);
  start(k, 0);
  probe("newcomer joins:", k);
  for (int i = 0; i <= k; i++) if (pids[i]) kill(pids[i], SIGKILL);
  while (wait(NULL) > 0) {}
  return 0;
}
