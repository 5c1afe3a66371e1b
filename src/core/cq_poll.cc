// Completion processing for CQs from Device::alloc_cq, like the Linux RDMA
// core's cq.c: poll in batches, call each completion's wr_cqe->done, and
// keep the CQ armed without losing an event.
#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include "core/cq_impl.h"
#include "srdma/device.h"

namespace srdma {
namespace {

// The kernel's constants (drivers/infiniband/core/cq.c).
constexpr int kPollBatch = 16;           // IB_POLL_BATCH
constexpr int kPollBatchDirect = 8;      // IB_POLL_BATCH_DIRECT
constexpr int kBudgetSoftirq = 256;      // IB_POLL_BUDGET_IRQ
constexpr int kBudgetWorkqueue = 65536;  // IB_POLL_BUDGET_WORKQUEUE
constexpr std::uint32_t kRearmFlags = CQ_NEXT_COMP | CQ_REPORT_MISSED_EVENTS;

// Polls up to `budget` completions, `batch` at a time, and dispatches them.
int process(CompletionQueue& cq, detail::CqImpl& s, int budget, int batch) {
  Wc wc[kPollBatch];
  int done = 0;
  while (done < budget) {
    const int want = std::min(batch, budget - done);
    const int n = cq.poll(std::span<Wc>(wc, static_cast<std::size_t>(want)));
    for (int i = 0; i < n; ++i) {
      if (wc[i].wr_cqe != nullptr && wc[i].wr_cqe->done != nullptr) {
        wc[i].wr_cqe->done(cq, wc[i]);
        s.completions.fetch_add(1, std::memory_order_relaxed);
      } else if (wc[i].status == WcStatus::kSuccess) {
        // The kernel WARNs here; we count (an error completion without a
        // wr_cqe is a flush the owner chose not to track).
        s.without_wr_cqe.fetch_add(1, std::memory_order_relaxed);
      }
    }
    done += n;
    if (n < want) break;
  }
  return done;
}

// Processes until the CQ is empty and re-armed with no event missed, in
// rounds of `budget`; true if it stopped because the budget ran out.
bool process_and_rearm(CompletionQueue& cq, detail::CqImpl& s, int budget) {
  int total = 0;
  bool more;
  for (;;) {
    const int n = process(cq, s, budget, kPollBatch);
    total += n;
    if (n >= budget) {
      more = true;
      break;
    }
    auto missed = cq.req_notify(kRearmFlags);
    if (!missed || *missed == 0) {  // armed, nothing waiting
      more = false;
      break;
    }
    // A CQE reserved but still being written counts as missed: let its
    // producer finish instead of spinning against it.
    if (n == 0) std::this_thread::yield();
  }
  if (s.use_dim) s.dim.on_event(*s.cq, total, core::CqDim::Clock::now());
  return more;
}

}  // namespace

void detail::DeviceImpl::start_workers() {
  std::call_once(workers_once, [this] {
    const auto vectors = static_cast<unsigned>(hca->profile().num_comp_vectors);
    const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned v = 0; v < vectors; ++v)
      vector_workers.push_back(std::make_unique<core::WorkQueue>(1, static_cast<int>(v % cpus)));
    unbound_worker = std::make_unique<core::WorkQueue>(cpus, -1);
  });
}

Result<std::unique_ptr<CompletionQueue>> Device::alloc_cq(void* cq_context, std::uint32_t nr_cqe,
                                                          std::uint32_t comp_vector, PollContext ctx) {
  return detail::CqAccess::alloc_cq(*state_, state_, cq_context, nr_cqe, comp_vector, ctx);
}

Result<std::unique_ptr<CompletionQueue>> detail::CqAccess::alloc_cq(DeviceImpl& dev,
                                                                   std::shared_ptr<DeviceImpl> keep,
                                                                   void* cq_context, std::uint32_t nr_cqe,
                                                                   std::uint32_t comp_vector, PollContext ctx) {
  if (!is_valid(ctx)) return make_error(EINVAL, fmt::format("poll context {} is not one", static_cast<unsigned>(ctx)));
  auto cq = create_cq(dev, std::move(keep), CqInit{.cqe = nr_cqe, .comp_vector = comp_vector, .context = cq_context});
  if (!cq) return cq;
  detail::CqImpl& s = *(*cq)->state_;
  s.ctx = ctx;
  CompletionQueue* pub = cq->get();
  hca::Cq& dev_cq = *s.cq;
  switch (ctx) {
    case PollContext::kDirect:
      // Polled by its owner; an event here means someone armed it: a bug.
      dev_cq.set_event_handler([&s](hca::Cq&) { s.unexpected_events.fetch_add(1, std::memory_order_relaxed); });
      return cq;
    case PollContext::kSoftirq:
      // On the vector's thread, like irq_poll: when a budget runs out, go
      // round again (the thread is ours).
      dev_cq.set_event_handler([pub, &s](hca::Cq&) {
        while (process_and_rearm(*pub, s, kBudgetSoftirq)) {
        }
      });
      break;
    case PollContext::kWorkqueue:
    case PollContext::kUnboundWorkqueue: {
      dev.start_workers();
      s.worker = ctx == PollContext::kWorkqueue ? dev.vector_workers.at(comp_vector).get()
                                                : dev.unbound_worker.get();
      // The event queues work; the work requeues itself while work remains.
      auto work = std::make_shared<std::function<void()>>();
      *work = [pub, &s, weak = std::weak_ptr<std::function<void()>>(work)] {
        if (process_and_rearm(*pub, s, kBudgetWorkqueue))
          if (auto again = weak.lock()) s.worker->queue(&s, *again);
      };
      dev_cq.set_event_handler([&s, work](hca::Cq&) { s.worker->queue(&s, *work); });
      break;
    }
  }
  s.processed = true;
  s.use_dim = dev.cq_dim.load(std::memory_order_relaxed);
  (void)pub->req_notify(CQ_NEXT_COMP);  // armed from the start, as ib_alloc_cq does
  return cq;
}

PollContext CompletionQueue::poll_context() const { return state_->ctx; }

Result<int> CompletionQueue::process_direct(int budget) {
  if (state_->processed)
    return make_error(EINVAL, fmt::format("the device processes this CQ ({}); only DIRECT CQs are polled by their owner",
                                          poll_context_name(state_->ctx)));
  if (budget < 0) return make_error(EINVAL, "negative budget");
  return process(*this, *state_, budget, kPollBatchDirect);
}

std::uint64_t CompletionQueue::completions_processed() const { return state_->completions.load(); }
std::uint64_t CompletionQueue::completions_without_wr_cqe() const { return state_->without_wr_cqe.load(); }
std::uint64_t CompletionQueue::unexpected_events() const { return state_->unexpected_events.load(); }
bool CompletionQueue::shared() const { return state_->shared; }

}  // namespace srdma

namespace srdma {
void Device::set_cq_dim(bool on) { state_->cq_dim.store(on, std::memory_order_relaxed); }
}  // namespace srdma
