#include "wait.h"

#include "core/cq_impl.h"
#include "hca/cq.h"
#include "hca/event_queue.h"

namespace srdma::test {

void drain_cq(CompletionQueue& cq) {
  detail::CqImpl& st = detail::CqAccess::state(cq);
  // The vector first: its handlers are what queue the CQ's work items.
  if (hca::EventQueue* eq = st.cq->eq()) eq->drain();
  if (st.worker != nullptr) st.worker->drain();
}

}  // namespace srdma::test
