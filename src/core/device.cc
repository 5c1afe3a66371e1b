#include "srdma/device.h"

#include <bit>

#include "core/cq_impl.h"
#include "core/pd_impl.h"
#include "hca/page_fault.h"
#include "hca/srq.h"

namespace srdma {

Result<Device> Device::open(const Profile& profile, std::string name) {
  return open_on(profile, std::move(name), nullptr);
}

Result<Device> Device::open(const Profile& profile, std::string name, const NetConfig& net) {
  return open_on(profile, std::move(name), &net);
}

Result<Device> Device::open_on(const Profile& profile, std::string name, const NetConfig* net) {
  auto p = validate_profile(profile);
  if (!p) return std::unexpected(p.error());
  auto hca = hca::SoftHca::open(*p, net);
  if (!hca) return std::unexpected(hca.error());
  auto s = std::make_shared<detail::DeviceImpl>();
  s->name = std::move(name);
  s->hca = std::move(*hca);
  detail::init_cq_pool(*s);
  detail::announce_device(s);  // clients' add()
  return Device(std::move(s));
}

const std::string& Device::name() const { return state_->name; }

WireStats Device::wire_stats() const {
  const hca::UdpLink* udp = state_->hca->udp();
  if (udp == nullptr) return {};
  const hca::UdpLinkStats u = udp->stats();
  WireStats w{u.frames_sent, u.frames_received, u.send_errors, u.rx_overruns, u.source_port_fallbacks};
  w.send_calls = u.send_calls;
  w.recv_calls = u.recv_calls;
  w.datagrams_received = u.datagrams_received;
  w.gro = udp->gro();
  if (const hca::HostSteering* steer = udp->steering()) {
    const hca::SteeringStats s = steer->stats();
    w.host_members = s.members;
    w.steer_rebuilds = s.rebuilds;
    w.steer_foreign = s.foreign;
    w.steer_bad_probes = s.bad_probes;
  }
  if (const hca::SameHostPath* same = udp->same_host()) {
    const hca::SameHostStats s = same->stats();
    w.same_host_peers = s.peers_out;
    w.same_host_frames_sent = s.frames_sent;
    w.same_host_frames_received = s.frames_received;
    w.same_host_ring_full = s.ring_full;
    w.same_host_refused = s.refused + s.broken_rings;
  }
  return w;
}

int Device::progress() { return state_->hca->engine().poll_link(); }

PortAttr Device::query_port() const {
  const hca::QueueEngine& engine = state_->hca->engine();
  PortAttr a;
  a.address = engine.address();
  a.active_mtu = a.max_mtu = engine.active_mtu();
  a.lid = static_cast<std::uint16_t>(a.address);
  if (is_roce_link_address(a.address)) {
    a.ethernet = true;
    a.gid = gid_of_roce_address(a.address);  // ::ffff:a.b.c.d, or the IPv6 address itself
  } else {
    a.gid[0] = 0xfe;
    a.gid[1] = 0x80;
    for (int i = 0; i < 8; ++i) a.gid[15 - i] = static_cast<std::uint8_t>(a.address >> (8 * i));
  }
  return a;
}
const Profile& Device::profile() const { return state_->hca->profile(); }

DeviceAttr Device::query() const {
  const Profile& p = profile();
  auto u32 = [](std::int64_t v) { return static_cast<std::uint32_t>(v); };
  DeviceAttr a;
  a.name = state_->name;
  a.max_mr_size = ~std::uint64_t{0};  // bounded by the MTTs, not the device (as mthca)
  a.page_size_cap = ((std::uint64_t{1} << 31) - 1) & ~std::uint64_t{4095};  // 4 KiB .. 1 GiB
  a.max_qp = u32(p.num_qp - p.reserved_qps);
  a.max_qp_wr = u32(p.max_qp_wr);
  a.max_sge = u32(p.max_sge);
  a.max_cq = u32(p.num_cq - p.reserved_cqs);
  a.max_cqe = u32(p.max_cqe);
  a.max_mr = u32(p.num_mpt - p.reserved_mrws);
  a.max_mw = a.max_mr;
  a.max_pd = u32(p.num_pd - p.reserved_pds);
  a.max_inline_data = u32(p.max_inline_data);
  int log_mpt = std::countr_zero(static_cast<std::uint64_t>(p.num_mpt));
  a.max_map_per_fmr = u32((std::int64_t{1} << (32 - log_mpt)) - 1);
  a.num_comp_vectors = u32(p.num_comp_vectors);
  a.max_qp_rd_atom = a.max_qp_init_rd_atom = hca::kMaxRdAtomic;
  a.max_srq = state_->hca->engine().max_srq();
  a.max_srq_wr = state_->hca->engine().max_srq_wr();
  a.max_srq_sge = state_->hca->engine().max_srq_sge();
  a.tm_max_num_tags = hca::QueueEngine::kMaxNumTags;
  a.tm_max_ops = hca::QueueEngine::kMaxTmOps;
  a.tm_max_sge = a.max_srq_sge;
  a.tm_max_rndv_hdr_size = hca::Srq::kMaxRndvHdrSize;
  a.on_demand_paging = hca::fault_in_available();
  a.max_dm_size = kMaxDmSize;
  if (state_->hca->udp() != nullptr) {
    a.max_mcast_grp = hca::UdpLink::kMaxMcastGroups;
    a.max_mcast_qp_attach = hca::UdpLink::kMaxMcastQpsPerGroup;
  }
  return a;
}

std::vector<TableUsage> Device::table_usage() const { return state_->hca->table_usage(); }
std::vector<BuddyUsage> Device::buddy_usage() const { return state_->hca->buddy_usage(); }
std::size_t Device::table_bytes() const { return state_->hca->table_bytes(); }

TptStats Device::tpt_stats() const {
  const auto& c = state_->hca->tables().tpt_cache();
  return TptStats{c.hits(), c.misses(), c.syncs()};
}

TransportCounters Device::counters() const { return state_->hca->engine().counters(); }

Result<void> Device::impair(const ImpairSpec& spec) {
  if (state_->removed) return make_error(ENODEV, "the device has been removed");
  return state_->hca->engine().impair(spec);
}

ImpairStats Device::impair_stats() const { return state_->hca->engine().impair_stats(); }

Result<void> Device::attach_mcast(std::uint32_t qpn, std::uint32_t group_ipv4) {
  if (state_->removed) return make_error(ENODEV, "the device has been removed");
  hca::UdpLink* link = state_->hca->udp();
  if (!link) return make_error(EOPNOTSUPP, "multicast needs a RoCEv2 device (the in-process link has none)");
  return link->attach_mcast(group_ipv4, qpn);
}

Result<void> Device::detach_mcast(std::uint32_t qpn, std::uint32_t group_ipv4) {
  if (state_->removed) return make_error(ENODEV, "the device has been removed");
  hca::UdpLink* link = state_->hca->udp();
  if (!link) return make_error(EOPNOTSUPP, "multicast needs a RoCEv2 device (the in-process link has none)");
  return link->detach_mcast(group_ipv4, qpn);
}

std::uint32_t Device::host_slot() const {
  const hca::UdpLink* link = state_->hca->udp();
  return link && link->steering() ? link->steering()->slot() : 0;
}

Result<void> Device::claim_service(std::uint64_t service_id) {
  hca::UdpLink* link = state_->hca->udp();
  if (!link || !link->steering()) return {};
  return link->steering()->claim_service(service_id);
}

void Device::release_service(std::uint64_t service_id) {
  hca::UdpLink* link = state_->hca->udp();
  if (link && link->steering()) link->steering()->release_service(service_id);
}

Result<ProtectionDomain> Device::alloc_pd() {
  if (state_->removed) return make_error(ENODEV, "the device has been removed");
  auto pdn = state_->hca->tables().alloc_pd();
  if (!pdn) return std::unexpected(pdn.error());
  auto s = std::make_shared<detail::PdImpl>();
  s->device = state_;
  s->pdn = *pdn;
  return ProtectionDomain(std::move(s));
}

std::expected<Translation, Refusal> Device::translate(std::uint32_t key, std::uint64_t iova,
                                                      std::uint64_t length, std::uint32_t access,
                                                      std::uint32_t pd_num, std::uint32_t qp_num) const {
  return state_->hca->tables().translate(key, iova, length, access, pd_num, qp_num);
}

void Device::sync_tpt() { state_->hca->tables().sync_tpt(); }

std::uint64_t Device::address() const { return state_->hca->engine().address(); }

void Device::set_async_event_handler(std::function<void(const AsyncEvent&)> handler) {
  state_->hca->engine().async_events().set_handler(std::move(handler));
}

void Device::flush_async_events() { state_->hca->engine().async_events().flush(); }

std::vector<CompVectorStats> Device::comp_vector_stats() const {
  std::vector<CompVectorStats> out;
  for (std::uint32_t v = 0; v < static_cast<std::uint32_t>(profile().num_comp_vectors); ++v) {
    const auto& eq = state_->hca->engine().event_queue(v);
    out.push_back(CompVectorStats{v, eq.cpu(), eq.interrupts(), eq.events(), eq.cqes(), eq.completions_handled()});
  }
  return out;
}

}  // namespace srdma
