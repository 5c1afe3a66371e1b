// The RoCEv2 link: the device's packets in UDP datagrams (IBTA vol. 1
// Annex A17), between processes and hosts.
//
// One UDP socket bound to the device's IP address (IPv4, or IPv6: then the
// link addresses are roce6 ones, net.h) and the RoCEv2 port
// receives; a thread drains it in batches (recvmmsg), polls on for a while
// after traffic and then sleeps in poll(), so that an idle device costs no
// CPU. A consumer that polls the device (an empty CQ poll, Device::progress)
// receives in its own thread instead, and while it does the receive thread
// stays out of its way: on a host with few cores, two threads spinning per
// process cost more than either saves. Every frame is parsed and checked (roce_frame.h) before anything in
// it is believed; a bad one is dropped and counted by reason.
//
// Sending: a QP's packets leave from a socket bound to its UDP source port
// (0xC000 | 14 bits of a hash of its QPN, ECMP entropy as rxe chooses it;
// the device's port when that one cannot be bound), unconnected and with
// IP_PMTUDISC_DO, so that the kernel sends DF and IPv4 Identification 0 and
// the sender knows every field the ICRC covers. Packets sent inside a
// SendBatch (link.h) go out together (sendmmsg) when it ends; their payload
// is read from its memory then, so it must stay put until the batch ends
// (it does: the requester's buffers until their WR completes, a responder's
// MR inside its delivery).
//
// Thread-safe.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <mutex>
#include <thread>
#include <vector>

#include "hca/host_steering.h"
#include "hca/link.h"
#include "hca/same_host.h"
#include "srdma/net.h"
#include "srdma/status.h"

namespace srdma::hca {

// A UDP socket of the device's own, made by the socket(2) system call
// rather than libc's socket(): an LD_PRELOAD shim that wraps socket() (Debian's
// librspreload turns SOCK_DGRAM sockets into datagram rsockets, which run
// on this very device) must not take the device's sockets over.
// An AF_INET6 one is IPV6_V6ONLY: an IPv6 device hears IPv6 only.
int device_udp_socket(int extra_flags = 0, int family = AF_INET);

class QueueEngine;

struct IpUdpFields;

struct UdpLinkStats {
  std::uint64_t frames_sent = 0;
  std::uint64_t frames_received = 0;  // parsed and handed to the device
  // The system calls that moved them: frames per call is what batching
  // (sendmmsg, GSO; recvmmsg, GRO) buys.
  std::uint64_t send_calls = 0;          // sendmmsg calls
  std::uint64_t recv_calls = 0;          // recvmmsg calls that returned datagrams
  std::uint64_t datagrams_received = 0;  // what they returned (a GRO run is one)
  std::uint64_t send_errors = 0;      // datagrams the kernel refused (lost: the transport resends)
  std::uint64_t rx_overruns = 0;      // datagrams the kernel dropped for a full receive buffer
  std::uint64_t source_port_fallbacks = 0;  // QPs whose entropy port could not be bound
};

class UdpLink final : public Link {
 public:
  // Binds config.ip:config.port; EADDRINUSE / EADDRNOTAVAIL ... saying which
  // address and why. No thread yet.
  static Result<std::unique_ptr<UdpLink>> open(const NetConfig& config);
  ~UdpLink() override;
  UdpLink(const UdpLink&) = delete;
  UdpLink& operator=(const UdpLink&) = delete;

  // Starts the receive thread; what arrives goes to `engine`.
  // REQUIRES: stop() is called before `engine` is destroyed.
  void start(QueueEngine& engine);
  // Stops and joins the receive thread: nothing is delivered once it
  // returns. Idempotent.
  void stop();

  bool send(Packet&& pkt) override;
  void end_batch() override;
  int poll() override;
  bool polled() const override { return true; }
  bool carries_trains_to(std::uint64_t addr, std::uint32_t qpn) override;
  bool prepare_sleep(std::vector<pollfd>& fds) override;
  void end_sleep() override;
  std::int64_t busy_poll_ns() const override { return std::int64_t{config_.busy_poll_us} * 1000; }
  bool knows(std::uint64_t addr) const override;
  std::uint32_t active_mtu() const override { return active_mtu_; }
  void add_drops(TransportCounters& c) const override;

