// steer: prototype of "one host, many processes" RoCEv2 steering.
//
// Every process binds ADDR:PORT with SO_REUSEPORT (same euid = one group).
// A process owns a slot s (1..254) of a host registry, a file in /dev/shm
// (mode 0600, owner checked): it holds an OFD write lock on byte
// LOCK_BASE + s, which the kernel drops when the process dies (kill -9 too),
// so a dead process's slot is free again with no cleanup. Its QPNs are
// s << 16 | local (the QPN's top byte is the slot).
// A classic BPF program (SO_ATTACH_REUSEPORT_CBPF, no privilege) maps the
// BTH's DestQP top byte (UDP payload byte 5) to the group index of the slot's
// socket. The group's order changes when a member leaves (the kernel moves
// the last socket into the hole), so whoever sees a change rebuilds the
// program, under a registry lock: it learns which slot sits at which index by
// probing (a datagram with BTH opcode 0xFF is steered to the index in its
// byte 1; the member that receives it, if the probe carries the registry's
// secret nonce, writes "gen, index" into its slot), then attaches a new
// program. Triggers: a member joins (it rebuilds before it is ready), a
// mapped slot's lock is free (dead: checked every CHECK_MS), or a packet for
// another live slot reached us (stale map).
//
//   steer test N M [secs]   functional test + throughput (see main)
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_ATTACH_REUSEPORT_CBPF
#define SO_ATTACH_REUSEPORT_CBPF 51
#endif

#define NSLOT 256
#define FIRST_SLOT 1    // slot 0 holds QPN 0/1 (QP0, GSI QP1)
#define LAST_SLOT 254   // slot 255 holds QPN 0xFFFFFF (multicast)
#define LOCK_BASE (1 << 20)
#define LOCK_MUTEX (LOCK_BASE + 512)
#define LOCK_INIT (LOCK_BASE + 513)
#define PROBE_OP 0xFF
#define CHECK_MS 20
#define MAGIC 0x53524450524547ull

struct slot {
  _Atomic uint32_t state;  // 0 free, 1 joining, 2 ready
  _Atomic int32_t pid;
  _Atomic uint64_t report;  // gen << 32 | index of the last valid probe
  _Atomic uint64_t rx_own, rx_foreign, rx_probe, rebuilds;
  char pad[64 - 48];
};
struct reg {
  uint64_t magic, nonce;
  _Atomic uint32_t gen;  // rebuild generation
  _Atomic int32_t n;     // sockets in the map
  _Atomic int16_t idx2slot[NSLOT];
  _Atomic uint64_t rebuild_ns_last;
  struct slot slots[NSLOT];
};

static const char *reg_path;
static uint32_t addr = 0x7f000001;
static int port = 4791;

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000ull + t.tv_nsec;
}

static int ofd_lock(int fd, int cmd, short type, off_t at) {
  struct flock l = {.l_type = type, .l_whence = SEEK_SET, .l_start = at, .l_len = 1};
  return fcntl(fd, cmd, &l);
}
// Is byte `at` locked by some other open file description?
static int locked(int fd, off_t at) {
  struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = at, .l_len = 1};
  if (fcntl(fd, F_OFD_GETLK, &l) != 0) return 0;
  return l.l_type != F_UNLCK;
}

// Open (create) the registry: 0600, owned by us, not a symlink.
static struct reg *reg_open(int *fd_out) {
  int fd = open(reg_path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) { perror("registry"); exit(1); }
  struct stat st;
  fstat(fd, &st);
  if (st.st_uid != geteuid() || (st.st_mode & 077) || !S_ISREG(st.st_mode)) {
    fprintf(stderr, "registry %s: not ours or not private, refused\n", reg_path);
    exit(1);
  }
  ofd_lock(fd, F_OFD_SETLKW, F_WRLCK, LOCK_INIT);
  fstat(fd, &st);
  if (st.st_size < (off_t)sizeof(struct reg)) ftruncate(fd, sizeof(struct reg));
  struct reg *r = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (r->magic != MAGIC) {
    getrandom(&r->nonce, sizeof r->nonce, 0);
    r->magic = MAGIC;
  }
  ofd_lock(fd, F_OFD_SETLK, F_UNLCK, LOCK_INIT);
  *fd_out = fd;
  return r;
}

// ---------------------------------------------------------------- member
static struct reg *R;
static int fd_own, fd_chk, sock, my;
static uint32_t stale_gen = 0;  // a misdelivery seen under this generation

