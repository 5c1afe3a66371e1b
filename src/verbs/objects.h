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
#include <new>
#include <cstdint>
#include <sys/types.h>
#include <condition_variable>
#include <unordered_set>
#include <vector>

#include "srdma/ah.h"
#include "srdma/cq.h"
#include "srdma/device.h"
#include "srdma/mr.h"
#include "srdma/mw.h"
#include "srdma/pd.h"
#include "srdma/qp.h"
#include "srdma/srq.h"
#include "srdma/xrcd.h"

#include "cq_ex.h"
#include "qp_ex.h"

namespace srdma::verbs {

struct Context;

// What a context has handed out, in the order close_device destroys what
// the application left behind (a QP before its SRQ and CQs, an MR before
// its PD, a window before the MR it may be bound to), as the kernel's uverbs
// cleanup does (and an MR before the device memory it is on, an SRQ before
// its XRC domain, a parent domain's objects before it, a thread domain
// last).
enum class Kind { kAh, kQp, kSrq, kXrcd, kMw, kMr, kDm, kCq, kChannel, kPd, kTd };
inline constexpr std::size_t kKinds = 11;

// What a command fd stands for, as the kernel's uverbs file does: the
// objects made through any context on it. ibv_import_device opens another
// context on the same file (a dup of the fd, in this process), which then
// shares them; they are destroyed when the last context on the file closes.
struct CommandFile {
  dev_t dev = 0;  // the memfd's identity (fstat): a dup names the same file
  ino_t ino = 0;
  pid_t pid = 0;  // the process it was made in (a forked child has a copy, not it)
  std::mutex owned_mu;
  std::array<std::unordered_set<void*>, kKinds> owned;
};

// One ibv_context: the verbs_context (which ends with the ibv_context the
// application sees), a handle on the process's device, and the async
// event queue behind async_fd.
struct Context {
  verbs_context vctx;  // first: &vctx.context is what the application holds
  Device dev;
  std::uint32_t ipv4 = 0;  // the device's IPv4 address (host order); 0 on an IPv6 device
  IpAddress ip;            // the device's address, either family

  // Async events for this context, readable on async_fd (an eventfd).
  std::mutex async_mu;
  std::condition_variable async_cv;
  std::deque<ibv_async_event> async_events;
  int async_fd = -1;
  int cmd_fd = -1;  // ibv_context.cmd_fd: a memfd (see ibv_open_device), or the fd imported
  std::shared_ptr<CommandFile> file;

