#include "hca/host_steering.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/secure_random.h"
#include "hca/sock_addr.h"
#include "hca/udp_link.h"

#ifndef SO_ATTACH_REUSEPORT_CBPF
#define SO_ATTACH_REUSEPORT_CBPF 51
#endif

namespace srdma::hca {

namespace {

constexpr std::uint64_t kMagic = 0x5352444d41524731ull;  // "SRDMARG1"
constexpr std::size_t kSlots = 256;
// OFD lock bytes, beyond the registry's contents (a lock needs no data).
constexpr off_t kLockBase = 1 << 20;
constexpr off_t kMutexByte = kLockBase + 512;
constexpr off_t kInitByte = kLockBase + 513;
constexpr off_t kServiceBase = kLockBase + 1024;
// A probe nobody answers within this long: its index is left out.
constexpr auto kProbeWait = std::chrono::milliseconds(200);
constexpr int kMaxMisses = 3;

// The wire: offsets in the UDP payload (the kernel hands the program the
// payload, which starts at the BTH).
constexpr std::uint32_t kBthDestQp = 4;       // a word: 8 bits reserved, then DestQP
constexpr std::uint32_t kBthDestSlot = 5;     // DestQP's top byte
constexpr std::uint32_t kMadClass = 12 + 8 + 1;     // BTH, DETH, then the MAD header's MgmtClass
constexpr std::uint8_t kCmClass = 0x07;              // the CM's MADs (IBA 16.7); other classes: the hash
constexpr std::uint32_t kMadAttrId = 12 + 8 + 16;   // the MAD header's AttributeID
constexpr std::uint32_t kMadData = 12 + 8 + 24;      // the CM message
constexpr std::uint32_t kCmLocalId = kMadData;       // REQ/SIDR_REQ: the sender's ID; SIDR_REP: the requester's
constexpr std::uint32_t kCmRemoteId = kMadData + 4;  // every later CM message: the receiver's ID
constexpr std::uint32_t kCmServiceId = kMadData + 8; // REQ and SIDR_REQ
constexpr std::uint16_t kAttrReq = 0x0010, kAttrSidrReq = 0x0017, kAttrSidrRep = 0x0018;
constexpr std::uint32_t kGsiQpn = 1;

struct Probe {
  std::uint8_t op;
  std::uint8_t index;
  std::uint8_t pad[2];
  std::uint32_t gen;
  std::uint64_t nonce;
};
static_assert(sizeof(Probe) == 16);

int ofd_lock(int fd, int cmd, short type, off_t at, off_t len = 1) {
  struct flock l{};
  l.l_type = type;
  l.l_whence = SEEK_SET;
  l.l_start = at;
  l.l_len = len;
  int rc;
  do rc = ::fcntl(fd, cmd, &l);
  while (rc != 0 && errno == EINTR && cmd == F_OFD_SETLKW);
  return rc;
}

// Whether some open file description other than `fd`'s holds a lock on
// [at, at+len).
bool locked(int fd, off_t at, off_t len = 1) {
  struct flock l{};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  l.l_start = at;
  l.l_len = len;
  if (::fcntl(fd, F_OFD_GETLK, &l) != 0) return false;
  return l.l_type != F_UNLCK;
}

std::uint16_t be16(const std::byte* p) { return static_cast<std::uint16_t>(std::to_integer<unsigned>(p[0]) << 8 | std::to_integer<unsigned>(p[1])); }
std::uint32_t be32(const std::byte* p) { return std::uint32_t{be16(p)} << 16 | be16(p + 2); }
std::uint64_t be64(const std::byte* p) { return std::uint64_t{be32(p)} << 32 | be32(p + 4); }

// Where the registry lives: $SRDMA_REGISTRY_DIR (tests), else /dev/shm.
// One group per user, network namespace (its inode: containers share
// /dev/shm but not 127.0.0.1), address and port.
std::string registry_path(const IpAddress& ip, std::uint16_t port) {
  const char* dir = std::getenv("SRDMA_REGISTRY_DIR");
  const std::string d = dir != nullptr && *dir != '\0' ? dir : "/dev/shm";
  struct stat ns{};
  if (::stat("/proc/self/ns/net", &ns) != 0) ns.st_ino = 0;
  return fmt::format("{}/srdma-{}-{}-{}-{}", d, ::geteuid(), ns.st_ino, ip_str(ip), port);
}

// The live members of this process, for exit(): a program that never closes
// its device must not leave the registry behind either.
std::mutex g_members_mu;
std::vector<HostSteering*>& members() {
  static auto* v = new std::vector<HostSteering*>;  // never destroyed: exit handlers run after statics
  return *v;
}

// The descriptors of every live member in this process: a child of fork()
// must not keep our slot's lock or our group socket alive (see atfork).
constexpr std::size_t kTracked = 64 * 3;
// Stored as fd + 1, so that zero-initialised means empty.
std::array<std::atomic<int>, kTracked> g_tracked_fds{};

void track(int fd) {
  for (auto& f : g_tracked_fds) {
    int none = 0;
    if (f.compare_exchange_strong(none, fd + 1)) return;
  }
}
void untrack(int fd) {
  for (auto& f : g_tracked_fds) {
    int v = fd + 1;
    if (f.compare_exchange_strong(v, 0)) return;
  }
}

// In a child of fork(): the descriptors point at /dev/null instead. Closing
// them would free their numbers for reuse under the child's copy of the
// device; keeping them would keep the parent's slot "live" after it dies.
// And the parent's members are marked left, so that the child's exit()
// does not clear the parent's slot and listeners in the shared registry.
void atfork_child() {
  HostSteering::disown_in_child();
  const int null = static_cast<int>(::syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDWR | O_CLOEXEC));
  if (null < 0) return;
  for (auto& f : g_tracked_fds) {
    const int fd = f.exchange(0) - 1;
    if (fd >= 0) (void)::dup3(null, fd, O_CLOEXEC);
  }
  ::close(null);
}

// A tiny cBPF assembler: labels for the long unconditional jumps.
struct Program {
  std::vector<sock_filter> code;
  std::map<std::size_t, int> fixups;  // JA at index -> label
  std::map<int, std::size_t> labels;
  void op(std::uint16_t code_, std::uint32_t k, std::uint8_t jt = 0, std::uint8_t jf = 0) {
    code.push_back(sock_filter{code_, jt, jf, k});
  }
  void ldb(std::uint32_t at) { op(BPF_LD | BPF_B | BPF_ABS, at); }
  void ldh(std::uint32_t at) { op(BPF_LD | BPF_H | BPF_ABS, at); }
  void ldw(std::uint32_t at) { op(BPF_LD | BPF_W | BPF_ABS, at); }
  void jeq(std::uint32_t k, std::uint8_t jt, std::uint8_t jf) { op(BPF_JMP | BPF_JEQ | BPF_K, k, jt, jf); }
  void ret(std::uint32_t k) { op(BPF_RET | BPF_K, k); }
  void ja(int label) {
    fixups[code.size()] = label;
    op(BPF_JMP | BPF_JA, 0);
  }
  void label(int l) { labels[l] = code.size(); }
  void link() {
    for (auto [at, l] : fixups) code[at].k = static_cast<std::uint32_t>(labels.at(l) - at - 1);
  }
};

constexpr std::uint32_t kHash = 0xffffffff;  // an index >= n: the kernel's 4-tuple hash

}  // namespace

