// IBA's queue-pair state transitions and the attributes each one requires
// and allows, per transport (IBA 10.3.1 and table 91; the tables of Linux's
// ib_modify_qp_is_ok for IB_QPT_RC, IB_QPT_UC and IB_QPT_UD).
#pragma once

#include <cstdint>

#include "srdma/qp_attr.h"
#include "srdma/status.h"

namespace srdma::hca {

// EINVAL (naming the transition and the attribute) for a transition the
// transport does not allow, a missing required attribute, or an attribute
// the transition does not accept.
Result<void> check_qp_transition(QpType type, QpState cur, QpState next, std::uint32_t mask);

// IBA 10.3.1: only a QP in RTR, RTS or SQD executes requests; every other
// state (and any value that is no state at all) drops what arrives. A
// whitelist: a state nobody thought of is closed, not open.
constexpr bool accepts_requests(QpState s) { return s == QpState::kRtr || s == QpState::kRts || s == QpState::kSqd; }

}  // namespace srdma::hca
