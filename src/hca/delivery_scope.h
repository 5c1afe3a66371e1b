// Deliveries and translation windows in progress, and waiting for them.
//
// DeliveryScope: the link's and the device's per-thread route caches hold
// plain pointers (a hit takes no lock and touches no reference count, which
// every thread would otherwise bounce between cores); what keeps the target
// alive is that a thread marks itself inside a delivery (this scope) before
// it checks the cache's generation, and whoever unpublishes a target
// (InprocLink::detach, QueueEngine::destroy_qp) bumps the generation and then
// waits (quiesce_deliveries) until every thread that was inside has left.
// Either the reader sees the new generation (and takes the locked path) or
// the writer sees it inside: a store-load barrier on both sides. It is
// asymmetric where Linux offers membarrier (private expedited): the
// reader's mark is a plain store, and the writer (rare: a detach, a
// destroy_qp) makes every running thread of the process execute a full
// barrier; elsewhere both sides use seq_cst. Scopes nest; only the
// outermost one publishes, on a line only this thread writes.
//
// TranslationWindow: the same handshake for memory keys. A role opens a
// window before it translates a key and closes it after its last store
// through that translation; whoever takes a key away (dereg_mr, an FMR
// unmap or remap, LOCAL_INV, SEND_WITH_INV) first makes the key fail
// translate() and then calls quiesce_translations(), which waits for every
// window open at that moment. So when the invalidation returns, no store
// through the old key is still to land (and no MTT entry it read is reused
// under it). A window holds no lock and takes none: translate, copy,
// close. That is what lets the invalidator wait with its own locks held.
#pragma once

namespace srdma::hca {

class DeliveryScope {
 public:
  DeliveryScope();
  ~DeliveryScope();
  DeliveryScope(const DeliveryScope&) = delete;
  DeliveryScope& operator=(const DeliveryScope&) = delete;
};
// Waits until every other thread that is inside a delivery now has left its
// outermost scope. The calling thread's own scope (when it unpublishes from
// inside a delivery) is not waited for. REQUIRES: no engine lock held.
void quiesce_deliveries();

// REQUIRES: no lock is taken while the window is open (translate and store
// only). Windows nest.
class TranslationWindow {
 public:
  TranslationWindow();
  ~TranslationWindow();
  TranslationWindow(const TranslationWindow&) = delete;
  TranslationWindow& operator=(const TranslationWindow&) = delete;
};
// Waits until every translation window open on another thread now has
// closed. Call it after the key stops translating. May be called with any
// lock held (a window never waits for one). Costs a membarrier.
void quiesce_translations();

}  // namespace srdma::hca
