#include "hca/srq.h"

#include <bit>
#include <mutex>
#include <string>

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
  if (is_tm()) {
    tags_.resize(xrc_.max_num_tags);
    free_tags_.reserve(xrc_.max_num_tags);
    for (std::uint32_t h = xrc_.max_num_tags; h-- > 0;) free_tags_.push_back(h);
    for (Tag& t : tags_) t.wqe.sges.reserve(max_sge);
  }
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

bool Srq::take_locked(RecvWqe& out, bool& limit_reached) {
  if (head_ == tail_) return false;
  std::swap(out, ring_[head_++ & (ring_.size() - 1)]);
  if (limit_ != 0 && tail_ - head_ < limit_) {
    limit_ = 0;  // once per arming
    limit_reached = true;
  }
  return true;
}

bool Srq::take(RecvWqe& out) {
  bool limit_reached = false;
  bool taken;
  {
    std::lock_guard lock(mu_);
    taken = take_locked(out, limit_reached);
  }
  if (limit_reached) events_.raise(AsyncEvent{AsyncEventType::kSrqLimitReached, 0, 0, context_, srqn_});
  return taken;
}

namespace {
std::uint64_t load_be(std::span<const std::byte> b, std::size_t at, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v = v << 8 | std::to_integer<std::uint64_t>(b[at + i]);
  return v;
}
}  // namespace

bool Srq::take_tm(std::span<const std::byte> head, std::uint64_t message_length, RecvWqe& out) {
  // Every byte of the TMH is checked before it is believed: a message too
  // short for one, or with an opcode this device does not match on, is
  // unexpected (the consumer sees it whole). A RNDV one is believed only
  // whole, TMH and RVH in its one packet and no longer than the device
  // offloads; its RVH's values are the responder's to check.
  const bool has_tmh = head.size() >= kTmhSize;
  auto op = has_tmh ? std::to_integer<std::uint8_t>(head[0]) : 0xff;
  if (op == static_cast<std::uint8_t>(TmhOpcode::kRndv) &&
      (head.size() < kTmhSize + kRvhSize || message_length < kTmhSize + kRvhSize ||
       message_length > kMaxRndvHdrSize))
    op = 0xff;  // not matched: unexpected
  const bool rndv = op == static_cast<std::uint8_t>(TmhOpcode::kRndv);
  const std::uint64_t tag = has_tmh ? load_be(head, 8, 8) : 0;
  const std::uint32_t priv = has_tmh ? static_cast<std::uint32_t>(load_be(head, 4, 4)) : 0;
  bool limit_reached = false;
  bool taken = false;
  {
    std::lock_guard lock(mu_);
    if (has_tmh && op == static_cast<std::uint8_t>(TmhOpcode::kNoTag)) {
      taken = take_locked(out, limit_reached);
      if (taken) {
        out.tm = TmDisposition::kNoTag;
        out.skip = 0;
        out.tm_tag = 0;
        out.tm_priv = 0;
      }
    } else {
      Tag* match = nullptr;
      // Matching is off while the consumer has not caught up with the
      // unexpected messages (ibv_post_srq_ops' phase synchronization).
      if ((op == static_cast<std::uint8_t>(TmhOpcode::kEager) || rndv) && synced_ == unexpected_) {
        for (Tag& t : tags_)
          if (t.used && (tag & t.mask) == (t.tag & t.mask) && (!match || t.seq < match->seq)) match = &t;
      }
      if (match) {
        std::swap(out, match->wqe);
        match->used = false;
        free_tags_.push_back(static_cast<std::uint32_t>(match - tags_.data()));
        out.tm = rndv ? TmDisposition::kRndv : TmDisposition::kMatched;
        out.skip = rndv ? 0 : kTmhSize;
        out.tm_tag = tag;
        out.tm_priv = priv;
        if (rndv) {
          out.rndv_va = load_be(head, kTmhSize, 8);
          out.rndv_rkey = static_cast<std::uint32_t>(load_be(head, kTmhSize + 8, 4));
          out.rndv_len = static_cast<std::uint32_t>(load_be(head, kTmhSize + 12, 4));
        }
        taken = true;
      } else {
        taken = take_locked(out, limit_reached);
        if (taken) {
          ++unexpected_;
          out.tm = TmDisposition::kUnexpected;
          out.skip = 0;
          out.tm_tag = tag;
          out.tm_priv = priv;
        }
      }
    }
  }
  if (limit_reached) events_.raise(AsyncEvent{AsyncEventType::kSrqLimitReached, 0, 0, context_, srqn_});
  return taken;
}

Result<void> Srq::post_ops(TmOpWr* wr, TmOpWr** bad) {
  if (!is_tm()) {
    if (bad) *bad = wr;
    return make_error(EINVAL, "not a tag-matching SRQ");
  }
  for (; wr; wr = wr->next) {
    auto refuse = [&](int code, std::string why) -> Result<void> {
      if (bad) *bad = wr;
      return make_error(code, std::move(why));
    };
    Wc wc;
    wc.wr_id = wr->wr_id;
    {
      std::lock_guard lock(mu_);
      switch (wr->opcode) {
        case TmOpcode::kAdd: {
          if (wr->num_sge < 0 || static_cast<std::uint32_t>(wr->num_sge) > max_sge_)
            return refuse(EINVAL, fmt::format("num_sge {} beyond the SRQ's max_sge {}", wr->num_sge, max_sge_));
          if (wr->num_sge > 0 && wr->sg_list == nullptr)
            return refuse(EINVAL, fmt::format("num_sge {} with a NULL sg_list", wr->num_sge));
          if (free_tags_.empty())
            return refuse(ENOMEM, fmt::format("the tag list is full ({} tags)", xrc_.max_num_tags));
          const std::uint32_t h = free_tags_.back();
          free_tags_.pop_back();
          Tag& t = tags_[h];
          RecvWr r;
          r.wr_id = wr->recv_wr_id;
          r.sg_list = wr->sg_list;
          r.num_sge = wr->num_sge;
          t.wqe.assign(r);
          t.tag = wr->tag;
          t.mask = wr->mask;
          t.seq = tag_seq_++;
          t.used = true;
          wr->handle = h;
          wc.opcode = WcOpcode::kTmAdd;
          break;
        }
        case TmOpcode::kDel:
          if (wr->handle >= tags_.size())
            return refuse(EINVAL, fmt::format("tag handle {} beyond max_num_tags {}", wr->handle, tags_.size()));
          wc.opcode = WcOpcode::kTmDel;
          // A tag a message consumed first: the DEL fails in its completion.
          if (!tags_[wr->handle].used) {
            wc.status = WcStatus::kTmErr;
          } else {
            tags_[wr->handle].used = false;
            free_tags_.push_back(wr->handle);
          }
          break;
        case TmOpcode::kSync:
          wc.opcode = WcOpcode::kTmSync;
          break;
        default:
          return refuse(EINVAL, fmt::format("unknown tag-matching op {}", static_cast<int>(wr->opcode)));
      }
      if (wr->flags & TM_OP_SYNC) synced_ = wr->unexpected_cnt;
      if (synced_ != unexpected_) wc.wc_flags |= WC_TM_SYNC_REQ;
    }
    // A failed op completes even unsignaled (as a failed send WR does).
    if ((wr->flags & TM_OP_SIGNALED) || wc.status != WcStatus::kSuccess) xrc_.cq->push(wc, false);
  }
  return {};
}

Srq::TmCounts Srq::tm_counts() const {
  std::lock_guard lock(mu_);
  return TmCounts{static_cast<std::uint32_t>(tags_.size() - free_tags_.size()), unexpected_, synced_};
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
