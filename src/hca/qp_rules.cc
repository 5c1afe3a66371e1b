#include "hca/qp_rules.h"

#include "srdma/wc.h"

#include <array>

#include <fmt/format.h>

namespace srdma::hca {
namespace {

struct Rule {
  bool valid = false;
  std::uint32_t required = 0;
  std::uint32_t optional = 0;
};

constexpr int kStates = 7;
constexpr int idx(QpState s) { return static_cast<int>(s); }

using Rules = std::array<std::array<Rule, kStates>, kStates>;

constexpr Rules make_rc_rules() {
  using S = QpState;
  Rules r{};
  // Every state may go to RESET and ERR with no attributes.
  for (int s = 0; s < kStates; ++s) {
    r[s][idx(S::kReset)] = {true, 0, 0};
    r[s][idx(S::kErr)] = {true, 0, 0};
  }
  r[idx(S::kReset)][idx(S::kInit)] = {true, QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS, 0};
  r[idx(S::kInit)][idx(S::kInit)] = {true, 0, QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS};
  r[idx(S::kInit)][idx(S::kRtr)] = {
      true, QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER,
      QP_ACCESS_FLAGS | QP_PKEY_INDEX};
  r[idx(S::kRtr)][idx(S::kRts)] = {
      true, QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC,
      QP_CUR_STATE | QP_ACCESS_FLAGS | QP_MIN_RNR_TIMER};
  r[idx(S::kRts)][idx(S::kRts)] = {true, 0, QP_CUR_STATE | QP_ACCESS_FLAGS | QP_MIN_RNR_TIMER};
  r[idx(S::kRts)][idx(S::kSqd)] = {true, 0, QP_EN_SQD_ASYNC_NOTIFY};
  r[idx(S::kSqd)][idx(S::kRts)] = {true, 0, QP_CUR_STATE | QP_ACCESS_FLAGS | QP_MIN_RNR_TIMER};
  r[idx(S::kSqd)][idx(S::kSqd)] = {
      true, 0,
      QP_ACCESS_FLAGS | QP_AV | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC |
          QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER | QP_PKEY_INDEX | QP_PORT};
  r[idx(S::kSqe)][idx(S::kRts)] = {true, 0, QP_CUR_STATE | QP_ACCESS_FLAGS | QP_MIN_RNR_TIMER};
  return r;
}

// UD: no path, no PSN to receive, no acknowledgement timers; the Q_Key.
constexpr Rules make_ud_rules() {
  using S = QpState;
  Rules r{};
  for (int s = 0; s < kStates; ++s) {
    r[s][idx(S::kReset)] = {true, 0, 0};
    r[s][idx(S::kErr)] = {true, 0, 0};
  }
  r[idx(S::kReset)][idx(S::kInit)] = {true, QP_PKEY_INDEX | QP_PORT | QP_QKEY, 0};
  r[idx(S::kInit)][idx(S::kInit)] = {true, 0, QP_PKEY_INDEX | QP_PORT | QP_QKEY};
  r[idx(S::kInit)][idx(S::kRtr)] = {true, 0, QP_PKEY_INDEX | QP_QKEY};
  r[idx(S::kRtr)][idx(S::kRts)] = {true, QP_SQ_PSN, QP_CUR_STATE | QP_QKEY};
  r[idx(S::kRts)][idx(S::kRts)] = {true, 0, QP_CUR_STATE | QP_QKEY};
  r[idx(S::kRts)][idx(S::kSqd)] = {true, 0, QP_EN_SQD_ASYNC_NOTIFY};
  r[idx(S::kSqd)][idx(S::kRts)] = {true, 0, QP_CUR_STATE | QP_QKEY};
  r[idx(S::kSqd)][idx(S::kSqd)] = {true, 0, QP_PKEY_INDEX | QP_QKEY};
  r[idx(S::kSqe)][idx(S::kRts)] = {true, 0, QP_CUR_STATE | QP_QKEY};
  return r;
}

// UC: RC's path without its acknowledgement timers, retries, RNR and
// READ/atomic resources (the table of ib_modify_qp_is_ok for IB_QPT_UC).
constexpr Rules make_uc_rules() {
  using S = QpState;
  Rules r{};
  for (int s = 0; s < kStates; ++s) {
    r[s][idx(S::kReset)] = {true, 0, 0};
    r[s][idx(S::kErr)] = {true, 0, 0};
  }
  r[idx(S::kReset)][idx(S::kInit)] = {true, QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS, 0};
  r[idx(S::kInit)][idx(S::kInit)] = {true, 0, QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS};
  r[idx(S::kInit)][idx(S::kRtr)] = {true, QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN,
                                    QP_ACCESS_FLAGS | QP_PKEY_INDEX};
  r[idx(S::kRtr)][idx(S::kRts)] = {true, QP_SQ_PSN, QP_CUR_STATE | QP_ACCESS_FLAGS};
  r[idx(S::kRts)][idx(S::kRts)] = {true, 0, QP_CUR_STATE | QP_ACCESS_FLAGS};
  r[idx(S::kRts)][idx(S::kSqd)] = {true, 0, QP_EN_SQD_ASYNC_NOTIFY};
  r[idx(S::kSqd)][idx(S::kRts)] = {true, 0, QP_CUR_STATE | QP_ACCESS_FLAGS};
  r[idx(S::kSqd)][idx(S::kSqd)] = {true, 0, QP_ACCESS_FLAGS | QP_AV | QP_PKEY_INDEX | QP_PORT};
  r[idx(S::kSqe)][idx(S::kRts)] = {true, 0, QP_CUR_STATE | QP_ACCESS_FLAGS};
  return r;
}

// XRC (the tables of ib_modify_qp_is_ok for IB_QPT_XRC_INI and
// IB_QPT_XRC_TGT): RC's path. An INI has no responder: RTR requires no
// max_dest_rd_atomic or min_rnr_timer; a TGT has no requester: RTS
// requires only the timeout and SQ PSN. Each accepts the other's as
// optional, as pyverbs' to_rts and rdma_cm set them for any connected QP.
constexpr Rules make_xrc_rules(QpType t) {
  using S = QpState;
  Rules r = make_rc_rules();
  constexpr std::uint32_t kResponderAttrs = QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
  constexpr std::uint32_t kRequesterAttrs = QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC;
  Rule& rtr = r[idx(S::kInit)][idx(S::kRtr)];
  Rule& rts = r[idx(S::kRtr)][idx(S::kRts)];
  if (t == QpType::kXrcIni) {
    rtr.required &= ~kResponderAttrs;
    rtr.optional |= kResponderAttrs;
  } else {
    rts.required &= ~kRequesterAttrs;
    rts.optional |= kRequesterAttrs;
  }
  return r;
}

constexpr Rules kRcRules = make_rc_rules();
constexpr Rules kUcRules = make_uc_rules();
constexpr Rules kUdRules = make_ud_rules();
constexpr Rules kXrcIniRules = make_xrc_rules(QpType::kXrcIni);
constexpr Rules kXrcTgtRules = make_xrc_rules(QpType::kXrcTgt);
static_assert(!(kXrcTgtRules[idx(QpState::kRtr)][idx(QpState::kRts)].required & QP_RETRY_CNT));
static_assert(kXrcIniRules[idx(QpState::kInit)][idx(QpState::kRtr)].optional & QP_MAX_DEST_RD_ATOMIC);
static_assert(!kRcRules[idx(QpState::kReset)][idx(QpState::kRtr)].valid);
static_assert(kRcRules[idx(QpState::kRts)][idx(QpState::kSqd)].valid);

const Rules& rules_of(QpType t) {
  switch (t) {
    case QpType::kRc: return kRcRules;
    case QpType::kUc: return kUcRules;
    case QpType::kUd: return kUdRules;
    case QpType::kXrcIni: return kXrcIniRules;
    case QpType::kXrcTgt: return kXrcTgtRules;
  }
  return kRcRules;
}

const char* attr_name(std::uint32_t bit) {
  switch (bit) {
    case QP_STATE: return "STATE";
    case QP_CUR_STATE: return "CUR_STATE";
    case QP_ACCESS_FLAGS: return "ACCESS_FLAGS";
    case QP_PKEY_INDEX: return "PKEY_INDEX";
    case QP_PORT: return "PORT";
    case QP_AV: return "AV";
    case QP_PATH_MTU: return "PATH_MTU";
    case QP_TIMEOUT: return "TIMEOUT";
    case QP_RETRY_CNT: return "RETRY_CNT";
    case QP_RNR_RETRY: return "RNR_RETRY";
    case QP_RQ_PSN: return "RQ_PSN";
    case QP_MAX_QP_RD_ATOMIC: return "MAX_QP_RD_ATOMIC";
    case QP_MIN_RNR_TIMER: return "MIN_RNR_TIMER";
    case QP_SQ_PSN: return "SQ_PSN";
    case QP_MAX_DEST_RD_ATOMIC: return "MAX_DEST_RD_ATOMIC";
    case QP_DEST_QPN: return "DEST_QPN";
    case QP_EN_SQD_ASYNC_NOTIFY: return "EN_SQD_ASYNC_NOTIFY";
    case QP_QKEY: return "QKEY";
    default: return "UNKNOWN";
  }
}

}  // namespace

Result<void> check_qp_transition(QpType type, QpState cur, QpState next, std::uint32_t mask) {
  const Rule& rule = rules_of(type)[idx(cur)][idx(next)];
  if (!rule.valid)
    return make_error(EINVAL, fmt::format("{} QP cannot go from {} to {}", qp_type_str(type), qp_state_str(cur),
                                          qp_state_str(next)));
  std::uint32_t given = mask & ~QP_STATE;
  if (std::uint32_t missing = rule.required & ~given) {
    std::uint32_t bit = missing & -missing;
    return make_error(EINVAL, fmt::format("{} -> {} requires attribute {}", qp_state_str(cur), qp_state_str(next),
                                          attr_name(bit)));
  }
  if (std::uint32_t extra = given & ~(rule.required | rule.optional)) {
    std::uint32_t bit = extra & -extra;
    return make_error(EINVAL, fmt::format("{} -> {} does not accept attribute {}", qp_state_str(cur),
                                          qp_state_str(next), attr_name(bit)));
  }
  return {};
}

}  // namespace srdma::hca