struct HostSteering::Registry {
  struct Slot {
    std::atomic<std::uint32_t> state;  // 0 free, 1 a member
    std::atomic<std::int32_t> pid;
    std::atomic<std::uint64_t> report;  // gen << 32 | index of the last probe it received
    char pad[48];
  };
  struct Service {
    std::atomic<std::uint64_t> sid;
    std::atomic<std::uint32_t> slot;  // 0: free
    std::uint32_t pad;
  };
  std::uint64_t magic;
  std::uint64_t nonce;  // probes without it are ignored
  std::atomic<std::uint32_t> gen;
  std::atomic<std::int32_t> n;  // sockets in the map
  std::array<std::atomic<std::int16_t>, kSlots> idx2slot;  // -1: a socket nobody answered for
  std::array<Slot, kSlots> slots;
  std::array<Service, kMaxServices> services;
};
static_assert(sizeof(HostSteering::Registry) < kLockBase);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::int16_t>::is_always_lock_free);

namespace {
Result<int> open_registry(const std::string& path) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
      return make_error(errno, fmt::format("host registry {}: {}", path, std::strerror(errno)));
    struct stat st{};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
      ::close(fd);
      return make_error(EPERM, fmt::format("host registry {}: not a private file of this user (refused; remove it "
                                           "or set SRDMA_REGISTRY_DIR)",
                                           path));
    }
    (void)ofd_lock(fd, F_OFD_SETLKW, F_WRLCK, kInitByte);
    // A leaver may have unlinked the file between our open and our lock:
    // then it is nobody's registry any more; open the name again.
    if (::fstat(fd, &st) != 0 || st.st_nlink == 0) {
      ::close(fd);
      continue;
    }
    return fd;  // with the init lock held
  }
  return make_error(EAGAIN, fmt::format("host registry {}: replaced under us too often", path));
}
}  // namespace