struct probe { uint8_t op, index, pad[2]; uint32_t gen; uint64_t nonce; };

static void handle(const uint8_t *b, int len) {
  if (len >= (int)sizeof(struct probe) && b[0] == PROBE_OP) {
    const struct probe *p = (const void *)b;
    if (p->nonce != R->nonce) return;  // not from this host's members: ignored
    atomic_store(&R->slots[my].report, (uint64_t)p->gen << 32 | p->index);
    atomic_fetch_add_explicit(&R->slots[my].rx_probe, 1, memory_order_relaxed);
    return;
  }
  if (len < 12) return;
  int slot = b[5];
  if (slot == my) {
    atomic_fetch_add_explicit(&R->slots[my].rx_own, 1, memory_order_relaxed);
    return;
  }
  atomic_fetch_add_explicit(&R->slots[my].rx_foreign, 1, memory_order_relaxed);
  // A packet for another live slot: the map is stale. For a free slot
  // (a dead process's old QPs) it is just dropped, as a NIC would.
  if (atomic_load(&R->slots[slot].state) != 0 && locked(fd_chk, LOCK_BASE + slot)) stale_gen = atomic_load(&R->gen) + 1;
}

static struct mmsghdr rmsg[64];
static struct iovec riov[64];
static uint8_t rbuf[64][9000];

static int drain(int timeout_ms) {
  struct timeval tv = {.tv_sec = 0, .tv_usec = timeout_ms * 1000};
  setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  int n = recvmmsg(sock, rmsg, 64, MSG_WAITFORONE, NULL);
  for (int i = 0; i < n; i++) handle(rbuf[i], rmsg[i].msg_len);
  return n;
}

static int mapped_dead(void) {
  int n = atomic_load(&R->n);
  for (int i = 0; i < n; i++) {
    int s = atomic_load(&R->idx2slot[i]);
    if (s > 0 && !locked(fd_chk, LOCK_BASE + s)) return 1;
  }
  return 0;
}

static int in_map(int s) {
  int n = atomic_load(&R->n);
  for (int i = 0; i < n; i++)
    if (atomic_load(&R->idx2slot[i]) == s) return 1;
  return 0;
}

static int still_needed(void) { return stale_gen > atomic_load(&R->gen) || !in_map(my) || mapped_dead(); }

static void rebuild_locked(void);
// Rebuild if nobody else is: never wait for the mutex, since a member that
// waits does not answer the current rebuilder's probes. Returns 1 if done
// or no longer needed, 0 if another member holds the mutex (try again).
static int try_rebuild(void) {
  if (ofd_lock(fd_own, F_OFD_SETLK, F_WRLCK, LOCK_MUTEX) != 0) return 0;
  if (still_needed()) rebuild_locked();  // re-checked under the mutex: someone may have just rebuilt
  ofd_lock(fd_own, F_OFD_SETLK, F_UNLCK, LOCK_MUTEX);
  stale_gen = 0;
  return 1;
}

// Learn slot -> index by probing, then attach the program. Caller holds the mutex.
static void rebuild_locked(void) {
  uint64_t t0 = now_ns();
  int live[NSLOT], nlive = 0;
  for (int s = FIRST_SLOT; s <= LAST_SLOT; s++) {
    if (locked(fd_chk, LOCK_BASE + s)) live[nlive++] = s;
    else atomic_store(&R->slots[s].state, 0);
  }
  uint32_t gen = atomic_fetch_add(&R->gen, 1) + 1;
  int idx2slot[NSLOT], n = 0, misses = 0, found = 0;
  int ps = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(addr)};
  for (int i = 0; i < NSLOT && found < nlive && misses < 3; i++) {
    struct probe p = {.op = PROBE_OP, .index = i, .gen = gen, .nonce = R->nonce};
    sendto(ps, &p, sizeof p, 0, (void *)&a, sizeof a);
    int who = -1;
    uint64_t want = (uint64_t)gen << 32 | i, end = now_ns() + 200000000ull;
    while (who < 0 && now_ns() < end) {
      int got = recvmmsg(sock, rmsg, 64, MSG_DONTWAIT, NULL);  // our own probe may be for us
      for (int j = 0; j < got; j++) handle(rbuf[j], rmsg[j].msg_len);
      if (got <= 0) usleep(20);
      for (int k = 0; k < nlive && who < 0; k++)
        if (atomic_load(&R->slots[live[k]].report) == want) who = live[k];
    }
    if (who < 0) { idx2slot[n++] = -1; misses++; continue; }  // a socket nobody answers for
    int dup = 0;
    for (int j = 0; j < n; j++) dup |= idx2slot[j] == who;
    if (dup) break;  // i >= group size: the kernel fell back to its hash
    idx2slot[n++] = who;
    found++;
  }
  close(ps);
  // Program: probes go to the index they name; data by DestQP's top byte.
  struct sock_filter f[8 + 2 * NSLOT];
  int k = 0;
  f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 0);
  f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PROBE_OP, 0, 2);
  f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 1);
  f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_A, 0);
  f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 5);
  for (int i = 0; i < n; i++) {
    if (idx2slot[i] < 0) continue;
    f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, idx2slot[i], 0, 1);
    f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, i);
  }
  f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0xffffffff);  // unknown: kernel's hash
  struct sock_fprog prog = {.len = k, .filter = f};
  if (setsockopt(sock, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof prog)) perror("attach");
  for (int i = 0; i < n; i++) atomic_store(&R->idx2slot[i], idx2slot[i]);
  atomic_store(&R->n, n);
  atomic_store(&R->rebuild_ns_last, now_ns() - t0);
  atomic_fetch_add(&R->slots[my].rebuilds, 1);
}

