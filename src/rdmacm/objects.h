// The objects librdmacm hands out, each the public struct of
// <rdma/rdma_cma.h> first, followed by what softrdma keeps behind it.
//
// One lock (g_mu) guards every ID's state, the port table and the set of
// live IDs: the CM's events come on the agent's thread and touch the IDs
// the application's threads use. It is never held across srdma_cm_destroy
// or srdma_cm_stop_listening, which wait for a running handler that may be
// waiting for it.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "srdma_cm_private.h"

namespace srdma::rdmacm {

// The process's one device, opened on first use and kept (as librdmacm keeps
// its devices open) until the process ends.
struct DeviceRef {
  ibv_context* verbs = nullptr;
  ibv_pd* pd = nullptr;  // the default PD (rdma_create_qp with pd NULL)
  srdma_cm* cm = nullptr;
  std::uint32_t ipv4 = 0;  // host order; 0 on a device on IPv6 (SRDMA_ADDR=::1 ...)
  bool v6 = false;         // the device is on IPv6: its addresses, GID and peers are IPv6
  in6_addr ip6{};          // its IPv6 address (v6)
  ibv_mtu mtu = IBV_MTU_1024;
  std::uint8_t max_rd_atomic = 1;
  pid_t pid = 0;  // the process that opened it (fork: device())
};
// NULL with errno when the device cannot be opened (SRDMA_ADDR).
DeviceRef* device();
// host_addrs.cc: whether the device stands for the whole host (no
// SRDMA_ADDR), and whether `ip` (host order) is one of the host's addresses.
bool device_stands_for_host();
bool host_ipv4(std::uint32_t ip);
// The IPv4 address and port (host order) an AF_INET address names, or an
// AF_INET6 one that is an IPv4 address in disguise: :: (any), ::1 (loopback)
// and ::ffff:a.b.c.d, as a dual-stack socket sees them. false for any other
// (softrdma's CM is IPv4).
bool ipv4_view(const sockaddr* a, std::uint32_t& ip, std::uint16_t& port);

struct Channel;
struct Id;

// A queued event, with a copy of its private data.
struct Event {
  rdma_cm_event ev;  // first: the application holds &ev
  Channel* channel = nullptr;
  // Once rdma_get_cm_event has given it (g_mu): the ID whose rdma_destroy_id
  // waits for its ack (a CONNECT_REQUEST's listener, else ev.id), and the
  // thread it was given to.
  Id* counted = nullptr;
  std::thread::id taker;
  std::uint8_t data[256];
};

struct Channel {
  rdma_event_channel ch;  // first
  std::mutex mu;
  std::deque<Event*> queue;
  bool readable = false;  // the eventfd's count is non-zero
  // g_mu: threads inside rdma_get_cm_event, and whether the channel was
  // destroyed under them (the last one out frees it).
  int waiters = 0;
  bool destroyed = false;
};

enum class State : std::uint8_t {
  kIdle,
  kBound,
  kAddrResolved,
  kRouteResolved,
  kListening,
  kConnecting,      // active: REQ sent
  kConnectResponse, // active without a QP: REP came, rdma_establish next
  kConnectRequest,  // passive: REQ came, rdma_accept or rdma_reject next
  kAccepting,       // passive: REP sent
  kConnected,
  kDisconnected,
  kFailed,          // rejected, unreachable, or a connect error
};

struct Id {
  rdma_cm_id id;  // first
  bool sync = false;  // no channel of the application's: calls wait for their events
  State state = State::kIdle;
  std::uint16_t port = 0;      // bound local port, host order (0: none)
  bool comm = false;           // comm_id names a CM connection
  std::uint32_t comm_id = 0;
  std::uint64_t service_id = 0;  // a listener's
  Id* listener = nullptr;        // a passive ID's, while its request is pending
  ibv_sa_path_rec path{};

  // The connection: the peer's QP from its REQ or REP, and ours.
  std::uint32_t peer_qpn = 0;
  std::uint32_t peer_psn = 0;
  ibv_mtu mtu = IBV_MTU_1024;
  std::uint8_t peer_responder_resources = 0;  // what the peer offers
  std::uint8_t peer_initiator_depth = 0;
  std::uint8_t peer_retry_count = 7;
  std::uint8_t peer_rnr_retry_count = 7;
  std::uint32_t psn = 0;
  std::uint8_t responder_resources = 0;
  std::uint8_t initiator_depth = 0;
  std::uint8_t retry_count = 7;
  std::uint8_t rnr_retry_count = 7;

  // rdma_set_option.
  std::uint8_t tos = 0;
  bool reuseaddr = false;
  bool afonly = false;
  std::uint8_t ack_timeout = 14;  // 4.096 us * 2^14: 67 ms

  // What rdma_create_qp made for the application (rdma_destroy_qp frees).
  bool own_cqs = false;

  // A passive rdma_create_ep's QP attributes and PD: rdma_get_request gives
  // every request's ID a QP made from them, as librdmacm does.
  bool ep_has_qp_init = false;
  ibv_qp_init_attr ep_qp_init{};
  ibv_pd* ep_pd = nullptr;

  // Events given and not yet acked that count against this ID (g_mu).
  int unacked = 0;