Result<std::unique_ptr<HostSteering>> HostSteering::join(const IpAddress& ip, std::uint16_t port) {
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] {
    ::pthread_atfork(nullptr, nullptr, atfork_child);
    std::atexit(leave_all_at_exit);
  });
  const std::string path = registry_path(ip, port);
  auto fd = open_registry(path);
  if (!fd) return std::unexpected(fd.error());
  const int reg_fd = *fd;
  auto fail = [&](int e, std::string why) -> Result<std::unique_ptr<HostSteering>> {
    (void)ofd_lock(reg_fd, F_OFD_SETLK, F_UNLCK, kInitByte);
    ::close(reg_fd);
    return make_error(e, std::move(why));
  };
  struct stat st{};
  if (::fstat(reg_fd, &st) != 0) return fail(errno, "host registry: fstat");
  if (st.st_size < static_cast<off_t>(sizeof(Registry)) && ::ftruncate(reg_fd, sizeof(Registry)) != 0)
    return fail(errno, fmt::format("host registry {}: {}", path, std::strerror(errno)));
  void* m = ::mmap(nullptr, sizeof(Registry), PROT_READ | PROT_WRITE, MAP_SHARED, reg_fd, 0);
  if (m == MAP_FAILED) return fail(errno, fmt::format("host registry {}: mmap: {}", path, std::strerror(errno)));
  auto* reg = static_cast<Registry*>(m);
  if (reg->magic != kMagic) {  // a new file (zeros): ours to set up, under the init lock
    std::memset(static_cast<void*>(reg), 0, sizeof(Registry));
    reg->nonce = secure_random_u64();
    reg->magic = kMagic;
  }
  // A random free slot rather than the lowest: the QPNs' top byte is then
  // not the same in every first process.
  std::uint32_t slot = 0;
  const std::uint32_t span = kLastSlot - kFirstSlot + 1;
  const std::uint32_t start = secure_random_u32() % span;
  for (std::uint32_t k = 0; k < span && slot == 0; ++k) {
    const std::uint32_t s = kFirstSlot + (start + k) % span;
    if (ofd_lock(reg_fd, F_OFD_SETLK, F_WRLCK, kLockBase + s) == 0) slot = s;
  }
  if (slot == 0) {
    ::munmap(m, sizeof(Registry));
    return fail(EBUSY, fmt::format("host registry {}: all {} slots are taken", path, span));
  }
  Registry::Slot& me = reg->slots[slot];
  me.report.store(0);
  me.pid.store(::getpid());
  me.state.store(1);
  (void)ofd_lock(reg_fd, F_OFD_SETLK, F_UNLCK, kInitByte);
  const int check_fd = ::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (check_fd < 0) {
    const int e = errno;
    ::munmap(m, sizeof(Registry));
    ::close(reg_fd);
    return make_error(e, fmt::format("host registry {}: {}", path, std::strerror(e)));
  }
  std::unique_ptr<HostSteering> h(new HostSteering(ip, port, reg_fd, check_fd, reg, slot));
  // Join under the mutex: the group grows only while nobody probes it.
  std::lock_guard local(h->rebuild_mu_);
  h->lock_mutex();
  const SockAddr a = SockAddr::of(ip, port);
  const int sock = device_udp_socket(0, a.family());
  const int on = 1;
  if (sock < 0 || ::setsockopt(sock, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0 ||
      ::bind(sock, a.ptr(), a.len()) != 0) {
    const int e = errno;
    if (sock >= 0) ::close(sock);
    h->unlock_mutex();
    return make_error(e, fmt::format("cannot bind {}:{} (shared by this user's processes): {}",
                                     a.family() == AF_INET6 ? "[" + ip_str(ip) + "]" : ip_str(ip), port,
                                     std::strerror(e)));
  }
  h->sock_ = sock;
  track(sock);
  h->rebuild_locked();
  h->unlock_mutex();
  return h;
}

