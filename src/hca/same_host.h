// The same-host path: frames between two devices of one user on one host
// (two processes, or two devices of one process) go through shared memory
// instead of the kernel's UDP stack. The transport is the same (PSNs, ACKs,
// retries, counters); only the link under it changes, per peer device.
//
// - Every device in a host group (hca/host_steering.h) listens on an
//   abstract unix socket named after its user, address, port and slot
//   ("srdma-<euid>-<ip>-<port>-<slot>"; abstract names live in the network
//   namespace, as the address does).
// - A device that sends to ip:slot connects there once. It checks the
//   listener's credentials (SO_PEERCRED: our euid, else the name is a
//   squatter's and nothing is sent), creates a ring (hca/shm_ring.h) and an
//   eventfd (its doorbell), and passes both over the socket with a hello.
//   The ring is one-way; the answers come back on the peer's own ring.
// - The listener takes a connection only from a process of its euid, and a
//   hello only with exactly a sealed memfd of the announced size and an
//   eventfd; anything else is refused and counted.
// - A third process has no way into a ring: it has no name, and its fd
//   travels only over a connection both ends checked. Even a ring's own
//   producer can feed the consumer nothing it could not send as a datagram:
//   every frame is parsed and checked like one (udp_link.cc).
// - A peer that dies hangs up its sockets: its channels close at once, the
//   frames it left are delivered first, and QPs that still send to it retry
//   out over UDP, where nobody answers. Nothing is left behind: memfds go
//   with their last mapping.
//
// Thread-safe as noted per call.
#pragma once

#include <poll.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "hca/shm_ring.h"
#include "srdma/status.h"

namespace srdma::hca {

struct SameHostStats {
  std::uint32_t peers_out = 0;       // rings this device writes
  std::uint32_t peers_in = 0;        // rings this device reads
  std::uint64_t frames_sent = 0;
  std::uint64_t frames_received = 0;  // parsed and handed to the device (the drops: the link's counts)
  std::uint64_t ring_full = 0;       // frames dropped for a full ring (the transport resends)
  std::uint64_t refused = 0;         // connections or hellos refused: another user, a bad hello, too many
  std::uint64_t broken_rings = 0;    // rings closed for a word out of range
};

class SameHostPath {
 public:
  static constexpr std::size_t kRingBytes = std::size_t{2} << 20;
  // A full ring is a busy consumer, not a lost one: the producer waits
  // this long for room (a NIC would push back too) before the frame is lost.
  static constexpr std::int64_t kFullWaitNs = 200'000;
  static constexpr std::size_t kMaxPeersIn = 512;
  static constexpr std::size_t kMaxPending = 16;
  // How long a destination found without a listener is sent to over UDP
  // before the next look.
  static constexpr std::int64_t kRetryNs = 100'000'000;

  // Listens as ip:port's slot `slot`. EADDRINUSE if that name is taken.
  static Result<std::unique_ptr<SameHostPath>> open(std::uint32_t ip, std::uint16_t port, std::uint32_t slot,
                                                    std::size_t ring_bytes = kRingBytes);
  ~SameHostPath();
  SameHostPath(const SameHostPath&) = delete;
  SameHostPath& operator=(const SameHostPath&) = delete;

  std::uint32_t slot() const { return slot_; }

  // Any thread. One frame (its pieces) for the device that owns slot
  // `dst_slot` at dst_ip:port.
  enum class Sent : std::uint8_t {
    kNotHere,  // no such device on this host (or its ring broke): use the wire
    kSent,
    kFull,     // the peer's ring is full: the frame is lost, as a datagram would be
  };
  Sent send(std::uint32_t dst_ip, std::uint32_t dst_slot, std::span<const std::span<const std::byte>> pieces,
            std::uint8_t ttl, std::uint8_t tos, std::uint8_t flags = 0, bool batched = false);
  // Any thread. Whether send() to that device goes through a ring now
  // (connecting to it if no one has): a QP whose peer is there sends it
  // trains (hca/ring_train.h). It may still fall back to the wire later,
  // when the peer goes.
  bool reachable(std::uint32_t dst_ip, std::uint32_t dst_slot);
  // The largest frame send() takes: a train longer than this is sent in
  // parts (a quarter of the ring, so that a full ring drains to room).
  std::size_t max_frame_bytes() const { return ring_bytes_ / 4; }
  // Frames sent with `batched` wait for this: the calling thread's rings
  // are published, and sleeping consumers woken (the link calls it where
  // its send batch ends).
  static void flush_thread();