  // Multicast groups joined (multicast.cc): the IPv4 group (host order)
  // and the context rdma_join_multicast was given.
  struct Membership {
    std::uint32_t group = 0;
    void* context = nullptr;
    bool full = true;  // a full member receives (its QP attached); a send-only one does not
  };
  std::vector<Membership> groups;
};

extern std::mutex g_mu;
extern std::unordered_set<Id*> g_ids;  // live IDs, so that a stale pointer is EINVAL
extern std::unordered_set<Channel*> g_channels;
extern std::unordered_set<Event*> g_given;  // given by rdma_get_cm_event, not yet acked
extern std::condition_variable g_acked;     // with g_mu: an ID's last given event was acked

inline Id* to_id(rdma_cm_id* id) { return reinterpret_cast<Id*>(id); }
inline Channel* to_channel(rdma_event_channel* c) { return reinterpret_cast<Channel*>(c); }
// REQUIRES g_mu.
inline bool live(rdma_cm_id* id) { return id && g_ids.count(to_id(id)); }

// Queues an event on the ID's channel (REQUIRES g_mu). `listen` is the
// listener of a CONNECT_REQUEST.
void queue_event(Id& id, rdma_cm_event_type type, int status, const rdma_conn_param* conn = nullptr,
                 Id* listen = nullptr);
// The same with a UD ID's parameters (param.ud).
void queue_ud_event(Id& id, rdma_cm_event_type type, int status, const rdma_ud_param& ud, Id* listen = nullptr);

// Detaches the ID's QP from every group it joined (REQUIRES g_mu): its QP
// or the ID is going away. attach_groups: a QP made after the joins.
void detach_groups(Id& id);
int attach_groups(Id& id);

// The RDMA CM's IP header (struct cma_hdr, 36 bytes) of the ID's route into
// `out` (IP version 4 or 6, as the route's); and the source port and
// address of a received one (false unless it is version 0, at least 36
// bytes, and of the device's IP version: src_ip for IPv4, src_ip6 for IPv6).
constexpr std::size_t kCmaHeaderBytes = 36;
void format_cma_header(const Id& i, std::uint8_t* out);
bool parse_cma_header(const std::uint8_t* pd, std::size_t len, std::uint16_t& src_port, std::uint32_t& src_ip,
                      in6_addr* src_ip6 = nullptr);

// UD IDs (RDMA_PS_UDP) through service ID resolution (ud.cc). REQUIRES g_mu.
inline bool is_ud(const Id& id) { return id.id.qp_type == IBV_QPT_UD; }
int connect_ud(Id& id, const rdma_conn_param& p);
int accept_ud(Id& id, const rdma_conn_param& p);
int reject_ud(Id& id, const void* private_data, std::uint8_t len);
// A SIDR_REQ on listener `l`: a new ID and its CONNECT_REQUEST, or (a
// request that is not the RDMA CM's over IPv4) a refusal. Takes g_mu.
void sidr_request_received(Id& l, const srdma_cm_event& e, std::unique_lock<std::mutex>& lock);
// Drops the ID's queued events (REQUIRES g_mu): it is being destroyed.
void drop_events(Id& id);
// Moves the ID's queued events to `to` (REQUIRES g_mu).
void move_events(Id& id, Channel* to);
// Waits until every event given for the ID is acked, except those given to
// the calling thread (it acks them after the ID is gone), as librdmacm's
// rdma_destroy_id does (REQUIRES g_mu, held in `lock`).
void wait_for_acks(Id& id, std::unique_lock<std::mutex>& lock);
// Takes the channel out of use (REQUIRES g_mu, after it left g_channels).
// True when the caller frees it now; false when a thread still waits in
// rdma_get_cm_event, which frees it on its way out.
bool retire_channel(Channel& c);
void free_channel(Channel* c);
// A synchronous ID: takes its next event, which must be `expected`
// (errno from its status otherwise). Called without g_mu.
int sync_wait(rdma_cm_id* id, rdma_cm_event_type expected);
Channel* new_channel();

// Ports of the one device (REQUIRES g_mu): EADDRINUSE when taken, 0 picks a
// free one. Returns the port or -1.
int take_port(Id& id, std::uint16_t port);
void release_port(Id& id);
// Binds the ID to the device at `addr` (REQUIRES g_mu).
int bind_locked(Id& id, const sockaddr* addr, const char* call);

// The service ID of a port in the ID's port space.
std::uint64_t service_id(const Id& id, std::uint16_t port);

// Fills id->route (addresses, GIDs, the one path record) from src and dst.
void fill_route_addrs(Id& id, std::uint32_t src_ip, std::uint16_t src_port, std::uint32_t dst_ip,
                      std::uint16_t dst_port);
// The same over IPv6 (no destination yet: dst null); the GIDs are the
// addresses themselves.
void fill_route_addrs6(Id& id, const in6_addr& src, std::uint16_t src_port, const in6_addr* dst,
                       std::uint16_t dst_port);
// The peer a received REQ or SIDR_REQ names on a device on IPv6: the
// event's GID, or the one its cma_hdr names.
in6_addr peer6_of(const srdma_cm_event& e, const in6_addr& from_header);
void fill_path(Id& id);

// QP transitions librdmacm does for the application (REQUIRES g_mu).
int init_qp_attr(const Id& id, ibv_qp_attr& attr, int& mask);
int move_qp(Id& id, ibv_qp_state to);

}  // namespace srdma::rdmacm