HostSteering::HostSteering(const IpAddress& ip, std::uint16_t port, int reg_fd, int check_fd, Registry* reg,
                           std::uint32_t slot)
    : ip_(ip), port_(port), reg_fd_(reg_fd), check_fd_(check_fd), reg_(reg), slot_(slot) {
  track(reg_fd_);
  track(check_fd_);
  std::lock_guard lock(g_members_mu);
  members().push_back(this);
}

void HostSteering::disown_in_child() {
  // One thread now: a parent thread that held the mutex at fork() is gone,
  // so try it rather than wait for ever.
  std::unique_lock lock(g_members_mu, std::try_to_lock);
  for (HostSteering* h : members()) {
    h->left_ = true;
    h->disowned_.store(true, std::memory_order_relaxed);
  }
}

void HostSteering::leave_all_at_exit() {
  std::lock_guard lock(g_members_mu);
  for (HostSteering* h : members()) h->leave();
}

HostSteering::~HostSteering() {
  // The caller closed the socket: the kernel has moved the last member into
  // our hole, and the others rebuild when they see our slot free.
  {
    std::lock_guard lock(g_members_mu);
    leave();
    std::erase(members(), this);
  }
  if (sock_ >= 0) untrack(sock_);
  ::munmap(reg_, sizeof(Registry));
  untrack(check_fd_);
  untrack(reg_fd_);
  ::close(check_fd_);
  ::close(reg_fd_);  // drops the init lock
}

// REQUIRES g_members_mu.
void HostSteering::leave() {
  if (left_) return;
  left_ = true;
  (void)ofd_lock(reg_fd_, F_OFD_SETLKW, F_WRLCK, kInitByte);
  reg_->slots[slot_].state.store(0);
  for (std::uint32_t e = 0; e < kMaxServices; ++e)
    if (reg_->services[e].slot.load() == slot_) reg_->services[e].slot.store(0);
  (void)ofd_lock(reg_fd_, F_OFD_SETLK, F_UNLCK, kServiceBase, kMaxServices);
  (void)ofd_lock(reg_fd_, F_OFD_SETLK, F_UNLCK, kLockBase + slot_);
  // The last member out removes the registry: nothing stays in /dev/shm.
  // (A newcomer that opened it meanwhile waits for the init lock, then sees
  // it unlinked and makes a new one.)
  if (!locked(check_fd_, kLockBase + kFirstSlot, kLastSlot - kFirstSlot + 1)) {
    const std::string path = registry_path(ip_, port_);
    struct stat named{}, ours{};
    if (::stat(path.c_str(), &named) == 0 && ::fstat(reg_fd_, &ours) == 0 && named.st_ino == ours.st_ino &&
        named.st_dev == ours.st_dev)
      ::unlink(path.c_str());
  }
  (void)ofd_lock(reg_fd_, F_OFD_SETLK, F_UNLCK, kInitByte);
}

void HostSteering::set_pump(Pump pump) {
  std::lock_guard local(rebuild_mu_);
  pump_ = std::move(pump);
}

bool HostSteering::slot_live(std::uint32_t s) const {
  if (s < kFirstSlot || s > kLastSlot) return false;
  return locked(check_fd_, kLockBase + s);
}

bool HostSteering::in_map(std::uint32_t s) const {
  const int n = std::min<int>(reg_->n.load(std::memory_order_acquire), kSlots);
  for (int i = 0; i < n; ++i)
    if (reg_->idx2slot[i].load(std::memory_order_relaxed) == static_cast<std::int16_t>(s)) return true;
  return false;
}

bool HostSteering::mapped_dead() const {
  const int n = std::min<int>(reg_->n.load(std::memory_order_acquire), kSlots);
  for (int i = 0; i < n; ++i) {
    const std::int16_t s = reg_->idx2slot[i].load(std::memory_order_relaxed);
    if (s > 0 && !slot_live(static_cast<std::uint32_t>(s))) return true;
  }
  return false;
}