  ibv_context* ibv() { return &vctx.context; }
  void adopt(Kind k, void* obj) {
    std::lock_guard lock(file->owned_mu);
    file->owned[static_cast<std::size_t>(k)].insert(obj);
  }
  void release(Kind k, void* obj) {
    std::lock_guard lock(file->owned_mu);
    file->owned[static_cast<std::size_t>(k)].erase(obj);
  }
};

struct Td {
  ibv_td ibv;
  std::atomic<int> users{0};  // parent domains naming it
};

// A protection domain (ibv_alloc_pd), or a parent domain
// (ibv_alloc_parent_domain) that stands for one: every verb given a parent
// domain acts on its protection domain (pd_core), and the QPs, CQs and SRQs
// made through it take their memory from its allocators (new_object).
struct Pd {
  ibv_pd ibv;
  ProtectionDomain core;  // a protection domain's own; empty in a parent domain
  Pd* protection = nullptr;  // a parent domain's protection domain
  Td* td = nullptr;
  void* (*alloc)(ibv_pd*, void*, size_t, size_t, std::uint64_t) = nullptr;
  void (*free)(ibv_pd*, void*, void*, std::uint64_t) = nullptr;
  void* pd_context = nullptr;
  // Of a protection domain: the parent domains on it. Of a parent domain:
  // the objects made through it. Either deallocates at 0 only (EBUSY).
  std::atomic<int> users{0};
  // ibv_import_pd's wrapper: the PD of another context on the same
  // command file it stands for (ibv_unimport_pd frees only the wrapper).
  Pd* imported_from = nullptr;
  bool is_parent() const { return protection != nullptr; }
};

struct Mr {
  ibv_mr ibv;
  MemoryRegion core;
  Mr* imported_from = nullptr;  // ibv_import_mr's wrapper: the MR it stands for
  unsigned access = 0;  // the ibv access flags it was registered with (ibv_rereg_mr keeps them)
};

struct Mw {
  ibv_mw ibv;
  MemoryWindow core;
};

// ibv_dm's memcpy_to_dm/memcpy_from_dm are its own function pointers
// (device_memory.cc sets them).
struct Dm {
  ibv_dm ibv;
  DeviceMemory core;
  Dm* imported_from = nullptr;  // ibv_import_dm's wrapper: the DM it stands for
};

struct CompChannelObj {
  ibv_comp_channel ibv;
  std::unique_ptr<CompChannel> core;
};

// Async events the application read (ibv_get_async_event) and has to
// acknowledge before the object they name may be destroyed, as libibverbs
// counts them (events_reported against the public struct's
// events_completed); guarded by the context's async_mu.
struct AsyncReported {
  std::uint32_t reported = 0;
};

// Where a QP's, CQ's or SRQ's wrapper memory came from: the allocator of
// the parent domain it was made through, or the heap (parent null).
struct ObjectMemory {
  Pd* parent = nullptr;
  bool custom = false;  // the parent's alloc gave it (else new, even with a parent: USE_DEFAULT)
};

// A parent domain's allocator's resource types (driver 0: softrdma has no
// kernel driver ID), as mlx5dv names its MLX5DV_RES_TYPE_*.
inline constexpr std::uint64_t kResourceQp = 1, kResourceCq = 2, kResourceSrq = 3;

struct Cq {
  union {
    ibv_cq ibv;
    ibv_cq_ex ex;  // ibv_create_cq_ex: starts with ibv_cq's fields (ibv_cq_ex_to_cq is a cast)
  };
  std::unique_ptr<CompletionQueue> core;
  AsyncReported async;
  std::unique_ptr<CqExPoll> ext;  // extended CQs only: what start_poll buffered (cq_ex.h)
  ObjectMemory mem;
  static constexpr std::uint64_t kResourceType = kResourceCq;
};

// ibv_create_cq's work (verb names the caller in refusals); the wrapper, or
// NULL with errno set.
Cq* make_cq(const char* verb, ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
            int comp_vector, ibv_pd* parent = nullptr);
// ibv_poll_cq on an extended CQ: what start_poll buffered, then the core's.
int poll_cq_ex_classic(Cq& cq, int num_entries, ibv_wc* wc);

struct Qp {
  union {
    ibv_qp ibv;
    ibv_qp_ex ex;  // ibv_create_qp_ex: starts with the ibv_qp (qp_base)
  };
  std::unique_ptr<QueuePair> core;
  std::unique_ptr<QpExPost> ext;  // extended QPs only: the ibv_wr_* staging (qp_ex.h)
  QpCaps caps;  // what create_qp granted (ibv_query_qp reports them)
  int sq_sig_all = 0;
  AsyncReported async;
  // Multicast groups attached (multicast.cc), detached when the QP is
  // destroyed, as the kernel's uverbs does.
  std::vector<std::uint32_t> mcast_groups;
  ObjectMemory mem;
  static constexpr std::uint64_t kResourceType = kResourceQp;
};

// ibv_create_qp's work (verb names the caller in refusals); the wrapper, or
// NULL with errno set.
Qp* make_qp(const char* verb, ibv_pd* pd, ibv_qp_init_attr* init);

struct Srq {
  ibv_srq ibv;
  std::unique_ptr<SharedReceiveQueue> core;
  AsyncReported async;
  ObjectMemory mem;
  static constexpr std::uint64_t kResourceType = kResourceSrq;
};

// An XRC domain as ibv_open_xrcd hands it out (xrc.cc): each open is its
// own handle; the handles opened on one file in this process share the
// domain (the kernel's inode table, per process here).
struct XrcdShared;
struct Xrcd {
  ibv_xrcd ibv;  // what the application holds
  std::shared_ptr<XrcdShared> shared;
};
inline Xrcd* to_xrcd(ibv_xrcd* x) { return reinterpret_cast<Xrcd*>(x); }
// What an XRC handle stands for in the core (xrc.cc).
XrcDomain& xrcd_core(ibv_xrcd* x);

struct Ah {
  ibv_ah ibv;
  std::unique_ptr<AddressHandle> core;
};

inline Context* to_ctx(ibv_context* c) {
  return reinterpret_cast<Context*>(reinterpret_cast<char*>(c) - offsetof(Context, vctx) -
                                    offsetof(verbs_context, context));
}
inline Pd* to_pd(ibv_pd* p) { return reinterpret_cast<Pd*>(p); }
inline Td* to_td(ibv_td* t) { return reinterpret_cast<Td*>(t); }
// The protection domain a verb given `p` acts on.
inline ProtectionDomain& pd_core(ibv_pd* p) {
  Pd* d = to_pd(p);
  if (d->imported_from) d = d->imported_from;
  return d->is_parent() ? d->protection->core : d->core;
}

// A QP, CQ or SRQ wrapper made through `parent` (a parent domain, or any
// PD, or null): from the parent domain's alloc when it has one and does not
// answer IBV_ALLOCATOR_USE_DEFAULT, else new. Null when the allocator
// gives none, or is out of memory.
template <class T>
T* new_object(ibv_pd* parent) {
  Pd* p = parent ? to_pd(parent) : nullptr;
  if (p && !p->is_parent()) p = nullptr;
  if (p && p->alloc) {
    void* mem = p->alloc(parent, p->pd_context, sizeof(T), alignof(T), T::kResourceType);
    if (mem == nullptr) return nullptr;
    if (mem != IBV_ALLOCATOR_USE_DEFAULT) {
      if (reinterpret_cast<std::uintptr_t>(mem) % alignof(T) != 0) {
        p->free(parent, p->pd_context, mem, T::kResourceType);
        return nullptr;
      }
      T* obj = new (mem) T{};
      obj->mem = ObjectMemory{p, true};
      ++p->users;
      return obj;
    }
  }
  T* obj = new (std::nothrow) T{};
  if (obj && p) {
    obj->mem = ObjectMemory{p, false};
    ++p->users;
  }
  return obj;
}

// Undoes new_object: back to the allocator it came from.
template <class T>
void delete_object(T* obj) {
  const ObjectMemory m = obj->mem;
  if (m.custom) {
    obj->~T();
    m.parent->free(&m.parent->ibv, m.parent->pd_context, obj, T::kResourceType);
  } else {
    delete obj;
  }
  if (m.parent) --m.parent->users;
}
inline Mr* to_mr(ibv_mr* m) { return reinterpret_cast<Mr*>(m); }
// The region a verb given `m` acts on (an imported MR's original).
inline Mr& mr_of(ibv_mr* m) {
  Mr* r = to_mr(m);
  return r->imported_from ? *r->imported_from : *r;
}
inline Mw* to_mw(ibv_mw* m) { return reinterpret_cast<Mw*>(m); }
inline Dm* to_dm(ibv_dm* d) { return reinterpret_cast<Dm*>(d); }
// The device memory a verb given `d` acts on (an imported DM's original).
inline DeviceMemory& dm_core(ibv_dm* d) {
  Dm* m = to_dm(d);
  return m->imported_from ? m->imported_from->core : m->core;
}
inline Cq* to_cq(ibv_cq* c) { return reinterpret_cast<Cq*>(c); }
inline CompChannelObj* to_channel(ibv_comp_channel* c) { return reinterpret_cast<CompChannelObj*>(c); }
inline Qp* to_qp(ibv_qp* q) { return reinterpret_cast<Qp*>(q); }
inline Srq* to_srq(ibv_srq* s) { return reinterpret_cast<Srq*>(s); }
inline Ah* to_ah(ibv_ah* a) { return reinterpret_cast<Ah*>(a); }

// verbs_context's thread and parent domain slots (memory.cc).
ibv_td* alloc_td_op(ibv_context* context, ibv_td_init_attr* attr);
int dealloc_td_op(ibv_td* td);
ibv_pd* alloc_parent_domain_op(ibv_context* context, ibv_parent_domain_init_attr* attr);

// Destroys what the application did not (ibv_close_device).
void destroy_leftovers(Context& ctx);

// Queues an async event on the context (the device's event thread calls it).
void push_async_event(Context& ctx, const ibv_async_event& ev);

// For a QP, CQ or SRQ whose core object was just destroyed (so it raises
// nothing more): waits until the events it raised reached the context,
// drops those the application has not read, and waits until it has
// acknowledged those it read. After this no event names the object: the
// kernel and libibverbs promise as much, and UCX reads element.qp->qp_num
// of every QP event it gets.
void retire_async_events(Context& ctx, ibv_qp* qp);
void retire_async_events(Context& ctx, ibv_cq* cq);
void retire_async_events(Context& ctx, ibv_srq* srq);

}  // namespace srdma::verbs
