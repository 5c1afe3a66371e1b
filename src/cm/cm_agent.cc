#include "cm/cm_agent.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cstring>

#include "common/secure_random.h"
#include "srdma/access.h"
#include "srdma/net.h"

namespace srdma::cm {
namespace {

constexpr std::uint64_t kRecvTag = 1ull << 32;  // wr_id: tag | slot
constexpr std::uint64_t kSendTag = 2ull << 32;
constexpr std::size_t kIpv4HeaderAt = 20;  // in the GRH area (rxe's layout)

// The CA GUID a REQ or REP names: the device's EUI-64 from its address, as
// the verbs face reports it (0x02 marks it locally administered).
std::uint64_t guid_of(std::uint64_t address) { return 0x0200'0000'0000'0000ull | (address & 0xFFFF'FFFF'FFFFull); }

}  // namespace

Result<std::unique_ptr<CmAgent>> CmAgent::create(Device& dev) {
  std::unique_ptr<CmAgent> a(new CmAgent(dev, guid_of(dev.address())));
  if (auto r = a->init(); !r) return std::unexpected(r.error());
  a->thread_ = std::thread([p = a.get()] { p->run(); });
  return a;
}

CmAgent::CmAgent(Device& dev, std::uint64_t guid)
    : dev_(dev.share()),
      guid_(guid),
      sidr_(*this,
            [this] {
              for (;;)
                if (const std::uint32_t id = random_id(); !engine_.state(id)) return id;
            },
            std::uint64_t{secure_random_u32()} << 32 | 1),
      engine_(*this, guid, [this] {
        for (;;)
          if (const std::uint32_t id = random_id(); !sidr_.contains(id)) return id;
      }) {}

// On a shared address the top byte is the device's host slot: the host's
// steering sends a MAD that answers this ID to this process.
std::uint32_t CmAgent::random_id() const {
  const std::uint32_t slot = dev_.host_slot();
  const std::uint32_t r = secure_random_u32();
  return slot != 0 ? slot << 24 | (r & 0xffffff) : r;
}

Result<void> CmAgent::init() {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return make_error(errno, "eventfd for the CM agent");
  auto pd = dev_.alloc_pd();
  if (!pd) return std::unexpected(pd.error());
  pd_ = std::move(*pd);
  CqInit ci;
  ci.cqe = kRecvSlots + kSendSlots;
  ci.handler = [this](CompletionQueue&) { wake(); };
  auto cq = dev_.create_cq(ci);
  if (!cq) return std::unexpected(cq.error());
  cq_ = std::move(*cq);
  QpInitAttr qi;
  qi.send_cq = cq_.get();
  qi.recv_cq = cq_.get();
  qi.cap = QpCaps{kSendSlots, kRecvSlots, 1, 1, 0};
  qi.qp_type = QpType::kUd;
  qi.create_flags = QP_CREATE_GSI;
  auto qp = pd_.create_qp(qi);
  if (!qp) return std::unexpected(qp.error());
  qp_ = std::move(*qp);
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qkey = kGsiQkey;
  if (auto r = qp_->modify(a, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_QKEY); !r) return r;
  a.qp_state = QpState::kRtr;
  if (auto r = qp_->modify(a, QP_STATE); !r) return r;
  a.qp_state = QpState::kRts;
  if (auto r = qp_->modify(a, QP_STATE | QP_SQ_PSN); !r) return r;
  buf_.resize(std::size_t{kRecvSlots} * kRecvSlotBytes + std::size_t{kSendSlots} * kMadBytes);
  auto mr = pd_.reg_mr(buf_.data(), buf_.size(), ACCESS_LOCAL_WRITE);
  if (!mr) return std::unexpected(mr.error());
  mr_ = std::move(*mr);
  for (std::uint32_t s = 0; s < kSendSlots; ++s) free_sends_.push_back(s);
  std::lock_guard lock(mu_);
  for (std::uint32_t s = 0; s < kRecvSlots; ++s) post_recv(s);
  if (auto r = cq_->req_notify(CQ_NEXT_COMP); !r) return make_error(r.error().code, r.error().reason);
  return {};
}

CmAgent::~CmAgent() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake();
  if (thread_.joinable()) thread_.join();
  // The QP goes before the CQ, the AHs and the MR it uses.
  qp_.reset();
  send_ahs_ = {};
  ahs_.clear();
  if (mr_.valid()) (void)mr_.dereg();
  if (cq_) (void)cq_->destroy();
  cq_.reset();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void CmAgent::wake() {
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void CmAgent::post_recv(std::uint32_t slot) {
  Sge sge{reinterpret_cast<std::uint64_t>(buf_.data() + std::size_t{slot} * kRecvSlotBytes), kRecvSlotBytes,
          mr_.lkey()};
  RecvWr wr;
  wr.wr_id = kRecvTag | slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  (void)qp_->post_recv(wr);  // fails only once the QP is going away
}

std::optional<IpAddress> ipv6_grh_source(std::span<const std::byte> grh, std::size_t payload_bytes) {
  if (grh.size() < 40) return std::nullopt;
  auto u8 = [&](std::size_t i) { return std::to_integer<unsigned>(grh[i]); };
  if ((u8(0) >> 4) != 6 || u8(6) != 17) return std::nullopt;  // IPv6, next header UDP
  const std::size_t pad = (4 - payload_bytes % 4) % 4;
  const std::size_t expected = 8 + 12 + 8 + payload_bytes + pad + 4;  // UDP, BTH, DETH, payload, ICRC
  if ((u8(4) << 8 | u8(5)) != expected) return std::nullopt;
  IpAddress a;
  for (std::size_t i = 0; i < 16; ++i) a.bytes[i] = static_cast<std::uint8_t>(u8(8 + i));
  if (a.is_v4() || a == IpAddress{}) return std::nullopt;  // no IPv6 datagram comes from those
  return a;
}

std::uint64_t CmAgent::sender_of(const std::byte* grh, std::size_t mad_bytes) {
  if (is_roce6_address(dev_.address())) {
    // Looked up, never added: a MAD from an address this process never
    // named has no link address (net.h) and is dropped.
    const auto src = ipv6_grh_source(std::span(grh, kGrhBytes), mad_bytes);
    const std::uint64_t a = src ? known_roce_address(*src) : 0;
    if (a == 0) ++dropped_bad_grh_;
    return a;
  }
  std::uint32_t be;
  std::memcpy(&be, grh + kIpv4HeaderAt + 12, sizeof be);
  const std::uint32_t ip = ntohl(be);
  // In process the GRH's addresses stand for the devices' (their low 32 bits).
  return is_roce_address(dev_.address()) ? roce_address(ip) : std::uint64_t{ip};
}

void CmAgent::drain_cq() {
  std::array<Wc, 16> wcs;
  for (;;) {
    const int n = cq_->poll(wcs);
    if (n <= 0) return;
    const CmTime now = CmClock::now();
    for (int i = 0; i < n; ++i) {
      const Wc& wc = wcs[static_cast<std::size_t>(i)];
      const auto slot = static_cast<std::uint32_t>(wc.wr_id);
      if ((wc.wr_id & ~0xFFFF'FFFFull) == kSendTag) {
        send_ahs_[slot].reset();  // an AH evicted from the cache goes with its last send
        free_sends_.push_back(slot);
        continue;
      }
      if (wc.status != WcStatus::kSuccess) continue;  // flushed: the QP is going
      const std::byte* at = buf_.data() + std::size_t{slot} * kRecvSlotBytes;
      if ((wc.wc_flags & WC_GRH) && wc.byte_len >= kGrhBytes) {
        const std::span<const std::byte> mad(at + kGrhBytes, wc.byte_len - kGrhBytes);
        MadHeader h;
        const bool sidr = decode_header(mad, h).ok() &&
                          (h.attribute_id == AttributeId::kSidrReq || h.attribute_id == AttributeId::kSidrRep);
        if (const std::uint64_t from = sender_of(at, mad.size()); from == 0 && is_roce6_address(dev_.address())) {
          // dropped (counted)
        } else if (sidr) {
          sidr_.receive(from, mad, now);
        } else {
          engine_.receive(from, mad, now);
        }
      }
      post_recv(slot);
    }
  }
}

void CmAgent::run() {
  thread_id_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  std::unique_lock lock(mu_);
  while (!stopping_) {
    int timeout_ms = -1;
    auto d = engine_.next_deadline();
    if (auto s = sidr_.next_deadline(); s && (!d || *s < *d)) d = s;
    if (d) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*d - CmClock::now()).count();
      timeout_ms = static_cast<int>(std::clamp<long long>(left, 0, 60'000));
    }
    lock.unlock();
    pollfd p{wake_fd_, POLLIN, 0};
    (void)::poll(&p, 1, timeout_ms);
    std::uint64_t v;
    (void)!::read(wake_fd_, &v, sizeof v);
    lock.lock();
    if (stopping_) break;
    drain_cq();
    // Armed again, then drained again: a completion between the two polls
    // would otherwise wait for the next one's event.
    (void)cq_->req_notify(CQ_NEXT_COMP);
    drain_cq();
    engine_.tick(CmClock::now());
    sidr_.tick(CmClock::now());
    lock.unlock();
    dispatch();
    lock.lock();
  }
}

void CmAgent::dispatch() {
  std::unique_lock lock(mu_);
  while (!pending_.empty()) {
    CmEvent e = std::move(pending_.front());
    pending_.erase(pending_.begin());
    Handler h;
    if (e.type == CmEventType::kReqReceived || e.type == CmEventType::kSidrReqReceived) {
      const bool sidr = e.type == CmEventType::kSidrReqReceived;
      auto l = listeners_.find(sidr ? std::get<SidrReq>(*e.message).service_id : std::get<Req>(*e.message).service_id);
      if (l == listeners_.end()) {  // the listener left meanwhile: nobody will answer
        if (sidr) {
          sidr_.destroy(e.id);  // a SIDR_REP "rejected"
          continue;
        }
        (void)engine_.reject(e.id);
        engine_.destroy(e.id, CmClock::now());
        continue;
      }
      h = *l->second;
      running_listener_ = l->second.get();
    } else {
      auto it = handlers_.find(e.id);
      if (it == handlers_.end()) continue;  // destroyed
      h = it->second;
    }
    running_id_ = e.id;
    lock.unlock();
    if (h) h(e);
    lock.lock();
    running_id_ = 0;
    running_listener_ = nullptr;
    idle_.notify_all();
  }
}

std::shared_ptr<AddressHandle> CmAgent::ah_for(std::uint64_t peer) {
  if (auto it = ahs_.find(peer); it != ahs_.end()) {
    ah_lru_.splice(ah_lru_.begin(), ah_lru_, it->second.second);  // most recently used first
    return it->second.first;
  }
  auto ah = pd_.create_ah(AhAttr{.dest_addr = peer});
  if (!ah) return nullptr;
  // Bounded: every source address a stranger spoofs would otherwise keep
  // an AH here for ever. The least recently used goes (a send still
  // posted with it holds it until its completion).
  if (ahs_.size() >= kMaxAhs) {
    ahs_.erase(ah_lru_.back());
    ah_lru_.pop_back();
    ++ah_evictions_;
  }
  ah_lru_.push_front(peer);
  std::shared_ptr<AddressHandle> shared(std::move(*ah));
  ahs_.emplace(peer, std::pair{shared, ah_lru_.begin()});
  return shared;
}

void CmAgent::send_mad(std::uint64_t peer, const Mad& mad) {
  if (free_sends_.empty()) {
    ++send_failures_;
    return;
  }
  std::shared_ptr<AddressHandle> ah = ah_for(peer);
  if (!ah) {
    ++send_failures_;
    return;
  }
  const std::uint32_t slot = free_sends_.back();
  free_sends_.pop_back();
  std::byte* at = buf_.data() + std::size_t{kRecvSlots} * kRecvSlotBytes + std::size_t{slot} * kMadBytes;
  std::memcpy(at, mad.data(), kMadBytes);
  Sge sge{reinterpret_cast<std::uint64_t>(at), static_cast<std::uint32_t>(kMadBytes), mr_.lkey()};
  SendWr wr;
  wr.wr_id = kSendTag | slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = WrOpcode::kSend;
  wr.send_flags = SEND_SIGNALED;
  wr.ud.ah = ah.get();
  wr.ud.remote_qpn = kGsiQpn;
  wr.ud.remote_qkey = kGsiQkey;
  if (!qp_->post_send(wr)) {
    free_sends_.push_back(slot);
    ++send_failures_;
    return;
  }
  send_ahs_[slot] = std::move(ah);
}

void CmAgent::on_event(const CmEvent& e) {
  pending_.push_back(e);
  // From a verb on another thread: the agent's thread dispatches.
  wake();
}

Result<void> CmAgent::listen(std::uint64_t service_id, Handler h) {
  // Claimed on the host first, without mu_: the claim rebuilds the host's
  // steering, which receives (and may deliver MADs to this agent) meanwhile.
  // A second listen on the service fails here (it is ours already).
  if (auto r = dev_.claim_service(service_id); !r) return r;
  std::lock_guard lock(mu_);
  auto owned = std::make_unique<Handler>(std::move(h));
  auto r = engine_.listen(service_id, owned.get());
  if (r) {
    r = sidr_.listen(service_id, owned.get());
    if (!r) engine_.stop_listening(service_id);
  }
  if (!r) {
    if (!listeners_.count(service_id)) dev_.release_service(service_id);
    return r;
  }
  listeners_[service_id] = std::move(owned);
  return {};
}

void CmAgent::stop_listening(std::uint64_t service_id) {
  std::unique_lock lock(mu_);
  auto it = listeners_.find(service_id);
  if (it == listeners_.end()) return;
  engine_.stop_listening(service_id);
  sidr_.stop_listening(service_id);
  const Handler* l = it->second.get();
  if (!on_agent_thread())
    idle_.wait(lock, [&] { return running_listener_ != l; });
  listeners_.erase(it);
  lock.unlock();
  dev_.release_service(service_id);
}

Result<std::uint32_t> CmAgent::connect(const ConnectParams& p, Handler h) {
  std::lock_guard lock(mu_);
  auto id = engine_.connect(p, CmClock::now());
  if (!id) return id;
  handlers_[*id] = std::move(h);
  wake();  // a new deadline
  return id;
}

Result<void> CmAgent::accept(std::uint32_t id, const Rep& rep, Handler h) {
  std::lock_guard lock(mu_);
  if (auto r = engine_.accept(id, rep, CmClock::now()); !r) return r;
  handlers_[id] = std::move(h);
  wake();
  return {};
}

Result<void> CmAgent::ready(std::uint32_t id, std::span<const std::byte> pd) {
  std::lock_guard lock(mu_);
  return engine_.ready(id, pd);
}

Result<void> CmAgent::reject(std::uint32_t id, std::span<const std::byte> pd) {
  std::lock_guard lock(mu_);
  return engine_.reject(id, pd);
}

Result<void> CmAgent::disconnect(std::uint32_t id, std::span<const std::byte> pd) {
  std::lock_guard lock(mu_);
  auto r = engine_.disconnect(id, CmClock::now(), pd);
  wake();
  return r;
}

Result<std::uint32_t> CmAgent::sidr_request(const SidrParams& p, Handler h) {
  std::lock_guard lock(mu_);
  auto id = sidr_.request(p, CmClock::now());
  if (!id) return id;
  handlers_[*id] = std::move(h);
  wake();  // a new deadline
  return id;
}

Result<void> CmAgent::sidr_reply(std::uint32_t id, const SidrRep& rep) {
  std::lock_guard lock(mu_);
  auto r = sidr_.reply(id, rep, CmClock::now());
  wake();  // the answer's expiry
  return r;
}

void CmAgent::destroy(std::uint32_t id) {
  std::unique_lock lock(mu_);
  engine_.destroy(id, CmClock::now());
  sidr_.destroy(id);
  handlers_.erase(id);
  if (!on_agent_thread()) idle_.wait(lock, [&] { return running_id_ != id; });
  wake();
}

std::optional<CmState> CmAgent::state(std::uint32_t id) const {
  std::lock_guard lock(mu_);
  return engine_.state(id);
}

CmCounters CmAgent::counters() const {
  std::lock_guard lock(mu_);
  CmCounters c = engine_.counters();
  c.dropped_bad_grh = dropped_bad_grh_;
  return c;
}

SidrCounters CmAgent::sidr_counters() const {
  std::lock_guard lock(mu_);
  return sidr_.counters();
}

std::size_t CmAgent::cached_ahs() const {
  std::lock_guard lock(mu_);
  return ahs_.size();
}

std::uint64_t CmAgent::send_failures() const {
  std::lock_guard lock(mu_);
  return send_failures_;
}

}  // namespace srdma::cm
