// The device behind every ID: softrdma's one device (SRDMA_ADDR), its
// address from GID 0 (::ffff:a.b.c.d), a default PD and its CM agent
// reference; and rdma_get_devices.
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "errors.h"
#include "objects.h"

namespace srdma::rdmacm {

std::mutex g_mu;
std::unordered_set<Id*> g_ids;
std::unordered_set<Channel*> g_channels;
std::unordered_set<Event*> g_given;
std::condition_variable g_acked;

namespace {
std::mutex g_dev_mu;
DeviceRef g_dev;
}  // namespace

DeviceRef* device() {
  std::lock_guard lock(g_dev_mu);
  // A child of fork() opens a device of its own (libibverbs does the same):
  // the parent's is not the child's to use.
  if (g_dev.verbs && g_dev.pid != ::getpid()) g_dev = DeviceRef{};
  if (g_dev.verbs) return &g_dev;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n < 1) {
    if (list) ibv_free_device_list(list);
    return fail_null<DeviceRef>("rdma_cm", ENODEV, "no RDMA device");
  }
  ibv_context* verbs = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!verbs) return nullptr;  // errno from ibv_open_device
  ibv_gid gid;
  ibv_port_attr port;
  ibv_device_attr attr;
  if (ibv_query_gid(verbs, 1, 0, &gid) || ibv_query_port(verbs, 1, &port) || ibv_query_device(verbs, &attr)) {
    int e = errno;
    ibv_close_device(verbs);
    return fail_null<DeviceRef>("rdma_cm", e, "cannot query the device");
  }
  ibv_pd* pd = ibv_alloc_pd(verbs);
  srdma_cm* cm = pd ? srdma_cm_open(verbs) : nullptr;
  if (!cm) {
    int e = errno;
    if (pd) ibv_dealloc_pd(pd);
    ibv_close_device(verbs);
    return fail_null<DeviceRef>("rdma_cm", e, "cannot start the device's CM agent");
  }
  // GID 0 is the device's address: ::ffff:a.b.c.d, or an IPv6 address.
  static constexpr std::uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(gid.raw, kMapped, sizeof kMapped) == 0) {
    g_dev.ipv4 = std::uint32_t{gid.raw[12]} << 24 | std::uint32_t{gid.raw[13]} << 16 |
                 std::uint32_t{gid.raw[14]} << 8 | gid.raw[15];
  } else {
    g_dev.v6 = true;
    std::memcpy(&g_dev.ip6, gid.raw, sizeof g_dev.ip6);
  }
  g_dev.mtu = port.active_mtu;
  g_dev.max_rd_atomic = static_cast<std::uint8_t>(std::min(attr.max_qp_rd_atom, 255));
  g_dev.pd = pd;
  g_dev.cm = cm;
  g_dev.verbs = verbs;
  g_dev.pid = ::getpid();
  return &g_dev;
}

}  // namespace srdma::rdmacm

using namespace srdma::rdmacm;

extern "C" {

ibv_context** rdma_get_devices(int* num_devices) {
  DeviceRef* d = device();
  if (!d) return nullptr;
  auto** list = static_cast<ibv_context**>(std::calloc(2, sizeof(ibv_context*)));
  if (!list) return fail_null<ibv_context*>("rdma_get_devices", ENOMEM, "out of memory");
  list[0] = d->verbs;
  if (num_devices) *num_devices = 1;
  return list;
}

void rdma_free_devices(ibv_context** list) { std::free(list); }

}  // extern "C"
