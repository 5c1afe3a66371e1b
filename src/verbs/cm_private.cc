// SOFTRDMA_PRIVATE_1: the device's CM agent for librdmacm.so.1 (see
// srdma_cm_private.h). One agent per device (CmAgent::create is EBUSY for a
// second), created on the first srdma_cm_open and gone with the last
// reference; it holds a handle on the device, so the device outlives it.
#include "srdma_cm_private.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>

#include "cm/cm_agent.h"
#include "cm/cma_header.h"
#include "errors.h"
#include "objects.h"
#include "signals.h"
#include "srdma/net.h"

struct srdma_cm {
  srdma::Device dev;  // before the agent: the agent holds a reference on it
  std::unique_ptr<srdma::cm::CmAgent> agent;
  int refs = 0;
};

namespace srdma::verbs {
namespace {

std::mutex g_cm_mu;
srdma_cm* g_cm = nullptr;  // the process has one device


std::optional<cm::PathMtu> cm_mtu(ibv_mtu m) {
  if (m < IBV_MTU_256 || m > IBV_MTU_4096) return std::nullopt;
  return static_cast<cm::PathMtu>(m);  // IBA's encoding in both
}

template <std::size_t N>
void fill_private(const std::array<std::byte, N>& pd, srdma_cm_event& ev) {
  ev.private_data = reinterpret_cast<const std::uint8_t*>(pd.data());
  ev.private_data_len = static_cast<std::uint8_t>(N);
}

// The link address a caller's peer names: its GID if it gives one (an IPv6
// peer: the address enters the process's IPv6 table, as any it names),
// else its IPv4 address.
Result<std::uint64_t> peer_of(std::uint32_t ipv4, const std::uint8_t (&gid)[16]) {
  Gid g;
  std::memcpy(g.data(), gid, g.size());
  if (g == Gid{}) return roce_address(ipv4);
  return roce_address_of_gid(g);
}

// The GID of a link address: ::ffff:a.b.c.d, or the IPv6 address.
cm::Gid cm_gid(std::uint64_t addr) {
  const Gid g = is_roce6_address(addr) ? gid_of_roce_address(addr) : gid_of_ipv4(roce_ipv4(addr));
  cm::Gid out;
  std::memcpy(out.data(), g.data(), out.size());
  return out;
}

srdma_cm_event to_c_event(const cm::CmEvent& e) {
  srdma_cm_event ev{};
  ev.id = e.id;
  ev.peer_ipv4 = is_roce_address(e.peer) ? roce_ipv4(e.peer) : 0;
  if (is_roce_link_address(e.peer)) {
    const Gid g = gid_of_roce_address(e.peer);
    std::memcpy(ev.peer_gid, g.data(), sizeof ev.peer_gid);
  }
  switch (e.type) {
    case cm::CmEventType::kReqReceived: {
      ev.type = SRDMA_CM_REQ_RECEIVED;
      const auto& r = std::get<cm::Req>(*e.message);
      ev.service_id = r.service_id;
      ev.qpn = r.local_qpn;
      ev.starting_psn = r.starting_psn;
      ev.path_mtu = static_cast<ibv_mtu>(r.path_mtu);
      ev.responder_resources = r.responder_resources;
      ev.initiator_depth = r.initiator_depth;
      ev.retry_count = r.retry_count;
      ev.rnr_retry_count = r.rnr_retry_count;
      ev.flow_control = r.end_to_end_flow_control;
      ev.srq = r.srq;
      fill_private(r.private_data, ev);
      break;
    }
    case cm::CmEventType::kRepReceived: {
      ev.type = SRDMA_CM_REP_RECEIVED;
      const auto& r = std::get<cm::Rep>(*e.message);
      ev.qpn = r.local_qpn;
      ev.starting_psn = r.starting_psn;
      ev.responder_resources = r.responder_resources;
      ev.initiator_depth = r.initiator_depth;
      ev.rnr_retry_count = r.rnr_retry_count;
      ev.flow_control = r.end_to_end_flow_control;
      ev.srq = r.srq;
      fill_private(r.private_data, ev);
      break;
    }
    case cm::CmEventType::kEstablished: ev.type = SRDMA_CM_ESTABLISHED; break;
    case cm::CmEventType::kRejected: {
      ev.type = SRDMA_CM_REJECTED;
      if (e.message && std::holds_alternative<cm::Rej>(*e.message)) {
        const auto& r = std::get<cm::Rej>(*e.message);
        ev.rej_reason = static_cast<std::uint16_t>(r.reason);
        fill_private(r.private_data, ev);
      }
      break;
    }
    case cm::CmEventType::kTimedOut: ev.type = SRDMA_CM_TIMED_OUT; break;
    case cm::CmEventType::kDisconnected: ev.type = SRDMA_CM_DISCONNECTED; break;
    case cm::CmEventType::kTimewaitExit: ev.type = SRDMA_CM_TIMEWAIT_EXIT; break;
    case cm::CmEventType::kSidrReqReceived: {
      ev.type = SRDMA_CM_SIDR_REQ_RECEIVED;
      const auto& r = std::get<cm::SidrReq>(*e.message);
      ev.service_id = r.service_id;
      fill_private(r.private_data, ev);
      break;
    }
    case cm::CmEventType::kSidrRepReceived: {
      ev.type = SRDMA_CM_SIDR_REP_RECEIVED;
      const auto& r = std::get<cm::SidrRep>(*e.message);
      ev.sidr_status = static_cast<std::uint8_t>(r.status);
      ev.qpn = r.qpn;
      ev.qkey = r.qkey;
      ev.service_id = r.service_id;
      fill_private(r.private_data, ev);
      break;
    }
  }
  return ev;
}

cm::CmAgent::Handler c_handler(srdma_cm_handler h, void* context) {
  return [h, context](const cm::CmEvent& e) {
    const srdma_cm_event ev = to_c_event(e);
    h(&ev, context);
  };
}

int result(const char* verb, const Result<void>& r) { return r ? 0 : fail(verb, r.error()); }

std::span<const std::byte> bytes(const void* p, std::size_t n) {
  return {static_cast<const std::byte*>(p), p ? n : 0};
}

}  // namespace
}  // namespace srdma::verbs

