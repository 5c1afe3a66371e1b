// The UD responder: a datagram for this QP from any device (no connection,
// so no source check, no PSN, no acknowledgement, no RNR) is placed into
// the next receive WQE behind a 40-byte GRH area, or dropped and counted:
// a Q_Key that is not the QP's (kBadKey), no receive WQE posted
// (kNoReceive), a WQE too short for the GRH area and the payload
// (kBadLength, the WQE stays posted), a state that takes no requests.
//
// The GRH area is what Linux rxe leaves there for RoCEv2 over IPv4 (and
// what rdma-core's ibv_init_ah_from_wc recognises, by the version nibble at
// byte 20): 20 zero bytes, then the datagram's IPv4 header. On the RoCEv2
// link that header is the one the packet came in (addresses, TTL and TOS as
// received); the in-process link synthesizes it from the devices' addresses
// (their low 32 bits; a RoCEv2 address is its IPv4 address) and the AH's
// hop limit and traffic class. Its total length is the RoCEv2 datagram's
// either way.
#include <array>
#include <mutex>

#include "hca/copy.h"
#include "hca/cq.h"
#include "hca/delivery_scope.h"
#include "hca/qp.h"
#include "hca/responder.h"
#include "hca/qp_rules.h"
#include "hca/queue_engine.h"
#include "hca/roce_frame.h"
#include "hca/srq.h"
#include "srdma/access.h"
#include "srdma/net.h"

