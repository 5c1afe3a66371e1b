// A target-side NVMe controller (the dynamic controller model of NVMe-oF):
// created by an admin queue's Connect, found by I/O queues' Connects through
// its cntlid, holding the controller properties and the keep-alive state.
//
// The admin commands that need nothing but the controller (Property Get /
// Set, Identify, Keep Alive) are answered here; the queues move the data.
// Thread safety: every member may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "nvmf/capsule_parser.h"
#include "nvmf/clock.h"
#include "nvmf/status.h"
#include "nvmf/subsystem.h"

namespace srdma::nvmf {

struct ControllerLimits {
  std::uint32_t max_queue_size = 128;       // CAP.MQES + 1
  std::uint32_t max_io_size = 128 * 1024;   // bytes per command (MDTS)
  std::uint32_t in_capsule_data_size = 0;   // I/O queues' in-capsule data (IOCCSZ * 16 - 64)
  std::uint16_t max_io_queues = 64;
  // Keep-alive (KATO) bounds: a controller always ends when its host falls
  // silent. KATO 0 ("no keep-alive") gets default_kato_ms, as nvmet gives a
  // discovery controller; anything else is clamped into [min, max] (NVMe
  // base 5.21.1.15 lets the controller round KATO).
  std::uint32_t min_kato_ms = 1000;
  std::uint32_t default_kato_ms = 120'000;
  std::uint32_t max_kato_ms = 3'600'000;
};

// The keep-alive timeout a controller runs with for a host's requested one.
std::uint32_t effective_kato_ms(std::uint32_t requested, const ControllerLimits& limits);

class Controller {
 public:
  // `clock` times KATO; `kato_ms` is the host's, bounded by
  // effective_kato_ms().
  Controller(std::uint16_t cntlid, std::shared_ptr<Subsystem> subsys, std::string hostnqn,
             std::uint32_t kato_ms, const ControllerLimits& limits, std::shared_ptr<const Clock> clock);

  std::uint16_t cntlid() const { return cntlid_; }
  const std::shared_ptr<Subsystem>& subsystem() const { return subsys_; }
  const std::string& hostnqn() const { return hostnqn_; }
  const ControllerLimits& limits() const { return limits_; }

  // CC.EN and CSTS.RDY: I/O is served only while ready.
  bool ready() const { return csts_.load(std::memory_order_acquire) & kCstsReady; }

  // Property Get: the value, or Invalid Field for an unknown property or size.
  NvmeStatus property_get(const PropertyFields& p, std::uint64_t* value) const;
  // Property Set of CC: enable -> ready, disable -> not ready, shutdown
  // notification -> shutdown complete.
  NvmeStatus property_set(const PropertyFields& p);

  // Identify into `out` (4096 bytes). Invalid Namespace for an nsid the
  // subsystem does not have (CNS 00h), Invalid Field for an unknown CNS.
  NvmeStatus identify(const Command& cmd, std::span<std::byte> out) const;

  // Keep Alive: any command counts as traffic (NVMe-oF 1.1 3.10: TBKAS off,
  // the Keep Alive command itself restarts the timer).
  void keep_alive() { last_keep_alive_ns_.store(now_ns(), std::memory_order_relaxed); }
  std::uint32_t kato_ms() const { return kato_ms_; }
  // True when no Keep Alive came within KATO.
  bool keep_alive_expired() const;

  // Revoked: its host may no longer reach its subsystem (a reload removed
  // one or the other, RdmaTarget::access_changed). Its queues are closed
  // as an expired keep-alive's are, and no I/O queue joins it.
  void revoke() { revoked_.store(true, std::memory_order_release); }
  bool revoked() const { return revoked_.load(std::memory_order_acquire); }

 private:
  std::int64_t now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_->now().time_since_epoch()).count();
  }

  const std::uint16_t cntlid_;
  const std::shared_ptr<Subsystem> subsys_;
  const std::string hostnqn_;
  const std::uint32_t kato_ms_;
  const ControllerLimits limits_;
  const std::shared_ptr<const Clock> clock_;
  mutable std::mutex mu_;  // serialises property writes
  std::atomic<std::uint32_t> cc_{0};
  std::atomic<std::uint32_t> csts_{0};
  std::atomic<std::int64_t> last_keep_alive_ns_;
  std::atomic<bool> revoked_{false};
};

}  // namespace srdma::nvmf