using namespace srdma;
using namespace srdma::verbs;

extern "C" {

srdma_cm* srdma_cm_open(ibv_context* context) {
  if (!context) return fail_null<srdma_cm>("srdma_cm_open", EINVAL, "NULL context");
  std::lock_guard lock(g_cm_mu);
  if (!g_cm) {
    auto* cm = new (std::nothrow) srdma_cm;
    if (!cm) return fail_null<srdma_cm>("srdma_cm_open", ENOMEM, "out of memory");
    cm->dev = to_ctx(context)->dev.share();
    SignalsBlocked quiet;  // the agent's thread starts here
    auto agent = cm::CmAgent::create(cm->dev);
    if (!agent) {
      delete cm;
      return fail_null<srdma_cm>("srdma_cm_open", agent.error());
    }
    cm->agent = std::move(*agent);
    g_cm = cm;
  } else if (g_cm->dev.address() != to_ctx(context)->dev.address()) {
    return fail_null<srdma_cm>("srdma_cm_open", ENODEV, "not the process's device");
  }
  ++g_cm->refs;
  return g_cm;
}

void srdma_cm_close(srdma_cm* cm) {
  if (!cm) return;
  srdma_cm* last = nullptr;
  {
    std::lock_guard lock(g_cm_mu);
    if (cm != g_cm || --cm->refs > 0) return;
    std::swap(last, g_cm);
  }
  last->agent.reset();  // stops its thread: no handler runs after this
  delete last;
}

int srdma_cm_listen(srdma_cm* cm, std::uint64_t service_id, srdma_cm_handler handler, void* context) {
  if (!cm || !handler) return fail("srdma_cm_listen", EINVAL, "NULL agent or handler");
  return result("srdma_cm_listen", cm->agent->listen(service_id, c_handler(handler, context)));
}

void srdma_cm_stop_listening(srdma_cm* cm, std::uint64_t service_id) {
  if (cm) cm->agent->stop_listening(service_id);
}

int srdma_cm_connect(srdma_cm* cm, const srdma_cm_connect_params* p, srdma_cm_handler handler, void* context,
                     std::uint32_t* id) {
  if (!cm || !p || !handler || !id) return fail("srdma_cm_connect", EINVAL, "NULL argument");
  auto mtu = cm_mtu(p->path_mtu);
  if (!mtu) return fail("srdma_cm_connect", EINVAL, "path_mtu is not an IBV_MTU_* value");
  if (p->private_data_len > cm::kReqPrivateDataBytes || (p->private_data_len && !p->private_data))
    return fail("srdma_cm_connect", EINVAL, "a REQ carries at most 92 bytes of private data");
  if (p->local_qpn > 0xFFFFFF || p->starting_psn > 0xFFFFFF)
    return fail("srdma_cm_connect", EINVAL, "QPN and PSN are 24 bits");
  cm::ConnectParams cp;
  auto peer = peer_of(p->peer_ipv4, p->peer_gid);
  if (!peer) return fail("srdma_cm_connect", peer.error());
  cp.peer = *peer;
  cp.service_id = p->service_id;
  if (p->response_timeout) cp.response_timeout = std::min<std::uint8_t>(p->response_timeout, 31);
  if (p->max_cm_retries) cp.max_cm_retries = std::min<std::uint8_t>(p->max_cm_retries, 15);
  cm::Req& r = cp.req;
  r.service_id = p->service_id;
  r.local_qpn = p->local_qpn;
  r.starting_psn = p->starting_psn;
  r.responder_resources = p->responder_resources;
  r.initiator_depth = p->initiator_depth;
  r.path_mtu = *mtu;
  r.retry_count = std::min<std::uint8_t>(p->retry_count, 7);
  r.rnr_retry_count = std::min<std::uint8_t>(p->rnr_retry_count, 7);
  r.primary_path.local_gid = cm_gid(cm->dev.address());
  r.primary_path.remote_gid = cm_gid(cp.peer);
  r.primary_path.hop_limit = 64;
  r.primary_path.local_ack_timeout = std::min<std::uint8_t>(p->local_ack_timeout, 31);
  if (p->private_data_len) std::memcpy(r.private_data.data(), p->private_data, p->private_data_len);
  auto got = cm->agent->connect(cp, c_handler(handler, context));
  if (!got) return fail("srdma_cm_connect", got.error());
  *id = *got;
  return 0;
}

int srdma_cm_accept(srdma_cm* cm, std::uint32_t id, const srdma_cm_reply* reply, srdma_cm_handler handler,
                    void* context) {
  if (!cm || !reply || !handler) return fail("srdma_cm_accept", EINVAL, "NULL argument");
  if (reply->private_data_len > cm::kRepPrivateDataBytes || (reply->private_data_len && !reply->private_data))
    return fail("srdma_cm_accept", EINVAL, "a REP carries at most 196 bytes of private data");
  if (reply->local_qpn > 0xFFFFFF || reply->starting_psn > 0xFFFFFF)
    return fail("srdma_cm_accept", EINVAL, "QPN and PSN are 24 bits");
  cm::Rep rep;
  rep.local_qpn = reply->local_qpn;
  rep.starting_psn = reply->starting_psn;
  rep.responder_resources = reply->responder_resources;
  rep.initiator_depth = reply->initiator_depth;
  rep.rnr_retry_count = std::min<std::uint8_t>(reply->rnr_retry_count, 7);
  rep.srq = reply->srq != 0;
  if (reply->private_data_len) std::memcpy(rep.private_data.data(), reply->private_data, reply->private_data_len);
  return result("srdma_cm_accept", cm->agent->accept(id, rep, c_handler(handler, context)));
}

int srdma_cm_reject(srdma_cm* cm, std::uint32_t id, const void* private_data, size_t len) {
  if (!cm) return fail("srdma_cm_reject", EINVAL, "NULL agent");
  if (len > cm::kRejPrivateDataBytes) return fail("srdma_cm_reject", EINVAL, "a REJ carries at most 148 bytes");
  return result("srdma_cm_reject", cm->agent->reject(id, bytes(private_data, len)));
}

int srdma_cm_ready(srdma_cm* cm, std::uint32_t id) {
  if (!cm) return fail("srdma_cm_ready", EINVAL, "NULL agent");
  return result("srdma_cm_ready", cm->agent->ready(id));
}

int srdma_cm_disconnect(srdma_cm* cm, std::uint32_t id) {
  if (!cm) return fail("srdma_cm_disconnect", EINVAL, "NULL agent");
  return result("srdma_cm_disconnect", cm->agent->disconnect(id));
}

void srdma_cm_destroy(srdma_cm* cm, std::uint32_t id) {
  if (cm) cm->agent->destroy(id);
}

int srdma_cm_sidr_request(srdma_cm* cm, const srdma_cm_sidr_params* p, srdma_cm_handler handler, void* context,
                          std::uint32_t* id) {
  if (!cm || !p || !handler || !id) return fail("srdma_cm_sidr_request", EINVAL, "NULL argument");
  if (p->private_data_len > cm::kSidrReqPrivateDataBytes || (p->private_data_len && !p->private_data))
    return fail("srdma_cm_sidr_request", EINVAL, "a SIDR_REQ carries at most 216 bytes of private data");
  cm::SidrParams sp;
  auto peer = peer_of(p->peer_ipv4, p->peer_gid);
  if (!peer) return fail("srdma_cm_sidr_request", peer.error());
  sp.peer = *peer;
  sp.service_id = p->service_id;
  if (p->response_timeout) sp.response_timeout = std::min<std::uint8_t>(p->response_timeout, 31);
  if (p->max_cm_retries) sp.max_cm_retries = std::min<std::uint8_t>(p->max_cm_retries, 15);
  if (p->private_data_len) std::memcpy(sp.private_data.data(), p->private_data, p->private_data_len);
  auto got = cm->agent->sidr_request(sp, c_handler(handler, context));
  if (!got) return fail("srdma_cm_sidr_request", got.error());
  *id = *got;
  return 0;
}

int srdma_cm_sidr_reply(srdma_cm* cm, std::uint32_t id, std::uint8_t status, std::uint32_t qpn, std::uint32_t qkey,
                        const void* private_data, size_t len) {
  if (!cm) return fail("srdma_cm_sidr_reply", EINVAL, "NULL agent");
  if (len > cm::kSidrRepPrivateDataBytes || (len && !private_data))
    return fail("srdma_cm_sidr_reply", EINVAL, "a SIDR_REP carries at most 136 bytes of private data");
  if (qpn > 0xFFFFFF) return fail("srdma_cm_sidr_reply", EINVAL, "a QPN is 24 bits");
  cm::SidrRep rep;
  rep.status = static_cast<cm::SidrStatus>(status);
  rep.qpn = qpn;
  rep.qkey = qkey;
  if (len) std::memcpy(rep.private_data.data(), private_data, len);
  return result("srdma_cm_sidr_reply", cm->agent->sidr_reply(id, rep));
}

}  // extern "C"
