// A link that misbehaves on purpose (srdma/impair.h): wraps the link a
// device sends on and loses, corrupts, duplicates or delays some of the
// packets given to it before handing the rest on.
//
// Per packet, in this order, each from the seeded PRNG: lost (nothing else
// happens to it), corrupted (flagged, and a bit of its payload copy
// flipped), duplicated (two copies back to back), reordered (held until
// 1..reorder_depth later packets have been offered, then delivered after
// the packet that released it). Every later send counts the held packets
// down, lost or held ones too, so a held packet is overtaken by at most
// reorder_depth later packets (and by the answers sent from inside their
// deliveries, which go before it). A packet this link keeps past send(), or
// hands on twice, owns a copy of its payload: the sender may reuse its
// buffer once the WR completes.
//
// Thread-safe. Delivery to the inner link happens outside the lock: the
// in-process link delivers synchronously and the receiver may answer
// through this same link from inside send().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <random>
#include <vector>

#include "hca/link.h"
#include "srdma/impair.h"

namespace srdma::hca {

class ImpairedLink final : public Link {
 public:
  // REQUIRES: spec was validated (parse_impair's ranges); `inner` outlives
  // this link.
  ImpairedLink(Link& inner, const ImpairSpec& spec);
  ~ImpairedLink() override;  // what is still held is lost
  ImpairedLink(const ImpairedLink&) = delete;
  ImpairedLink& operator=(const ImpairedLink&) = delete;

  // The inner link's answer for this packet when it goes on now; true when
  // it is lost or held (the wire does not say).
  bool send(Packet&& msg) override;
  // Delivers every held packet now, in the order they were held.
  void flush();

  const ImpairSpec& spec() const { return spec_; }
  ImpairStats stats() const;

 private:
  // A packet on its way, with the payload it owns (when it owns one).
  struct Pending {
    Packet pkt;
    std::vector<std::byte>* bytes = nullptr;  // pkt.owned, writable, when this link made the copy
    std::uint32_t copies = 1;      // 2 when duplicated
    std::uint32_t left = 0;        // sends still to let by, when held
  };
  static void own_payload(Pending& p);
  bool deliver(Pending& p);

  Link& inner_;
  const ImpairSpec spec_;
  std::mutex mu_;  // guards rng_ and held_
  std::mt19937_64 rng_;
  std::vector<Pending> held_;  // in the order held
  std::atomic<std::uint64_t> passed_{0}, dropped_{0}, duplicated_{0}, reordered_{0}, corrupted_{0};
};

}  // namespace srdma::hca
