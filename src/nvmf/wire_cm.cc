#include "nvmf/wire_cm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "cm/cm_agent.h"
#include "cm/cma_header.h"
#include "srdma/net.h"

namespace srdma::nvmf {
namespace {

using cm::CmAgent;
using cm::CmEvent;
using cm::CmEventType;

// RDMA READ/atomic depth both ways: the device's (kMaxRdAtomic), which the
// QPs' connect() sets too.
constexpr std::uint8_t kRdAtomic = 16;

// The devices' agents: shared by their users, gone with the last one. An
// entry stays until its agent is destroyed, not only unreferenced: the
// device has one GSI QP, so a new agent waits for the old one to release it.
std::mutex agents_mu;
std::condition_variable agents_cv;
std::map<std::uint64_t, std::weak_ptr<CmAgent>> agents;

// The threads that destroy an agent whose last reference went in one of its
// own handlers. Joined, never detached: the next such destruction joins the
// ones before it, and the process's exit joins the rest before the statics
// they use go (this is made at an agent's creation, after the device's
// statics, so it is destroyed before them; the registry above outlives it).
class AgentReaper {
 public:
  void run(std::function<void()> f) {
    std::lock_guard lock(mu_);
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    threads_.emplace_back(std::move(f));
  }
  ~AgentReaper() {
    std::lock_guard lock(mu_);
    for (std::thread& t : threads_) t.join();
  }

