// The device list, contexts, the device and port queries, GIDs and P_Keys,
// and the async event channel.
//
// A process has one softrdma device, srdma0, bound to SRDMA_ADDR (default
// 127.0.0.1) and the RoCEv2 port. Every ibv_open_device shares it: a UDP
// address can be bound once, and the contexts of one process are one HCA's
// contexts. It closes with the last context.
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "convert.h"
#include "cq_ex.h"
#include "qp_ex.h"
#include "errors.h"
#include "objects.h"
#include "ops.h"
#include "signals.h"
#include "srdma/net.h"

#undef ibv_query_port
#undef ibv_get_device_list

namespace srdma::verbs {
namespace {

constexpr std::uint32_t kVendorId = 0xFFFFFF;  // no real vendor's (IEEE OUIs are 24 bits; this one is unassigned)
constexpr char kDeviceName[] = "srdma0";
// The GID table's length a port reports (RoCE devices report a table with
// room for every address of their netdev; populated entries are listed by
// ibv_query_gid_table).
constexpr std::uint32_t kGidTableLen = 16;

ibv_device g_device = [] {
  ibv_device d{};
  d.node_type = IBV_NODE_CA;
  d.transport_type = IBV_TRANSPORT_IB;
  std::snprintf(d.name, sizeof d.name, "%s", kDeviceName);
  // The node UCX checks (/dev/infiniband/<dev_name>, never opened): named
  // after the device so that it cannot be a real HCA's uverbsN. This
  // library never creates it; `srdma devnode` does, when the user asks.
  std::snprintf(d.dev_name, sizeof d.dev_name, "%s", kDeviceName);
  std::snprintf(d.dev_path, sizeof d.dev_path, "/dev/infiniband/%s", kDeviceName);
  std::snprintf(d.ibdev_path, sizeof d.ibdev_path, "/sys/class/infiniband/%s", kDeviceName);
  return d;
}();

// The process's device and the contexts open on it.
std::mutex g_mu;
Device* g_dev = nullptr;
pid_t g_dev_pid = 0;  // the process that opened g_dev
std::vector<Context*> g_contexts;

bool is_open_context(Context* c) {
  return std::find(g_contexts.begin(), g_contexts.end(), c) != g_contexts.end();
}

ibv_async_event to_ibv_event(const AsyncEvent& ev, Context** owner) {
  ibv_async_event out{};
  *owner = nullptr;
  switch (ev.type) {
    case AsyncEventType::kCqErr: {
      auto* cq = static_cast<CompletionQueue*>(ev.context);
      auto* w = cq ? static_cast<Cq*>(cq->context()) : nullptr;
      out.event_type = IBV_EVENT_CQ_ERR;
      if (w) {
        out.element.cq = &w->ibv;
        *owner = to_ctx(w->ibv.context);
      }
      break;
    }
    case AsyncEventType::kQpFatal:
    case AsyncEventType::kQpLastWqeReached: {
      auto* w = static_cast<Qp*>(ev.context);
      out.event_type = ev.type == AsyncEventType::kQpFatal ? IBV_EVENT_QP_FATAL : IBV_EVENT_QP_LAST_WQE_REACHED;
      if (w) {
        out.element.qp = &w->ibv;
        *owner = to_ctx(w->ibv.context);
      }
      break;
    }
    case AsyncEventType::kSrqLimitReached: {
      auto* srq = static_cast<SharedReceiveQueue*>(ev.context);
      auto* w = srq ? static_cast<Srq*>(srq->context()) : nullptr;
      out.event_type = IBV_EVENT_SRQ_LIMIT_REACHED;
      if (w) {
        out.element.srq = &w->ibv;
        *owner = to_ctx(w->ibv.context);
      }
      break;
    }
    case AsyncEventType::kPortActive:
    case AsyncEventType::kDeviceFatal:
      out.event_type = ev.type == AsyncEventType::kPortActive ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_DEVICE_FATAL;
      out.element.port_num = 1;
      break;
  }
  return out;
}

void dispatch_async_event(const AsyncEvent& ev) {
  Context* owner = nullptr;
  ibv_async_event out = to_ibv_event(ev, &owner);
  std::lock_guard lock(g_mu);
  if (owner) {
    if (is_open_context(owner)) push_async_event(*owner, out);
  } else {
    for (Context* c : g_contexts) push_async_event(*c, out);  // device-wide
  }
}

Result<Device> open_process_device() {
  auto net = NetConfig::from_env();
  if (!net) return std::unexpected(net.error());
  return Device::open(Profile{}, kDeviceName, *net);
}

std::uint64_t node_guid(std::uint32_t ipv4) {
  // EUI-64 in the style of a RoCE port's: locally administered, the IPv4
  // address in the low bytes. Big-endian as verbs reports GUIDs.
  std::uint64_t g = (std::uint64_t{0x02} << 56) | (std::uint64_t{0x5352} << 40) | (std::uint64_t{0xfffe} << 32) | ipv4;
  return htobe64(g);
}
// Either family: an IPv6 address's low 32 bits stand in the IPv4 one's place.
std::uint64_t node_guid(const IpAddress& ip) {
  return node_guid(ip.is_v4() ? ip.v4()
                              : std::uint32_t{ip.bytes[12]} << 24 | std::uint32_t{ip.bytes[13]} << 16 |
                                    std::uint32_t{ip.bytes[14]} << 8 | ip.bytes[15]);
}

// The interface that holds `ip` (0 if none is found).
std::uint32_t ifindex_of(const IpAddress& ip) {
  if (!ip.is_v4()) {
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) return 0;
    std::uint32_t index = 0;
    for (ifaddrs* a = list; a; a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET6) continue;
      if (std::memcmp(&reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, ip.bytes.data(), 16) == 0) {
        index = if_nametoindex(a->ifa_name);
        break;
      }
    }
    freeifaddrs(list);
    return index;
  }
  const std::uint32_t ipv4 = ip.v4();
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return 0;
  std::uint32_t index = 0;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    auto* sin = reinterpret_cast<sockaddr_in*>(a->ifa_addr);
    auto* mask = reinterpret_cast<sockaddr_in*>(a->ifa_netmask);
    std::uint32_t m = mask ? ntohl(mask->sin_addr.s_addr) : 0xFFFFFFFF;
    if ((ntohl(sin->sin_addr.s_addr) & m) == (ipv4 & m)) {
      index = if_nametoindex(a->ifa_name);
      break;
    }
  }
  freeifaddrs(list);
  return index;
}

