// The per-QP MR pool (see srdma/mr_pool.h): a list under the pool's mutex.
#include "srdma/mr_pool.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/qp_impl.h"

namespace srdma {
namespace detail {
struct MrPoolAccess {
  static QpImpl& state(const QueuePair& qp) { return *qp.state_; }
};
}  // namespace detail

namespace {
detail::MrPoolImpl& pool_of(const QueuePair& qp) { return detail::MrPoolAccess::state(qp).mr_pool; }
}  // namespace

Result<void> mr_pool_init(QueuePair& qp, int nr, MrType type, std::uint32_t max_num_sg) {
  if (nr < 1) return make_error(EINVAL, fmt::format("an MR pool of {} MRs", nr));
  if (type != MrType::kMemReg) return make_error(EINVAL, "MR pools hold kMemReg MRs");
  auto& qs = detail::MrPoolAccess::state(qp);
  if (!qs.pd) return make_error(EINVAL, "an XRC TGT QP has no PD and no send queue: no MR pool");
  auto& pool = qs.mr_pool;
  std::lock_guard lock(pool.mu);
  if (!pool.all.empty()) return make_error(EBUSY, fmt::format("QP {:#x} already has an MR pool", qp.qp_num()));
  std::vector<std::unique_ptr<MemoryRegion>> mrs;
  mrs.reserve(static_cast<std::size_t>(nr));
  for (int i = 0; i < nr; ++i) {
    auto mr = detail::MrAccess::alloc_mr(qs.pd, type, max_num_sg);
    if (!mr) return make_error(mr.error().code, fmt::format("MR {} of {}: {}", i, nr, mr.error().reason));
    mrs.push_back(std::make_unique<MemoryRegion>(std::move(*mr)));
  }
  pool.all = std::move(mrs);
  pool.free_list.clear();
  // Handed out from the back: the first MR first.
  for (auto it = pool.all.rbegin(); it != pool.all.rend(); ++it) pool.free_list.push_back(it->get());
  pool.type = type;
  pool.max_num_sg = max_num_sg;
  return {};
}

MemoryRegion* mr_pool_get(QueuePair& qp) {
  auto& pool = pool_of(qp);
  std::lock_guard lock(pool.mu);
  if (pool.free_list.empty()) return nullptr;
  MemoryRegion* mr = pool.free_list.back();
  pool.free_list.pop_back();
  pool.used.fetch_add(1, std::memory_order_relaxed);
  return mr;
}

Result<void> mr_pool_put(QueuePair& qp, MemoryRegion* mr) {
  auto& pool = pool_of(qp);
  std::lock_guard lock(pool.mu);
  // A wrong pointer or a double put would hand one MR to two users.
  const bool ours = std::any_of(pool.all.begin(), pool.all.end(), [&](const auto& p) { return p.get() == mr; });
  if (!ours) return make_error(EINVAL, "the MR does not belong to this QP's pool");
  if (std::find(pool.free_list.begin(), pool.free_list.end(), mr) != pool.free_list.end())
    return make_error(EINVAL, "the MR is already in the pool (double put)");
  pool.free_list.push_back(mr);
  pool.used.fetch_sub(1, std::memory_order_relaxed);
  return {};
}

Result<void> mr_pool_destroy(QueuePair& qp) {
  auto& pool = pool_of(qp);
  std::vector<std::unique_ptr<MemoryRegion>> doomed;
  {
    std::lock_guard lock(pool.mu);
    if (int n = pool.used.load(std::memory_order_relaxed); n > 0)
      return make_error(EBUSY, fmt::format("{} MR(s) of the pool are still handed out", n));
    doomed = std::move(pool.all);
    pool.all.clear();
    pool.free_list.clear();
  }
  return {};  // `doomed` deregisters them, outside the lock
}

int mr_pool_used(const QueuePair& qp) { return pool_of(qp).used.load(std::memory_order_relaxed); }

int mr_pool_size(const QueuePair& qp) {
  auto& pool = pool_of(qp);
  std::lock_guard lock(pool.mu);
  return static_cast<int>(pool.all.size());
}

}  // namespace srdma
