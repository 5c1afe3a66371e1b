#include "hca/srq.h"

#include <bit>
#include <mutex>

#include <fmt/format.h>

#include "hca/async_events.h"
#include "hca/cq.h"

namespace srdma::hca {
namespace {
std::size_t ring_size(std::uint32_t max_wr) { return std::bit_ceil(std::max<std::size_t>(max_wr, 1)); }
}  // namespace

Srq::Srq(std::uint32_t srqn, std::uint32_t pdn, std::uint32_t max_wr, std::uint32_t max_sge, std::uint32_t limit,
         void* context, AsyncEventDispatcher& events, XrcBinding xrc)
    : srqn_(srqn), pdn_(pdn), max_sge_(max_sge), context_(context), xrc_(std::move(xrc)), events_(events),
      max_wr_(max_wr), limit_(limit) {
  if (xrc_.cq) xrc_.cq->usecnt.fetch_add(1);
  ring_.resize(ring_size(max_wr));
  for (RecvWqe& r : ring_) r.sges.reserve(max_sge);
}

Srq::~Srq() {
  if (xrc_.cq) xrc_.cq->usecnt.fetch_sub(1);
}

Result<void> Srq::post_recv(const RecvWr* wr, const RecvWr** bad_wr) {
  std::lock_guard lock(mu_);
  for (; wr; wr = wr->next) {
    auto refuse = [&](int code, std::string why) -> Result<void> {
      if (bad_wr) *bad_wr = wr;
      return make_error(code, std::move(why));
    };
    if (wr->num_sge < 0 || static_cast<std::uint32_t>(wr->num_sge) > max_sge_)
      return refuse(EINVAL, fmt::format("num_sge {} beyond the SRQ's max_sge {}", wr->num_sge, max_sge_));
    if (wr->num_sge > 0 && wr->sg_list == nullptr)
      return refuse(EINVAL, fmt::format("num_sge {} with a NULL sg_list", wr->num_sge));
    if (tail_ - head_ >= max_wr_) return refuse(ENOMEM, fmt::format("SRQ full ({} WRs)", max_wr_));
    ring_[tail_ & (ring_.size() - 1)].assign(*wr);
    ++tail_;
  }
  return {};
}

bool Srq::take(RecvWqe& out) {
  bool limit_reached = false;
  {
    std::lock_guard lock(mu_);
    if (head_ == tail_) return false;
    std::swap(out, ring_[head_++ & (ring_.size() - 1)]);
    if (limit_ != 0 && tail_ - head_ < limit_) {
      limit_ = 0;  // once per arming
      limit_reached = true;
    }
  }
  if (limit_reached) events_.raise(AsyncEvent{AsyncEventType::kSrqLimitReached, 0, 0, context_, srqn_});
  return true;
}

Srq::Attr Srq::attr() const {
  std::lock_guard lock(mu_);
  return Attr{max_wr_, max_sge_, limit_};
}

std::uint32_t Srq::posted() const {
  std::lock_guard lock(mu_);
  return static_cast<std::uint32_t>(tail_ - head_);
}

Result<void> Srq::resize(std::uint32_t max_wr, std::uint32_t device_max_wr) {
  if (max_wr < 1 || max_wr > device_max_wr)
    return make_error(EINVAL, fmt::format("max_wr {} outside 1..max_srq_wr {}", max_wr, device_max_wr));
  std::lock_guard lock(mu_);
  const std::uint64_t n = tail_ - head_;
  if (max_wr < n) return make_error(EINVAL, fmt::format("max_wr {} below the {} WRs posted", max_wr, n));
  if (max_wr < limit_) return make_error(EINVAL, fmt::format("max_wr {} below the armed limit {}", max_wr, limit_));
  std::vector<RecvWqe> ring(ring_size(max_wr));
  for (std::uint64_t i = 0; i < n; ++i) std::swap(ring[i], ring_[(head_ + i) & (ring_.size() - 1)]);
  for (std::size_t i = n; i < ring.size(); ++i) ring[i].sges.reserve(max_sge_);
  ring_ = std::move(ring);
  head_ = 0;
  tail_ = n;
  max_wr_ = max_wr;
  return {};
}

Result<void> Srq::arm_limit(std::uint32_t limit) {
  std::lock_guard lock(mu_);
  if (limit > max_wr_) return make_error(EINVAL, fmt::format("srq_limit {} beyond max_wr {}", limit, max_wr_));
  limit_ = limit;
  return {};
}

}  // namespace srdma::hca
