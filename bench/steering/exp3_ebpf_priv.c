// exp3: can this user create a REUSEPORT_SOCKARRAY map and load a
// BPF_PROG_TYPE_SK_REUSEPORT program (candidate c)? And can it open a raw
// UDP socket / packet socket (candidate d)?
#include <errno.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static long bpf(int cmd, union bpf_attr *a) { return syscall(SYS_bpf, cmd, a, sizeof *a); }

int main(void) {
  printf("euid=%d\n", geteuid());
  union bpf_attr a;
  memset(&a, 0, sizeof a);
  a.map_type = BPF_MAP_TYPE_REUSEPORT_SOCKARRAY;
  a.key_size = 4;
  a.value_size = 8;
  a.max_entries = 256;
  long m = bpf(BPF_MAP_CREATE, &a);
  printf("  BPF_MAP_CREATE REUSEPORT_SOCKARRAY: %s\n", m >= 0 ? "ok" : strerror(errno));
  memset(&a, 0, sizeof a);
  a.map_type = BPF_MAP_TYPE_ARRAY;
  a.key_size = 4;
  a.value_size = 8;
  a.max_entries = 1;
  m = bpf(BPF_MAP_CREATE, &a);
  printf("  BPF_MAP_CREATE ARRAY: %s\n", m >= 0 ? "ok" : strerror(errno));
  struct bpf_insn prog[] = {
      {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = 0, .imm = 1},  // r0 = SK_PASS
      {.code = BPF_JMP | BPF_EXIT},
  };
  memset(&a, 0, sizeof a);
  a.prog_type = BPF_PROG_TYPE_SK_REUSEPORT;
  a.insns = (unsigned long)prog;
  a.insn_cnt = 2;
  a.license = (unsigned long)"GPL";
  long p = bpf(BPF_PROG_LOAD, &a);
  printf("  BPF_PROG_LOAD SK_REUSEPORT: %s\n", p >= 0 ? "ok" : strerror(errno));
  a.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
  p = bpf(BPF_PROG_LOAD, &a);
  printf("  BPF_PROG_LOAD SOCKET_FILTER: %s\n", p >= 0 ? "ok" : strerror(errno));
  int r = socket(AF_INET, SOCK_RAW, IPPROTO_UDP);
  printf("  socket(AF_INET, SOCK_RAW, IPPROTO_UDP): %s\n", r >= 0 ? "ok" : strerror(errno));
  r = socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_IP));
  printf("  socket(AF_PACKET, SOCK_DGRAM): %s\n", r >= 0 ? "ok" : strerror(errno));
  return 0;
}