void fill_device_attr(Context& ctx, ibv_device_attr& a) {
  const DeviceAttr d = ctx.dev.query();
  std::memset(&a, 0, sizeof a);
  std::snprintf(a.fw_ver, sizeof a.fw_ver, "softrdma %s", "0.1");
  a.node_guid = node_guid(ctx.ip);
  a.sys_image_guid = a.node_guid;
  a.max_mr_size = d.max_mr_size;
  a.page_size_cap = d.page_size_cap;
  a.vendor_id = kVendorId;
  a.vendor_part_id = 0;
  a.hw_ver = 0;
  a.max_qp = static_cast<int>(d.max_qp);
  a.max_qp_wr = static_cast<int>(d.max_qp_wr);
  a.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SHUTDOWN_PORT |
                       IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_MEM_MGT_EXTENSIONS | IBV_DEVICE_SRQ_RESIZE |
                       IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_XRC;
  a.max_sge = static_cast<int>(d.max_sge);
  a.max_sge_rd = static_cast<int>(d.max_sge);
  a.max_cq = static_cast<int>(d.max_cq);
  a.max_cqe = static_cast<int>(d.max_cqe);
  a.max_mr = static_cast<int>(d.max_mr);
  a.max_mw = static_cast<int>(d.max_mw);
  a.max_pd = static_cast<int>(d.max_pd);
  a.max_qp_rd_atom = static_cast<int>(d.max_qp_rd_atom);
  a.max_qp_init_rd_atom = static_cast<int>(d.max_qp_init_rd_atom);
  a.max_res_rd_atom = static_cast<int>(std::min<std::uint64_t>(std::uint64_t{d.max_qp} * d.max_qp_rd_atom, 1u << 30));
  a.atomic_cap = IBV_ATOMIC_HCA;
  a.max_ah = static_cast<int>(d.max_qp);
  a.max_map_per_fmr = static_cast<int>(d.max_map_per_fmr);
  a.max_srq = static_cast<int>(d.max_srq);
  a.max_srq_wr = static_cast<int>(d.max_srq_wr);
  a.max_srq_sge = static_cast<int>(d.max_srq_sge);
  a.max_mcast_grp = static_cast<int>(d.max_mcast_grp);
  a.max_mcast_qp_attach = static_cast<int>(d.max_mcast_qp_attach);
  a.max_total_mcast_qp_attach = static_cast<int>(d.max_mcast_grp * d.max_mcast_qp_attach);
  a.max_pkeys = 1;
  a.local_ca_ack_delay = 15;
  a.phys_port_cnt = 1;
}

