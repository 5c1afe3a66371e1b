// A link that misbehaves on purpose: the loss, duplication, reordering and
// corruption a real fabric inflicts now and then, at chosen rates, so the
// RC transport's recovery (retransmission, duplicate detection, sequence
// NAKs) runs on demand. The decisions come from a PRNG seeded by `seed`: one
// seed and one single-threaded packet sequence replay exactly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "srdma/status.h"

namespace srdma {

struct ImpairSpec {
  // Probabilities per packet, each in [0, 1), drawn independently.
  double loss = 0;     // the packet vanishes
  double dup = 0;      // it arrives twice, back to back
  double reorder = 0;  // it arrives behind the next 1..reorder_depth packets
  double corrupt = 0;  // it arrives with a bad ICRC (and a flipped payload bit)
  std::uint32_t reorder_depth = 4;
  std::uint64_t seed = 1;
  // Every packet alone, as a wire hands them over, even where the link
  // underneath carries trains (the in-process link): for tests of the
  // per-packet paths. Set in code only; parse_impair leaves it false.
  bool single_packets = false;
  // A bottleneck: the device's packets leave through one switch port that
  // drains at rate_gbps (0: no port) with room for queue_packets, and
  // marks CE on ECN-capable ones as a switch configured for DCQCN does
  // (RED on the instantaneous queue): never below ecn_packets queued (Kmin;
  // 0: it never marks), always at ecn_max_packets (Kmax) or more, and in
  // between with a probability rising linearly from 0 to ecn_pmax (Pmax).
  // ecn_max_packets 0 means Kmax = Kmin: every packet at the threshold is
  // marked. A full queue drops at its tail. The queue is a virtual one (a
  // phantom queue): the port's occupancy is kept from the packets' sizes
  // and the engine clock, and a packet that fits goes on at once.
  double rate_gbps = 0;
  std::uint32_t queue_packets = 1000;
  std::uint32_t ecn_packets = 0;
  std::uint32_t ecn_max_packets = 0;
  double ecn_pmax = 1;

  // Some impairment is asked for (a spec without any is a plain link).
  bool any() const { return loss > 0 || dup > 0 || reorder > 0 || corrupt > 0 || rate_gbps > 0; }
  bool operator==(const ImpairSpec&) const = default;
};

inline constexpr std::uint32_t kMaxReorderDepth = 64;
inline constexpr double kMaxBottleneckGbps = 1000;
inline constexpr std::uint32_t kMaxQueuePackets = 100000;

// "loss=P,dup=P,reorder=P,corrupt=P,seed=N,depth=K,rate=GBPS,queue=PACKETS,
// ecn=KMIN,kmax=KMAX,pmax=P": any subset of the keys,
// each at most once, in any order; the others keep their defaults.
// EINVAL naming the key or value at fault: an unknown key, a probability
// outside [0, 1), a seed that is not a 64-bit unsigned number, a depth
// outside 1..kMaxReorderDepth, a rate outside (0, kMaxBottleneckGbps], a
// queue outside 1..kMaxQueuePackets, an ecn threshold above the queue,
// kmax below ecn or above the queue, kmax or pmax without ecn, pmax without
// kmax or outside (0, 1], queue=, ecn=, kmax= or pmax= without rate=, an
// empty spec.
Result<ImpairSpec> parse_impair(std::string_view text);

// EINVAL naming the field when a spec is outside parse_impair's ranges (a
// spec built in code rather than parsed).
Result<void> validate_impair(const ImpairSpec& spec);

// The form parse_impair reads back to the same spec (every key, shortest
// exact decimal for the probabilities).
std::string to_string(const ImpairSpec& spec);

// What an impairing link did. passed + dropped + (held now) = packets
// offered; a packet duplicated, reordered or corrupted is also passed (once).
struct ImpairStats {
  std::uint64_t passed = 0;      // handed on (a held packet when it goes on)
  std::uint64_t dropped = 0;     // lost, or discarded while held because its sender sent it again
  std::uint64_t duplicated = 0;  // extra copies delivered
  std::uint64_t reordered = 0;   // held back behind later packets
  std::uint64_t corrupted = 0;   // marked corrupted
  std::uint64_t tail_dropped = 0;  // the bottleneck's queue was full (also in dropped)
  std::uint64_t ce_marked = 0;     // the bottleneck marked CE (ECN congestion experienced)
  bool operator==(const ImpairStats&) const = default;
};

}  // namespace srdma