void HostSteering::lock_mutex() { (void)ofd_lock(reg_fd_, F_OFD_SETLKW, F_WRLCK, kMutexByte); }
bool HostSteering::try_lock_mutex() { return ofd_lock(reg_fd_, F_OFD_SETLK, F_WRLCK, kMutexByte) == 0; }
void HostSteering::unlock_mutex() { (void)ofd_lock(reg_fd_, F_OFD_SETLK, F_UNLCK, kMutexByte); }

std::uint32_t HostSteering::service_owner(std::uint64_t sid) const {
  for (std::uint32_t e = 0; e < kMaxServices; ++e) {
    const Registry::Service& s = reg_->services[e];
    const std::uint32_t owner = s.slot.load(std::memory_order_acquire);
    if (owner == 0 || s.sid.load(std::memory_order_relaxed) != sid) continue;
    if (owner == slot_ || (slot_live(owner) && locked(check_fd_, kServiceBase + e))) return owner;
  }
  return 0;
}

HostSteering::Verdict HostSteering::admit(std::span<const std::byte> f, const IpAddress& src_ip) {
  if (f.size() == sizeof(Probe) && std::to_integer<std::uint8_t>(f[0]) == kProbeOpcode) {
    Probe p;
    std::memcpy(&p, f.data(), sizeof p);
    // Only a member of this host's group knows the nonce, and it probes
    // from the group's own address.
    if (p.nonce != reg_->nonce || src_ip != ip_) {
      bad_probes_.fetch_add(1, std::memory_order_relaxed);
      return Verdict::kProbe;
    }
    reg_->slots[slot_].report.store(std::uint64_t{p.gen} << 32 | p.index, std::memory_order_release);
    probes_.fetch_add(1, std::memory_order_relaxed);
    return Verdict::kProbe;
  }
  if (f.size() < 12) return Verdict::kOurs;  // the parser drops it
  const std::uint32_t dest_qp = be32(f.data() + kBthDestQp) & 0xffffff;
  std::uint32_t owner;
  if (dest_qp == kGsiQpn) {
    if (f.size() < kCmServiceId + 8 || std::to_integer<std::uint8_t>(f[kMadClass]) != kCmClass) return Verdict::kOurs;
    const std::uint16_t attr = be16(f.data() + kMadAttrId);
    if (attr == kAttrReq || attr == kAttrSidrReq) {
      owner = service_owner(be64(f.data() + kCmServiceId));
      if (owner == 0) return Verdict::kOurs;  // nobody listens: our CM rejects it, as any would
    } else {
      owner = std::to_integer<std::uint32_t>(f[attr == kAttrSidrRep ? kCmLocalId : kCmRemoteId]);
      if (owner == 0) return Verdict::kOurs;
    }
  } else {
    owner = dest_qp >> 16;
    if (owner < kFirstSlot || owner > kLastSlot) return Verdict::kOurs;  // QP0, multicast: the parser's
  }
  if (owner == slot_) return Verdict::kOurs;
  foreign_.fetch_add(1, std::memory_order_relaxed);
  // For a live slot the map is stale (the kernel moved a socket); a free
  // slot's packets (a dead process's QPs) are just dropped, as a NIC would.
  if (slot_live(owner)) stale_.store(true, std::memory_order_release);
  return Verdict::kForeign;
}

bool HostSteering::rebuild_due(std::int64_t now_ns) {
  if (stale_.load(std::memory_order_acquire)) return true;
  if (now_ns < next_check_.load(std::memory_order_relaxed)) return false;
  next_check_.store(now_ns + kCheckNs, std::memory_order_relaxed);
  return !in_map(slot_) || mapped_dead();
}

int HostSteering::idle_timeout_ms() const {
  if (stale_.load(std::memory_order_relaxed) || reg_->n.load(std::memory_order_relaxed) > 1)
    return static_cast<int>(kCheckNs / 1'000'000);
  return -1;
}

bool HostSteering::try_rebuild() {
  if (disowned_.load(std::memory_order_relaxed)) return true;
  std::unique_lock local(rebuild_mu_, std::try_to_lock);
  if (!local.owns_lock()) return false;
  if (!try_lock_mutex()) return false;
  // Re-checked under the mutex: another member may have just rebuilt.
  if (stale_.load(std::memory_order_acquire) || !in_map(slot_) || mapped_dead()) rebuild_locked();
  unlock_mutex();
  return true;
}