 private:
  std::mutex mu_;
  std::vector<std::thread> threads_;
};

AgentReaper& reaper() {
  static AgentReaper r;
  return r;
}

void agent_destroyed(std::uint64_t address) {
  std::lock_guard lock(agents_mu);
  agents.erase(address);
  agents_cv.notify_all();
}

}  // namespace

Result<std::shared_ptr<CmAgent>> device_cm_agent(Device& dev) {
  const std::uint64_t address = dev.address();
  std::unique_lock lock(agents_mu);
  for (;;) {
    auto it = agents.find(address);
    if (it == agents.end()) break;
    if (auto a = it->second.lock()) return a;
    agents_cv.wait(lock);  // the last user left and the agent is being destroyed
  }
  auto a = CmAgent::create(dev);
  if (!a) return std::unexpected(a.error());
  (void)reaper();  // made now, while the device's statics exist (see AgentReaper)
  // The last reference can go in one of the agent's own handlers (a
  // connection freed there): the agent is then destroyed on another
  // thread, which joins the agent's once the handler has returned.
  std::shared_ptr<CmAgent> shared(a->release(), [address](CmAgent* p) {
    auto destroy = [p, address] {
      delete p;
      agent_destroyed(address);
    };
    if (p->on_agent_thread())
      reaper().run(destroy);
    else
      destroy();
  });
  agents[address] = shared;
  return shared;
}

namespace {

std::uint64_t service_id(std::uint16_t port) { return cm::rdma_service_id(cm::kRdmaPsTcp, port); }

std::optional<cm::PathMtu> encode_mtu(std::uint32_t bytes) {
  switch (bytes) {
    case 256: return cm::PathMtu::k256;
    case 512: return cm::PathMtu::k512;
    case 1024: return cm::PathMtu::k1024;
    case 2048: return cm::PathMtu::k2048;
    case 4096: return cm::PathMtu::k4096;
    default: return std::nullopt;
  }
}
std::uint32_t mtu_bytes(cm::PathMtu m) { return 128u << static_cast<unsigned>(m); }

// The IPv4 address the RDMA CM header names: a RoCEv2 device's own; an
// in-process device's address stands for one (its low 32 bits, as the UD
// GRH the link synthesizes says).
std::uint32_t ipv4_of(std::uint64_t addr) {
  return is_roce_address(addr) ? roce_ipv4(addr) : static_cast<std::uint32_t>(addr);
}

// The RDMA CM header of a connection from `local` to `peer`: IPv6 between
// IPv6 devices (their addresses, as librdmacm's over sockaddr_in6), else
// IPv4.
cm::CmaHeader cma_header_of(std::uint64_t local, std::uint64_t peer) {
  if (!is_roce6_address(local)) return cm::cma_header_v4(ipv4_of(local), ipv4_of(peer), 0);
  cm::CmaHeader h;
  h.ip_version = 6;
  const Gid src = gid_of_roce_address(local), dst = gid_of_roce_address(peer);
  std::memcpy(h.src_addr.data(), src.data(), src.size());
  std::memcpy(h.dst_addr.data(), dst.data(), dst.size());
  return h;
}

// A RoCEv2 GID (IPv4-mapped, or an IPv6 device's address itself); on the
// in-process link the link-local GID the port reports (fe80::address).
cm::Gid gid_of(std::uint64_t addr) {
  cm::Gid out{};
  if (is_roce_link_address(addr)) {
    const Gid g = gid_of_roce_address(addr);
    std::memcpy(out.data(), g.data(), out.size());
    return out;
  }
  out[0] = std::byte{0xfe};
  out[1] = std::byte{0x80};
  for (int i = 0; i < 8; ++i) out[15 - i] = static_cast<std::byte>(addr >> (8 * i));
  return out;
}

std::string rej_reason(const CmEvent& e) {
  if (!e.message) return "no reason";
  const auto& r = std::get<cm::Rej>(*e.message);
  return fmt::format("{} ({})", cm::reject_reason_name(r.reason), static_cast<unsigned>(r.reason));
}

}  // namespace

WireListener::WireListener(std::shared_ptr<CmAgent> agent, std::uint64_t service_id)
    : agent_(std::move(agent)), service_id_(service_id) {}

WireListener::~WireListener() { agent_->stop_listening(service_id_); }

cm::CmCounters WireListener::counters() const { return agent_->counters(); }

Result<std::unique_ptr<WireListener>> wire_listen(Device& dev, std::uint16_t port, CmListener* l) {
  if (!l) return make_error(EINVAL, "no listener");
  auto agent = device_cm_agent(dev);
  if (!agent) return std::unexpected(agent.error());
  std::weak_ptr<CmAgent> weak = *agent;
  // The RDMA CM's requests over the device's own IP version (an IPv6
  // device's peers are IPv6: net.h).
  const std::uint8_t ip_version = is_roce6_address(dev.address()) ? 6 : 4;
  auto handle_req = [weak, l, ip_version](const CmEvent& e) {
    auto a = weak.lock();
    if (!a) return;
    const auto& req = std::get<cm::Req>(*e.message);
    cm::CmaHeader h;
    if (!cm::decode_cma_header(req.private_data, h).ok() || h.ip_version != ip_version ||
        req.transport_service_type != cm::TransportServiceType::kRc) {
      (void)a->reject(e.id);  // not an RDMA CM request over our IP version, or not RC
      a->destroy(e.id);
      return;
    }
    CmRequest creq;
    creq.peer_addr = e.peer;
    creq.peer_qpn = req.local_qpn;
    creq.psn = req.starting_psn;
    creq.path_mtu = mtu_bytes(req.path_mtu);
    creq.private_data.assign(req.private_data.begin() + cm::kCmaHeaderBytes, req.private_data.end());
    auto conn = std::make_shared<CmConnection>();
    conn->hold(a);
    const std::uint32_t id = e.id;
    // The target leaving: the DREQ.
    conn->set_disconnect_handler(CmConnection::kActive, [weak, id] {
      if (auto live = weak.lock()) (void)live->disconnect(id);
    });
    auto reply = l->on_connect_request(creq, conn);
    if (!reply) {
      (void)a->reject(id);
      a->destroy(id);
      return;
    }
    cm::Rep rep;
    rep.local_qpn = reply->qpn;
    rep.starting_psn = reply->psn;
    rep.responder_resources = kRdAtomic;
    rep.initiator_depth = kRdAtomic;
    rep.rnr_retry_count = 7;
    std::copy_n(reply->private_data.begin(), std::min(reply->private_data.size(), rep.private_data.size()),
                rep.private_data.begin());
    std::weak_ptr<CmConnection> wconn = conn;
    // The host leaving (its DREQ), or the handshake failing: the queue's
    // disconnect handler runs.
    auto later = [weak, wconn](const CmEvent& ev) {
      if (ev.type == CmEventType::kEstablished) {
        if (auto c = wconn.lock()) c->mark_established();
        return;
      }
      if (auto c = wconn.lock()) c->disconnect(CmConnection::kActive);
      if (auto live = weak.lock()) live->destroy(ev.id);
    };
    if (!a->accept(id, rep, later)) {
      conn->disconnect(CmConnection::kActive);
      a->destroy(id);
    }
  };
  if (auto r = (*agent)->listen(service_id(port), handle_req); !r) return std::unexpected(r.error());
  return std::unique_ptr<WireListener>(new WireListener(std::move(*agent), service_id(port)));
}

Result<std::pair<CmReply, std::shared_ptr<CmConnection>>> wire_connect(Device& local, std::uint64_t addr,
                                                                       std::uint16_t port, const CmRequest& req) {
  auto mtu = encode_mtu(req.path_mtu);
  if (!mtu) return make_error(EINVAL, fmt::format("path MTU {} is not an IB MTU", req.path_mtu));
  if (req.private_data.size() > cm::kRdmaCmReqUserData)
    return make_error(EINVAL, fmt::format("{} bytes of private data: a REQ has room for {}", req.private_data.size(),
                                          cm::kRdmaCmReqUserData));
  if (is_roce_link_address(addr) && is_roce6_address(addr) != is_roce6_address(local.address()))
    return make_error(EINVAL, fmt::format("the target is on {}, this device on {}: a device reaches its own family only",
                                          is_roce6_address(addr) ? "IPv6" : "IPv4",
                                          is_roce6_address(local.address()) ? "IPv6" : "IPv4"));
  auto agent = device_cm_agent(local);
  if (!agent) return std::unexpected(agent.error());

  cm::ConnectParams p;
  p.peer = addr;
  p.service_id = service_id(port);
  cm::Req& r = p.req;
  r.local_qpn = req.peer_qpn;
  r.starting_psn = req.psn;
  r.responder_resources = kRdAtomic;
  r.initiator_depth = kRdAtomic;
  r.path_mtu = *mtu;
  r.retry_count = 7;
  r.rnr_retry_count = 7;
  r.primary_path.local_gid = gid_of(local.address());
  r.primary_path.remote_gid = gid_of(addr);
  r.primary_path.hop_limit = 64;
  r.primary_path.local_ack_timeout = 14;
  (void)cm::encode_cma_header(cma_header_of(local.address(), addr), r.private_data);
  std::copy(req.private_data.begin(), req.private_data.end(), r.private_data.begin() + cm::kCmaHeaderBytes);

  struct Pending {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<Result<CmReply>> result;
    std::weak_ptr<CmConnection> conn;
  };
  auto pending = std::make_shared<Pending>();
  std::weak_ptr<CmAgent> weak = *agent;
  auto handler = [pending, weak](const CmEvent& e) {
    auto a = weak.lock();
    std::unique_lock lock(pending->mu);
    switch (e.type) {
      case CmEventType::kRepReceived: {
        const auto& rep = std::get<cm::Rep>(*e.message);
        CmReply reply;
        reply.qpn = rep.local_qpn;
        reply.psn = rep.starting_psn;
        reply.private_data.assign(rep.private_data.begin(), rep.private_data.end());
        if (a) (void)a->ready(e.id);
        pending->result = std::move(reply);
        break;
      }
      case CmEventType::kRejected:
        if (!pending->result) pending->result = make_error(ECONNREFUSED, "the target rejected the connection: " + rej_reason(e));
        break;
      case CmEventType::kTimedOut:
        if (!pending->result) pending->result = make_error(ETIMEDOUT, "no answer from the target's CM");
        break;
      case CmEventType::kDisconnected: {
        auto c = pending->conn.lock();
        lock.unlock();
        if (c) c->disconnect(CmConnection::kPassive);  // the target left: the queue's handler runs
        if (a) a->destroy(e.id);
        return;
      }
      case CmEventType::kReqReceived:
      case CmEventType::kEstablished:
      case CmEventType::kTimewaitExit:  // (destroyed at kDisconnected: never here)
      case CmEventType::kSidrReqReceived:  // SIDR is UD's: never on an NVMe-oF connection
      case CmEventType::kSidrRepReceived:
        break;
    }
    pending->cv.notify_all();
  };
  auto id = (*agent)->connect(p, handler);
  if (!id) return std::unexpected(id.error());
  auto conn = std::make_shared<CmConnection>();
  conn->hold(*agent);
  const std::uint32_t cid = *id;
  conn->set_disconnect_handler(CmConnection::kPassive, [weak, cid] {
    if (auto a = weak.lock()) (void)a->disconnect(cid);  // the host leaving: the DREQ
  });
  Result<CmReply> result = make_error(ETIMEDOUT, "no answer from the target's CM");
  {
    std::unique_lock lock(pending->mu);
    pending->conn = conn;
    // The engine answers within its retries (REQ response timeout times
    // max_cm_retries + 1): this bound only guards against a lost agent.
    pending->cv.wait_for(lock, std::chrono::seconds(30), [&] { return pending->result.has_value(); });
    if (pending->result) result = std::move(*pending->result);
  }
  if (!result) {
    (*agent)->destroy(cid);
    return std::unexpected(result.error());
  }
  return std::pair{std::move(*result), std::move(conn)};
}

}  // namespace srdma::nvmf
