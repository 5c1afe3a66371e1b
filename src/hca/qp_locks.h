// A QP's two locks by name, for the roles' annotations: every call of the
// requester and the completer REQUIRES(sq_mutex(qp_)), the responder's
// locked ones REQUIRES(rq_mutex(qp_)). Declared before the roles, defined
// after the Qp that holds the locks (qp.h), where LOCK_RETURNED names the
// member each returns, so clang's analysis sees one lock through both.
#pragma once

namespace srdma::hca {

class FastMutex;
class Qp;

FastMutex& sq_mutex(Qp& qp);
FastMutex& rq_mutex(Qp& qp);

}  // namespace srdma::hca
