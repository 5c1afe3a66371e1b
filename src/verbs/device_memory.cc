// Device memory (ibv_alloc_dm, ibv_free_dm, ibv_memcpy_to_dm/_from_dm,
// ibv_reg_dm_mr): verbs.h calls these through verbs_context and ibv_dm;
// the buffer is the core's DeviceMemory (srdma/dm.h).
#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>

#include <fmt/format.h>

#include "convert.h"
#include "errors.h"
#include "objects.h"
#include "ops.h"

namespace srdma::verbs {
namespace {

// ibv_memcpy_to_dm / _from_dm return the errno value (0 on success).
int memcpy_to_dm(ibv_dm* dm, std::uint64_t dm_offset, const void* host_addr, size_t length) {
  if (!dm || (!host_addr && length)) return fail("ibv_memcpy_to_dm", EINVAL, "NULL device memory or host address");
  if (auto r = dm_core(dm).copy_to(dm_offset, host_addr, length); !r) return fail("ibv_memcpy_to_dm", r.error());
  return 0;
}

int memcpy_from_dm(void* host_addr, ibv_dm* dm, std::uint64_t dm_offset, size_t length) {
  if (!dm || (!host_addr && length)) return fail("ibv_memcpy_from_dm", EINVAL, "NULL device memory or host address");
  if (auto r = dm_core(dm).copy_from(host_addr, dm_offset, length); !r)
    return fail("ibv_memcpy_from_dm", r.error());
  return 0;
}

}  // namespace

ibv_dm* alloc_dm_op(ibv_context* context, ibv_alloc_dm_attr* attr) {
  constexpr const char* verb = "ibv_alloc_dm";
  if (!context || !attr) return fail_null<ibv_dm>(verb, EINVAL, "NULL context or attribute");
  if (attr->comp_mask) return fail_null<ibv_dm>(verb, EINVAL, fmt::format("unknown comp_mask {:#x}", attr->comp_mask));
  auto core = to_ctx(context)->dev.alloc_dm(attr->length, attr->log_align_req);
  if (!core) return fail_null<ibv_dm>(verb, core.error());
  auto* dm = new (std::nothrow) Dm{};
  if (!dm) return fail_null<ibv_dm>(verb, ENOMEM, "out of memory");
  dm->core = std::move(*core);
  dm->ibv.context = context;
  dm->ibv.memcpy_to_dm = memcpy_to_dm;
  dm->ibv.memcpy_from_dm = memcpy_from_dm;
  dm->ibv.comp_mask = 0;
  // A handle of its own, which ibv_import_dm finds it by.
  static std::atomic<std::uint32_t> next_handle{1};
  dm->ibv.handle = next_handle.fetch_add(1);
  to_ctx(context)->adopt(Kind::kDm, dm);
  return &dm->ibv;
}

int free_dm_op(ibv_dm* dm) {
  if (!dm) return fail("ibv_free_dm", EINVAL, "NULL device memory");
  if (auto r = dm_core(dm).free(); !r) return fail("ibv_free_dm", r.error());
  if (to_dm(dm)->imported_from) {  // the original's wrapper goes with its context
    delete to_dm(dm);
    return 0;
  }
  to_ctx(dm->context)->release(Kind::kDm, dm);
  delete to_dm(dm);
  return 0;
}

// ibv_reg_dm_mr(3): the region is zero-based (its addresses are offsets
// from dm_offset), so IBV_ACCESS_ZERO_BASED is required, as mlx5 requires
// it; addr in the ibv_mr is 0.
ibv_mr* reg_dm_mr_op(ibv_pd* pd, ibv_dm* dm, std::uint64_t dm_offset, size_t length, unsigned int access) {
  constexpr const char* verb = "ibv_reg_dm_mr";
  if (!pd || !dm) return fail_null<ibv_mr>(verb, EINVAL, "NULL PD or device memory");
  if (dm->context != pd->context) return fail_null<ibv_mr>(verb, EINVAL, "the PD and the DM are of other contexts");
  if (!(access & IBV_ACCESS_ZERO_BASED))
    return fail_null<ibv_mr>(verb, EINVAL, "a device-memory MR is zero-based: IBV_ACCESS_ZERO_BASED is required");
  if (access & (IBV_ACCESS_ON_DEMAND | IBV_ACCESS_MW_BIND))
    return fail_null<ibv_mr>(verb, EINVAL, "device memory takes no ON_DEMAND or MW_BIND");
  auto flags = access_flags(access & ~static_cast<unsigned>(IBV_ACCESS_ZERO_BASED));
  if (!flags) return fail_null<ibv_mr>(verb, flags.error());
  auto core = pd_core(pd).reg_dm_mr(dm_core(dm), dm_offset, length, *flags);
  if (!core) return fail_null<ibv_mr>(verb, core.error());
  return adopt_mr(verb, pd, std::move(*core), nullptr, length, access);
}

}  // namespace srdma::verbs

extern "C" {

// A DM of another context on this context's command file (ibv_import_device).
ibv_dm* ibv_import_dm(ibv_context* context, std::uint32_t dm_handle) {
  using namespace srdma::verbs;
  if (!context) return fail_null<ibv_dm>("ibv_import_dm", EINVAL, "NULL context");
  Context* ctx = to_ctx(context);
  Dm* found = nullptr;
  {
    std::lock_guard lock(ctx->file->owned_mu);
    for (void* o : ctx->file->owned[static_cast<std::size_t>(Kind::kDm)]) {
      Dm* d = static_cast<Dm*>(o);
      if (d->ibv.handle == dm_handle) found = d;
    }
  }
  if (!found) return fail_null<ibv_dm>("ibv_import_dm", ENOENT, "no device memory with that handle on this command file");
  auto* dm = new (std::nothrow) Dm{};
  if (!dm) return fail_null<ibv_dm>("ibv_import_dm", ENOMEM, "out of memory");
  dm->imported_from = found;
  dm->ibv = found->ibv;
  dm->ibv.context = context;
  return &dm->ibv;
}

void ibv_unimport_dm(ibv_dm* dm) {
  using namespace srdma::verbs;
  if (dm && to_dm(dm)->imported_from) delete to_dm(dm);
}

}  // extern "C"
