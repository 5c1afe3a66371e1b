// One host, many processes: the processes of one user share an address and
// the RoCEv2 port, and each RoCEv2 packet reaches the process that owns
// its destination QP (docs/DESIGN.md, "The host model"; the measurements
// behind it in docs/host_steering.md).
//
// - Every member binds ip:4791 with SO_REUSEPORT (never SO_REUSEADDR: with
//   it, another user's socket could take our packets). The kernel lets only
//   sockets of one euid into a group.
// - A member owns a slot s in 1..254 of the host registry, a 0600 file in
//   /dev/shm named after the euid, address and port: an OFD write lock on
//   the slot's byte, which the kernel drops when the process dies, so a dead
//   process blocks nobody. Its QPNs are s << 16 | local, and its CM
//   communication IDs carry s in their top byte.
// - A classic BPF program on the group (SO_ATTACH_REUSEPORT_CBPF, no
//   privilege) picks the socket: by the BTH's DestQP top byte; for QP1 (the
//   CM's MADs) by the ServiceID of a REQ or SIDR_REQ (the registry's table of
//   listeners) and by the top byte of the communication ID a later MAD
//   answers (MADs of other management classes, and anything else it cannot
//   place, go to the kernel's hash).
// - The kernel numbers a group's sockets in join order and moves the last
//   one into a leaver's hole, and no call tells a socket its index: the
//   rebuilder learns slot -> index by probing (a datagram with BTH opcode
//   0xFF, manufacturer-specific, that the program steers to the index in
//   its byte 1; the member that receives it writes the probe's generation
//   and index into its slot, if the probe carries the registry's secret).
// - A rebuild runs under the registry's mutex (another OFD lock) when a
//   member joins, when a listener comes or goes, when a mapped slot's owner
//   is gone, and when a packet for another live slot arrives here (the
//   map is stale). The receive thread only ever try-locks the mutex: a
//   member waiting for it would not answer the rebuilder's probes.
//
// Nothing here is trusted beyond the user: the registry refuses a file it
// does not own or that others may read, and a packet of another slot is
// dropped, never answered on its owner's behalf.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>

#include "srdma/net.h"
#include "srdma/status.h"

namespace srdma::hca {

struct SteeringStats {
  std::uint32_t slot = 0;
  std::uint32_t members = 0;        // sockets in the group's current map
  std::uint64_t rebuilds = 0;       // programs this member attached
  std::uint64_t foreign = 0;        // packets for another slot, dropped here
  std::uint64_t probes = 0;         // probes answered
  std::uint64_t bad_probes = 0;     // probes without the secret or from elsewhere: ignored
};

class HostSteering {
 public:
  static constexpr std::uint32_t kFirstSlot = 1;   // slot 0 holds QP0 and QP1
  static constexpr std::uint32_t kLastSlot = 254;  // slot 255 holds 0xFFFFFF (multicast)
  static constexpr std::uint32_t kMaxServices = 512;
  static constexpr std::uint8_t kProbeOpcode = 0xff;

  // What receives on the group's socket while a rebuild's probes are out:
  // the link's receive path (which calls admit()), run on the caller's
  // thread. It must not block.
  using Pump = std::function<void()>;

  // Joins the group of ip:port (IPv4 or IPv6): takes a slot, binds a socket with
  // SO_REUSEPORT (fd(); the caller owns and closes it) and attaches the
  // group's program. EADDRINUSE when another user holds the address, EPERM
  // for a registry that is not ours or not private, EBUSY when every slot
  // is taken.
  static Result<std::unique_ptr<HostSteering>> join(const IpAddress& ip, std::uint16_t port);
  ~HostSteering();
  HostSteering(const HostSteering&) = delete;
  HostSteering& operator=(const HostSteering&) = delete;

  int fd() const { return sock_; }
  std::uint32_t slot() const { return slot_; }
  // Set once the link can receive: later rebuilds pump through it. Until
  // then a rebuild reads the socket itself and answers probes only.
  void set_pump(Pump pump);

  // The receive path's first look at a datagram from src_ip:
  enum class Verdict : std::uint8_t {
    kOurs,     // parse and deliver it (a malformed one is the parser's to drop)
    kProbe,    // a probe, answered (or ignored): consumed
    kForeign,  // another slot's: drop it
  };
  Verdict admit(std::span<const std::byte> frame, const IpAddress& src_ip);

  // Whether a rebuild is due (a stale map was seen, our slot is not in the
  // map, a listener changed, or, at most every kCheckNs, a mapped slot's
  // owner is gone). Cheap; called by the receive loop.
  bool rebuild_due(std::int64_t now_ns);
  // Rebuilds if no other member is rebuilding (try-lock). false: another
  // member holds the mutex; ask again later.
  bool try_rebuild();
  // How long the receive loop may sleep before rebuild_due() needs a look
  // (ms; -1: until traffic, when this is the group's only member).
  int idle_timeout_ms() const;

  // A listener's ServiceID: REQs and SIDR_REQs naming it come to this
  // member. EADDRINUSE when another live member listens on it; ENOSPC when
  // the table is full. Rebuilds before it returns.
  Result<void> claim_service(std::uint64_t service_id);
  void release_service(std::uint64_t service_id);

  SteeringStats stats() const;
  // In a child of fork() (its atfork handler): the parent's members are not
  // the child's to leave.
  static void disown_in_child();

  static constexpr std::int64_t kCheckNs = 20'000'000;

  struct Registry;  // host_steering.cc

 private:
  HostSteering(const IpAddress& ip, std::uint16_t port, int reg_fd, int check_fd, Registry* reg, std::uint32_t slot);
  // Gives up the slot and the listeners, and removes the registry if no
  // member is left. Once (the destructor, or exit() for a program that
  // never closed its device).
  void leave();
  static void leave_all_at_exit();
  void rebuild_locked();
  void pump_once();
  bool slot_live(std::uint32_t s) const;
  bool in_map(std::uint32_t s) const;
  bool mapped_dead() const;
  void lock_mutex();
  bool try_lock_mutex();
  void unlock_mutex();
  std::uint32_t service_owner(std::uint64_t sid) const;  // 0: none live

  const IpAddress ip_;  // either family
  const std::uint16_t port_;
  const int reg_fd_;    // holds our slot's lock (and the mutex while we rebuild)
  const int check_fd_;  // a second open file description: F_OFD_GETLK sees reg_fd_'s locks
  Registry* const reg_;
  const std::uint32_t slot_;
  int sock_ = -1;
  // The OFD mutex belongs to reg_fd_'s open file description, so two
  // threads of this member would both "hold" it: this keeps them apart.
  std::mutex rebuild_mu_;
  Pump pump_;
  bool left_ = false;  // under g_members_mu (host_steering.cc)
  std::atomic<bool> disowned_{false};  // in a child of fork(): the parent's member, not ours
  std::atomic<bool> stale_{false};        // a packet for another live slot reached us
  std::atomic<bool> services_changed_{false};
  std::atomic<std::int64_t> next_check_{0};
  std::atomic<std::uint64_t> rebuilds_{0}, foreign_{0}, probes_{0}, bad_probes_{0};
};

}  // namespace srdma::hca