  // The receiver (one thread at a time: the link's receiver). Hands up to
  // `budget` frames from the rings to `deliver(record, src_ip)`, which says
  // whether it took the frame (frames_received) or dropped it (its count).
  template <class Deliver>
  int receive(int budget, Deliver&& deliver);
  // The receiver: takes new connections and hellos, closes channels whose
  // peer hung up or whose ring broke. Whether a channel came or went.
  bool control();
  // The receiver, before a sleep (the receive thread's, or a consumer's
  // blocked on a completion channel): the rings' doorbells added to `fds`
  // and the rings marked parked, so that a producer rings. false: frames
  // wait; do not sleep. Either way unpark() after.
  bool park_rings(std::vector<pollfd>& fds);
  // The receiver, before the receive thread sleeps: what makes control()
  // due (the listener, hellos pending, the connections).
  void control_fds(std::vector<pollfd>& fds) const;
  // Any thread, once per park_rings(), after the sleep. The rings stop
  // ringing when no thread sleeps on them any more: two may (the receive
  // thread and a blocked consumer), and the one that wakes first must not
  // silence the other's doorbells.
  void unpark();

  SameHostStats stats() const;

 public:
  struct Outbound;  // same_host.cc

 private:
  struct Inbound {
    int conn = -1;
    int doorbell = -1;
    ShmRing ring;
    std::uint32_t src_ip = 0;
    ~Inbound();
  };
  SameHostPath(std::uint32_t ip, std::uint16_t port, std::uint32_t slot, std::size_t ring_bytes, int listen_fd);
  std::shared_ptr<Outbound> connect_to(std::uint32_t dst_ip, std::uint32_t dst_slot);
  std::shared_ptr<Outbound> outbound(std::uint32_t dst_ip, std::uint32_t dst_slot);
  void accept_new();
  void take_hello(int conn);

  const std::uint32_t ip_;
  const std::uint16_t port_;
  const std::uint32_t slot_;
  const std::size_t ring_bytes_;
  const int listen_fd_;

  mutable std::mutex out_mu_;
  std::unordered_map<std::uint64_t, std::shared_ptr<Outbound>> out_;

  // The receiver's (whoever holds the link's receiver). Changed under
  // in_mu_ too: the receive thread unparks the rings after its sleep
  // without holding the receiver.
  mutable std::mutex in_mu_;
  std::vector<std::unique_ptr<Inbound>> in_;
  int sleepers_ = 0;  // park_rings() not yet unparked; under in_mu_
  std::vector<int> pending_;  // accepted, hello not yet read
  std::atomic<std::uint32_t> peers_in_{0};

  std::atomic<std::uint64_t> frames_sent_{0}, frames_received_{0}, ring_full_{0}, refused_{0}, broken_{0};
};

template <class Deliver>
int SameHostPath::receive(int budget, Deliver&& deliver) {
  int n = 0;
  std::uint64_t taken = 0;
  for (auto& c : in_) {
    ShmRecord rec;
    while (n < budget && c->ring.peek(rec)) {
      taken += deliver(rec, c->src_ip) ? 1 : 0;
      c->ring.pop();
      ++n;
    }
  }
  if (taken != 0) frames_received_.fetch_add(taken, std::memory_order_relaxed);
  return n;
}

}  // namespace srdma::hca
