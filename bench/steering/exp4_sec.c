// exp4: who may join or block a UDP port group.
//   exp4_sec bind OPTS ADDR SECONDS : bind ADDR:4791 with OPTS (r = SO_REUSEADDR,
//       p = SO_REUSEPORT, - = none), then count datagrams for SECONDS and print.
//   exp4_sec send N : send N datagrams to 127.0.0.1:4791 from N source ports.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc >= 3 && !strcmp(argv[1], "send")) {
    int n = atoi(argv[2]);
    for (int i = 0; i < n; i++) {
      int c = socket(AF_INET, SOCK_DGRAM, 0);
      struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(4791), .sin_addr.s_addr = htonl(0x7f000001)};
      sendto(c, "x", 1, 0, (void *)&a, sizeof a);
      close(c);
    }
    return 0;
  }
  if (argc < 5) return 2;
  int s = socket(AF_INET, SOCK_DGRAM, 0), on = 1;
  if (strchr(argv[2], 'r')) setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (strchr(argv[2], 'p')) setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(4791)};
  inet_pton(AF_INET, argv[3], &a.sin_addr);
  if (bind(s, (void *)&a, sizeof a)) {
    printf("  uid %d bind(%s:4791, %s): %s\n", geteuid(), argv[3], argv[2], strerror(errno));
    return 1;
  }
  printf("  uid %d bind(%s:4791, %s): ok\n", geteuid(), argv[3], argv[2]);
  fflush(stdout);
  struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  int got = 0;
  time_t end = time(NULL) + atoi(argv[4]);
  char b[16];
  while (time(NULL) < end)
    if (recv(s, b, sizeof b, 0) > 0) got++;
  printf("  uid %d (%s, %s) received %d\n", geteuid(), argv[3], argv[2], got);
  return 0;
}
