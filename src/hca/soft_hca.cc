#include "hca/soft_hca.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string_view>

#include <fmt/format.h>

#include "hca/copy.h"
#include "hca/inproc_link.h"

namespace srdma::hca {
namespace {
constexpr std::uint32_t kQpnMask = (1u << 24) - 1;  // QPNs and CQNs are 24 bits
constexpr std::uint32_t kSlotQpns = 1u << 16;       // a slot's QPNs (host_steering.h)

// Device addresses: unique in the process, like LIDs on a subnet.
std::uint64_t next_address() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1);
}

// MPT keys and QPNs are what a stranger must guess to reach a QP or a
// region: their high bits rotate randomly from the CSPRNG (index_allocator.h),
// unless SRDMA_DETERMINISTIC_IDS=<seed> asks for a replayable rotation, for
// tests and tools that compare runs (never a production setting). `table`
// keeps the MPT's and the QP table's streams apart.
alloc::TopRotation id_rotation(std::uint64_t table) {
  const char* v = std::getenv("SRDMA_DETERMINISTIC_IDS");
  if (v == nullptr || *v == '\0') return alloc::TopRotation::random();
  char* end = nullptr;
  const unsigned long long seed = std::strtoull(v, &end, 0);
  if (*end != '\0') {
    std::fprintf(stderr, "srdma: SRDMA_DETERMINISTIC_IDS='%s' is not a number; identifiers stay random\n", v);
    return alloc::TopRotation::random();
  }
  return alloc::TopRotation::seeded(seed ^ (table * 0x9e3779b97f4a7c15ull));
}

Result<alloc::IndexAllocator> make_alloc(const char* table, std::int64_t num, std::uint32_t mask,
                                         std::int64_t reserved,
                                         alloc::TopRotation rotation = alloc::TopRotation::sequential()) {
  auto a = alloc::IndexAllocator::create(static_cast<std::uint32_t>(num), mask,
                                         static_cast<std::uint32_t>(reserved), rotation);
  if (!a) return make_error(a.error().code, fmt::format("{} table: {}", table, a.error().reason));
  return a;
}
}  // namespace

Result<std::shared_ptr<SoftHca>> SoftHca::open(const Profile& requested, const NetConfig* net) try {
  prepare_engine_copy();  // once per process, here rather than in the first WRITE
  Profile p = requested;
  if (const char* cc = std::getenv("SRDMA_CC"); cc != nullptr && *cc != '\0') {
    const std::string_view v(cc);
    if (v != "0" && v != "1") return make_error(EINVAL, fmt::format("SRDMA_CC={}: 0 (congestion control off) or 1", v));
    if (v == "0") p.congestion_control = 0;
  }
  auto mpt = MptTable::create(static_cast<std::uint32_t>(p.num_mpt), static_cast<std::uint32_t>(p.reserved_mrws),
                              id_rotation(1));
  if (!mpt) return std::unexpected(mpt.error());
  auto mtt = MttTable::create(static_cast<std::uint32_t>(p.num_mtt_segs), static_cast<int>(p.log_mtts_per_seg),
                              static_cast<std::uint32_t>(p.fmr_reserved_mtt_segs),
                              static_cast<std::uint32_t>(p.reserved_mtt_segs));
  if (!mtt) return std::unexpected(mtt.error());
  // PD numbers do not rotate; QPNs and CQNs rotate within 24 bits, QPNs
  // (on the wire, in every BTH) randomly. QPNs 0 and 1 stay reserved: the
  // index of a QPN is never below reserved_qps.
  auto pd = make_alloc("PD", p.num_pd, static_cast<std::uint32_t>(p.num_pd - 1), p.reserved_pds);
  if (!pd) return std::unexpected(pd.error());
  std::unique_ptr<UdpLink> udp;
  if (net != nullptr) {
    if (net->shared && p.num_qp > kSlotQpns)
      return make_error(EINVAL, fmt::format("num_qp {} on a shared address: at most {} (SRDMA_EXCLUSIVE=1 for more)",
                                            p.num_qp, kSlotQpns));
    auto link = UdpLink::open(*net);
    if (!link) return std::unexpected(link.error());
    udp = std::move(*link);
  }
  // On a shared address a QPN's top byte is the process's slot (the
  // packet's way to it) and the allocator has the 16 bits below.
  const HostSteering* steer = udp ? udp->steering() : nullptr;
  auto qp = make_alloc("QP", p.num_qp, steer ? kSlotQpns - 1 : kQpnMask, p.reserved_qps, id_rotation(2));
  if (!qp) return std::unexpected(qp.error());
  auto cq = make_alloc("CQ", p.num_cq, kQpnMask, p.reserved_cqs);
  if (!cq) return std::unexpected(cq.error());
  auto dev = std::shared_ptr<SoftHca>(new SoftHca(p, std::move(*mpt), std::move(*mtt), std::move(*pd),
                                                  std::move(*qp), std::move(*cq), std::move(udp)));
  // The engine's handle and the link's: aliases of the device's own, so
  // that neither keeps the device open.
  std::shared_ptr<QueueEngine> engine(dev, &dev->engine_);
  dev->engine_.set_self(engine);
  if (dev->udp_)
    dev->udp_->start(dev->engine_);
  else
    InprocLink::instance().attach(dev->engine_.address(), engine);
  return dev;
} catch (const std::bad_alloc&) {
  return make_error(ENOMEM, "not enough address space for the device tables of this profile");
}

SoftHca::SoftHca(const Profile& p, MptTable mpt, MttTable mtt, alloc::IndexAllocator pd,
                 alloc::IndexAllocator qp, alloc::IndexAllocator cq, std::unique_ptr<UdpLink> udp)
    : profile_(p),
      tables_(profile_, std::move(mpt), std::move(mtt), std::move(pd)),
      udp_(std::move(udp)),
      engine_(profile_, tables_, std::move(qp), std::move(cq), udp_ ? udp_->address() : next_address(),
              udp_ ? static_cast<Link&>(*udp_) : InprocLink::instance(),
              udp_ && udp_->steering() ? udp_->steering()->slot() << 16 : 0) {}

SoftHca::~SoftHca() {
  // Off the link first: no delivery reaches the engine once this returns.
  if (udp_)
    udp_->stop();
  else
    InprocLink::instance().detach(engine_.address());
}

std::vector<TableUsage> SoftHca::table_usage() const {
  std::vector<TableUsage> rows = engine_.table_usage();
  for (TableUsage& t : tables_.table_usage()) rows.push_back(std::move(t));
  return rows;
}

std::size_t SoftHca::table_bytes() const { return tables_.table_bytes() + engine_.allocator_bytes(); }

}  // namespace srdma::hca

