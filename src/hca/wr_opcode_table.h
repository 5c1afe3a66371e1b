// The second table: per work-request opcode, on which QP types it is valid
// and how the requester sends it (IBA 9.2 and 10.8.3; rxe's
// rxe_wr_opcode_info). post_send validates against it, the requester picks
// each packet's BTH opcode from it, the completer its CQE opcode and length.
// A new work request is one row (and its handler if its class is new).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "hca/opcode_table.h"
#include "srdma/qp_attr.h"
#include "srdma/wc.h"
#include "srdma/wr.h"

namespace srdma::hca {

// How a WR travels.
enum class WrClass : std::uint8_t {
  kMessage,  // SEND or RDMA WRITE: packets of the path MTU, FIRST..LAST or ONLY
  kRead,     // one READ request, a PSN per response packet
  kAtomic,   // one request, one PSN, 8 bytes back
  kLocal,    // REG_MR, LOCAL_INV, BIND_MW: executed in order, nothing on the wire
};

constexpr std::uint8_t qp_type_bit(QpType t) { return static_cast<std::uint8_t>(1u << static_cast<unsigned>(t)); }

struct WrOpcodeRow {
  std::string_view name;  // as ibv_wr_opcode_str names it
  WrClass cls = WrClass::kLocal;
  std::uint8_t qp_types = 0;  // qp_type_bit() of each transport that sends it
  // Its packets' BTH opcodes by place in the message (immediate data and
  // the invalidated key ride on the last); a READ or atomic: `only`.
  Opcode first = Opcode::kSendFirst, middle = Opcode::kSendMiddle, last = Opcode::kSendLast,
         only = Opcode::kSendOnly;
  WcOpcode wc = WcOpcode::kSend;
  std::uint32_t wc_byte_len = 0;  // the CQE's byte_len when fixed (an atomic's 8), else the WR's length

