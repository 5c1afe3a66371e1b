// A device's CM agent: its GSI QP (QP1) carrying the CM's MADs to and from
// other devices, and the CM state machine (cm_engine.h) and service ID
// resolution for UD (sidr.h) behind it, like Linux's ib_cm on a port's MAD
// agent. SIDR_REQ and SIDR_REP go to the SIDR engine, the rest to the CM's.
//
// One thread per agent receives MADs (a receive ring on QP1), runs the
// engine's timers and hands the engine's events to the consumers'
// handlers, one at a time and with no agent lock held: a handler may call
// back into the agent (accept() from its kReqReceived, ready() from its
// kRepReceived). The verbs (connect, accept, ...) may be called from any
// thread.
//
// A MAD goes to the peer's QP1 with the GSI Q_Key; each peer gets one
// address handle. The sender of a MAD is the source address of its
// datagram (the GRH area's IPv4 header), which the engine checks against
// the connection's peer. Every MAD is decoded and checked before use; the
// engine counts what it drops.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <list>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "cm/cm_engine.h"
#include "cm/sidr.h"
#include "srdma/ah.h"
#include "srdma/cq.h"
#include "srdma/device.h"
#include "srdma/mr.h"
#include "srdma/net.h"
#include "srdma/pd.h"
#include "srdma/qp.h"

namespace srdma::cm {

// The source of a UD datagram received over IPv6, from its GRH area (the
// datagram's IPv6 header, as udp_link writes it): nullopt unless it is the
// header of a RoCEv2 datagram (version 6, next header UDP) whose payload
// length is that of a UD SEND of `payload_bytes` (UDP, BTH, DETH, the
// payload and its pad, ICRC).
std::optional<IpAddress> ipv6_grh_source(std::span<const std::byte> grh, std::size_t payload_bytes);

class CmAgent final : private CmEngine::Port {
 public:
  using Handler = std::function<void(const CmEvent&)>;

  // Creates the device's GSI QP (EBUSY when the device has one: one agent
  // per device) and starts the agent's thread. The agent keeps a handle on
  // the device.
  static Result<std::unique_ptr<CmAgent>> create(Device& dev);
  ~CmAgent() override;
  CmAgent(const CmAgent&) = delete;
  CmAgent& operator=(const CmAgent&) = delete;

  // kReqReceived and kSidrReqReceived events for `service_id` go to `h`
  // (which accepts, rejects or replies to the ID it names). EADDRINUSE when
  // the service has a listener.
  Result<void> listen(std::uint64_t service_id, Handler h);
  // Afterwards no handler of this listener runs or will run.
  void stop_listening(std::uint64_t service_id);

  // The engine's verbs; `h` gets the connection's later events.
  Result<std::uint32_t> connect(const ConnectParams& p, Handler h);
  Result<void> accept(std::uint32_t id, const Rep& rep, Handler h);
  Result<void> ready(std::uint32_t id, std::span<const std::byte> private_data = {});
  Result<void> reject(std::uint32_t id, std::span<const std::byte> private_data = {});
  Result<void> disconnect(std::uint32_t id, std::span<const std::byte> private_data = {});
  // SIDR: the request (`h` gets kSidrRepReceived or kTimedOut) and the
  // passive side's reply to a kSidrReqReceived.
  Result<std::uint32_t> sidr_request(const SidrParams& p, Handler h);
  Result<void> sidr_reply(std::uint32_t id, const SidrRep& rep);
  // Forgets the ID (a connection's or a SIDR request's): no handler of it
  // runs after this returns (unless this is called from that handler itself).
  void destroy(std::uint32_t id);

  std::optional<CmState> state(std::uint32_t id) const;
  CmCounters counters() const;
  SidrCounters sidr_counters() const;
  // MADs the agent could not send (no send slot free, no address handle):
  // the engine's retries cover them.
  std::uint64_t send_failures() const;
  // Address handles cached (at most kMaxAhs).
  std::size_t cached_ahs() const;
  static constexpr std::size_t kMaxAhs = 256;
  std::uint64_t local_ca_guid() const { return guid_; }
  // The CQ of its GSI QP, which a tool tells apart from its consumers' CQs.
  std::uint32_t cqn() const { return cq_->cqn(); }
  // True on the agent's own thread (in a handler): an owner must not
  // destroy the agent there, since the destructor joins that thread.
  bool on_agent_thread() const {
    return std::this_thread::get_id() == thread_id_.load(std::memory_order_relaxed);
  }

 private:
  static constexpr std::uint32_t kRecvSlots = 256;  // a burst of REQs waits here, not dropped
  static constexpr std::uint32_t kSendSlots = 64;
  static constexpr std::uint32_t kGrhBytes = 40;
  static constexpr std::uint32_t kRecvSlotBytes = kGrhBytes + kMadBytes;

  CmAgent(Device& dev, std::uint64_t guid);
  // A fresh random communication or SIDR request ID (see cm_agent.cc).
  std::uint32_t random_id() const;
  // REQUIRES mu_. The peer's AH from the bounded LRU cache; null if the
  // device refuses one.
  std::shared_ptr<AddressHandle> ah_for(std::uint64_t peer);
  Result<void> init();
  void run();
  void wake();
  // REQUIRES mu_.
  void drain_cq();
  void post_recv(std::uint32_t slot);
  // The MAD's sender (0: none, a GRH that does not hold up; counted).
  // REQUIRES mu_.
  std::uint64_t sender_of(const std::byte* grh, std::size_t mad_bytes);
  void dispatch();

  // CmEngine::Port (called with mu_ held).
  void send_mad(std::uint64_t peer, const Mad& mad) override;
  void on_event(const CmEvent& e) override;

  Device dev_;  // a handle of its own: the device stays while the agent does
  const std::uint64_t guid_;
  ProtectionDomain pd_;
  std::unique_ptr<CompletionQueue> cq_;
  std::unique_ptr<QueuePair> qp_;
  std::vector<std::byte> buf_;  // the receive slots, then the send slots
  MemoryRegion mr_;
  int wake_fd_ = -1;

  mutable std::mutex mu_;
  // Before engine_: each draws IDs the other does not hold (one handler
  // map for both), and the CM engine draws its first at construction.
  SidrEngine sidr_;
  CmEngine engine_;
  // Address handles by peer, least recently used last in ah_lru_.
  std::map<std::uint64_t, std::pair<std::shared_ptr<AddressHandle>, std::list<std::uint64_t>::iterator>> ahs_;
  std::list<std::uint64_t> ah_lru_;
  std::uint64_t ah_evictions_ = 0;
  std::array<std::shared_ptr<AddressHandle>, kSendSlots> send_ahs_;  // the AH each posted send uses
  std::vector<std::uint32_t> free_sends_;
  std::map<std::uint32_t, Handler> handlers_;        // by local comm ID
  std::map<std::uint64_t, std::unique_ptr<Handler>> listeners_;  // by service ID; the engine's context
  std::vector<CmEvent> pending_;                     // events for dispatch()
  std::uint64_t send_failures_ = 0;
  std::uint64_t dropped_bad_grh_ = 0;  // sender_of()
  // The handler running on the agent's thread (0: none), so that destroy()
  // and stop_listening() can wait for it.
  std::uint32_t running_id_ = 0;
  const Handler* running_listener_ = nullptr;
  std::condition_variable idle_;
  bool stopping_ = false;
  std::thread thread_;
  // Stored by the agent's thread itself: thread_ is still being assigned
  // when that thread first runs.
  std::atomic<std::thread::id> thread_id_{};
};

}  // namespace srdma::cm
