// IDs: create, destroy, migrate, bind, options, ports.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "common/secure_random.h"
#include "errors.h"
#include "objects.h"

namespace srdma::rdmacm {
namespace {

std::map<std::uint16_t, Id*> g_ports;  // bound ports of the device

std::uint16_t port_space_of(rdma_port_space ps) { return static_cast<std::uint16_t>(ps); }

}  // namespace

int take_port(Id& id, std::uint16_t port) {
  if (port == 0) {
    // An ephemeral port, as the kernel's cma_alloc_any_port picks one
    // (get_random_u32_inclusive there): a port a stranger cannot predict
    // from the last one it saw.
    for (int i = 0; i < 4096; ++i) {
      std::uint16_t p = static_cast<std::uint16_t>(32768 + secure_random_u32() % 28232);
      if (!g_ports.count(p)) {
        port = p;
        break;
      }
    }
    if (port == 0) return fail("rdma_bind_addr", EADDRNOTAVAIL, "no free port");
  } else if (auto it = g_ports.find(port); it != g_ports.end() && it->second != &id) {
    return fail("rdma_bind_addr", EADDRINUSE, "the port is bound by another ID");
  }
  g_ports[port] = &id;
  id.port = port;
  return port;
}

void release_port(Id& id) {
  if (id.port == 0) return;
  if (auto it = g_ports.find(id.port); it != g_ports.end() && it->second == &id) g_ports.erase(it);
  id.port = 0;
}

std::uint64_t service_id(const Id& id, std::uint16_t port) {
  return std::uint64_t{port_space_of(id.id.ps)} << 16 | port;
}

}  // namespace srdma::rdmacm

using namespace srdma::rdmacm;

namespace {

// The IPv4 address of `addr`, checked against the device's: INADDR_ANY is
// the device's own, and so is a loopback address, as the kernel's RDMA CM
// binds one to its first device (cma_bind_loopback); a device with no
// SRDMA_ADDR stands for the host, and every address of the host is its own
// (libfabric's verbs provider binds each interface's address to find its
// device). Where the kernel's ID would still report that address, ours
// reports the device's: a listener's name (libfabric sends it to the peer)
// must be one the peer can reach. -1 with errno otherwise.
int local_ipv4(const char* call, const sockaddr* addr, const DeviceRef& d, std::uint32_t& ip, std::uint16_t& port) {
  if (!ipv4_view(addr, ip, port))
    return fail(call, EAFNOSUPPORT, "IPv4 addresses only (and ::, ::1, ::ffff:a.b.c.d)");
  if (ip == INADDR_ANY || (ip >> 24) == 127 || (device_stands_for_host() && host_ipv4(ip))) ip = d.ipv4;
  if (ip != d.ipv4)
    return fail(call, EADDRNOTAVAIL,
                device_stands_for_host() ? "not an address of this host"
                                         : "neither the device's address (SRDMA_ADDR) nor a loopback address");
  return 0;
}

// The same for a device on IPv6: ::, ::1 (loopback, as above) and the
// device's own address are its own; 0.0.0.0 (a program that listens on
// "any" in IPv4 terms) is too. Any other address: EADDRNOTAVAIL; another
// IPv4 one: EAFNOSUPPORT.
int local_ipv6(const char* call, const sockaddr* addr, const DeviceRef& d, std::uint16_t& port) {
  if (addr->sa_family == AF_INET) {
    const auto* s = reinterpret_cast<const sockaddr_in*>(addr);
    if (s->sin_addr.s_addr != htonl(INADDR_ANY))
      return fail(call, EAFNOSUPPORT, "the device is on IPv6 (SRDMA_ADDR): IPv6 addresses only, or 0.0.0.0");
    port = ntohs(s->sin_port);
    return 0;
  }
  if (addr->sa_family != AF_INET6) return fail(call, EAFNOSUPPORT, "not an IP address");
  const auto* s = reinterpret_cast<const sockaddr_in6*>(addr);
  port = ntohs(s->sin6_port);
  const in6_addr& a = s->sin6_addr;
  if (IN6_IS_ADDR_UNSPECIFIED(&a) || IN6_IS_ADDR_LOOPBACK(&a) || IN6_ARE_ADDR_EQUAL(&a, &d.ip6)) return 0;
  return fail(call, EADDRNOTAVAIL, "neither the device's address (SRDMA_ADDR) nor ::1 or ::");
}

}  // namespace