namespace srdma::hca {
namespace {

constexpr std::uint32_t ipv4_of(std::uint64_t addr) {
  return is_roce_address(addr) ? roce_ipv4(addr) : static_cast<std::uint32_t>(addr);
}

// 20 zero bytes and the IPv4 header of the RoCEv2 datagram that carries
// `pkt` (IHL 5, DF, Identification 0, protocol UDP, its checksum right).
// Over IPv6 the GRH area is the datagram's whole IPv6 header (version 6,
// traffic class, flow label 0, payload length, next header UDP, hop limit,
// the addresses), as a RoCEv2 HCA writes it.
std::array<std::byte, kGrhBytes> grh6_area(const Packet& pkt) {
  std::array<std::byte, kGrhBytes> out{};
  const std::size_t headers = kBthBytes + kDethBytes + (has_imm(pkt.op) ? kImmDtBytes : 0);
  const auto payload = static_cast<std::uint16_t>(kUdpHeaderBytes + frame_bytes(headers, pkt.payload_length));
  const std::uint32_t w0 = (6u << 28) | (std::uint32_t{pkt.traffic_class} << 20);
  for (int i = 0; i < 4; ++i) out[i] = static_cast<std::byte>(w0 >> (24 - 8 * i));
  out[4] = static_cast<std::byte>(payload >> 8);
  out[5] = static_cast<std::byte>(payload);
  out[6] = std::byte{17};
  out[7] = static_cast<std::byte>(pkt.hop_limit);
  const Gid src = gid_of_roce_address(pkt.src_addr), dst = gid_of_roce_address(pkt.dst_addr);
  for (int i = 0; i < 16; ++i) {
    out[8 + i] = static_cast<std::byte>(src[i]);
    out[24 + i] = static_cast<std::byte>(dst[i]);
  }
  return out;
}

std::array<std::byte, kGrhBytes> grh_area(const Packet& pkt) {
  std::array<std::uint8_t, kGrhBytes> b{};
  if (is_roce6_address(pkt.dst_addr)) return grh6_area(pkt);
  std::uint8_t* ip = b.data() + 20;
  const std::size_t headers = kBthBytes + kDethBytes + (has_imm(pkt.op) ? kImmDtBytes : 0);
  const auto total = static_cast<std::uint16_t>(kIpv4HeaderBytes + kUdpHeaderBytes + frame_bytes(headers, pkt.payload_length));
  const std::uint32_t src = ipv4_of(pkt.src_addr), dst = ipv4_of(pkt.dst_addr);
  ip[0] = 0x45;
  ip[1] = pkt.traffic_class;
  ip[2] = static_cast<std::uint8_t>(total >> 8);
  ip[3] = static_cast<std::uint8_t>(total);
  ip[6] = 0x40;  // DF
  ip[8] = pkt.hop_limit;
  ip[9] = 17;
  for (int i = 0; i < 4; ++i) {
    ip[12 + i] = static_cast<std::uint8_t>(src >> (24 - 8 * i));
    ip[16 + i] = static_cast<std::uint8_t>(dst >> (24 - 8 * i));
  }
  std::uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += (std::uint32_t{ip[i]} << 8) | ip[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  const auto check = static_cast<std::uint16_t>(~sum);
  ip[10] = static_cast<std::uint8_t>(check >> 8);
  ip[11] = static_cast<std::uint8_t>(check);
  std::array<std::byte, kGrhBytes> out;
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>(b[i]);
  return out;
}

}  // namespace

void Responder::receive_datagram(const Packet& pkt) {
  FastLock lock(qp_.rq_mu_);
  if (!accepts_requests(qp_.state())) return qp_.recv_counters_.dropped_bad_state.bump();
  qp_.recv_counters_.requests_received.bump();
  // IBA 10.2.4 / C10-15: a datagram whose Q_Key is not the QP's is dropped.
  if (pkt.qkey != resp_.qkey.load(std::memory_order_relaxed)) return qp_.recv_counters_.dropped_bad_key.bump();
  if (pkt.count != 1 || (pkt.op != Opcode::kSendOnly && pkt.op != Opcode::kSendOnlyImm))
    return qp_.recv_counters_.dropped_bad_opcode.bump();
  if (pkt.payload_length > qp_.engine_.active_mtu()) return qp_.recv_counters_.dropped_bad_length.bump();
  if (!qp_.rq_.ready()) return qp_.recv_counters_.dropped_no_receive.bump();  // UD has no RNR
  const RecvWqe& r = qp_.rq_.head();
  if (r.length < kGrhBytes + std::uint64_t{pkt.payload_length}) return qp_.recv_counters_.dropped_bad_length.bump();
  const std::array<std::byte, kGrhBytes> grh = grh_area(pkt);
  const std::uint32_t pdn = qp_.rq_.pdn();
  const bool placed = [&] {
    TranslationWindow window(Qp::window_key(r.sges));
    PieceList dst;
    if (!qp_.translate_slice(r.sges, 0, kGrhBytes + std::uint64_t{pkt.payload_length}, ACCESS_LOCAL_WRITE, pdn, dst))
      return false;
    PieceList src;
    src.push_back(MemPiece{const_cast<std::byte*>(grh.data()), kGrhBytes});
    for (const MemPiece& m : std::span<const MemPiece>(pkt.payload)) src.push_back(m);
    copy_pieces(dst, src);
    return true;
  }();
  const RecvWqe& done = qp_.rq_.take();
  Wc wc;
  wc.wr_id = done.wr_id;
  wc.status = placed ? WcStatus::kSuccess : WcStatus::kLocProtErr;
  wc.opcode = WcOpcode::kRecv;
  wc.byte_len = placed ? kGrhBytes + pkt.payload_length : 0;
  wc.wc_flags = WC_GRH;
  if (pkt.op == Opcode::kSendOnlyImm) {
    wc.wc_flags |= WC_WITH_IMM;
    wc.imm_data = pkt.imm;
  }
  wc.qp_num = qp_.qpn_;
  wc.qp_context = qp_.init_.qp_context;
  wc.src_qp = pkt.src_qpn;  // DETH
  wc.slid = static_cast<std::uint16_t>(pkt.src_addr);
  wc.pkey_index = 0;
  qp_.push_cqe(*qp_.init_.recv_cq, wc, pkt.solicited);
}

}  // namespace srdma::hca