namespace srdma {

std::string_view qp_type_str(QpType t) {
  switch (t) {
    case QpType::kRc: return "RC";
    case QpType::kUc: return "UC";
    case QpType::kUd: return "UD";
    case QpType::kXrcIni: return "XRC INI";
    case QpType::kXrcTgt: return "XRC TGT";
  }
  return "?";
}

std::string_view qp_state_str(QpState s) {
  switch (s) {
    case QpState::kReset: return "RESET";
    case QpState::kInit: return "INIT";
    case QpState::kRtr: return "RTR";
    case QpState::kRts: return "RTS";
    case QpState::kSqd: return "SQD";
    case QpState::kSqe: return "SQE";
    case QpState::kErr: return "ERR";
  }
  return "?";
}

std::uint32_t rnr_timer_usec(std::uint8_t encoded) {
  // IBA table 45, in microseconds; index 0 is the longest.
  static constexpr std::uint32_t kUsec[32] = {
      655360, 10,    20,    30,    40,    60,    80,    120,   160,   240,   320,
      480,    640,   960,   1280,  1920,  2560,  3840,  5120,  7680,  10240, 15360,
      20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return kUsec[encoded & 31];
}

}  // namespace srdma

namespace srdma {

std::string_view wc_status_str(WcStatus s) {
  switch (s) {
    case WcStatus::kSuccess: return "success";
    case WcStatus::kLocLenErr: return "local length error";
    case WcStatus::kLocQpOpErr: return "local QP operation error";
    case WcStatus::kLocProtErr: return "local protection error";
    case WcStatus::kWrFlushErr: return "WR flushed";
    case WcStatus::kRemInvReqErr: return "remote invalid request error";
    case WcStatus::kRemAccessErr: return "remote access error";
    case WcStatus::kRemOpErr: return "remote operation error";
    case WcStatus::kRetryExcErr: return "transport retry counter exceeded";
    case WcStatus::kRnrRetryExcErr: return "RNR retry counter exceeded";
    case WcStatus::kMemMgmtOpErr: return "memory management operation error";
    case WcStatus::kMwBindErr: return "memory window bind error";
    case WcStatus::kGeneralErr: return "general error";
    case WcStatus::kTmErr: return "tag matching error";
    case WcStatus::kTmRndvIncomplete: return "tag matching rendezvous incomplete";
  }
  return "unknown status";
}

}  // namespace srdma
