// The device's shared CQ pool: core::CqPool's policy over CQs from
// alloc_cq, owned by the device.
#include <map>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "core/cq_impl.h"
#include "srdma/device.h"

namespace srdma {
namespace detail {

// Creates pool CQs through the device's own alloc_cq and keeps them.
class DevicePoolBackend final : public core::CqPool::Backend {
 public:
  explicit DevicePoolBackend(DeviceImpl& dev) : dev_(dev) {}

  Result<void*> create_cq(std::uint32_t cqe, std::uint32_t vector, PollContext ctx) override {
    auto cq = make_cq(cqe, vector, ctx);
    if (!cq) return std::unexpected(cq.error());
    void* handle = cq->get();
    std::lock_guard lock(mu_);
    cqs_.emplace(handle, std::move(*cq));
    return handle;
  }

  void destroy_cq(void* handle) override {
    std::unique_ptr<CompletionQueue> cq;
    {
      std::lock_guard lock(mu_);
      auto it = cqs_.find(handle);
      if (it == cqs_.end()) return;
      cq = std::move(it->second);
      cqs_.erase(it);
    }
    // ~CompletionQueue unshares it and destroys it, or leaves it to the
    // QPs still attached.
  }

 private:
  Result<std::unique_ptr<CompletionQueue>> make_cq(std::uint32_t cqe, std::uint32_t vector, PollContext ctx);

  DeviceImpl& dev_;
  std::mutex mu_;  // guards cqs_
  std::map<void*, std::unique_ptr<CompletionQueue>> cqs_;
};

}  // namespace detail
}  // namespace srdma

namespace srdma {
namespace detail {

Result<std::unique_ptr<CompletionQueue>> DevicePoolBackend::make_cq(std::uint32_t cqe, std::uint32_t vector,
                                                                     PollContext ctx) {
  // No cq_context (completions find their queue through the QP), and no
  // reference to the device: the device owns the pool.
  auto cq = CqAccess::alloc_cq(dev_, nullptr, nullptr, cqe, vector, ctx);
  if (cq) CqAccess::state(**cq).shared = true;
  return cq;
}

void init_cq_pool(DeviceImpl& dev) {
  const auto& p = dev.hca->profile();
  const unsigned cpus = std::thread::hardware_concurrency();
  dev.pool_backend = std::make_unique<DevicePoolBackend>(dev);
  dev.cq_pool = std::make_unique<core::CqPool>(*dev.pool_backend, static_cast<std::uint32_t>(p.num_comp_vectors),
                                               cpus, static_cast<std::uint32_t>(p.max_cqe));
}

}  // namespace detail

Result<CompletionQueue*> Device::cq_pool_get(std::uint32_t nr_cqe, int comp_vector_hint, PollContext ctx) {
  if (state_->removed) return make_error(ENODEV, "the device has been removed");
  auto cq = state_->cq_pool->get(nr_cqe, comp_vector_hint, ctx);
  if (!cq) return std::unexpected(cq.error());
  return static_cast<CompletionQueue*>(cq->handle);
}

Result<void> Device::cq_pool_put(CompletionQueue* cq, std::uint32_t nr_cqe) {
  auto r = state_->cq_pool->put_handle(cq, nr_cqe);
  if (!r) return std::unexpected(r.error());
  return {};
}

Result<CqLease> Device::cq_pool_lease(std::uint32_t nr_cqe, int comp_vector_hint, PollContext ctx) {
  auto cq = cq_pool_get(nr_cqe, comp_vector_hint, ctx);
  if (!cq) return std::unexpected(cq.error());
  return CqLease(state_.get(), *cq, nr_cqe);
}

std::size_t Device::cq_pool_trim() { return state_->cq_pool->trim(); }

std::vector<PoolCqStats> Device::cq_pool_stats() const {
  std::vector<PoolCqStats> out;
  for (const auto& p : state_->cq_pool->snapshot()) {
    auto* cq = static_cast<CompletionQueue*>(p.handle);
    PoolCqStats s{p.id, p.vector, p.ctx, p.cqe, p.cqe_used, detail::CqAccess::state(*cq).cq->usecnt.load(),
                  cq->completions_processed(), cq->events(), 0};
    s.completions_per_interrupt = s.interrupts ? static_cast<double>(s.completions) / static_cast<double>(s.interrupts) : 0;
    out.push_back(s);
  }
  return out;
}

std::vector<CqUsage> Device::cq_usage() const {
  std::map<std::uint32_t, std::uint32_t> pool_used;  // CQN -> entries leased
  for (const auto& p : state_->cq_pool->snapshot())
    pool_used[detail::CqAccess::state(*static_cast<CompletionQueue*>(p.handle)).cq->cqn()] = p.cqe_used;
  auto rows = state_->hca->engine().cq_usage();
  for (CqUsage& u : rows) {
    // Every device CQ was made through the core: its public object and state.
    u.state_bytes += sizeof(CompletionQueue) + sizeof(detail::CqImpl);
    auto it = pool_used.find(u.cqn);
    u.shared = it != pool_used.end();
    u.cqe_used = u.shared ? it->second : u.cqe;
  }
  return rows;
}

CqLease& CqLease::operator=(CqLease&& o) noexcept {
  if (this != &o) {
    release();
    dev_ = std::exchange(o.dev_, nullptr);
    cq_ = std::exchange(o.cq_, nullptr);
    nr_cqe_ = std::exchange(o.nr_cqe_, 0);
  }
  return *this;
}

void CqLease::release() {
  if (!dev_) return;
  (void)dev_->cq_pool->put_handle(cq_, nr_cqe_);
  dev_ = nullptr;
  cq_ = nullptr;
}

}  // namespace srdma