static void member(int ready_fd) {
  int fd;
  R = reg_open(&fd);
  fd_own = fd;
  fd_chk = open(reg_path, O_RDWR | O_CLOEXEC);  // a second open file description
  my = -1;
  for (int s = FIRST_SLOT; s <= LAST_SLOT && my < 0; s++)
    if (ofd_lock(fd_own, F_OFD_SETLK, F_WRLCK, LOCK_BASE + s) == 0) my = s;
  if (my < 0) { fprintf(stderr, "no free slot\n"); exit(1); }
  struct slot *me = &R->slots[my];
  me->rx_own = me->rx_foreign = me->rx_probe = me->rebuilds = 0;
  me->report = 0;
  me->pid = getpid();
  me->state = 1;
  for (int i = 0; i < 64; i++) {
    riov[i] = (struct iovec){rbuf[i], sizeof rbuf[i]};
    rmsg[i].msg_hdr = (struct msghdr){.msg_iov = &riov[i], .msg_iovlen = 1};
  }
  // Join under the mutex: the group grows only while nobody is probing.
  ofd_lock(fd_own, F_OFD_SETLKW, F_WRLCK, LOCK_MUTEX);
  sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int on = 1, rcv = 8 << 20;
  setsockopt(sock, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on);  // never SO_REUSEADDR (exp4)
  setsockopt(sock, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(addr)};
  if (bind(sock, (void *)&a, sizeof a)) { perror("bind"); exit(1); }
  rebuild_locked();  // still under the mutex
  ofd_lock(fd_own, F_OFD_SETLK, F_UNLCK, LOCK_MUTEX);
  me->state = 2;
  if (ready_fd >= 0) { write(ready_fd, &my, sizeof my); close(ready_fd); }
  uint64_t next_check = now_ns();
  int pending = 0;
  for (;;) {
    drain(pending ? 1 : CHECK_MS);
    uint32_t g = atomic_load(&R->gen);
    int need = pending || stale_gen > g;  // stale map seen since the last rebuild
    if (now_ns() >= next_check) {
      next_check = now_ns() + CHECK_MS * 1000000ull;
      need |= mapped_dead();
    }
    if (need) pending = !try_rebuild();
  }
}

// ---------------------------------------------------------------- driver
static uint64_t rnd = 88172645463325252ull;
static uint64_t xs(void) { rnd ^= rnd << 13; rnd ^= rnd >> 7; rnd ^= rnd << 17; return rnd; }

struct ctr { _Atomic uint64_t n; };  // plain receiver's count (shared anon)

static pid_t spawn(int *slot_out) {
  int p[2];
  pipe(p);
  pid_t pid = fork();
  if (pid == 0) { close(p[0]); member(p[1]); _exit(0); }
  close(p[1]);
  if (read(p[0], slot_out, sizeof *slot_out) != sizeof *slot_out) { fprintf(stderr, "member failed\n"); exit(1); }
  close(p[0]);
  return pid;
}

static uint64_t tot(int s) { return R->slots[s].rx_own + R->slots[s].rx_foreign; }

