// A software RDMA device: open one with a profile, query it, allocate PDs.
//
// Device is an owning, move-only handle. The device stays open while the
// handle or anything allocated from it (a PD, an MR) lives.
// Thread safety: all calls may be made from any thread.
#pragma once

#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "srdma/async_event.h"
#include "srdma/counters.h"
#include "srdma/impair.h"
#include "srdma/net.h"
#include "srdma/cq.h"
#include "srdma/cq_pool.h"
#include "srdma/dm.h"
#include "srdma/pd.h"
#include "srdma/profile.h"
#include "srdma/status.h"
#include "srdma/translation.h"
#include "srdma/usage.h"
#include "srdma/xrcd.h"

struct pollfd;

namespace srdma {

namespace detail {
struct DeviceImpl;
struct ClientAccess;
}  // namespace detail

// What query_device reports (the fields of ib_device_attr that apply).
struct DeviceAttr {
  std::string name;
  std::uint64_t max_mr_size = 0;
  std::uint64_t page_size_cap = 0;  // bit n set: pages of 2^n bytes supported
  std::uint32_t max_qp = 0;
  std::uint32_t max_qp_wr = 0;
  std::uint32_t max_sge = 0;
  std::uint32_t max_cq = 0;
  std::uint32_t max_cqe = 0;
  std::uint32_t max_mr = 0;
  std::uint32_t max_mw = 0;  // windows share the MPT with regions (as on mthca)
  std::uint32_t max_pd = 0;
  std::uint32_t max_inline_data = 0;
  std::uint32_t max_map_per_fmr = 0;  // (1 << (32 - log2(num_mpt))) - 1
  std::uint32_t max_qp_rd_atom = 0;       // max_dest_rd_atomic at most (responder resources)
  std::uint32_t max_qp_init_rd_atom = 0;  // max_rd_atomic at most
  std::uint32_t num_comp_vectors = 0;
  std::uint32_t max_srq = 0;      // the SRQ table: as large as the QP table, SRQN 0 reserved
  std::uint32_t max_srq_wr = 0;   // max_qp_wr
  std::uint32_t max_srq_sge = 0;  // max_sge
  // Tag-matching SRQs (SrqInitAttr::max_num_tags), on RC QPs: their limits
  // (0 tags: none). A rendezvous request (TMH, RVH, optional data) of at
  // most tm_max_rndv_hdr_size bytes that matches is offloaded: the device
  // READs the sender's buffer into the tag's and sends the FIN.
  std::uint32_t tm_max_num_tags = 0;
  std::uint32_t tm_max_ops = 0;
  std::uint32_t tm_max_sge = 0;
  std::uint32_t tm_max_rndv_hdr_size = 0;
  // On-demand paging (ACCESS_ON_DEMAND regions, explicit and implicit:
  // hca/page_fault.h), on RC, UC and UD; false where the kernel cannot
  // fault pages in for the device.
  bool on_demand_paging = false;
  std::uint64_t max_dm_size = 0;  // device memory in all (kMaxDmSize; dm.h)
  // UD multicast (attach_mcast): RoCEv2 devices only, 0 in process.
  std::uint32_t max_mcast_grp = 0;
  std::uint32_t max_mcast_qp_attach = 0;  // QPs per group
};

// What query_port reports for the device's one port (ib_port_attr's
// fields that apply).
struct PortAttr {
  bool ethernet = false;        // link layer: Ethernet (RoCEv2) or InfiniBand (the in-process link)
  std::uint32_t active_mtu = 0;  // the largest path_mtu a QP may use
  std::uint32_t max_mtu = 0;
  std::uint16_t lid = 0;        // low 16 bits of the address (RoCE ignores it; LID-only tools use it)
  Gid gid{};                    // GID[0]: ::ffff:a.b.c.d on RoCEv2 over IPv4, the address itself over
                                // IPv6, fe80::<address> in process
  std::uint64_t address = 0;    // Device::address()
};

// What the RoCEv2 link did (all zero on the in-process link).
struct WireStats {
  std::uint64_t frames_sent = 0;
  std::uint64_t frames_received = 0;  // parsed and handed to the device
  std::uint64_t send_errors = 0;      // sends the kernel refused (lost: the transport resends)
  std::uint64_t rx_overruns = 0;      // datagrams the kernel dropped for a full receive buffer
  std::uint64_t source_port_fallbacks = 0;  // QPs whose entropy source port could not be bound
  // The system calls behind those frames (frames per call: what sendmmsg
  // and GSO, recvmmsg and GRO batch):
  std::uint64_t send_calls = 0;          // sendmmsg calls
  std::uint64_t recv_calls = 0;          // recvmmsg calls that returned datagrams
  std::uint64_t datagrams_received = 0;  // the datagrams they returned (a GRO run is one)
  bool gro = false;                      // runs of frames arrive as one datagram (UDP_GRO)
  // On an address shared by this user's processes (Device::host_slot):
  std::uint32_t host_members = 0;     // sockets in the host group's map
  std::uint64_t steer_rebuilds = 0;   // steering programs this device attached
  std::uint64_t steer_foreign = 0;    // packets for another process's QP, dropped here
  std::uint64_t steer_bad_probes = 0; // probes without the host's secret or from elsewhere: ignored
  // The same-host path (shared-memory rings to this user's other devices
  // on this host), beside the RoCEv2 frames above:
  std::uint32_t same_host_peers = 0;           // devices this one writes to through a ring now
  std::uint64_t same_host_frames_sent = 0;
  std::uint64_t same_host_frames_received = 0;
  std::uint64_t same_host_ring_full = 0;       // frames lost to a full ring (the transport resends)
  std::uint64_t same_host_refused = 0;         // connections or rings refused (another user, a bad hello, a broken ring)
};

// One completion vector's counters.
struct CompVectorStats {
  std::uint32_t vector = 0;
  int cpu = -1;                      // where its thread is pinned, -1 if not
  std::uint64_t interrupts = 0;      // wake-ups of its thread that delivered events
  std::uint64_t events = 0;          // completion events delivered
  std::uint64_t cqes = 0;            // CQEs written to its CQs
  std::uint64_t completions_handled = 0;  // CQEs polled from its CQs
};

// Translation-cache counters.
struct TptStats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t syncs = 0;
};

