#include "hca/impaired_link.h"

#include <cstring>
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

ImpairedLink::ImpairedLink(Link& inner, const ImpairSpec& spec) : inner_(inner), spec_(sane(spec)), rng_(spec.seed) {}

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

bool ImpairedLink::send(Packet&& msg) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Pending now;
  now.flow = flow_of(msg);
  now.pkt = std::move(msg);
  bool lost = false, held = false;
  std::vector<Pending> released;
  {
    std::lock_guard lock(mu_);
    // Every draw happens on every send, in one order, so that the decisions
    // for packet n depend only on the seed and n.
    double u_loss = unit(rng_), u_corrupt = unit(rng_), u_dup = unit(rng_), u_reorder = unit(rng_);
    std::uint64_t bit = rng_();
    std::uint32_t wait = 1 + static_cast<std::uint32_t>(rng_() % spec_.reorder_depth);

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

    if (u_loss < spec_.loss) {
      lost = true;
    } else {
      if (u_corrupt < spec_.corrupt) {
        // Never the sender's own byte: the flip goes into a copy.
        now.pkt.corrupted = true;
        own_payload(now);
        if (now.bytes && !now.bytes->empty())
          (*now.bytes)[bit / 8 % now.bytes->size()] ^= std::byte(1u << (bit % 8));
        corrupted_.fetch_add(1, kRelaxed);
      }
      // A packet kept or sent twice carries a copy (Packet::owned, shared
      // by its copies and by a receiver that keeps one): the first copy may
      // complete the WR, and the sender reuse its buffer, before the second
      // goes.
      if (u_dup < spec_.dup) {
        now.copies = 2;  // counted when both go
        own_payload(now);
      }
      if (u_reorder < spec_.reorder && !resend) {
        own_payload(now);
        now.left = wait;
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
  return ImpairStats{passed_.load(kRelaxed), dropped_.load(kRelaxed), duplicated_.load(kRelaxed),
                     reordered_.load(kRelaxed), corrupted_.load(kRelaxed)};
}

}  // namespace srdma::hca