void fill_port_attr(Context& ctx, ibv_port_attr& p) {
  const PortAttr port = ctx.dev.query_port();
  std::memset(&p, 0, sizeof p);
  p.state = IBV_PORT_ACTIVE;
  p.max_mtu = mtu_enum(port.max_mtu);
  p.active_mtu = mtu_enum(port.active_mtu);
  p.gid_tbl_len = kGidTableLen;
  p.port_cap_flags = IBV_PORT_CM_SUP;
  p.max_msg_sz = 1u << 31;
  p.pkey_tbl_len = 1;
  p.lid = port.lid;
  p.max_vl_num = 1;
  p.active_width = 2;   // 4x
  p.active_speed = 32;  // EDR: 25 Gb/s a lane, what a software device of this kind claims
  p.phys_state = 5;     // LinkUp
  p.link_layer = port.ethernet ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
}

int query_port_op(ibv_context* c, std::uint8_t port_num, ibv_port_attr* attr, size_t len) {
  if (!c || !attr) return fail("ibv_query_port", EINVAL, "NULL context or attribute");
  if (port_num != 1) return fail("ibv_query_port", EINVAL, "the device has one port, port 1");
  ibv_port_attr full;
  fill_port_attr(*to_ctx(c), full);
  std::memcpy(attr, &full, std::min(len, sizeof full));
  return 0;
}

int query_device_ex_op(ibv_context* c, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                       size_t attr_size) {
  if (!c || !attr) return fail("ibv_query_device_ex", EINVAL, "NULL context or attribute");
  if (input && input->comp_mask) return fail("ibv_query_device_ex", EINVAL, "unknown input comp_mask");
  if (attr_size < sizeof(ibv_device_attr)) return fail("ibv_query_device_ex", EINVAL, "attribute buffer too small");
  ibv_device_attr_ex full{};
  fill_device_attr(*to_ctx(c), full.orig_attr);
  full.phys_port_cnt_ex = 1;
  // Extended CQs stamp completions in CLOCK_MONOTONIC nanoseconds
  // (cq_ex.cc): a 64-bit counter at 1 GHz (hca_core_clock is in kHz).
  full.completion_timestamp_mask = ~std::uint64_t{0};
  full.hca_core_clock = 1'000'000;
  // As libibverbs fills it from the kernel: the same capabilities, 64 bits
  // wide, and above bit 31 IBA 1.5's ATOMIC WRITE (the kernel's
  // IB_UVERBS_DEVICE_ATOMIC_WRITE, Linux 6.2; newer than rdma-core 44's headers).
  constexpr std::uint64_t kDeviceAtomicWrite = std::uint64_t{1} << 40;
  full.device_cap_flags_ex = static_cast<unsigned>(full.orig_attr.device_cap_flags) | kDeviceAtomicWrite;
  // On-demand paging: every access through an ODP region faults its pages
  // in (hca/page_fault.h), whatever the transport or the role of the
  // memory; implicit regions too, XRC's SRQ receives included.
  const DeviceAttr da = to_ctx(c)->dev.query();
  if (da.on_demand_paging) {
    full.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
    full.odp_caps.per_transport_caps.rc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
                                                   IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                                                   IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
    full.odp_caps.per_transport_caps.uc_odp_caps =
        IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_SRQ_RECV;
    full.odp_caps.per_transport_caps.ud_odp_caps =
        IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
    // XRC receives only through its SRQs (no RECV of its own).
    full.xrc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                        IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
  }
  full.max_dm_size = da.max_dm_size;
  // Tag-matching SRQs on RC (srq.cc's post_srq_ops_op), rendezvous
  // offloaded for requests of up to max_rndv_hdr_size bytes.
  full.tm_caps.max_rndv_hdr_size = da.tm_max_rndv_hdr_size;
  full.tm_caps.max_num_tags = da.tm_max_num_tags;
  full.tm_caps.flags = da.tm_max_num_tags ? IBV_TM_CAP_RC : 0;
  full.tm_caps.max_ops = da.tm_max_ops;
  full.tm_caps.max_sge = da.tm_max_sge;
  // CQ moderation is the core's (CompletionQueue::modify), but
  // ibv_modify_cq is not wired to it: none is reported.
  std::memcpy(attr, &full, std::min(attr_size, sizeof full));
  return 0;
}