class Device {
 public:
  // Validates `profile` (see validate_profile) and opens a device with it.
  static Result<Device> open(const Profile& profile = {}, std::string name = "srdma0");
  // A device on an IP network (net.h): it binds net.ip and its RoCEv2 port
  // and reaches its peers over UDP; its address is roce_address(net.ip).
  // The bind's error (EADDRINUSE, EADDRNOTAVAIL ...) names the address.
  static Result<Device> open(const Profile& profile, std::string name, const NetConfig& net);

  Device() = default;
  Device(Device&&) noexcept = default;
  Device& operator=(Device&&) noexcept = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device() = default;

  bool valid() const { return state_ != nullptr; }
  // Another owning handle on the same device.
  Device share() const { return Device(state_); }

  // Removes the device (like ib_unregister_device): every client's remove()
  // runs (there ULPs destroy their QPs and return their pool CQs), then the
  // CQ pool is freed. Afterwards nothing new can be created (ENODEV); the
  // memory goes with the last handle. EBUSY if pool CQs were still reserved
  // (they are freed once their QPs are gone); EINVAL if already removed.
  Result<void> remove();
  bool removed() const;
  const std::string& name() const;
  const Profile& profile() const;  // after validation
  DeviceAttr query() const;
  PortAttr query_port() const;
  // Receives what the device's wire holds, in the calling thread; the
  // packets handled. A consumer that spins on memory rather than on a CQ
  // (an RDMA WRITE's last byte) calls this as it spins: on the RoCEv2 link
  // a spinning consumer is the receiver (an empty CQ poll does the same).
  // The in-process link delivers by itself: 0.
  int progress();
  // poll(2) on `fds` that, on a wire received by polling (the RoCEv2
  // link), receives from the wire in the calling thread while it waits, as
  // a consumer blocked in CompChannel::get_event does: a completion the
  // arriving packets make, and its channel's event, are made by this
  // thread, with no hop through the receive thread (which stands aside
  // for a consumer that polls, so a plain poll(2) on a channel's fd after
  // an empty CQ poll waited for its next look, 100 us). poll's result and
  // errno (EINTR when a signal ends the wait); `timeout_ms` as poll's.
  int poll_receiving(::pollfd* fds, std::size_t nfds, int timeout_ms);
  WireStats wire_stats() const;
  std::vector<TableUsage> table_usage() const;
  std::vector<BuddyUsage> buddy_usage() const;
  TptStats tpt_stats() const;
  // The transport's counters summed over the device's QPs, past and
  // present, plus the packets no QP could take (counters.h).
  TransportCounters counters() const;
  // From now on the device's packets cross a link that loses, duplicates,
  // reorders or corrupts some of them as `spec` says (impair.h), so the
  // transport's recovery can be exercised and measured; a spec without any
  // impairment restores the plain link. Call it before the device's first
  // QP: EBUSY while it has QPs, EINVAL for a spec out of range, ENODEV once
  // removed.
  Result<void> impair(const ImpairSpec& spec);
  // What the impairing link did so far (zeros without one).
  ImpairStats impair_stats() const;

