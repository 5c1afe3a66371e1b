// IBA's queue-pair state transitions for RC and the attributes each one
// requires and allows (IBA 10.3.1 and table 91; the table of Linux's
// ib_modify_qp_is_ok for IB_QPT_RC).
#pragma once

#include <cstdint>

#include "srdma/qp_attr.h"
#include "srdma/status.h"

namespace srdma::hca {

// EINVAL (naming the transition and the attribute) for a transition RC does
// not allow, a missing required attribute, or an attribute the transition
// does not accept.
Result<void> check_qp_transition(QpState cur, QpState next, std::uint32_t mask);

}  // namespace srdma::hca
