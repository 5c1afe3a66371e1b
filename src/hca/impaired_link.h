// A link that misbehaves on purpose (srdma/impair.h): wraps the link a
// device sends on and loses, corrupts, duplicates or delays some of the
// packets given to it before handing the rest on.
//
// Per packet, in this order, each from the seeded PRNG: lost (nothing else
// happens to it), corrupted (flagged, and a bit of its payload copy
// flipped), duplicated (two copies back to back), reordered (held until
// 1..reorder_depth later packets of its flow have been offered, then
// delivered after the packet that released it). With a bottleneck
// (bottleneck.h) every packet first meets its port: dropped at a full
// queue's tail (lost), marked CE above the ECN threshold; its fates follow.
// A bottleneck takes trains packet by packet, as a port does.
//
// Over a link that carries trains (the in-process link) a train's packets
// draw their fates one by one, as they would unrolled; a train none of
// whose packets is touched, and whose flow holds nothing back, goes on
// whole, any other packet by packet. So a lossy in-process link costs what
// the clean one does except where a packet is touched (a link of single
// packets ran the in-process transport at a third of its clean rate).
//
// A flow is one QP's requests, or one QP's responses, to one peer QP: RC
// needs order only within it, and a held packet goes on only in the context
// that sends its flow, so the transport's locks see what a plain
// synchronous link gives them. (Released by another QP's send, a request
// would reach the responder from a thread that does not hold its
// requester's sq_mu_; the answer could then run that requester, whose next
// request re-enters the responder whose lock the thread already holds.)
// Every later send of the flow counts its held packets down, lost or held
// ones too, so a held packet is overtaken by at most reorder_depth packets
// of its flow (and by the answers sent from inside their deliveries, which
// go before it); a flow that stops keeps its held packet until the
// transport's timeout resends into it.
//
// A held packet never outlives its own resend: when the sender sends a PSN
// of the flow again, a held packet of that PSN is discarded (counted lost),
// and a resend is not held. A fabric bounds a packet's life below the ACK
// timeout (IBA's packet lifetime); without the bound a late copy could
// arrive after its WR completed, a duplicate RDMA READ could then meet a
// key already invalidated, and the responder's QP would end in error.
//
// A packet this link keeps past send(), or hands on twice, owns a copy of
// its payload (Packet::owned): the sender may reuse its buffer once the WR
// completes. A corrupted packet always gets a copy.
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
#include <unordered_map>
#include <vector>

#include "hca/bottleneck.h"
#include "hca/engine_clock.h"
#include "hca/link.h"
#include "srdma/impair.h"

namespace srdma::hca {

class ImpairedLink final : public Link {
 public:
  // REQUIRES: spec was validated (parse_impair's ranges); `inner` and
  // `clock` (the bottleneck's time; nullptr: the steady clock) outlive
  // this link.
  ImpairedLink(Link& inner, const ImpairSpec& spec, const EngineClock* clock = nullptr);
  ~ImpairedLink() override;  // what is still held is lost
  ImpairedLink(const ImpairedLink&) = delete;
  ImpairedLink& operator=(const ImpairedLink&) = delete;

  // The inner link's answer for this packet when it goes on now; true when
  // it is lost or held (the wire does not say).
  bool send(Packet&& msg) override;
  // Delivers every held packet now, in the order they were held. For tests
  // and quiet devices: from outside its flow's context a held request can
  // deadlock a synchronous link's receiver (see above).
  void flush();

  // A train (packet.h) where the inner link takes trains: it goes on whole
  // when none of its packets is touched, else packet by packet.
  bool carries_trains() const override { return !spec_.single_packets && inner_.carries_trains(); }
  bool carries_trains_to(std::uint64_t addr, std::uint32_t qpn) override {
    return !spec_.single_packets && inner_.carries_trains_to(addr, qpn);
  }
  void end_batch() override { inner_.end_batch(); }
  bool knows(std::uint64_t addr) const override { return inner_.knows(addr); }
  std::uint32_t active_mtu() const override { return inner_.active_mtu(); }
  void add_drops(TransportCounters& c) const override { inner_.add_drops(c); }

  const ImpairSpec& spec() const { return spec_; }
  // passed + dropped + (held now) = packets offered.
  ImpairStats stats() const;

 private:
  // Which packets keep their order among themselves (see above).
  struct Flow {
    std::uint32_t src_qpn = 0;
    std::uint64_t dst_addr = 0;
    std::uint32_t dst_qpn = 0;
    bool request = false;
    bool operator==(const Flow&) const = default;
  };
  struct FlowHash {
    std::size_t operator()(const Flow& f) const {
      return std::hash<std::uint64_t>()(f.dst_addr ^ (std::uint64_t{f.src_qpn} << 40) ^
                                        (std::uint64_t{f.dst_qpn} << 16) ^ f.request);
    }
  };
  static Flow flow_of(const Packet& p) { return Flow{p.src_qpn, p.dst_addr, p.dst_qpn, is_request(p.op)}; }

  // A packet on its way, with the payload it owns (when it owns one).
  struct Pending {
    Flow flow;
    Packet pkt;
    std::vector<std::byte>* bytes = nullptr;  // pkt.owned, writable, when this link made the copy
    std::uint32_t copies = 1;      // 2 when duplicated
    std::uint32_t left = 0;        // sends of its flow still to let by, when held
  };
  // What the PRNG decides for one packet (the defaults: untouched). The
  // PRNG is drawn only for the packets a fate touches: the gap to the next
  // one is geometric, drawn once; then that packet's fates, conditioned on
  // at least one (draw()). A clean packet costs a decrement, where six
  // draws per packet had cost a lossy in-process link 63% of its clean
  // rate at a loss of 1e-7.
  struct Fate {
    double u_loss = 1, u_corrupt = 1, u_dup = 1, u_reorder = 1;  // below the spec's chance: it happens
    std::uint64_t bit = 0;
    std::uint32_t wait = 1;
  };
  static constexpr std::size_t kFates = 4;  // loss, corrupt, dup, reorder, in that order
  static constexpr std::uint32_t kMaxTrainFates = 64;  // on the stack; a longer train allocates
  Fate draw();  // REQUIRES mu_
  std::uint64_t gap();  // REQUIRES mu_: untouched packets before the next touched one
  bool untouched(const Fate& f) const;  // it passes as it is
  bool send_train(Packet&& train);
  bool send_packet(Packet&& msg, const Fate& fate);
  static void own_payload(Pending& p);
  bool deliver(Pending& p);

  Link& inner_;
  const ImpairSpec spec_;
  const EngineClock* const clock_;
  std::mutex mu_;  // guards rng_, next_psn_, held_ and port_
  std::unique_ptr<BottleneckPort> port_;  // with rate_gbps
  std::mt19937_64 rng_;
  double p_[kFates] = {};    // each fate's chance
  double any_[kFates] = {};  // the chance of at least one of fates i..
  std::uint64_t untouched_left_ = 0;  // packets until the next touched one (mu_)
  std::unordered_map<Flow, std::uint32_t, FlowHash> next_psn_;  // per flow: one past the newest PSN sent
  std::vector<Pending> held_;  // in the order held
  std::atomic<std::uint64_t> passed_{0}, dropped_{0}, duplicated_{0}, reordered_{0}, corrupted_{0};
  std::atomic<std::uint64_t> tail_dropped_{0}, ce_marked_{0};
};

}  // namespace srdma::hca