bool gid_args_ok(ibv_context* c, std::uint32_t port, std::uint32_t index) {
  return c && port == 1 && index < kGidTableLen;
}
// Index 0 holds the device address's GID; the rest of the table is empty
// (as a kernel device's slots without an address are).
bool gid_populated(std::uint32_t index) { return index == 0; }

}  // namespace

void destroy_leftovers(Context& ctx) {
  CommandFile& f = *ctx.file;
  std::lock_guard lock(f.owned_mu);
  for (std::size_t k = 0; k < kKinds; ++k) {
    for (void* obj : f.owned[k]) {
      switch (static_cast<Kind>(k)) {
        case Kind::kAh: delete static_cast<Ah*>(obj); break;
        case Kind::kQp: delete_object(static_cast<Qp*>(obj)); break;
        case Kind::kSrq: delete_object(static_cast<Srq*>(obj)); break;
        case Kind::kXrcd: delete static_cast<Xrcd*>(obj); break;
        case Kind::kMw: delete static_cast<Mw*>(obj); break;
        case Kind::kMr: delete static_cast<Mr*>(obj); break;
        case Kind::kDm: delete static_cast<Dm*>(obj); break;
        case Kind::kCq: delete_object(static_cast<Cq*>(obj)); break;
        case Kind::kChannel: delete static_cast<CompChannelObj*>(obj); break;
        case Kind::kPd: delete static_cast<Pd*>(obj); break;
        case Kind::kTd: delete static_cast<Td*>(obj); break;
      }
    }
    f.owned[k].clear();
  }
}

void push_async_event(Context& ctx, const ibv_async_event& ev) {
  std::lock_guard lock(ctx.async_mu);
  if (ctx.async_events.empty()) {
    std::uint64_t one = 1;
    (void)!::write(ctx.async_fd, &one, sizeof one);  // readable while events wait
  }
  ctx.async_events.push_back(ev);
  ctx.async_cv.notify_all();
}

namespace {

// The object an event names, and the count of its events read and not yet
// retired; null for a port or device event.
struct Named {
  const void* object = nullptr;
  AsyncReported* reported = nullptr;
  // What ibv_ack_async_event counts in: the public struct's own fields.
  pthread_mutex_t* mu = nullptr;
  pthread_cond_t* cond = nullptr;
  std::uint32_t* completed = nullptr;
};

Named named_by(const ibv_async_event& ev) {
  switch (ev.event_type) {
    case IBV_EVENT_CQ_ERR: {
      ibv_cq* cq = ev.element.cq;
      return {cq, &to_cq(cq)->async, &cq->mutex, &cq->cond, &cq->async_events_completed};
    }
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: {
      ibv_qp* qp = ev.element.qp;
      return {qp, &to_qp(qp)->async, &qp->mutex, &qp->cond, &qp->events_completed};
    }
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED: {
      ibv_srq* srq = ev.element.srq;
      return {srq, &to_srq(srq)->async, &srq->mutex, &srq->cond, &srq->events_completed};
    }
    case IBV_EVENT_DEVICE_FATAL:
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
    case IBV_EVENT_WQ_FATAL: return {};
  }
  return {};
}

// Drops the unread events naming `obj`; returns how many the application
// read (under async_mu).
std::uint32_t drop_unread(Context& ctx, const void* obj, const AsyncReported& reported) {
  ctx.dev.flush_async_events();  // what the core object raised is queued here now
  std::lock_guard lock(ctx.async_mu);
  const bool had = !ctx.async_events.empty();
  std::erase_if(ctx.async_events, [&](const ibv_async_event& ev) { return named_by(ev).object == obj; });
  if (had && ctx.async_events.empty()) {
    std::uint64_t n;
    (void)!::read(ctx.async_fd, &n, sizeof n);  // nothing waits: not readable
  }
  return reported.reported;
}

void wait_acked(pthread_mutex_t& mu, pthread_cond_t& cond, const std::uint32_t& completed, std::uint32_t reported) {
  pthread_mutex_lock(&mu);
  while (completed < reported) pthread_cond_wait(&cond, &mu);
  pthread_mutex_unlock(&mu);
}

}  // namespace

