#include "nvmf/controller.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace srdma::nvmf {
namespace {

// Copies `s` into a space-padded ASCII field (Identify's SN, MN, FR).
template <std::size_t N>
void set_ascii(char (&field)[N], std::string_view s) {
  std::memset(field, ' ', N);
  std::memcpy(field, s.data(), std::min(N, s.size()));
}

}  // namespace

std::uint32_t effective_kato_ms(std::uint32_t requested, const ControllerLimits& limits) {
  if (requested == 0) return limits.default_kato_ms;
  return std::clamp(requested, limits.min_kato_ms, std::max(limits.min_kato_ms, limits.max_kato_ms));
}

Controller::Controller(std::uint16_t cntlid, std::shared_ptr<Subsystem> subsys, std::string hostnqn,
                       std::uint32_t kato_ms, const ControllerLimits& limits, std::shared_ptr<const Clock> clock)
    : cntlid_(cntlid),
      subsys_(std::move(subsys)),
      hostnqn_(std::move(hostnqn)),
      kato_ms_(effective_kato_ms(kato_ms, limits)),
      limits_(limits),
      clock_(std::move(clock)),
      last_keep_alive_ns_(now_ns()) {}

NvmeStatus Controller::property_get(const PropertyFields& p, std::uint64_t* value) const {
  switch (p.property) {
    case Property::kCap:
      // MQES (0's based), CQR, TO = 1 (500 ms), CSS = NVM command set.
      *value = (limits_.max_queue_size - 1) | kCapCqr | (std::uint64_t{1} << kCapToShift) |
               (std::uint64_t{1} << kCapCssShift);
      return NvmeStatus::success();
    case Property::kVs:
      *value = kVersion1_4;
      return NvmeStatus::success();
    case Property::kCc:
      *value = cc_.load(std::memory_order_acquire);
      return NvmeStatus::success();
    case Property::kCsts:
      *value = csts_.load(std::memory_order_acquire);
      return NvmeStatus::success();
  }
  return NvmeStatus::of(StatusCode::kInvalidField);
}

NvmeStatus Controller::property_set(const PropertyFields& p) {
  if (p.property != Property::kCc) return NvmeStatus::of(StatusCode::kInvalidField);
  std::lock_guard lock(mu_);
  const auto cc = static_cast<std::uint32_t>(p.value);
  const std::uint32_t old = cc_.exchange(cc, std::memory_order_acq_rel);
  std::uint32_t csts = csts_.load(std::memory_order_relaxed);
  if ((cc & kCcEnable) && !(old & kCcEnable)) csts |= kCstsReady;
  if (!(cc & kCcEnable) && (old & kCcEnable)) csts &= ~kCstsReady;
  const std::uint32_t shn = (cc >> kCcShnShift) & 3;
  if (shn != 0) {
    // Nothing is cached in RAM namespaces and the file ones flush per
    // command: the shutdown completes at once.
    csts = (csts & ~(3u << kCstsShstShift)) | (2u << kCstsShstShift);
  }
  csts_.store(csts, std::memory_order_release);
  return NvmeStatus::success();
}

NvmeStatus Controller::identify(const Command& cmd, std::span<std::byte> out) const {
  if (out.size() < kIdentifyDataSize) return NvmeStatus::of(StatusCode::kInternalError);
  std::memset(out.data(), 0, kIdentifyDataSize);
  switch (cmd.identify.cns) {
    case Cns::kController: {
      IdentifyController id;
      id.vid = 0x1b36;  // the "virtual device" vendor id QEMU and nvmet use
      id.ssvid = id.vid;
      fill_identify_controller(*subsys_, id);  // SN, MN, SUBNQN, NN
      set_ascii(id.fr, "0.1");
      // MDTS in units of the minimum page size (4 KiB).
      id.mdts = static_cast<std::uint8_t>(std::bit_width(limits_.max_io_size / 4096) - 1);
      id.cntlid = cntlid_;
      id.ver = kVersion1_4;
      id.kas = 1;  // 100 ms granularity
      id.sqes = (6 << 4) | 6;
      id.cqes = (4 << 4) | 4;
      id.maxcmd = static_cast<std::uint16_t>(limits_.max_queue_size);
      id.sgls = kSglsSupported | kSglsKeyedDataBlock | kSglsOffset;
      id.ioccsz = (sizeof(NvmeCommand) + limits_.in_capsule_data_size) / 16;
      id.iorcsz = sizeof(NvmeCompletion) / 16;
      id.msdbd = 1;
      std::memcpy(out.data(), &id, sizeof(id));
      return NvmeStatus::success();
    }
    case Cns::kNamespace: {
      auto ns = subsys_->find_namespace(cmd.nsid);
      if (!ns) return NvmeStatus::of(StatusCode::kInvalidNamespace);
      const IdentifyNamespace id = identify_namespace(*ns);
      std::memcpy(out.data(), &id, sizeof(id));
      return NvmeStatus::success();
    }
    case Cns::kActiveNamespaceList: {
      // nsids greater than cmd.nsid, increasing, zero terminated.
      std::size_t n = 0;
      for (std::uint32_t nsid : subsys_->active_nsids(cmd.nsid)) std::memcpy(out.data() + 4 * n++, &nsid, 4);
      return NvmeStatus::success();
    }
  }
  return NvmeStatus::of(StatusCode::kInvalidField);
}

bool Controller::keep_alive_expired() const {
  if (kato_ms_ == 0) return false;
  return now_ns() - last_keep_alive_ns_.load(std::memory_order_relaxed) > std::int64_t{kato_ms_} * 1'000'000;
}

}  // namespace srdma::nvmf