  // Multicast on a RoCEv2 device (IBA 10.5; the IPv4 group of an
  // IPv4-mapped MGID): UD datagrams sent to `group_ipv4` with DestQP
  // 0xFFFFFF reach the UD QP `qpn` of this device. EOPNOTSUPP on the
  // in-process link; EINVAL for a group that is not IPv4 multicast; EEXIST
  // / ENOENT for an attach made already / a detach of none.
  Result<void> attach_mcast(std::uint32_t qpn, std::uint32_t group_ipv4);
  Result<void> detach_mcast(std::uint32_t qpn, std::uint32_t group_ipv4);
  // Bytes of address space the device tables take; they are touched lazily.
  std::size_t table_bytes() const;

  // A RoCEv2 device on an address shared with this user's other processes
  // (NetConfig::shared): its slot on the host, the top byte of its QPNs and
  // of its CM communication IDs (0: the device holds its address alone, or
  // is in process).
  std::uint32_t host_slot() const;
  // A CM listener's ServiceID, claimed for this device on the host, so that
  // REQs naming it reach this process: EADDRINUSE when another process
  // listens on it. A device with no host group claims nothing (success).
  Result<void> claim_service(std::uint64_t service_id);
  void release_service(std::uint64_t service_id);

  Result<ProtectionDomain> alloc_pd();
  // An XRC domain (xrcd.h): its XRC SRQs and TGT QPs. ENODEV once removed.
  Result<std::unique_ptr<XrcDomain>> open_xrcd();
  // Device memory (dm.h) of `length` bytes, 1..max_dm_size, its start
  // aligned to 2^log_align (at most a page, 12). EINVAL for a length or
  // alignment out of range; ENOMEM when the device's memory is used up.
  Result<DeviceMemory> alloc_dm(std::uint64_t length, std::uint32_t log_align = 0);

  // This device's address on the link (what a peer QP's QP_AV names).
  std::uint64_t address() const;
  // A completion queue of exactly init.cqe entries (1..max_cqe, else
  // EINVAL) on vector init.comp_vector (< num_comp_vectors, else EINVAL).
  Result<std::unique_ptr<CompletionQueue>> create_cq(const CqInit& init);
  Result<std::unique_ptr<CompChannel>> create_comp_channel();