void retire_async_events(Context& ctx, ibv_qp* qp) {
  const std::uint32_t reported = drop_unread(ctx, qp, to_qp(qp)->async);
  wait_acked(qp->mutex, qp->cond, qp->events_completed, reported);
}
void retire_async_events(Context& ctx, ibv_cq* cq) {
  const std::uint32_t reported = drop_unread(ctx, cq, to_cq(cq)->async);
  wait_acked(cq->mutex, cq->cond, cq->async_events_completed, reported);
}
void retire_async_events(Context& ctx, ibv_srq* srq) {
  const std::uint32_t reported = drop_unread(ctx, srq, to_srq(srq)->async);
  wait_acked(srq->mutex, srq->cond, srq->events_completed, reported);
}

}  // namespace srdma::verbs

using namespace srdma;
using namespace srdma::verbs;

extern "C" {

ibv_device** ibv_get_device_list(int* num_devices) {
  auto** list = static_cast<ibv_device**>(std::calloc(2, sizeof(ibv_device*)));
  if (!list) {
    errno = ENOMEM;
    return nullptr;
  }
  list[0] = &g_device;
  if (num_devices) *num_devices = 1;
  return list;
}

void ibv_free_device_list(ibv_device** list) { std::free(list); }

const char* ibv_get_device_name(ibv_device* device) { return device ? device->name : nullptr; }

int ibv_get_device_index(ibv_device* device) { return device == &g_device ? 0 : -1; }

__be64 ibv_get_device_guid(ibv_device* device) {
  if (device != &g_device) return 0;
  auto net = NetConfig::from_env();
  if (!net) return 0;
  auto ip = parse_ip(net->ip);
  return ip ? node_guid(*ip) : 0;
}

namespace {

// A context on `file` whose command fd is `cmd_fd` (taken over: closed
// with the context), on the process's device (opened by the first).
// REQUIRES g_mu. NULL with errno set.
ibv_context* open_context(const char* verb, std::shared_ptr<CommandFile> file, int cmd_fd) {
  SignalsBlocked quiet;  // the device's threads start here
  Device dev;
  // A child of fork() does not share its parent's device (whose threads
  // stayed in the parent, and whose host slot the child let go of): its
  // first context opens a device of its own, as with rdma-core, where a
  // parent's contexts are of no use in the child. The parent's copy is left
  // as it is.
  if (g_dev && g_dev_pid != ::getpid()) g_dev = nullptr;
  if (g_dev) {
    dev = g_dev->share();
  } else {
    auto opened = open_process_device();
    if (!opened) {
      // The one failure a user must see to fix (SRDMA_ADDR, a taken port).
      std::fprintf(stderr, "softrdma: cannot open %s: %s\n", kDeviceName, opened.error().to_string().c_str());
      return fail_null<ibv_context>(verb, opened.error());
    }
    dev = std::move(*opened);
    dev.set_async_event_handler(dispatch_async_event);
    g_dev = new (std::nothrow) Device(dev.share());
    if (!g_dev) return fail_null<ibv_context>(verb, ENOMEM, "out of memory");
    g_dev_pid = ::getpid();
  }
  auto* ctx = new (std::nothrow) Context;
  if (!ctx) return fail_null<ibv_context>(verb, ENOMEM, "out of memory");
  ctx->async_fd = eventfd(0, EFD_CLOEXEC);
  if (ctx->async_fd < 0) {
    int e = errno;
    delete ctx;
    return fail_null<ibv_context>(verb, e, "eventfd for the async event channel");
  }
  ctx->cmd_fd = cmd_fd;
  ctx->file = std::move(file);
  ctx->dev = std::move(dev);
  ctx->ip = ip_of_roce_address(ctx->dev.address());
  ctx->ipv4 = ctx->ip.is_v4() ? ctx->ip.v4() : 0;
  std::memset(&ctx->vctx, 0, sizeof ctx->vctx);
  ctx->vctx.sz = sizeof(verbs_context);
  ctx->vctx.query_port = query_port_op;
  ctx->vctx.query_device_ex = query_device_ex_op;
  ctx->vctx.create_cq_ex = create_cq_ex_op;
  ctx->vctx.query_rt_values = query_rt_values_op;
  ctx->vctx.create_qp_ex = create_qp_ex_op;
  ctx->vctx.open_xrcd = open_xrcd_op;
  ctx->vctx.close_xrcd = close_xrcd_op;
  ctx->vctx.create_srq_ex = create_srq_ex_op;
  ctx->vctx.post_srq_ops = post_srq_ops_op;
  ctx->vctx.get_srq_num = get_srq_num_op;
  ctx->vctx.open_qp = open_qp_op;
  ctx->vctx.alloc_td = alloc_td_op;
  ctx->vctx.dealloc_td = dealloc_td_op;
  ctx->vctx.alloc_parent_domain = alloc_parent_domain_op;
  ctx->vctx.advise_mr = advise_mr_op;
  ctx->vctx.alloc_dm = alloc_dm_op;
  ctx->vctx.free_dm = free_dm_op;
  ctx->vctx.reg_dm_mr = reg_dm_mr_op;
  ibv_context& c = ctx->vctx.context;
  c.device = &g_device;
  c.cmd_fd = ctx->cmd_fd;
  c.async_fd = ctx->async_fd;
  c.num_comp_vectors = static_cast<int>(ctx->dev.query().num_comp_vectors);
  c.abi_compat = __VERBS_ABI_IS_EXTENDED;
  pthread_mutex_init(&c.mutex, nullptr);
  fill_context_ops(c.ops);
  g_contexts.push_back(ctx);
  return &c;
}

}  // namespace

ibv_context* ibv_open_device(ibv_device* device) {
  if (device != &g_device) return fail_null<ibv_context>("ibv_open_device", ENODEV, "not a softrdma device");
  // The context's command fd: no kernel behind it, but a real descriptor,
  // as programs dup it (to hand to ibv_import_device) or poll it. A memfd
  // of its own: its identity names the context's command file.
  const int fd = memfd_create("srdma0-context", MFD_CLOEXEC);
  if (fd < 0) return fail_null<ibv_context>("ibv_open_device", errno, "memfd for the command fd");
  struct stat st;
  auto file = std::make_shared<CommandFile>();
  if (::fstat(fd, &st) == 0) {
    file->dev = st.st_dev;
    file->ino = st.st_ino;
  }
  file->pid = ::getpid();
  std::lock_guard lock(g_mu);
  ibv_context* c = open_context("ibv_open_device", std::move(file), fd);
  if (!c) {
    const int e = errno;
    ::close(fd);
    errno = e;
  }
  return c;
}

// Another context on the command file `cmd_fd` names (a dup of a context's
// cmd_fd, in this process): it shares that context's objects, as contexts
// on one uverbs file do (ibv_import_pd / ibv_import_mr reach them). The fd
// is the new context's (closed by ibv_close_device). A context's objects
// live in its process: an fd from another process names no file here
// (EOPNOTSUPP), anything else is not a command fd (EINVAL).
ibv_context* ibv_import_device(int cmd_fd) {
  struct stat st;
  if (cmd_fd < 0 || ::fstat(cmd_fd, &st) != 0) return fail_null<ibv_context>("ibv_import_device", EBADF, "not an open fd");
  std::lock_guard lock(g_mu);
  std::shared_ptr<CommandFile> file;
  for (Context* c : g_contexts)
    if (c->file->dev == st.st_dev && c->file->ino == st.st_ino && c->file->pid == ::getpid()) file = c->file;
  if (!file) {
    char name[64] = {};
    const std::string link = "/proc/self/fd/" + std::to_string(cmd_fd);
    const ssize_t n = ::readlink(link.c_str(), name, sizeof name - 1);
    if (n > 0 && std::string_view(name, static_cast<std::size_t>(n)).starts_with("/memfd:srdma0-context"))
      return fail_null<ibv_context>("ibv_import_device", EOPNOTSUPP,
                                    "a softrdma context of another process: its objects live there");
    return fail_null<ibv_context>("ibv_import_device", EINVAL, "not a softrdma command fd");
  }
  return open_context("ibv_import_device", std::move(file), cmd_fd);
}

int ibv_close_device(ibv_context* context) {
  if (!context) return fail("ibv_close_device", EINVAL, "NULL context");
  Context* ctx = to_ctx(context);
  Device* last = nullptr;
  bool last_on_file = false;
  {
    std::lock_guard lock(g_mu);
    if (!is_open_context(ctx)) return fail("ibv_close_device", EINVAL, "not an open context");
    g_contexts.erase(std::find(g_contexts.begin(), g_contexts.end(), ctx));
    last_on_file = std::none_of(g_contexts.begin(), g_contexts.end(), [&](Context* c) { return c->file == ctx->file; });
    if (g_contexts.empty()) std::swap(last, g_dev);
  }
  // Outside g_mu: the device's event thread may be dispatching into it.
  // The device closes with its last handle, ctx->dev below.
  delete last;
  // The objects belong to the command file: the last context on it
  // destroys what the application left.
  if (last_on_file) destroy_leftovers(*ctx);
  ::close(ctx->async_fd);
  ::close(ctx->cmd_fd);
  pthread_mutex_destroy(&context->mutex);
  delete ctx;
  return 0;
}

int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  if (!context || !attr) return fail("ibv_query_device", EINVAL, "NULL context or attribute");
  fill_device_attr(*to_ctx(context), *attr);
  return 0;
}

