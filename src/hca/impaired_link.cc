#include "hca/impaired_link.h"

#include "hca/dcqcn.h"  // the ECN codepoints

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

namespace srdma::hca {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

// A depth of 0 (a spec nobody checked) holds for one send rather than
// dividing by zero.
ImpairSpec sane(ImpairSpec s) {
  if (s.reorder_depth == 0) s.reorder_depth = 1;
  return s;
}

}  // namespace

ImpairedLink::ImpairedLink(Link& inner, const ImpairSpec& spec, const EngineClock* clock)
    : inner_(inner), spec_(sane(spec)), clock_(clock), rng_(spec.seed) {
  if (spec_.rate_gbps > 0)
    port_ = std::make_unique<BottleneckPort>(spec_.rate_gbps, spec_.queue_packets, spec_.ecn_packets,
                                             spec_.ecn_max_packets, spec_.ecn_pmax, spec_.seed);
  // p[i] the chance of fate i; any[i] that of at least one of i.. (the
  // chance a packet is touched at all is any[0]).
  const double p[kFates] = {spec_.loss, spec_.corrupt, spec_.dup, spec_.reorder};
  double none = 1;
  for (std::size_t i = kFates; i-- > 0;) {
    p_[i] = std::clamp(p[i], 0.0, 1.0);
    none *= 1 - p_[i];
    any_[i] = 1 - none;
  }
  untouched_left_ = gap();
}

std::uint64_t ImpairedLink::gap() {
  // Geometric: the packets before the next touched one, from one draw.
  if (any_[0] <= 0) return std::numeric_limits<std::uint64_t>::max();
  if (any_[0] >= 1) return 0;
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  const double g = std::floor(std::log1p(-u) / std::log1p(-any_[0]));
  return g >= 1e18 ? std::numeric_limits<std::uint64_t>::max() : static_cast<std::uint64_t>(g);
}

ImpairedLink::~ImpairedLink() = default;

void ImpairedLink::own_payload(Pending& p) {
  if (p.pkt.owned || p.pkt.payload.empty()) return;
  auto bytes = std::make_shared<std::vector<std::byte>>();
  for (const MemPiece& m : std::span<const MemPiece>(p.pkt.payload)) {
    const auto* from = m.addr;
    bytes->insert(bytes->end(), from, from + m.length);
  }
  p.pkt.payload.clear();
  if (!bytes->empty()) p.pkt.payload.push_back(MemPiece{bytes->data(), bytes->size()});
  p.bytes = bytes.get();
  p.pkt.owned = std::move(bytes);  // every copy of the packet keeps them alive
}

bool ImpairedLink::deliver(Pending& p) {
  passed_.fetch_add(1, kRelaxed);
  if (p.copies > 1) duplicated_.fetch_add(p.copies - 1, kRelaxed);
  bool known = true;
  // A plain ACK goes on in the compact form the responder handed it in
  // (Link::send_ack), as the inner link would have taken it: the
  // completer's ACK entry then meets impaired ACK streams too.
  const bool ack = Ack::is(p.pkt);
  for (std::uint32_t i = 0; i < p.copies; ++i) {
    bool k = false;
    if (ack) {
      k = inner_.send_ack(Ack::of(p.pkt));
    } else {
      Packet copy = p.pkt;  // the payload pieces point at p.bytes or the sender's memory
      k = inner_.send(std::move(copy));
    }
    if (i == 0) known = k;
  }
  return known;
}

ImpairedLink::Fate ImpairedLink::draw() {
  if (untouched_left_ > 0) {
    --untouched_left_;
    return Fate{};
  }
  // A touched packet: which fates, given that at least one. Fate i happens
  // with p_i / any_i while none before it did (then at least one of i..
  // must), with p_i once one did: the fates' joint law, conditioned.
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  double* u[kFates];
  Fate f;
  u[0] = &f.u_loss, u[1] = &f.u_corrupt, u[2] = &f.u_dup, u[3] = &f.u_reorder;
  bool owed = true;
  for (std::size_t i = 0; i < kFates; ++i) {
    const double chance = owed ? (any_[i] > 0 ? p_[i] / any_[i] : 0.0) : p_[i];
    const bool happens = unit(rng_) < chance;
    *u[i] = happens ? 0.0 : 1.0;
    owed = owed && !happens;
  }
  f.bit = rng_();
  f.wait = 1 + static_cast<std::uint32_t>(rng_() % spec_.reorder_depth);
  untouched_left_ = gap();
  return f;
}

bool ImpairedLink::untouched(const Fate& f) const {
  return f.u_loss >= spec_.loss && f.u_corrupt >= spec_.corrupt && f.u_dup >= spec_.dup &&
         f.u_reorder >= spec_.reorder;
}

bool ImpairedLink::send(Packet&& msg) {
  if (msg.count > 1) return send_train(std::move(msg));
  Fate fate;
  {
    std::lock_guard lock(mu_);
    fate = draw();
  }
  return send_packet(std::move(msg), fate);
}