namespace srdma::rdmacm {

// REQUIRES g_mu. Binds the ID to the device and `addr` (port 0: any).
int bind_locked(Id& id, const sockaddr* addr, const char* call) {
  if (id.state != State::kIdle) return fail(call, EINVAL, "the ID is bound already");
  DeviceRef* d = device();
  if (!d) return -1;
  std::uint32_t ip = 0;
  std::uint16_t port = 0;
  if (d->v6 ? local_ipv6(call, addr, *d, port) : local_ipv4(call, addr, *d, ip, port)) return -1;
  if (take_port(id, port) < 0) return -1;
  id.id.verbs = d->verbs;
  id.id.pd = d->pd;  // the device's PD, as librdmacm sets it once the ID has a device
  id.id.port_num = 1;
  if (d->v6)
    fill_route_addrs6(id, d->ip6, id.port, nullptr, 0);
  else
    fill_route_addrs(id, ip, id.port, 0, 0);
  id.state = State::kBound;
  return 0;
}

}  // namespace srdma::rdmacm

extern "C" {

int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context, rdma_port_space ps) {
  if (!id) return fail("rdma_create_id", EINVAL, "NULL id");
  if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP) {
    if (ps == RDMA_PS_IB || ps == RDMA_PS_IPOIB)
      return fail("rdma_create_id", EOPNOTSUPP, "RDMA_PS_TCP (RC) and RDMA_PS_UDP (UD) IDs only");
    return fail("rdma_create_id", EINVAL, "unknown port space");
  }
  bool sync = false;
  if (!channel) {
    // librdmacm: an ID without a channel is synchronous, on a channel of its own.
    Channel* c = new_channel();
    if (!c) return -1;
    channel = &c->ch;
    sync = true;
  } else {
    std::lock_guard lock(g_mu);
    if (!g_channels.count(to_channel(channel))) return fail("rdma_create_id", EINVAL, "not an event channel");
  }
  auto* i = new (std::nothrow) Id;
  if (!i) return fail("rdma_create_id", ENOMEM, "out of memory");
  std::memset(&i->id, 0, sizeof i->id);
  i->id.channel = channel;
  i->id.context = context;
  i->id.ps = ps;
  i->id.qp_type = ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;  // librdmacm's ucma_get_qp_type
  i->sync = sync;
  std::lock_guard lock(g_mu);
  g_ids.insert(i);
  *id = &i->id;
  return 0;
}

int rdma_destroy_id(rdma_cm_id* id) {
  bool listening = false, comm = false, sync = false;
  std::uint64_t sid = 0;
  std::uint32_t comm_id = 0;
  Id* i = to_id(id);
  {
    std::lock_guard lock(g_mu);
    if (!live(id)) return fail("rdma_destroy_id", EINVAL, "not a live rdma_cm_id");
    g_ids.erase(i);
    listening = i->state == State::kListening;
    sid = i->service_id;
    comm = i->comm;
    comm_id = i->comm_id;
    sync = i->sync;
    release_port(*i);
    detach_groups(*i);
  }
  // Outside g_mu: these wait for a handler of the ID that may be running.
  DeviceRef* d = device();
  if (d && listening) srdma_cm_stop_listening(d->cm, sid);
  if (d && comm) srdma_cm_destroy(d->cm, comm_id);
  {
    std::unique_lock lock(g_mu);
    drop_events(*i);
    wait_for_acks(*i, lock);
  }
  if (sync) rdma_destroy_event_channel(id->channel);
  delete i;
  return 0;
}

int rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* channel) {
  Channel* to = nullptr;
  bool made = false;
  if (!channel) {
    to = new_channel();
    if (!to) return -1;
    made = true;
  }
  std::lock_guard lock(g_mu);
  if (!live(id)) return fail("rdma_migrate_id", EINVAL, "not a live rdma_cm_id");
  if (!made) {
    to = to_channel(channel);
    if (!g_channels.count(to)) return fail("rdma_migrate_id", EINVAL, "not an event channel");
  }
  Id& i = *to_id(id);
  move_events(i, to);
  Channel* old = i.sync ? to_channel(id->channel) : nullptr;
  id->channel = &to->ch;
  i.sync = made;
  if (old) {
    g_channels.erase(old);
    if (retire_channel(*old)) free_channel(old);
  }
  return 0;
}

int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
  if (!addr) return fail("rdma_bind_addr", EINVAL, "NULL address");
  std::lock_guard lock(g_mu);
  if (!live(id)) return fail("rdma_bind_addr", EINVAL, "not a live rdma_cm_id");
  return bind_locked(*to_id(id), addr, "rdma_bind_addr");
}

int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval, size_t optlen) {
  std::lock_guard lock(g_mu);
  if (!live(id)) return fail("rdma_set_option", EINVAL, "not a live rdma_cm_id");
  if (!optval) return fail("rdma_set_option", EINVAL, "NULL optval");
  Id& i = *to_id(id);
  if (level == RDMA_OPTION_ID) {
    switch (optname) {
      case RDMA_OPTION_ID_TOS:
        if (optlen != sizeof(std::uint8_t)) return fail("rdma_set_option", EINVAL, "TOS is a uint8_t");
        i.tos = *static_cast<std::uint8_t*>(optval);
        return 0;
      case RDMA_OPTION_ID_REUSEADDR:
        if (optlen != sizeof(int)) return fail("rdma_set_option", EINVAL, "REUSEADDR is an int");
        if (i.state != State::kIdle) return fail("rdma_set_option", EINVAL, "REUSEADDR before bind only");
        i.reuseaddr = *static_cast<int*>(optval) != 0;
        return 0;
      case RDMA_OPTION_ID_AFONLY:
        if (optlen != sizeof(int)) return fail("rdma_set_option", EINVAL, "AFONLY is an int");
        if (i.state != State::kIdle) return fail("rdma_set_option", EINVAL, "AFONLY before bind only");
        i.afonly = *static_cast<int*>(optval) != 0;
        return 0;
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (optlen != sizeof(std::uint8_t)) return fail("rdma_set_option", EINVAL, "ACK_TIMEOUT is a uint8_t");
        if (*static_cast<std::uint8_t*>(optval) > 31) return fail("rdma_set_option", EINVAL, "ACK_TIMEOUT is 5 bits");
        i.ack_timeout = *static_cast<std::uint8_t*>(optval);
        return 0;
      default: return fail("rdma_set_option", ENOSYS, "unknown RDMA_OPTION_ID option");
    }
  }
  if (level == RDMA_OPTION_IB)
    return fail("rdma_set_option", ENOSYS, "RDMA_OPTION_IB_PATH: paths are resolved by softrdma");
  return fail("rdma_set_option", ENOSYS, "unknown option level");
}

__be16 rdma_get_src_port(rdma_cm_id* id) {
  std::lock_guard lock(g_mu);
  if (!live(id)) return 0;
  return id->route.addr.src_sin.sin_port;
}

__be16 rdma_get_dst_port(rdma_cm_id* id) {
  std::lock_guard lock(g_mu);
  if (!live(id)) return 0;
  return id->route.addr.dst_sin.sin_port;
}

}  // extern "C"
