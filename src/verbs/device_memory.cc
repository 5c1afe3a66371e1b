// Device memory (ibv_alloc_dm, ibv_free_dm, ibv_memcpy_to_dm/_from_dm,
// ibv_reg_dm_mr): verbs.h calls these through verbs_context and ibv_dm;
// the buffer is the core's DeviceMemory (srdma/dm.h).
#include <cstdint>
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
  if (auto r = to_dm(dm)->core.copy_to(dm_offset, host_addr, length); !r) return fail("ibv_memcpy_to_dm", r.error());
  return 0;
}

int memcpy_from_dm(void* host_addr, ibv_dm* dm, std::uint64_t dm_offset, size_t length) {
  if (!dm || (!host_addr && length)) return fail("ibv_memcpy_from_dm", EINVAL, "NULL device memory or host address");
  if (auto r = to_dm(dm)->core.copy_from(host_addr, dm_offset, length); !r)
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
  dm->ibv.handle = 0;  // no kernel object behind it (ibv_import_dm refuses)
  to_ctx(context)->adopt(Kind::kDm, dm);
  return &dm->ibv;
}

int free_dm_op(ibv_dm* dm) {
  if (!dm) return fail("ibv_free_dm", EINVAL, "NULL device memory");
  if (auto r = to_dm(dm)->core.free(); !r) return fail("ibv_free_dm", r.error());
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
  auto core = pd_core(pd).reg_dm_mr(to_dm(dm)->core, dm_offset, length, *flags);
  if (!core) return fail_null<ibv_mr>(verb, core.error());
  return adopt_mr(verb, pd, std::move(*core), nullptr, length, access);
}

}  // namespace srdma::verbs
