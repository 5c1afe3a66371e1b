// NVMe/RDMA connection setup, as the Linux host and target do it through
// the RDMA CM, on the in-process link and on RoCEv2 alike: a REQ to the
// service ID of the target's TCP port (RDMA_PS_TCP), whose private data is
// the RDMA CM's IP header (IPv4, or IPv6 between IPv6 devices; a listener
// takes its device's version only) and then the NVMe-oF RDMA request (queue ID,
// queue sizes); a REP with the NVMe-oF RDMA reply; the RTU; DREQ/DREP when
// either side leaves.
//
// It speaks rdma_cm.h's CmListener and CmConnection: a DREQ from the peer
// runs the local side's disconnect handler, and the local side's
// disconnect() sends the DREQ.
//
// The CM agents (one per device, on its GSI QP) are shared by everything
// that uses the device and live as long as something does: a listener, a
// connection, a connect in progress.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "cm/cm_engine.h"
#include "nvmf/rdma_cm.h"
#include "srdma/device.h"

namespace srdma::cm {
class CmAgent;
}

namespace srdma::nvmf {

// Listening on the wire while it lives.
class WireListener {
 public:
  ~WireListener();
  WireListener(const WireListener&) = delete;
  WireListener& operator=(const WireListener&) = delete;
  // The counters of the CM agent it listens through.
  cm::CmCounters counters() const;

 private:
  friend Result<std::unique_ptr<WireListener>> wire_listen(Device& dev, std::uint16_t port, CmListener* l);
  WireListener(std::shared_ptr<cm::CmAgent> agent, std::uint64_t service_id);
  std::shared_ptr<cm::CmAgent> agent_;
  std::uint64_t service_id_;
};

// Connection requests to (dev, port) from other devices reach `l` (which
// outlives the returned listener). EADDRINUSE when the port has one.
Result<std::unique_ptr<WireListener>> wire_listen(Device& dev, std::uint16_t port, CmListener* l);

// Connects `local`'s QP (req.peer_qpn, starting PSN req.psn) to whatever listens
// on (addr, port), waiting for the REP, a REJ (ECONNREFUSED) or the CM's
// timeout (ETIMEDOUT). The RTU goes out with the REP's arrival: the
// caller's QP connects right after, before anything can come to it (an
// NVMe-oF target speaks only when spoken to).
Result<std::pair<CmReply, std::shared_ptr<CmConnection>>> wire_connect(Device& local, std::uint64_t addr,
                                                                       std::uint16_t port, const CmRequest& req);

// The device's CM agent, made if it has none: what answers on its GSI QP
// while something holds it. A test that takes a target away but not its
// host holds it, as the kernel's ib_cm stays up without nvmet: a host's
// REQ then gets REJ (no listener), not silence until the CM's timeout.
Result<std::shared_ptr<cm::CmAgent>> device_cm_agent(Device& dev);

}  // namespace srdma::nvmf
