// Protection domains and memory regions.
#include <cstdint>
#include <new>
#include <vector>

#include "convert.h"
#include "errors.h"
#include "objects.h"
#include "ops.h"
#include "srdma/access.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

using namespace srdma;
using namespace srdma::verbs;

namespace {

ibv_mr* reg_mr(const char* verb, ibv_pd* pd, void* addr, size_t length, std::uint64_t iova, unsigned int access) {
  if (!pd) return fail_null<ibv_mr>(verb, EINVAL, "NULL PD");
  if (iova != reinterpret_cast<std::uintptr_t>(addr))
    return fail_null<ibv_mr>(verb, EOPNOTSUPP, "an iova other than the buffer's address");
  auto flags = access_flags(access);
  if (!flags) return fail_null<ibv_mr>(verb, flags.error());
  // Implicit ODP (ibv_reg_mr(3)): NULL and SIZE_MAX with ON_DEMAND name the
  // whole address space. Without ON_DEMAND they fail reg_mr's checks.
  const bool implicit = !addr && length == SIZE_MAX && (*flags & ACCESS_ON_DEMAND);
  auto core = implicit ? pd_core(pd).reg_implicit_odp_mr(*flags) : pd_core(pd).reg_mr(addr, length, *flags);
  if (!core) return fail_null<ibv_mr>(verb, core.error());
  return adopt_mr(verb, pd, std::move(*core), addr, length, access);
}

}  // namespace

namespace srdma::verbs {

ibv_mr* adopt_mr(const char* verb, ibv_pd* pd, MemoryRegion core, void* addr, size_t length, unsigned access) {
  auto* mr = new (std::nothrow) Mr{};
  if (!mr) return fail_null<ibv_mr>(verb, ENOMEM, "out of memory");  // `core` deregisters as it goes
  mr->core = std::move(core);
  mr->access = access;
  mr->ibv.context = pd->context;
  mr->ibv.pd = pd;
  mr->ibv.addr = addr;
  mr->ibv.length = length;
  mr->ibv.handle = mr->core.lkey();
  mr->ibv.lkey = mr->core.lkey();
  mr->ibv.rkey = mr->core.rkey();
  to_ctx(pd->context)->adopt(Kind::kMr, mr);
  return &mr->ibv;
}

// ibv_advise_mr(3): every SGE an ODP region of this PD (errors as the man
// page gives them, from TranslationTables::prefetch). The prefetch is done
// when this returns, so FLUSH asks for nothing more.
int advise_mr_op(ibv_pd* pd, ibv_advise_mr_advice advice, std::uint32_t flags, ibv_sge* sg_list,
                 std::uint32_t num_sge) {
  constexpr const char* verb = "ibv_advise_mr";
  if (!pd) return fail(verb, EINVAL, "NULL PD");
  ProtectionDomain::MrAdvice a;
  switch (advice) {
    case IBV_ADVISE_MR_ADVICE_PREFETCH: a = ProtectionDomain::MrAdvice::kPrefetch; break;
    case IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE: a = ProtectionDomain::MrAdvice::kPrefetchWrite; break;
    case IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT: a = ProtectionDomain::MrAdvice::kPrefetchNoFault; break;
    default: return fail(verb, EOPNOTSUPP, "an advice other than PREFETCH, PREFETCH_WRITE, PREFETCH_NO_FAULT");
  }
  if (flags & ~std::uint32_t{IBV_ADVISE_MR_FLAG_FLUSH}) return fail(verb, EINVAL, "flags other than FLUSH");
  if (!sg_list || num_sge == 0) return fail(verb, EINVAL, "an empty scatter/gather list");
  std::vector<Sge> sges(num_sge);
  for (std::uint32_t i = 0; i < num_sge; ++i) sges[i] = Sge{sg_list[i].addr, sg_list[i].length, sg_list[i].lkey};
  if (auto r = pd_core(pd).advise_mr(a, sges); !r) return fail(verb, r.error());
  return 0;
}

}  // namespace srdma::verbs