void HostSteering::pump_once() {
  if (pump_) {
    pump_();
    return;
  }
  // Before the link receives (join): answer probes, drop the rest (nothing
  // here has a QP yet).
  std::array<std::byte, 64> b;
  const int family = ip_.is_v4() ? AF_INET : AF_INET6;
  for (;;) {
    SockAddr from;
    socklen_t len = sizeof from.u;
    const ssize_t n = ::recvfrom(sock_, b.data(), b.size(), MSG_DONTWAIT | MSG_TRUNC, from.ptr(), &len);
    if (n < 0) return;
    IpAddress src;
    std::uint16_t sport = 0;
    if (static_cast<std::size_t>(n) <= b.size() && from.ip_port(family, len, src, sport))
      (void)admit(std::span(b.data(), static_cast<std::size_t>(n)), src);
  }
}

void HostSteering::rebuild_locked() {
  stale_.store(false, std::memory_order_release);
  std::vector<std::uint32_t> live;
  for (std::uint32_t s = kFirstSlot; s <= kLastSlot; ++s) {
    if (slot_live(s))
      live.push_back(s);
    else
      reg_->slots[s].state.store(0, std::memory_order_relaxed);
  }
  const std::uint32_t gen = reg_->gen.fetch_add(1) + 1;
  // Alone in the group (the common case: one process on its address), our
  // socket is index 0 and nothing needs asking: no probe reaches the wire.
  const bool alone = live.size() == 1 && live[0] == slot_;
  SockAddr a = SockAddr::of(ip_, 0);
  const int ps = alone ? -1 : device_udp_socket(0, a.family());
  if (ps >= 0) (void)::bind(ps, a.ptr(), a.len());  // probes come from ip_
  a = SockAddr::of(ip_, port_);
  std::vector<std::int16_t> map;
  std::size_t found = 0;
  int misses = 0;
  for (std::uint32_t i = 0; i < kSlots && found < live.size() && misses < kMaxMisses && ps >= 0; ++i) {
    const Probe p{kProbeOpcode, static_cast<std::uint8_t>(i), {}, gen, reg_->nonce};
    (void)::sendto(ps, &p, sizeof p, 0, a.ptr(), a.len());
    const std::uint64_t want = std::uint64_t{gen} << 32 | i;
    const auto deadline = std::chrono::steady_clock::now() + kProbeWait;
    std::int32_t who = -1;
    while (who < 0 && std::chrono::steady_clock::now() < deadline) {
      pump_once();
      for (std::uint32_t s : live)
        if (reg_->slots[s].report.load(std::memory_order_acquire) == want) who = static_cast<std::int32_t>(s);
      if (who < 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    if (who < 0) {  // a socket nobody answers for (stopped, or its buffer full)
      map.push_back(-1);
      ++misses;
      continue;
    }
    bool dup = false;
    for (std::int16_t s : map) dup |= s == who;
    if (dup) break;  // i is past the group's end: the kernel's hash answered
    map.push_back(static_cast<std::int16_t>(who));
    ++found;
  }
  if (ps >= 0) ::close(ps);
  if (alone) map.assign(1, static_cast<std::int16_t>(slot_));
  while (!map.empty() && map.back() < 0) map.pop_back();

  // The program. Probes go to the index they name; QP1's MADs by service
  // or communication ID; the rest by DestQP's top byte.
  Program prog;
  enum { kCm = 1, kComm, kSlotChain, kData };
  prog.ldb(0);
  prog.jeq(kProbeOpcode, 0, 2);
  prog.ldb(1);
  prog.op(BPF_RET | BPF_A, 0);
  prog.ldw(kBthDestQp);
  prog.op(BPF_ALU | BPF_AND | BPF_K, 0xffffff);
  prog.jeq(kGsiQpn, 1, 0);
  prog.ja(kData);
  prog.label(kCm);
  prog.ldb(kMadClass);
  prog.jeq(kCmClass, 1, 0);
  prog.ret(kHash);
  prog.ldh(kMadAttrId);
  prog.jeq(kAttrReq, 2, 0);
  prog.jeq(kAttrSidrReq, 1, 0);
  prog.ja(kComm);
  auto index_of = [&](std::uint32_t s) -> int {
    for (std::size_t i = 0; i < map.size(); ++i)
      if (map[i] == static_cast<std::int16_t>(s)) return static_cast<int>(i);
    return -1;
  };
  for (std::uint32_t e = 0; e < kMaxServices; ++e) {
    const Registry::Service& s = reg_->services[e];
    const std::uint32_t owner = s.slot.load(std::memory_order_acquire);
    if (owner == 0 || !locked(check_fd_, kServiceBase + e)) continue;
    const int idx = index_of(owner);
    if (idx < 0) continue;
    const std::uint64_t sid = s.sid.load(std::memory_order_relaxed);
    prog.ldw(kCmServiceId);
    prog.jeq(static_cast<std::uint32_t>(sid >> 32), 0, 3);
    prog.ldw(kCmServiceId + 4);
    prog.jeq(static_cast<std::uint32_t>(sid), 0, 1);
    prog.ret(static_cast<std::uint32_t>(idx));
  }
  prog.ret(kHash);
  prog.label(kComm);
  prog.jeq(kAttrSidrRep, 0, 2);
  prog.ldb(kCmLocalId);
  prog.ja(kSlotChain);
  prog.ldb(kCmRemoteId);
  prog.ja(kSlotChain);
  prog.label(kData);
  prog.ldb(kBthDestSlot);
  prog.label(kSlotChain);
  for (std::size_t i = 0; i < map.size(); ++i) {
    if (map[i] <= 0) continue;
    prog.jeq(static_cast<std::uint32_t>(map[i]), 0, 1);
    prog.ret(static_cast<std::uint32_t>(i));
  }
  prog.ret(kHash);
  prog.link();
  sock_fprog fp{static_cast<unsigned short>(prog.code.size()), prog.code.data()};
  (void)::setsockopt(sock_, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &fp, sizeof fp);
  for (std::size_t i = 0; i < map.size(); ++i) reg_->idx2slot[i].store(map[i], std::memory_order_relaxed);
  reg_->n.store(static_cast<std::int32_t>(map.size()), std::memory_order_release);
  rebuilds_.fetch_add(1, std::memory_order_relaxed);
}

Result<void> HostSteering::claim_service(std::uint64_t sid) {
  if (disowned_.load(std::memory_order_relaxed))
    return make_error(ENODEV, "the device belongs to the parent process (fork): open one in this process");
  std::lock_guard local(rebuild_mu_);
  lock_mutex();
  if (service_owner(sid) != 0) {
    unlock_mutex();
    return make_error(EADDRINUSE, fmt::format("service {:#x} has a listener on this host", sid));
  }
  for (std::uint32_t e = 0; e < kMaxServices; ++e) {
    if (locked(check_fd_, kServiceBase + e) || ofd_lock(reg_fd_, F_OFD_SETLK, F_WRLCK, kServiceBase + e) != 0)
      continue;
    reg_->services[e].sid.store(sid, std::memory_order_relaxed);
    reg_->services[e].slot.store(slot_, std::memory_order_release);
    rebuild_locked();
    unlock_mutex();
    return {};
  }
  unlock_mutex();
  return make_error(ENOSPC, fmt::format("the host's table of {} listeners is full", kMaxServices));
}

void HostSteering::release_service(std::uint64_t sid) {
  if (disowned_.load(std::memory_order_relaxed)) return;
  std::lock_guard local(rebuild_mu_);
  lock_mutex();
  for (std::uint32_t e = 0; e < kMaxServices; ++e) {
    Registry::Service& s = reg_->services[e];
    if (s.slot.load(std::memory_order_acquire) != slot_ || s.sid.load(std::memory_order_relaxed) != sid) continue;
    s.slot.store(0, std::memory_order_release);
    (void)ofd_lock(reg_fd_, F_OFD_SETLK, F_UNLCK, kServiceBase + e);
  }
  rebuild_locked();
  unlock_mutex();
}

SteeringStats HostSteering::stats() const {
  SteeringStats s;
  s.slot = slot_;
  s.members = static_cast<std::uint32_t>(std::max(0, reg_->n.load(std::memory_order_relaxed)));
  s.rebuilds = rebuilds_.load(std::memory_order_relaxed);
  s.foreign = foreign_.load(std::memory_order_relaxed);
  s.probes = probes_.load(std::memory_order_relaxed);
  s.bad_probes = bad_probes_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace srdma::hca