// Send m packets to random QPNs of the given slots (plus `extra` to `dead`
// slot), paced so that no socket buffer overflows; then wait for quiet.
static void send_check(const char *title, int *slots, int ns, int m, int dead, int extra) {
  uint64_t want[NSLOT] = {0}, own0[NSLOT], for0[NSLOT];
  for (int s = 0; s < NSLOT; s++) { own0[s] = R->slots[s].rx_own; for0[s] = R->slots[s].rx_foreign; }
  uint32_t gen0 = R->gen;
  int c = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(addr)};
  connect(c, (void *)&a, sizeof a);
  uint8_t b[64] = {0x04};  // RC SEND_ONLY
  uint64_t sent = 0, base = 0;
  for (int s = 0; s < NSLOT; s++) base += tot(s);
  for (int i = 0; i < m + extra; i++) {
    int s = i < m ? slots[xs() % ns] : dead;
    uint32_t qpn = (uint32_t)s << 16 | (xs() & 0xffff);
    b[5] = qpn >> 16, b[6] = qpn >> 8, b[7] = qpn;
    send(c, b, sizeof b, 0);
    sent++;
    if (i < m) want[s]++;
    if ((sent & 255) == 0)
      for (;;) {  // pacing: at most 2048 in flight
        uint64_t got = 0;
        for (int t = 0; t < NSLOT; t++) got += tot(t);
        if (sent - (got - base) < 2048) break;
        usleep(50);
      }
  }
  uint64_t last = ~0ull;
  for (;;) {  // quiet for 100 ms
    usleep(100000);
    uint64_t got = 0;
    for (int t = 0; t < NSLOT; t++) got += tot(t);
    if (got == last) break;
    last = got;
  }
  close(c);
  int ok = 1;
  printf("%s\n", title);
  for (int k = 0; k < ns; k++) {
    int s = slots[k];
    uint64_t own = R->slots[s].rx_own - own0[s], fo = R->slots[s].rx_foreign - for0[s];
    printf("   slot %3d pid %6d: sent %6llu, got own %6llu, foreign %llu%s\n", s, R->slots[s].pid,
           (unsigned long long)want[s], (unsigned long long)own, (unsigned long long)fo,
           own == want[s] && (extra || fo == 0) ? "" : "  <-- MISMATCH");
    ok &= own == want[s] && (extra || fo == 0);
  }
  if (extra) printf("   + %d packets to dead slot %d: dropped as foreign by whoever got them\n", extra, dead);
  printf("   %s (rebuilds during the phase: %u)\n", ok ? "OK: every packet reached its owner" : "FAILED",
         R->gen - gen0);
}

static int live_slots(int *out);
// Kill a member (not the last of the group) while ~100k pkt/s flow to all
// members; count what the survivors lose until the map is rebuilt.
static void kill_under_load(pid_t *pid, int *slots, int ns) {
  int victim = R->idx2slot[0], moved = R->idx2slot[R->n - 1];
  uint64_t own0[NSLOT], for0[NSLOT], want[NSLOT] = {0};
  for (int s = 0; s < NSLOT; s++) { own0[s] = R->slots[s].rx_own; for0[s] = R->slots[s].rx_foreign; }
  uint32_t gen0 = R->gen;
  int c = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(addr)};
  connect(c, (void *)&a, sizeof a);
  uint8_t b[64] = {0x04};
  uint64_t t0 = now_ns(), sent = 0, tkill = 0, trebuilt = 0;
  while (now_ns() - t0 < 400000000ull) {
    uint64_t el = now_ns() - t0;
    if (!tkill && el > 100000000ull) { kill(pid[victim], SIGKILL); tkill = now_ns(); }
    if (tkill && !trebuilt && R->gen != gen0 && R->n == ns - 1) trebuilt = now_ns();
    if (sent > el / 10000) { usleep(100); continue; }  // 100k pkt/s
    for (int i = 0; i < 16; i++) {
      int s = slots[xs() % ns];
      uint32_t qpn = (uint32_t)s << 16 | (xs() & 0xffff);
      b[5] = qpn >> 16, b[6] = qpn >> 8, b[7] = qpn;
      send(c, b, sizeof b, 0);
      sent++;
      want[s]++;
    }
  }
  usleep(200000);
  waitpid(pid[victim], NULL, 0);
  pid[victim] = 0;
  close(c);
  printf(" phase 4: kill -9 slot %d (group index 0; the last socket, slot %d, moves into its hole) under ~100k pkt/s\n",
         victim, moved);
  uint64_t lost = 0, wsum = 0;
  for (int k = 0; k < ns; k++) {
    int s = slots[k];
    if (s == victim) continue;
    uint64_t own = R->slots[s].rx_own - own0[s], fo = R->slots[s].rx_foreign - for0[s];
    printf("   slot %3d: sent %6llu, got own %6llu (lost %llu), foreign %llu (incl. the dead slot's)\n", s, (unsigned long long)want[s],
           (unsigned long long)own, (unsigned long long)(want[s] - own), (unsigned long long)fo);
    lost += want[s] - own;
    wsum += want[s];
  }
  printf("   survivors lost %llu of %llu (%.3f%%); map rebuilt %.1f ms after the kill; rebuilds %u\n",
         (unsigned long long)lost, (unsigned long long)wsum, 100.0 * lost / wsum,
         trebuilt ? (trebuilt - tkill) / 1e6 : -1.0, R->gen - gen0);
}