namespace srdma::verbs {

// Thread domains are a promise that one thread at a time uses what is made
// through them; a software device's queues take their locks anyway, so the
// promise changes nothing but is kept count of (EBUSY while in use).
ibv_td* alloc_td_op(ibv_context* context, ibv_td_init_attr* attr) {
  if (!context || !attr) return fail_null<ibv_td>("ibv_alloc_td", EINVAL, "NULL context or attribute");
  if (attr->comp_mask) return fail_null<ibv_td>("ibv_alloc_td", EINVAL, "unknown comp_mask bits");
  auto* td = new (std::nothrow) Td{};
  if (!td) return fail_null<ibv_td>("ibv_alloc_td", ENOMEM, "out of memory");
  td->ibv.context = context;
  to_ctx(context)->adopt(Kind::kTd, td);
  return &td->ibv;
}

int dealloc_td_op(ibv_td* td) {
  if (!td) return fail("ibv_dealloc_td", EINVAL, "NULL TD");
  if (to_td(td)->users.load() > 0) return fail("ibv_dealloc_td", EBUSY, "parent domains use the thread domain");
  to_ctx(td->context)->release(Kind::kTd, td);
  delete to_td(td);
  return 0;
}

ibv_pd* alloc_parent_domain_op(ibv_context* context, ibv_parent_domain_init_attr* attr) {
  constexpr const char* verb = "ibv_alloc_parent_domain";
  constexpr std::uint32_t kKnown = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  if (!context || !attr) return fail_null<ibv_pd>(verb, EINVAL, "NULL context or attribute");
  if (attr->comp_mask & ~kKnown) return fail_null<ibv_pd>(verb, EINVAL, "unknown comp_mask bits");
  if (!attr->pd || attr->pd->context != context || to_pd(attr->pd)->is_parent())
    return fail_null<ibv_pd>(verb, EINVAL, "pd must be a protection domain of this context");
  if (attr->td && attr->td->context != context) return fail_null<ibv_pd>(verb, EINVAL, "a thread domain of another context");
  const bool allocators = attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;
  if (allocators && (!attr->alloc || !attr->free))
    return fail_null<ibv_pd>(verb, EINVAL, "ALLOCATORS needs both alloc and free");
  auto* d = new (std::nothrow) Pd{};
  if (!d) return fail_null<ibv_pd>(verb, ENOMEM, "out of memory");
  d->protection = to_pd(attr->pd);
  d->td = attr->td ? to_td(attr->td) : nullptr;
  if (allocators) {
    d->alloc = attr->alloc;
    d->free = attr->free;
  }
  if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT) d->pd_context = attr->pd_context;
  d->ibv.context = context;
  d->ibv.handle = attr->pd->handle;  // the PD it stands for
  ++d->protection->users;
  if (d->td) ++d->td->users;
  to_ctx(context)->adopt(Kind::kPd, d);
  return &d->ibv;
}

}  // namespace srdma::verbs

extern "C" {

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  if (!context) return fail_null<ibv_pd>("ibv_alloc_pd", EINVAL, "NULL context");
  auto core = to_ctx(context)->dev.alloc_pd();
  if (!core) return fail_null<ibv_pd>("ibv_alloc_pd", core.error());
  auto* pd = new (std::nothrow) Pd{};
  if (!pd) return fail_null<ibv_pd>("ibv_alloc_pd", ENOMEM, "out of memory");
  pd->core = std::move(*core);
  pd->ibv.context = context;
  pd->ibv.handle = pd->core.pd_num();
  to_ctx(context)->adopt(Kind::kPd, pd);
  return &pd->ibv;
}

// A protection domain, or a parent domain (as mlx5: EBUSY while objects
// made through it, or parent domains on the PD, remain).
int ibv_dealloc_pd(ibv_pd* pd) {
  if (!pd) return fail("ibv_dealloc_pd", EINVAL, "NULL PD");
  Pd* d = to_pd(pd);
  if (d->imported_from) {
    // The PD it stands for goes (the kernel's object is shared); its
    // original's wrapper goes with its context.
    if (auto r = d->imported_from->core.dealloc(); !r) return fail("ibv_dealloc_pd", r.error());
    delete d;
    return 0;
  }
  if (int n = d->users.load(); n > 0)
    return fail("ibv_dealloc_pd", EBUSY,
                d->is_parent() ? "QPs, CQs or SRQs made through the parent domain remain" : "parent domains on the PD remain");
  if (d->is_parent()) {
    --d->protection->users;
    if (d->td) --d->td->users;
  } else if (auto r = d->core.dealloc(); !r) {
    return fail("ibv_dealloc_pd", r.error());
  }
  to_ctx(pd->context)->release(Kind::kPd, pd);
  delete d;
  return 0;
}

ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return reg_mr("ibv_reg_mr", pd, addr, length, reinterpret_cast<std::uintptr_t>(addr), static_cast<unsigned>(access));
}

ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, std::uint64_t iova, int access) {
  return reg_mr("ibv_reg_mr_iova", pd, addr, length, iova, static_cast<unsigned>(access));
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, std::uint64_t iova, unsigned int access) {
  return reg_mr("ibv_reg_mr_iova2", pd, addr, length, iova, access);
}

ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, std::uint64_t, size_t, std::uint64_t, int, int) {
  return fail_null<ibv_mr>("ibv_reg_dmabuf_mr", EOPNOTSUPP, "no dma-buf on a software device");
}

int ibv_dereg_mr(ibv_mr* mr) {
  if (!mr) return fail("ibv_dereg_mr", EINVAL, "NULL MR");
  // An imported MR deregisters the region it stands for (the kernel's
  // object is shared); its original's wrapper goes with its context.
  if (auto r = mr_of(mr).core.dereg(); !r) return fail("ibv_dereg_mr", r.error());
  if (to_mr(mr)->imported_from) {
    delete to_mr(mr);
    return 0;
  }
  to_ctx(mr->context)->release(Kind::kMr, mr);
  delete to_mr(mr);
  return 0;
}