bool ImpairedLink::send_train(Packet&& train) {
  // Each of its packets draws its own fate, as it would one by one, so a
  // packet's fate still depends only on the seed and its place in the
  // sequence. When none of them is touched and nothing of its flow is held
  // (no countdown could end inside it), the train goes on whole.
  Fate fates[kMaxTrainFates];
  const bool fits = train.count <= kMaxTrainFates;
  std::vector<Fate> many;
  Fate* f = fates;
  if (!fits) {
    many.resize(train.count);
    f = many.data();
  }
  const Flow flow = flow_of(train);
  bool whole = true;
  {
    std::lock_guard lock(mu_);
    if (untouched_left_ >= train.count) {
      untouched_left_ -= train.count;  // what draw() would do, count times
    } else {
      for (std::uint32_t i = 0; i < train.count; ++i) {
        f[i] = draw();
        whole = whole && untouched(f[i]);
      }
    }
    if (whole)
      for (const Pending& h : held_) whole = whole && !(h.flow == flow);
    whole = whole && !port_;  // a port takes packets
    if (whole) {
      // What send_packet notes of a packet that passes: the flow's newest PSN.
      const std::uint32_t last = last_psn_of(train);
      auto [next, first] = next_psn_.try_emplace(flow, psn_add(last, 1));
      if (!first && psn_diff(last, next->second) >= 0) next->second = psn_add(last, 1);
    }
  }
  if (whole) {
    passed_.fetch_add(train.count, kRelaxed);
    return inner_.send(std::move(train));  // outside the lock, as deliver()
  }
  // Packet by packet, each with the fate it drew.
  const std::uint32_t mtu = train_mtu(train);
  bool known = true, any = false;
  std::uint32_t i = 0;
  unroll(train, mtu, [&](Packet& p) {
    const bool k = send_packet(std::move(p), f[i++]);
    if (!any) known = k, any = true;
  });
  return known;
}

bool ImpairedLink::send_packet(Packet&& msg, const Fate& fate) {
  Pending now;
  now.flow = flow_of(msg);
  now.pkt = std::move(msg);
  bool lost = false, held = false;
  std::vector<Pending> released;
  {
    std::lock_guard lock(mu_);
    // A PSN behind the newest the flow sent is a resend (go-back-N, a
    // timeout, a repeated ACK or NAK).
    const std::uint32_t psn = now.pkt.psn;
    auto [next, first] = next_psn_.try_emplace(now.flow, psn_add(psn, 1));
    const bool resend = !first && psn_diff(psn, next->second) < 0;
    if (!first && !resend) next->second = psn_add(psn, 1);

    // The packets of its flow held before this one count it; those it was
    // the last for go on right after it, those it repeats are discarded.
    for (auto it = held_.begin(); it != held_.end();) {
      if (it->flow != now.flow) {
        ++it;
      } else if (resend && it->pkt.psn == psn) {
        dropped_.fetch_add(1, kRelaxed);
        it = held_.erase(it);
      } else if (--it->left == 0) {
        released.push_back(std::move(*it));
        it = held_.erase(it);
      } else {
        ++it;
      }
    }

    // The port first: a packet it drops never reaches the wire's fates.
    BottleneckPort::Verdict port = BottleneckPort::Verdict::kPass;
    if (port_) {
      // What the wire carries: Ethernet, IPv4, UDP, the BTH and extended
      // headers (about), the ICRC.
      constexpr std::uint32_t kWireHeaderBytes = 14 + 20 + 8 + 28 + 4;
      const std::uint32_t bytes = now.pkt.payload_length + kWireHeaderBytes;
      port = port_->offer(bytes, ecn_capable(now.pkt.traffic_class), clock_ ? clock_->now() : Clock::now());
    }
    if (port == BottleneckPort::Verdict::kDrop) {
      lost = true;
      tail_dropped_.fetch_add(1, kRelaxed);
    } else if (fate.u_loss < spec_.loss) {
      lost = true;
    } else {
      if (port == BottleneckPort::Verdict::kMark) {
        now.pkt.traffic_class |= kEcnCe;
        ce_marked_.fetch_add(1, kRelaxed);
      }
      if (fate.u_corrupt < spec_.corrupt) {
        // Never the sender's own byte: the flip goes into a copy.
        now.pkt.corrupted = true;
        own_payload(now);
        if (now.bytes && !now.bytes->empty())
          (*now.bytes)[fate.bit / 8 % now.bytes->size()] ^= std::byte(1u << (fate.bit % 8));
        corrupted_.fetch_add(1, kRelaxed);
      }
      // A packet kept or sent twice carries a copy (Packet::owned, shared
      // by its copies and by a receiver that keeps one): the first copy may
      // complete the WR, and the sender reuse its buffer, before the second
      // goes.
      if (fate.u_dup < spec_.dup) {
        now.copies = 2;  // counted when both go
        own_payload(now);
      }
      if (fate.u_reorder < spec_.reorder && !resend) {
        own_payload(now);
        now.left = fate.wait;
        held_.push_back(std::move(now));
        held = true;
        reordered_.fetch_add(1, kRelaxed);
      }
    }
  }
  if (lost) dropped_.fetch_add(1, kRelaxed);
  bool known = true;
  if (!lost && !held) known = deliver(now);
  for (Pending& p : released) deliver(p);
  return known;
}

void ImpairedLink::flush() {
  std::vector<Pending> all;
  {
    std::lock_guard lock(mu_);
    all.swap(held_);
  }
  for (Pending& p : all) deliver(p);
}

ImpairStats ImpairedLink::stats() const {
  return ImpairStats{passed_.load(kRelaxed),       dropped_.load(kRelaxed),      duplicated_.load(kRelaxed),
                     reordered_.load(kRelaxed),    corrupted_.load(kRelaxed),    tail_dropped_.load(kRelaxed),
                     ce_marked_.load(kRelaxed)};
}

}  // namespace srdma::hca