static int live_slots(int *out) {
  int n = 0, fd = open(reg_path, O_RDWR);
  for (int s = FIRST_SLOT; s <= LAST_SLOT; s++)
    if (locked(fd, LOCK_BASE + s) && R->slots[s].state == 2) out[n++] = s;
  close(fd);
  return n;
}

static void wait_map(int n) {
  uint64_t t0 = now_ns();
  while (R->n != n && now_ns() - t0 < 5000000000ull) usleep(500);
  printf("   map rebuilt to %d sockets %.1f ms after the kill (last rebuild took %.2f ms, gen %u)\n", R->n,
         (now_ns() - t0) / 1e6, R->rebuild_ns_last / 1e6, R->gen);
}

// Throughput: blast `secs` with sendmmsg, count what the receivers got.
static double blast(int dport, int size, double secs, int *slots, int ns, struct ctr *plain, double *sent_pps) {
  int c = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(dport), .sin_addr.s_addr = htonl(addr)};
  connect(c, (void *)&a, sizeof a);
  enum { B = 32 };
  static uint8_t buf[B][4096];
  struct mmsghdr mm[B];
  struct iovec iv[B];
  uint64_t got0 = plain ? plain->n : 0;
  if (!plain) for (int t = 0; t < NSLOT; t++) got0 += tot(t);
  uint64_t sent = 0, t0 = now_ns(), end = t0 + (uint64_t)(secs * 1e9);
  while (now_ns() < end) {
    for (int i = 0; i < B; i++) {
      uint32_t qpn = (uint32_t)slots[xs() % ns] << 16 | (xs() & 0xffff);
      buf[i][0] = 0x04, buf[i][5] = qpn >> 16, buf[i][6] = qpn >> 8, buf[i][7] = qpn;
      iv[i] = (struct iovec){buf[i], size};
      mm[i].msg_hdr = (struct msghdr){.msg_iov = &iv[i], .msg_iovlen = 1};
    }
    int r = sendmmsg(c, mm, B, 0);
    if (r > 0) sent += r;
  }
  double dt = (now_ns() - t0) / 1e9;
  usleep(200000);
  uint64_t got = plain ? plain->n : 0;
  if (!plain) for (int t = 0; t < NSLOT; t++) got += tot(t);
  close(c);
  *sent_pps = sent / dt;
  return (got - got0) / dt;
}

