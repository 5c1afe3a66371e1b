// The send queue the requester and the completer share: a ring of send
// WQEs, each with an explicit state (as rxe's wqe->state), and the
// producer index post_send moves. The requester moves a WQE from posted to
// in flight (or to acknowledged: a local operation executed, a UC or UD
// message handed to the link); the completer moves it on to done or error
// and owns the consumer index. All of it is guarded by the QP's sq_mu_.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "srdma/wr.h"

namespace srdma::hca {

enum class WqeState : std::uint8_t {
  kPosted,        // queued; nothing of it sent (again, after a rewind)
  kInFlight,      // its first packet went out; responses are awaited
  kAcknowledged,  // nothing more to wait for (a local operation executed, a
                  // UC/UD message handed to the link): the completer retires
                  // it when it reaches it, in order
  kDone,          // retired with success (its CQE written, if signaled)
  kError,         // completed with an error, or flushed
};

// A WQE the device posted itself (none: the consumer's): a tag-matching
// SRQ's rendezvous, on the QP the request came by (Qp::post_rndv): the
// READ of the sender's buffer into the matched tag's, then the FIN.
enum class DeviceWqe : std::uint8_t { kNone, kRndvRead, kRndvFin };

struct SendWqe {
  std::uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  WqeState state = WqeState::kDone;
  std::uint32_t flags = 0;
  std::uint32_t imm = 0;
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  std::uint64_t compare_add = 0;
  std::uint64_t swap = 0;
  std::vector<Sge> sges;
  std::vector<std::byte> inline_data;
  bool is_inline = false;
  std::uint32_t length = 0;
  std::uint32_t psn = 0;   // of its first packet (a READ's request), set when it is first sent
  std::uint32_t npsn = 1;  // PSNs it takes: one per packet; a READ, one per response packet
  // REG_MR (rkey holds the key; LOCAL_INV's key is in rkey too): the MR's
  // mapping, copied at post time into vectors that keep their capacity.
  std::uint32_t access = 0;
  std::uint8_t page_shift = 12;
  std::uint64_t iova = 0;
  std::uint64_t mr_length = 0;
  std::vector<std::uint64_t> pages;
  // BIND_MW (rkey: the window's new key; iova, mr_length, access: where
  // and how): the window and region keys the core resolved at post time.
  std::uint32_t mw_key = 0;
  std::uint32_t mr_key = 0;
  bool mw_type1_verb = false;
  // UD: the datagram's destination, from the WR and its AH at post time.
  std::uint32_t xrc_srqn = 0;  // XRC INI: the remote SRQ (XRCETH)
  std::uint64_t ud_dest_addr = 0;
  std::uint32_t ud_qpn = 0;
  std::uint32_t ud_qkey = 0;
  bool ud_own_qkey = false;  // remote_qkey had the high bit: send the QP's
  std::uint8_t ud_hop_limit = 64;
  std::uint8_t ud_traffic_class = 0;
  // A device WQE (wr_id: the tag's recv_wr_id). Its completion is not a
  // send CQE: the completer hands it to Qp::rndv_done. kRndvRead: sges are
  // the tag's buffer, of the PD `tm_pdn` (the SRQ's), and tm_tag, tm_priv
  // what its FIN repeats.
  DeviceWqe device = DeviceWqe::kNone;
  std::uint32_t tm_pdn = 0;
  std::uint32_t tm_priv = 0;
  std::uint64_t tm_tag = 0;

  // Has nothing left to wait for: a resend from an earlier WQE passes it
  // without executing or sending it again.
  bool acknowledged() const { return state == WqeState::kAcknowledged; }
};

class SendQueue {
 public:
  // `depth`: what the consumer asked for (max_send_wr), which post_send
  // enforces; the ring is a power of two long (an index is masked, not
  // divided: a division per lookup was a measurable part of a small
  // message).
  SendQueue(std::uint32_t depth, std::uint32_t max_sge, std::uint32_t max_inline)
      : depth_(std::max<std::uint32_t>(depth, 1)), ring_(std::bit_ceil(depth_)), mask_(ring_.size() - 1) {
    for (auto& w : ring_) {
      w.sges.reserve(max_sge);
      w.inline_data.reserve(max_inline);
    }
  }

  SendWqe& operator[](std::uint64_t index) { return ring_[index & mask_]; }
  const SendWqe& operator[](std::uint64_t index) const { return ring_[index & mask_]; }
  std::uint64_t depth() const { return depth_; }
  // The next WQE index post_send fills; WQEs before it are posted.
  std::uint64_t prod() const { return prod_; }
  // post_send filled operator[](prod()).
  void produce() {
    (*this)[prod_].state = WqeState::kPosted;
    ++prod_;
  }
  void reset() { prod_ = 0; }  // RESET: the queue empties

 private:
  const std::uint64_t depth_;
  std::vector<SendWqe> ring_;
  const std::uint64_t mask_;
  std::uint64_t prod_ = 0;
};

}  // namespace srdma::hca