  // A CQ whose completions the device processes in `ctx` (like
  // ib_alloc_cq): each completion calls its WR's wr_cqe->done. SOFTIRQ runs
  // on the vector's thread (budget 256, batches of 16, re-armed with
  // next-completion | report-missed-events and run again if events were
  // missed); WORKQUEUE on a worker bound to the vector (budget 65536,
  // requeued while work remains); UNBOUND_WORKQUEUE on a shared worker pool;
  // DIRECT by the owner through process_direct(). REQUIRES: every WR posted
  // against it carries a wr_cqe (or a zero wr_id).
  Result<std::unique_ptr<CompletionQueue>> alloc_cq(void* cq_context, std::uint32_t nr_cqe,
                                                    std::uint32_t comp_vector, PollContext ctx);

  // --- The shared CQ pool (like ib_cq_pool_get / ib_cq_pool_put) ---
  // Reserves nr_cqe entries on a pool CQ of poll context `ctx` on vector
  // hint mod n, n = min(num_comp_vectors, online CPUs); a negative hint
  // means round robin (per device). The least used CQ with room is chosen;
  // a miss grows the pool by one CQ per vector of min(max_cqe, max(nr_cqe,
  // 4096)) entries. EINVAL for nr_cqe 0 or above max_cqe, for DIRECT, for
  // n == 0. The CQ has no cq_context: completions find their queue through
  // the QP's context. The CQ stays the pool's: destroy, resize and modify
  // answer EOPNOTSUPP.
  Result<CompletionQueue*> cq_pool_get(std::uint32_t nr_cqe, int comp_vector_hint, PollContext ctx);
  // EINVAL (nothing changed) for a CQ not from the pool or more than it has
  // reserved.
  Result<void> cq_pool_put(CompletionQueue* cq, std::uint32_t nr_cqe);
  // cq_pool_get as an RAII lease.
  Result<CqLease> cq_pool_lease(std::uint32_t nr_cqe, int comp_vector_hint, PollContext ctx);
  // Adaptive completion-event moderation (like DIM) for CQs allocated from
  // now on with a processed poll context (SOFTIRQ, WORKQUEUE, UNBOUND), pool
  // CQs included: see src/core/cq_dim.h. On by default.
  void set_cq_dim(bool on);
  // Frees every pool CQ with nothing reserved; how many.
  std::size_t cq_pool_trim();
  std::vector<PoolCqStats> cq_pool_stats() const;
  // Every CQ of the device (the owner's and the pool's), by CQN: its size,
  // what its ring really holds and its bytes, for footprint reports.
  std::vector<CqUsage> cq_usage() const;

  // Asynchronous events (CQ error, QP fatal, port active ...) go to
  // `handler` on the device's event thread; it may call verbs. Replaces any
  // earlier handler; an empty one drops events.
  void set_async_event_handler(std::function<void(const AsyncEvent&)> handler);
  // Waits until every event raised so far was handled (tests, shutdown).
  void flush_async_events();

  // Per completion vector: its "interrupt" thread's counters.
  std::vector<CompVectorStats> comp_vector_stats() const;

  // Introspection: what the device's data path would make of an access
  // (arriving on QP `qp_num`, which a type 2 memory window checks).
  std::expected<Translation, Refusal> translate(std::uint32_t key, std::uint64_t iova,
                                                std::uint64_t length, std::uint32_t access,
                                                std::uint32_t pd_num, std::uint32_t qp_num = 0) const;
  // Drops the device's cached translations.
  void sync_tpt();

 private:
  friend struct detail::ClientAccess;
  explicit Device(std::shared_ptr<detail::DeviceImpl> s) : state_(std::move(s)) {}
  static Result<Device> open_on(const Profile& profile, std::string name, const NetConfig* net);
  std::shared_ptr<detail::DeviceImpl> state_;
};

}  // namespace srdma
