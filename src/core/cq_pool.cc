#include "core/cq_pool.h"

#include <algorithm>

#include <fmt/format.h>

namespace srdma::core {

CqPool::CqPool(Backend& backend, std::uint32_t num_vectors, std::uint32_t cpus, std::uint32_t max_cqe)
    : backend_(backend), n_(std::min(num_vectors, cpus)), max_cqe_(max_cqe) {}

CqPool::~CqPool() {
  for (auto& cq : cqs_) backend_.destroy_cq(cq->handle);
}

PoolCq* CqPool::select_locked(std::uint32_t vector, PollContext ctx, std::uint32_t nr_cqe) {
  PoolCq* best = nullptr;
  for (auto& cq : cqs_) {  // creation order: a tie keeps the earlier CQ
    if (cq->vector != vector || cq->ctx != ctx || cq->cqe - cq->cqe_used < nr_cqe) continue;
    if (!best || cq->cqe_used < best->cqe_used) best = cq.get();
  }
  return best;
}

PoolCq* CqPool::find_locked(std::uint32_t id) {
  for (auto& cq : cqs_)
    if (cq->id == id) return cq.get();
  return nullptr;
}

const PoolCq* CqPool::find_locked(std::uint32_t id) const {
  return const_cast<CqPool*>(this)->find_locked(id);
}

Result<PoolCq> CqPool::get(std::uint32_t nr_cqe, int comp_vector_hint, PollContext ctx) {
  if (!is_valid(ctx)) return make_error(EINVAL, fmt::format("poll context {} is not one", static_cast<unsigned>(ctx)));
  if (ctx == PollContext::kDirect)
    return make_error(EINVAL, "DIRECT CQs are polled by their owner and cannot be shared");
  if (nr_cqe == 0) return make_error(EINVAL, "nr_cqe is 0");
  if (nr_cqe > max_cqe_) return make_error(EINVAL, fmt::format("nr_cqe {} exceeds max_cqe {}", nr_cqe, max_cqe_));
  if (n_ == 0) return make_error(EINVAL, "the device has no completion vectors (or no online CPUs)");

  std::uint32_t vector;
  {
    std::lock_guard lock(mu_);
    vector = comp_vector_hint < 0 ? rr_++ % n_ : static_cast<std::uint32_t>(comp_vector_hint) % n_;
    if (PoolCq* cq = select_locked(vector, ctx, nr_cqe)) {
      cq->cqe_used += nr_cqe;
      return *cq;
    }
  }
  // A miss. One thread grows the pool; the others wait here and then find
  // room in what it added.
  std::lock_guard grow(grow_mu_);
  {
    std::lock_guard lock(mu_);
    if (PoolCq* cq = select_locked(vector, ctx, nr_cqe)) {
      cq->cqe_used += nr_cqe;
      return *cq;
    }
  }
  const std::uint32_t size = std::min(max_cqe_, std::max(nr_cqe, kMinSharedCqSize));
  std::vector<void*> made;
  for (std::uint32_t v = 0; v < n_; ++v) {
    auto h = backend_.create_cq(size, v, ctx);
    if (!h) {
      for (void* m : made) backend_.destroy_cq(m);
      return make_error(h.error().code, "growing the CQ pool: " + h.error().reason);
    }
    made.push_back(*h);
  }
  std::lock_guard lock(mu_);
  for (std::uint32_t v = 0; v < n_; ++v)
    cqs_.push_back(std::make_unique<PoolCq>(PoolCq{next_id_++, v, ctx, size, 0, made[v]}));
  PoolCq* cq = select_locked(vector, ctx, nr_cqe);  // the new CQ on `vector` has room
  cq->cqe_used += nr_cqe;
  return *cq;
}

Result<PoolCq> CqPool::put(std::uint32_t id, std::uint32_t nr_cqe) {
  std::lock_guard lock(mu_);
  PoolCq* cq = find_locked(id);
  if (!cq) return make_error(EINVAL, fmt::format("CQ {} is not a pool CQ", id));
  return put_locked(cq, nr_cqe);
}

Result<PoolCq> CqPool::put_handle(const void* handle, std::uint32_t nr_cqe) {
  std::lock_guard lock(mu_);
  for (auto& cq : cqs_)
    if (cq->handle == handle) return put_locked(cq.get(), nr_cqe);
  return make_error(EINVAL, "the CQ is not one of this device's pool CQs");
}

Result<PoolCq> CqPool::put_locked(PoolCq* cq, std::uint32_t nr_cqe) {
  if (nr_cqe > cq->cqe_used)
    return make_error(EINVAL,
                      fmt::format("put of {} entries, but CQ {} has {} reserved", nr_cqe, cq->id, cq->cqe_used));
  cq->cqe_used -= nr_cqe;
  return *cq;
}

std::size_t CqPool::trim() {
  std::vector<std::unique_ptr<PoolCq>> idle;
  {
    std::lock_guard lock(mu_);
    auto keep = std::stable_partition(cqs_.begin(), cqs_.end(), [](const auto& cq) { return cq->cqe_used != 0; });
    std::move(keep, cqs_.end(), std::back_inserter(idle));
    cqs_.erase(keep, cqs_.end());
  }
  for (auto& cq : idle) backend_.destroy_cq(cq->handle);
  return idle.size();
}

Result<void> CqPool::destroy(std::uint32_t id) const {
  std::lock_guard lock(mu_);
  if (!find_locked(id)) return make_error(EINVAL, fmt::format("CQ {} is not a pool CQ", id));
  return make_error(EOPNOTSUPP, fmt::format("CQ {} is shared by the pool: destroy is refused (trim frees idle ones)", id));
}

Result<void> CqPool::resize(std::uint32_t id, std::uint32_t cqe) const {
  std::lock_guard lock(mu_);
  if (!find_locked(id)) return make_error(EINVAL, fmt::format("CQ {} is not a pool CQ", id));
  return make_error(EOPNOTSUPP, fmt::format("CQ {} is shared by the pool: resize to {} is refused", id, cqe));
}

std::vector<PoolCq> CqPool::snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<PoolCq> out;
  for (const auto& cq : cqs_) out.push_back(*cq);
  return out;
}

}  // namespace srdma::core