  constexpr bool valid_on(QpType t) const { return (qp_types & qp_type_bit(t)) != 0; }
  // What max_rd_atomic counts and a responder resource answers twice.
  constexpr bool rd_atomic() const { return cls == WrClass::kRead || cls == WrClass::kAtomic; }
  constexpr Opcode packet(bool first_packet, bool last_packet) const {
    return first_packet ? (last_packet ? only : first) : (last_packet ? last : middle);
  }
};

namespace wr_table_detail {
constexpr std::uint8_t kRc = qp_type_bit(QpType::kRc), kUc = qp_type_bit(QpType::kUc),
                       kUd = qp_type_bit(QpType::kUd);
using O = Opcode;
}  // namespace wr_table_detail

// Indexed by WrOpcode.
inline constexpr std::array<WrOpcodeRow, 12> kWrOpcodeTable = [] {
  using namespace wr_table_detail;
  std::array<WrOpcodeRow, 12> t{};
  auto at = [&](WrOpcode op) -> WrOpcodeRow& { return t[static_cast<std::size_t>(op)]; };
  at(WrOpcode::kSend) = {"SEND", WrClass::kMessage, kRc | kUc | kUd, O::kSendFirst, O::kSendMiddle, O::kSendLast,
                         O::kSendOnly, WcOpcode::kSend};
  at(WrOpcode::kSendWithImm) = {"SEND_WITH_IMM",  WrClass::kMessage, kRc | kUc | kUd, O::kSendFirst, O::kSendMiddle,
                                O::kSendLastImm,  O::kSendOnlyImm,   WcOpcode::kSend};
  at(WrOpcode::kSendWithInv) = {"SEND_WITH_INV", WrClass::kMessage, kRc,         O::kSendFirst, O::kSendMiddle,
                                O::kSendLastInv, O::kSendOnlyInv,   WcOpcode::kSend};
  at(WrOpcode::kRdmaWrite) = {"RDMA_WRITE", WrClass::kMessage, kRc | kUc,        O::kWriteFirst, O::kWriteMiddle,
                              O::kWriteLast, O::kWriteOnly,    WcOpcode::kRdmaWrite};
  at(WrOpcode::kRdmaWriteWithImm) = {"RDMA_WRITE_WITH_IMM", WrClass::kMessage, kRc | kUc,
                                     O::kWriteFirst,        O::kWriteMiddle,   O::kWriteLastImm,
                                     O::kWriteOnlyImm,      WcOpcode::kRdmaWrite};
  at(WrOpcode::kRdmaRead) = {"RDMA_READ",     WrClass::kRead,    kRc, O::kReadRequest, O::kReadRequest,
                             O::kReadRequest, O::kReadRequest, WcOpcode::kRdmaRead};
  at(WrOpcode::kAtomicCmpAndSwp) = {"ATOMIC_CMP_AND_SWP", WrClass::kAtomic, kRc,  O::kCmpSwap, O::kCmpSwap,
                                    O::kCmpSwap,          O::kCmpSwap,      WcOpcode::kCompSwap, 8};
  at(WrOpcode::kAtomicFetchAndAdd) = {"ATOMIC_FETCH_AND_ADD", WrClass::kAtomic, kRc, O::kFetchAdd, O::kFetchAdd,
                                      O::kFetchAdd,           O::kFetchAdd,     WcOpcode::kFetchAdd, 8};
  at(WrOpcode::kRegMr) = {"REG_MR", WrClass::kLocal, kRc | kUc};
  at(WrOpcode::kRegMr).wc = WcOpcode::kRegMr;
  at(WrOpcode::kLocalInv) = {"LOCAL_INV", WrClass::kLocal, kRc | kUc};
  at(WrOpcode::kLocalInv).wc = WcOpcode::kLocalInv;
  // IBA 10.6.7.2.4: Bind MW is posted on RC and UC send queues (as rxe).
  at(WrOpcode::kBindMw) = {"BIND_MW", WrClass::kLocal, kRc | kUc};
  at(WrOpcode::kBindMw).wc = WcOpcode::kBindMw;
  at(WrOpcode::kAtomicWrite) = {"ATOMIC_WRITE", WrClass::kMessage, kRc, O::kAtomicWrite, O::kAtomicWrite,
                                O::kAtomicWrite, O::kAtomicWrite};
  at(WrOpcode::kAtomicWrite).wc = WcOpcode::kAtomicWrite;
  // An XRC INI QP is an RC requester whose WRs also name the remote SRQ: it
  // sends what RC sends. An XRC TGT QP has no send queue.
  for (WrOpcodeRow& r : t)
    if (r.valid_on(QpType::kRc)) r.qp_types |= qp_type_bit(QpType::kXrcIni);
  return t;
}();

// A value of the enum (a caller's WR may hold anything).
constexpr bool is_wr_opcode(WrOpcode op) { return static_cast<std::size_t>(op) < kWrOpcodeTable.size(); }
// The row of a known opcode.
constexpr const WrOpcodeRow& wr_row(WrOpcode op) { return kWrOpcodeTable[static_cast<std::size_t>(op)]; }

// The predicates asked of every WQE, several times per message, as bit sets
// made from the rows: a shift and a test instead of a row's load.
template <class Pred>
constexpr std::uint32_t wr_opcode_set(Pred pred) {
  static_assert(kWrOpcodeTable.size() <= 32);
  std::uint32_t set = 0;
  for (std::size_t i = 0; i < kWrOpcodeTable.size(); ++i)
    if (pred(kWrOpcodeTable[i])) set |= 1u << i;
  return set;
}
inline constexpr std::uint32_t kLocalOps = wr_opcode_set([](const WrOpcodeRow& r) { return r.cls == WrClass::kLocal; });
inline constexpr std::uint32_t kMessageOps = wr_opcode_set([](const WrOpcodeRow& r) { return r.cls == WrClass::kMessage; });
inline constexpr std::uint32_t kRdAtomicOps = wr_opcode_set([](const WrOpcodeRow& r) { return r.rd_atomic(); });

// (A known opcode: a caller's WR is checked with is_wr_opcode first.)
constexpr bool is_local_op(WrOpcode op) { return (kLocalOps >> static_cast<unsigned>(op)) & 1u; }
constexpr bool is_message_op(WrOpcode op) { return (kMessageOps >> static_cast<unsigned>(op)) & 1u; }
constexpr bool is_rd_atomic(WrOpcode op) { return (kRdAtomicOps >> static_cast<unsigned>(op)) & 1u; }

static_assert(wr_row(WrOpcode::kLocalInv).wc == WcOpcode::kLocalInv);
static_assert(is_rd_atomic(WrOpcode::kRdmaRead) && is_rd_atomic(WrOpcode::kAtomicFetchAndAdd) &&
              !is_rd_atomic(WrOpcode::kRdmaWrite) && is_local_op(WrOpcode::kRegMr) && !is_local_op(WrOpcode::kSend) &&
              is_message_op(WrOpcode::kRdmaWriteWithImm) && !is_message_op(WrOpcode::kRdmaRead));
static_assert(wr_row(WrOpcode::kAtomicFetchAndAdd).valid_on(QpType::kXrcIni) &&
              !wr_row(WrOpcode::kSend).valid_on(QpType::kXrcTgt));
static_assert(wr_row(WrOpcode::kBindMw).wc == WcOpcode::kBindMw && is_local_op(WrOpcode::kBindMw));
static_assert(wr_row(WrOpcode::kRdmaWriteWithImm).packet(false, true) == Opcode::kWriteLastImm);

}  // namespace srdma::hca