static void plain_rx(struct ctr *c, int dport, int reuse) {
  int s = socket(AF_INET, SOCK_DGRAM, 0), rcv = 8 << 20;
  if (reuse) setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &reuse, sizeof reuse);
  setsockopt(s, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(dport), .sin_addr.s_addr = htonl(addr)};
  if (bind(s, (void *)&a, sizeof a)) { perror("plain bind"); _exit(1); }
  for (int i = 0; i < 64; i++) {
    riov[i] = (struct iovec){rbuf[i], sizeof rbuf[i]};
    rmsg[i].msg_hdr = (struct msghdr){.msg_iov = &riov[i], .msg_iovlen = 1};
  }
  for (;;) {
    int n = recvmmsg(s, rmsg, 64, MSG_WAITFORONE, NULL);
    if (n > 0) atomic_fetch_add(&c->n, n);
  }
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "test")) {
    fprintf(stderr, "usage: steer test N M [secs] [rounds]\n");
    return 2;
  }
  int N = argc > 2 ? atoi(argv[2]) : 3, M = argc > 3 ? atoi(argv[3]) : 20000;
  double secs = argc > 4 ? atof(argv[4]) : 1.0;
  int rounds = argc > 5 ? atoi(argv[5]) : 3;
  static char path[128];
  snprintf(path, sizeof path, "/dev/shm/srdma-steer-test-%d", geteuid());
  reg_path = path;
  unlink(path);
  int fd;
  R = reg_open(&fd);
  printf("steer test: %d members on 127.0.0.1:%d, euid %d, registry %s\n", N, port, geteuid(), path);
  pid_t pid[NSLOT] = {0};
  int slot_of[64];
  for (int i = 0; i < N; i++) {
    pid_t p = spawn(&slot_of[i]);
    pid[slot_of[i]] = p;
  }
  int live[NSLOT], nl = live_slots(live);
  printf(" joined: %d members, map of %d sockets, gen %u, last rebuild %.2f ms\n", nl, R->n, R->gen,
         R->rebuild_ns_last / 1e6);
  char t[128];
  snprintf(t, sizeof t, " phase 1: %d packets to random QPNs of %d members", M, nl);
  send_check(t, live, nl, M, 0, 0);

  int victim = R->idx2slot[R->n / 2];  // the socket in the middle of the group
  printf(" kill -9 pid %d (slot %d, group index %d of %d)\n", pid[victim], victim, R->n / 2, R->n);
  kill(pid[victim], SIGKILL);
  waitpid(pid[victim], NULL, 0);
  pid[victim] = 0;
  wait_map(nl - 1);
  nl = live_slots(live);
  snprintf(t, sizeof t, " phase 2: %d packets to the %d survivors + 500 to the dead slot", M, nl);
  send_check(t, live, nl, M, victim, 500);

  int ns;
  pid_t p = spawn(&ns);
  pid[ns] = p;
  printf(" newcomer pid %d took slot %d (the dead one's: %s); map %d sockets, gen %u\n", p, ns,
         ns == victim ? "yes" : "no", R->n, R->gen);
  nl = live_slots(live);
  snprintf(t, sizeof t, " phase 3: %d packets to %d members", M, nl);
  send_check(t, live, nl, M, 0, 0);

  kill_under_load(pid, live, nl);
  nl = live_slots(live);

  // Throughput: steered group vs one plain socket (port+1), alternating.
  struct ctr *pc = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  pid_t pp = fork(), hp[64];
  if (pp == 0) plain_rx(pc, port + 1, 0);
  for (int i = 0; i < nl; i++)  // a reuseport group of nl, no program (kernel hash): isolates the cBPF's cost
    if ((hp[i] = fork()) == 0) plain_rx(pc + 1, port + 2, 1);
  usleep(100000);
  uint64_t fo0 = 0;
  for (int s = 0; s < NSLOT; s++) fo0 += R->slots[s].rx_foreign;
  int sizes[2] = {64, 4096};
  printf(" throughput, %.1f s per run, sendmmsg x32 from one sender, %d rounds received pkt/s (sent pkt/s)\n",
         secs, rounds);
  for (int zi = 0; zi < 2; zi++) {
    double st[16], pl[16], hs[16], sst[16], spl[16], shs[16], s1[16], ss1[16];
    for (int r = 0; r < rounds; r++) {
      pl[r] = blast(port + 1, sizes[zi], secs, live, nl, pc, &spl[r]);
      s1[r] = blast(port, sizes[zi], secs, live, 1, NULL, &ss1[r]);  // all to one member's QPNs
      st[r] = blast(port, sizes[zi], secs, live, nl, NULL, &sst[r]);
      hs[r] = blast(port + 2, sizes[zi], secs, live, nl, pc + 1, &shs[r]);
    }
    for (int r = 0; r < rounds; r++)
      printf("   %4d B round %d: plain 1 sock %7.0f (%7.0f) | steered, 1 dest %7.0f (%7.0f) | steered, %d dests %7.0f (%7.0f) | hash group %d, no prog %7.0f (%7.0f)\n",
             sizes[zi], r, pl[r], spl[r], s1[r], ss1[r], nl, st[r], sst[r], nl, hs[r], shs[r]);
  }
  uint64_t fo = 0;
  for (int s = 0; s < NSLOT; s++) fo += R->slots[s].rx_foreign;
  printf(" foreign (misdelivered) packets during the steered throughput runs: %llu\n", (unsigned long long)(fo - fo0));
  kill(pp, SIGKILL);
  for (int i = 0; i < nl; i++) kill(hp[i], SIGKILL);
  for (int s = 0; s < NSLOT; s++) if (pid[s]) kill(pid[s], SIGKILL);
  while (wait(NULL) > 0) {}
  unlink(path);
  return 0;
}