// The exported query_port: programs built against old headers pass the
// 48-byte compat struct; never write more than that.
int ibv_query_port(ibv_context* context, std::uint8_t port_num, _compat_ibv_port_attr* attr) {
  constexpr size_t kCompatPortAttrSize = 48;  // rdma-core's struct _compat_ibv_port_attr (not in verbs.h)
  return query_port_op(context, port_num, reinterpret_cast<ibv_port_attr*>(attr), kCompatPortAttrSize);
}

int ibv_query_gid(ibv_context* context, std::uint8_t port_num, int index, ibv_gid* gid) {
  if (!gid || index < 0 || !gid_args_ok(context, port_num, static_cast<std::uint32_t>(index))) {
    fail("ibv_query_gid", EINVAL, "port 1's GID table has 16 entries");
    return -1;
  }
  // An empty slot reads as the zero GID, as the kernel's sysfs shows it.
  std::memset(gid->raw, 0, sizeof gid->raw);
  if (!gid_populated(static_cast<std::uint32_t>(index))) return 0;
  const Gid g = to_ctx(context)->dev.query_port().gid;
  std::memcpy(gid->raw, g.data(), sizeof gid->raw);
  return 0;
}

int _ibv_query_gid_ex(ibv_context* context, std::uint32_t port_num, std::uint32_t gid_index, ibv_gid_entry* entry,
                      std::uint32_t flags, size_t entry_size) {
  if (!entry || flags || entry_size < sizeof(ibv_gid_entry))
    return fail("ibv_query_gid_ex", EINVAL, "NULL entry, unknown flags or a short entry");
  if (!gid_args_ok(context, port_num, gid_index)) return fail("ibv_query_gid_ex", EINVAL, "port 1's GID table has 16 entries");
  // An empty entry is an answer, not a refusal: programs walk the table
  // entry by entry (perftest per QP), and a debug line for each drowned
  // the refusals SRDMA_VERBS_DEBUG is for.
  if (!gid_populated(gid_index)) {
    errno = ENODATA;
    return ENODATA;
  }
  Context* ctx = to_ctx(context);
  std::memset(entry, 0, entry_size);
  const Gid g = ctx->dev.query_port().gid;
  std::memcpy(entry->gid.raw, g.data(), sizeof entry->gid.raw);
  entry->gid_index = 0;
  entry->port_num = 1;
  entry->gid_type = IBV_GID_TYPE_ROCE_V2;
  entry->ndev_ifindex = ifindex_of(ctx->ip);
  return 0;
}

ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries, std::uint32_t flags,
                             size_t entry_size) {
  if (!context || !entries || flags || entry_size < sizeof(ibv_gid_entry))
    return -fail("ibv_query_gid_table", EINVAL, "NULL argument, unknown flags or a short entry");
  if (max_entries < 1) return -fail("ibv_query_gid_table", EINVAL, "the table has one populated entry");
  int r = _ibv_query_gid_ex(context, 1, 0, entries, 0, entry_size);
  return r ? -r : 1;
}