// The region re-pointed in place (ProtectionDomain::rereg_mr): its keys
// stay, as mlx5 and rxe keep them, and the old translation (pages, PD,
// access) stops before this returns, no store through it still to land. A
// WR that names the old pages or PD afterwards fails its protection check.
// On a refusal the MR is as it was.
int ibv_rereg_mr(ibv_mr* ibmr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  constexpr const char* verb = "ibv_rereg_mr";
  if (!ibmr) {
    fail(verb, EINVAL, "NULL MR");
    return IBV_REREG_MR_ERR_INPUT;
  }
  if (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) {
    fail(verb, EINVAL, "unknown flags");
    return IBV_REREG_MR_ERR_INPUT;
  }
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !length)) {
    fail(verb, EINVAL, "CHANGE_TRANSLATION with a NULL address or length 0");
    return IBV_REREG_MR_ERR_INPUT;
  }
  if (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS)) {
    fail(verb, EINVAL, "access flags without CHANGE_ACCESS");
    return IBV_REREG_MR_ERR_INPUT;
  }
  if ((flags & IBV_REREG_MR_CHANGE_PD) && (!pd || pd->context != ibmr->context)) {
    fail(verb, EINVAL, "CHANGE_PD with a NULL PD or one of another context");
    return IBV_REREG_MR_ERR_INPUT;
  }
  if (flags == 0) return 0;  // nothing to change
  Mr& mr = mr_of(ibmr);
  ibv_pd* npd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd : ibmr->pd;
  void* naddr = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? addr : ibmr->addr;
  const size_t nlength = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? length : ibmr->length;
  const unsigned naccess = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? static_cast<unsigned>(access) : mr.access;
  // IBA 10.6.3.1 (as ibv_reg_mr): remote write or atomic access needs local write.
  if ((naccess & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(naccess & IBV_ACCESS_LOCAL_WRITE)) {
    fail(verb, EINVAL, "remote write or atomic access without local write");
    return IBV_REREG_MR_ERR_INPUT;
  }
  auto nflags = access_flags(naccess);
  if (!nflags) {
    fail(verb, nflags.error());
    return IBV_REREG_MR_ERR_INPUT;
  }
  if (auto r = pd_core(npd).rereg_mr(mr.core, naddr, nlength, *nflags); !r) {
    fail(verb, r.error());
    return IBV_REREG_MR_ERR_CMD;
  }
  mr.access = naccess;
  ibmr->pd = npd;
  ibmr->addr = naddr;
  ibmr->length = nlength;
  return 0;
}

// Importing: a context opened with ibv_import_device shares its command
// file's objects; these hand out wrappers of its own for them (by the
// handles the original reports), freed by unimport alone.
ibv_pd* ibv_import_pd(ibv_context* context, std::uint32_t pd_handle) {
  if (!context) return fail_null<ibv_pd>("ibv_import_pd", EINVAL, "NULL context");
  Context* ctx = to_ctx(context);
  Pd* found = nullptr;
  {
    std::lock_guard lock(ctx->file->owned_mu);
    for (void* o : ctx->file->owned[static_cast<std::size_t>(Kind::kPd)]) {
      Pd* p = static_cast<Pd*>(o);
      if (!p->is_parent() && p->core.valid() && p->ibv.handle == pd_handle) found = p;
    }
  }
  if (!found) return fail_null<ibv_pd>("ibv_import_pd", ENOENT, "no PD with that handle on this command file");
  auto* pd = new (std::nothrow) Pd{};
  if (!pd) return fail_null<ibv_pd>("ibv_import_pd", ENOMEM, "out of memory");
  pd->imported_from = found;
  pd->ibv.context = context;
  pd->ibv.handle = pd_handle;
  return &pd->ibv;
}

void ibv_unimport_pd(ibv_pd* pd) {
  if (pd && to_pd(pd)->imported_from) delete to_pd(pd);
}

ibv_mr* ibv_import_mr(ibv_pd* pd, std::uint32_t mr_handle) {
  if (!pd) return fail_null<ibv_mr>("ibv_import_mr", EINVAL, "NULL PD");
  Context* ctx = to_ctx(pd->context);
  Mr* found = nullptr;
  {
    std::lock_guard lock(ctx->file->owned_mu);
    for (void* o : ctx->file->owned[static_cast<std::size_t>(Kind::kMr)]) {
      Mr* m = static_cast<Mr*>(o);
      if (m->core.valid() && m->ibv.handle == mr_handle) found = m;
    }
  }
  if (!found) return fail_null<ibv_mr>("ibv_import_mr", ENOENT, "no MR with that handle on this command file");
  if (found->core.pd_num() != pd_core(pd).pd_num())
    return fail_null<ibv_mr>("ibv_import_mr", EINVAL, "the MR is of another PD");
  auto* mr = new (std::nothrow) Mr{};
  if (!mr) return fail_null<ibv_mr>("ibv_import_mr", ENOMEM, "out of memory");
  mr->imported_from = found;
  mr->access = found->access;
  mr->ibv = found->ibv;
  mr->ibv.context = pd->context;
  mr->ibv.pd = pd;
  return &mr->ibv;
}

void ibv_unimport_mr(ibv_mr* mr) {
  if (mr && to_mr(mr)->imported_from) delete to_mr(mr);
}

}  // extern "C"