  // Multicast (IBA 10.5, RoCEv2 over an IPv4 group; udp_multicast.cc):
  // UD datagrams sent to `group` (DestQP 0xFFFFFF) reach UD QP `qpn` of
  // this device. The group's first attach joins it on the device's
  // interface (a socket bound to group:port, IP_ADD_MEMBERSHIP for the
  // device's address); its last detach leaves it. EINVAL for a group that
  // is not IPv4 multicast, EEXIST / ENOENT for an attach made already / a
  // detach of none.
  // ENOMEM beyond kMaxMcastGroups groups (a socket each) or
  // kMaxMcastQpsPerGroup QPs in one (rxe's per-group figure).
  static constexpr std::uint32_t kMaxMcastGroups = 256;
  static constexpr std::uint32_t kMaxMcastQpsPerGroup = 56;
  Result<void> attach_mcast(std::uint32_t group, std::uint32_t qpn);
  Result<void> detach_mcast(std::uint32_t group, std::uint32_t qpn);

  std::uint32_t ipv4() const { return ip_; }  // 0 on an IPv6 device
  bool ipv6() const { return v6_; }
  const IpAddress& ip() const { return ip_addr_; }
  // The host group this device shares its address with (null: it holds
  // the address alone, NetConfig::shared false).
  HostSteering* steering() const { return steer_.get(); }
  // The shared-memory path to this user's other devices on this host (null:
  // none, on an exclusive address or with NetConfig::same_host false).
  SameHostPath* same_host() const { return same_host_.get(); }
  // Runs of frames arrive as one datagram (UDP_GRO; SRDMA_GRO=0: not).
  bool gro() const { return gro_; }
  std::uint64_t address() const;
  UdpLinkStats stats() const;

 private:
  UdpLink(const NetConfig& config, const IpAddress& ip, std::uint64_t address, int fd, int wake_fd, std::uint32_t active_mtu, bool gso,
          bool gro, std::unique_ptr<HostSteering> steer, std::unique_ptr<SameHostPath> same_host);
  struct RxState;
  void receive_loop();
  // One recvmmsg and the delivery of what it got, then what the same-host
  // rings hold. REQUIRES: rx_busy_ held.
  int receive_once();
  int receive_datagrams();
  // One frame of a datagram (all of it, or a piece of a GRO run): steered,
  // parsed, checked and handed to the engine, or dropped and counted.
  void receive_frame(std::span<const std::byte> frame, const IpAddress& src, const IpUdpFields& ip, int ttl, int tos);
  int receive_same_host();
  // Hands a frame for another device of this host to its ring. false: not
  // one (it takes the wire).
  bool send_same_host(std::uint64_t dst_addr, std::uint32_t dst_qpn, std::span<const iovec> iov, std::uint8_t ttl,
                      std::uint8_t tos, bool corrupted);
  // The same for a train (or part of one) as one record (hca/ring_train.h).
  bool send_train_same_host(const Packet& train, std::uint32_t slot);
  // The slot of the device that QP `dst_qpn` at `dst_addr` belongs to when
  // a ring may reach it; 0: the wire's (QP0/QP1, multicast, this device
  // itself, no same-host path).
  std::uint32_t ring_slot(std::uint64_t dst_addr, std::uint32_t dst_qpn) const;
  // Frames for the wire (a train unrolled), or for rings frame by frame.
  void enqueue_packets(const Packet& in);
  // The receive thread's look at the same-host path's connections (at most
  // every kControlNs while traffic flows), or a request for the receiver's
  // holder to look (control_due_).
  void same_host_control();
  // The look itself. REQUIRES: rx_busy_ held.
  void same_host_control_locked();
  bool on_rx_thread() const {
    return std::this_thread::get_id() == rx_thread_id_.load(std::memory_order_relaxed);
  }
  // Puts `p` in this thread's pending datagrams (see SendBatch).
  void enqueue(Packet&& p);
  // A consumer's answers wait for its next send (see udp_link.cc).
  void defer(Packet&& p);
  // Sends the deferred answers, and what this thread has pending, now.
  void flush_deferred();
  // Queues the deferred answers in this thread's pending datagrams.
  // REQUIRES: deferred_mu_ held, until they are flushed.
  void take_deferred();
  // Reads away a defer() wakeup (not stop()'s).
  void drain_wakeups();
  // What the groups' sockets hold, each frame to every QP attached to its
  // group. REQUIRES: rx_busy_ held.
  int receive_groups();
  // What a sleeping receiver polls for the wire: the device's socket and
  // the groups' (udp_multicast.cc).
  void wire_fds(std::vector<pollfd>& fds) const;
  // The socket that sends from entropy port `sport`: bound on first use.
  int socket_for(std::uint16_t sport);
  // Hands the calling thread's pending datagrams to the kernel.
  static void flush_pending();
  friend struct PendingSends;

