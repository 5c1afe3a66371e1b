// The objects libibverbs hands out, each the public struct of
// <infiniband/verbs.h> followed by the softrdma object behind it.
//
// The application holds pointers to the public structs and reads their
// fields (qp->qp_num, mr->lkey, cq->channel ...); verbs.h's inline verbs
// dispatch through context->ops. Every wrapper starts with its public
// struct (offset 0), so a pointer the application passes back is cast to
// the wrapper; the pointer is trusted as libibverbs trusts it (an object
// this library returned and the application has not destroyed).
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <condition_variable>
#include <unordered_set>
#include <vector>

#include "srdma/ah.h"
#include "srdma/cq.h"
#include "srdma/device.h"
#include "srdma/mr.h"
#include "srdma/pd.h"
#include "srdma/qp.h"
#include "srdma/srq.h"

namespace srdma::verbs {

struct Context;

// What a context has handed out, in the order close_device destroys what
// the application left behind (a QP before its SRQ and CQs, an MR before
// its PD), as the kernel's uverbs cleanup does.
enum class Kind { kAh, kQp, kSrq, kMr, kCq, kChannel, kPd };
inline constexpr std::size_t kKinds = 7;

// One ibv_context: the verbs_context (which ends with the ibv_context the
// application sees), a handle on the process's device, and the async
// event queue behind async_fd.
struct Context {
  verbs_context vctx;  // first: &vctx.context is what the application holds
  Device dev;
  std::uint32_t ipv4 = 0;  // the device's address (host order)

  // Async events for this context, readable on async_fd (an eventfd).
  std::mutex async_mu;
  std::condition_variable async_cv;
  std::deque<ibv_async_event> async_events;
  int async_fd = -1;

  std::mutex owned_mu;
  std::array<std::unordered_set<void*>, kKinds> owned;

  ibv_context* ibv() { return &vctx.context; }
  void adopt(Kind k, void* obj) {
    std::lock_guard lock(owned_mu);
    owned[static_cast<std::size_t>(k)].insert(obj);
  }
  void release(Kind k, void* obj) {
    std::lock_guard lock(owned_mu);
    owned[static_cast<std::size_t>(k)].erase(obj);
  }
};

struct Pd {
  ibv_pd ibv;
  ProtectionDomain core;
};

struct Mr {
  ibv_mr ibv;
  MemoryRegion core;
};

struct CompChannelObj {
  ibv_comp_channel ibv;
  std::unique_ptr<CompChannel> core;
};

struct Cq {
  ibv_cq ibv;
  std::unique_ptr<CompletionQueue> core;
};

struct Qp {
  ibv_qp ibv;
  std::unique_ptr<QueuePair> core;
  QpCaps caps;  // what create_qp granted (ibv_query_qp reports them)
  int sq_sig_all = 0;
  // Multicast groups attached (multicast.cc), detached when the QP is
  // destroyed, as the kernel's uverbs does.
  std::vector<std::uint32_t> mcast_groups;
};

struct Srq {
  ibv_srq ibv;
  std::unique_ptr<SharedReceiveQueue> core;
};

struct Ah {
  ibv_ah ibv;
  std::unique_ptr<AddressHandle> core;
};

inline Context* to_ctx(ibv_context* c) {
  return reinterpret_cast<Context*>(reinterpret_cast<char*>(c) - offsetof(Context, vctx) -
                                    offsetof(verbs_context, context));
}
inline Pd* to_pd(ibv_pd* p) { return reinterpret_cast<Pd*>(p); }
inline Mr* to_mr(ibv_mr* m) { return reinterpret_cast<Mr*>(m); }
inline Cq* to_cq(ibv_cq* c) { return reinterpret_cast<Cq*>(c); }
inline CompChannelObj* to_channel(ibv_comp_channel* c) { return reinterpret_cast<CompChannelObj*>(c); }
inline Qp* to_qp(ibv_qp* q) { return reinterpret_cast<Qp*>(q); }
inline Srq* to_srq(ibv_srq* s) { return reinterpret_cast<Srq*>(s); }
inline Ah* to_ah(ibv_ah* a) { return reinterpret_cast<Ah*>(a); }

// Destroys what the application did not (ibv_close_device).
void destroy_leftovers(Context& ctx);

// Queues an async event on the context (the device's event thread calls it).
void push_async_event(Context& ctx, const ibv_async_event& ev);

}  // namespace srdma::verbs
