// Queue pair states, attributes and the attribute mask of modify_qp.
#pragma once

#include <cstdint>
#include <string_view>

namespace srdma {

// The transport service of a QP (IBA 9.8): reliable connected, unreliable
// connected, unreliable datagram, and the two halves of an XRC connection
// (IBA annex A14, eXtended Reliable Connection): the initiator (XRC INI,
// ibv's XRC_SEND: an RC send queue whose WRs name the remote SRQ) and the
// target (XRC TGT, ibv's XRC_RECV: an RC responder that receives into the
// XRC SRQ each request names, in its XRC domain).
enum class QpType : std::uint8_t { kRc, kUc, kUd, kXrcIni, kXrcTgt };
constexpr bool is_valid(QpType t) { return static_cast<unsigned>(t) <= static_cast<unsigned>(QpType::kXrcTgt); }
constexpr bool is_xrc(QpType t) { return t == QpType::kXrcIni || t == QpType::kXrcTgt; }
std::string_view qp_type_str(QpType t);

// The GSI QP (QP1) and the Q_Key its MADs carry (IBA 13.5.1).
inline constexpr std::uint32_t kGsiQpn = 1;
inline constexpr std::uint32_t kGsiQkey = 0x80010000;

// IBA 10.3.1 QP states.
enum class QpState : std::uint8_t { kReset, kInit, kRtr, kRts, kSqd, kSqe, kErr };
// False for a value outside the enum (a caller's bad cast): such a state is
// refused at the API and never indexes a table.
constexpr bool is_valid(QpState s) { return static_cast<unsigned>(s) <= static_cast<unsigned>(QpState::kErr); }
std::string_view qp_state_str(QpState s);

// Which QpAttr fields a modify_qp sets (like enum ib_qp_attr_mask).
enum QpAttrMask : std::uint32_t {
  QP_STATE = 1u << 0,
  QP_CUR_STATE = 1u << 1,
  QP_ACCESS_FLAGS = 1u << 2,
  QP_PKEY_INDEX = 1u << 3,
  QP_PORT = 1u << 4,
  QP_AV = 1u << 5,  // the peer device's address
  QP_PATH_MTU = 1u << 6,
  QP_TIMEOUT = 1u << 7,
  QP_RETRY_CNT = 1u << 8,
  QP_RNR_RETRY = 1u << 9,
  QP_RQ_PSN = 1u << 10,
  QP_MAX_QP_RD_ATOMIC = 1u << 11,
  QP_MIN_RNR_TIMER = 1u << 12,
  QP_SQ_PSN = 1u << 13,
  QP_MAX_DEST_RD_ATOMIC = 1u << 14,
  QP_DEST_QPN = 1u << 15,
  QP_EN_SQD_ASYNC_NOTIFY = 1u << 16,
  QP_QKEY = 1u << 17,  // UD
};
inline constexpr std::uint32_t kQpAttrMaskAll = (1u << 18) - 1;

struct QpAttr {
  QpState qp_state = QpState::kReset;
  QpState cur_qp_state = QpState::kReset;
  std::uint32_t qp_access_flags = 0;  // ACCESS_REMOTE_WRITE | _READ | _ATOMIC accepted as responder
  std::uint16_t pkey_index = 0;
  std::uint8_t port_num = 1;
  std::uint64_t dest_addr = 0;  // QP_AV: the peer device's address (Device::address())
  std::uint32_t path_mtu = 4096;
  std::uint8_t timeout = 14;
  std::uint8_t retry_cnt = 7;
  std::uint8_t rnr_retry = 7;  // 7 = retry for ever (IBA 9.7.5.2.8)
  std::uint32_t rq_psn = 0;
  std::uint32_t sq_psn = 0;
  std::uint8_t max_rd_atomic = 16;
  std::uint8_t max_dest_rd_atomic = 16;
  std::uint8_t min_rnr_timer = 1;  // IBA encoding: 1 = 0.01 ms ... 0 = 655.36 ms
  std::uint32_t dest_qp_num = 0;
  // UD: the Q_Key a datagram must carry to be received, and the one sent
  // when a WR's remote_qkey has its high bit set (IBA 10.2.4).
  std::uint32_t qkey = 0;
};

// What a QP's queues can hold (ib_qp_cap); create_qp refuses caps beyond
// the device's limits with EINVAL naming the cap.
struct QpCaps {
  std::uint32_t max_send_wr = 0;
  std::uint32_t max_recv_wr = 0;
  std::uint32_t max_send_sge = 1;
  std::uint32_t max_recv_sge = 1;
  std::uint32_t max_inline_data = 0;
};

// IBA table 45: the RNR NAK timer field's value in microseconds.
std::uint32_t rnr_timer_usec(std::uint8_t encoded);

}  // namespace srdma