  const NetConfig config_;
  const IpAddress ip_addr_;   // the device's address, either family
  const bool v6_;             // an IPv6 device (no same-host path, no multicast)
  const int family_;          // AF_INET or AF_INET6: every socket of the device's
  const std::uint32_t ip_;    // the IPv4 address; 0 on an IPv6 device
  const std::uint64_t address_;  // address()
  // Declared before fd_: destroyed after the destructor has closed fd_, so
  // that our socket has left the group before our slot is free.
  const std::unique_ptr<HostSteering> steer_;
  const std::unique_ptr<SameHostPath> same_host_;
  const int fd_;       // bound to ip_:port, receives
  const int wake_fd_;  // eventfd: stop() and defer() wake the receive thread
  const std::uint32_t active_mtu_;
  // The kernel segments UDP (UDP_SEGMENT) and the config allows it; off
  // for good once a GSO send is refused as such.
  std::atomic<bool> gso_;
  // The socket hands over runs of frames as one datagram (UDP_GRO).
  const bool gro_;
  QueueEngine* engine_ = nullptr;
  std::thread rx_thread_;
  // The receive thread's id, stored by that thread: rx_thread_ itself is
  // still being assigned when the thread first runs.
  std::atomic<std::thread::id> rx_thread_id_{};
  std::atomic<bool> stopping_{false};
  // Whoever receives holds this (the receive thread or a consumer's poll()).
  std::atomic<bool> rx_busy_{false};
  std::unique_ptr<RxState> rx_;
  std::atomic<std::uint64_t> consumer_polls_{0};  // poll() calls, ever
  std::mutex deferred_mu_;
  std::vector<Packet> deferred_;
  std::atomic<bool> has_deferred_{false};
  std::atomic<bool> parked_{false};  // the receive thread sleeps in poll() until traffic
  // The receive thread, standing aside while a consumer receives, saw the
  // socket readable: the consumer's next receive_once() looks at it.
  std::atomic<bool> socket_ready_{false};
  std::int64_t last_control_ = 0;     // the receive thread's: same_host_control()
  // The receive thread could not take the receiver for same_host_control():
  // whoever holds it (a consumer that polls without pause) does it instead.
  std::atomic<bool> control_due_{false};

  // Multicast groups joined, by group address. A group's socket stays open
  // until the link closes (the receive thread may be polling it); leaving
  // drops the membership.
  struct Group {
    int fd = -1;
    bool member = false;
    std::vector<std::uint32_t> qpns;
  };
  mutable std::mutex groups_mu_;
  std::map<std::uint32_t, Group> groups_;
  std::atomic<bool> has_groups_{false};

  // Entropy-port sockets, indexed by the port's low 14 bits; -1 until used.
  std::mutex sockets_mu_;  // serialises binding
  std::unique_ptr<std::atomic<int>[]> sockets_;

  std::atomic<std::uint64_t> frames_sent_{0};
  std::atomic<std::uint64_t> frames_received_{0};
  std::atomic<std::uint64_t> send_calls_{0};
  std::atomic<std::uint64_t> recv_calls_{0};
  std::atomic<std::uint64_t> datagrams_received_{0};
  std::atomic<std::uint64_t> send_errors_{0};
  std::atomic<std::uint64_t> rx_overruns_{0};
  std::atomic<std::uint64_t> port_fallbacks_{0};
  std::array<std::atomic<std::uint64_t>, kNumDropReasons> dropped_{};
};

}  // namespace srdma::hca