// rdma-core's private query of a GID's type: 1 is RoCE v2 (IBV_GID_TYPE_SYSFS_ROCE_V2).
int ibv_query_gid_type(ibv_context* context, std::uint8_t port_num, unsigned int index, int* type) {
  if (!type || !gid_args_ok(context, port_num, index) || !gid_populated(index))
    return fail("ibv_query_gid_type", EINVAL, "not a populated GID table entry of port 1");
  *type = 1;
  return 0;
}

int ibv_query_pkey(ibv_context* context, std::uint8_t port_num, int index, __be16* pkey) {
  if (!context || !pkey || port_num != 1 || index != 0) {
    fail("ibv_query_pkey", EINVAL, "port 1 has one P_Key, index 0");
    return -1;
  }
  *pkey = htons(0xFFFF);  // the default partition, full membership
  return 0;
}

int ibv_get_pkey_index(ibv_context* context, std::uint8_t port_num, __be16 pkey) {
  if (!context || port_num != 1) return -fail("ibv_get_pkey_index", EINVAL, "port 1 only");
  if ((ntohs(pkey) & 0x7FFF) != 0x7FFF) return -fail("ibv_get_pkey_index", ENOENT, "only the default P_Key");
  return 0;
}

int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  if (!context || !event) {
    fail("ibv_get_async_event", EINVAL, "NULL argument");
    return -1;
  }
  Context* ctx = to_ctx(context);
  const bool nonblocking = (fcntl(ctx->async_fd, F_GETFL) & O_NONBLOCK) != 0;
  std::unique_lock lock(ctx->async_mu);
  if (ctx->async_events.empty()) {
    if (nonblocking) {
      errno = EAGAIN;
      return -1;
    }
    ctx->async_cv.wait(lock, [&] { return !ctx->async_events.empty(); });
  }
  *event = ctx->async_events.front();
  ctx->async_events.pop_front();
  if (AsyncReported* r = named_by(*event).reported) ++r->reported;  // ibv_ack_async_event owes one
  if (ctx->async_events.empty()) {
    std::uint64_t n;
    (void)!::read(ctx->async_fd, &n, sizeof n);  // not readable again until the next event
  }
  return 0;
}

// Counts the event as libibverbs does, so that a destroy waiting for it
// (retire_async_events) goes on.
void ibv_ack_async_event(ibv_async_event* event) {
  if (!event) return;
  const Named n = named_by(*event);
  if (!n.object) return;
  pthread_mutex_lock(n.mu);
  ++*n.completed;
  pthread_cond_broadcast(n.cond);
  pthread_mutex_unlock(n.mu);
}

int ibv_fork_init(void) { return 0; }  // softrdma pins nothing: fork is always safe
ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }
int ibv_dontfork_range(void*, size_t) { return 0; }
int ibv_dofork_range(void*, size_t) { return 0; }


void ibv_register_driver(const char*, void*) {}

}  // extern "C"
