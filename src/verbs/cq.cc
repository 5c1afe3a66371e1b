// Completion channels, completion queues, polling and arming.
#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <new>

#include "convert.h"
#include "errors.h"
#include "objects.h"
#include "ops.h"
#include "signals.h"
#include "srdma_cm_private.h"

using namespace srdma;
using namespace srdma::verbs;

namespace srdma::verbs {

int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  if (!cq || num_entries < 0 || (num_entries > 0 && !wc)) return -fail("ibv_poll_cq", EINVAL, "bad argument");
  if (to_cq(cq)->ext) [[unlikely]] return poll_cq_ex_classic(*to_cq(cq), num_entries, wc);
  CompletionQueue& core = *to_cq(cq)->core;
  std::array<Wc, 16> batch;
  int done = 0;
  while (done < num_entries) {
    const int want = std::min<int>(num_entries - done, batch.size());
    const int n = core.poll(std::span<Wc>(batch.data(), static_cast<std::size_t>(want)));
    for (int i = 0; i < n; ++i) to_ibv_wc(batch[static_cast<std::size_t>(i)], wc[done + i]);
    done += n;
    if (n < want) break;
  }
  return done;
}

int req_notify_cq(ibv_cq* cq, int solicited_only) {
  if (!cq) return fail("ibv_req_notify_cq", EINVAL, "NULL CQ");
  auto r = to_cq(cq)->core->req_notify(solicited_only ? CQ_SOLICITED : CQ_NEXT_COMP);
  return r ? 0 : fail("ibv_req_notify_cq", r.error());
}

Cq* make_cq(const char* verb, ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
            int comp_vector, ibv_pd* parent) {
  if (!context) return fail_null<Cq>(verb, EINVAL, "NULL context");
  if (cqe < 1) return fail_null<Cq>(verb, EINVAL, "cqe must be at least 1");
  if (comp_vector < 0) return fail_null<Cq>(verb, EINVAL, "negative comp_vector");
  auto* cq = new_object<Cq>(parent);
  if (!cq) return fail_null<Cq>(verb, ENOMEM, "out of memory");
  std::memset(&cq->ex, 0, sizeof cq->ex);
  CqInit init;
  // Sized as mlx4/mlx5 size a CQ: the power of two above the entries asked
  // for, so that a program which leaves a CQE or two unpolled around its
  // events does not overrun a CQ of exactly its depth (within max_cqe;
  // cq->cqe reports what the CQ holds).
  const std::uint32_t asked = static_cast<std::uint32_t>(cqe);
  const std::uint32_t rounded = std::bit_ceil(std::min<std::uint32_t>(asked, 1u << 30) + 1);
  init.cqe = rounded <= to_ctx(context)->dev.query().max_cqe ? rounded : asked;
  init.comp_vector = static_cast<std::uint32_t>(comp_vector);
  init.context = cq;  // async events and get_cq_event find the wrapper through it
  init.channel = channel ? to_channel(channel)->core.get() : nullptr;
  SignalsBlocked quiet;  // the first CQ starts the engine's threads
  auto core = to_ctx(context)->dev.create_cq(init);
  if (!core) {
    delete_object(cq);
    return fail_null<Cq>(verb, core.error());
  }
  cq->core = std::move(*core);
  cq->ibv.context = context;
  cq->ibv.channel = channel;
  cq->ibv.cq_context = cq_context;
  cq->ibv.handle = cq->core->cqn();
  cq->ibv.cqe = static_cast<int>(cq->core->cqe());
  pthread_mutex_init(&cq->ibv.mutex, nullptr);
  pthread_cond_init(&cq->ibv.cond, nullptr);
  if (channel) ++channel->refcnt;
  to_ctx(context)->adopt(Kind::kCq, cq);
  return cq;
}

}  // namespace srdma::verbs

extern "C" {

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  if (!context) return fail_null<ibv_comp_channel>("ibv_create_comp_channel", EINVAL, "NULL context");
  auto core = to_ctx(context)->dev.create_comp_channel();
  if (!core) return fail_null<ibv_comp_channel>("ibv_create_comp_channel", core.error());
  auto* ch = new (std::nothrow) CompChannelObj{};
  if (!ch) return fail_null<ibv_comp_channel>("ibv_create_comp_channel", ENOMEM, "out of memory");
  ch->core = std::move(*core);
  ch->ibv.context = context;
  ch->ibv.fd = ch->core->fd();
  ch->ibv.refcnt = 0;
  to_ctx(context)->adopt(Kind::kChannel, ch);
  return &ch->ibv;
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  if (!channel) return fail("ibv_destroy_comp_channel", EINVAL, "NULL channel");
  if (channel->refcnt > 0) return fail("ibv_destroy_comp_channel", EBUSY, "CQs still use the channel");
  to_ctx(channel->context)->release(Kind::kChannel, channel);
  delete to_channel(channel);
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel, int comp_vector) {
  Cq* cq = make_cq("ibv_create_cq", context, cqe, cq_context, channel, comp_vector);
  return cq ? &cq->ibv : nullptr;
}

int ibv_resize_cq(ibv_cq* cq, int cqe) {
  if (!cq || cqe < 1) return fail("ibv_resize_cq", EINVAL, "NULL CQ or cqe below 1");
  if (auto r = to_cq(cq)->core->resize(static_cast<std::uint32_t>(cqe)); !r) return fail("ibv_resize_cq", r.error());
  cq->cqe = static_cast<int>(to_cq(cq)->core->cqe());
  return 0;
}

int ibv_destroy_cq(ibv_cq* cq) {
  if (!cq) return fail("ibv_destroy_cq", EINVAL, "NULL CQ");
  // As libibverbs: the destroy waits until every event returned for the CQ
  // was acknowledged (ibv_ack_cq_events signals), so that no thread still
  // holds an event for a CQ that is gone.
  if (cq->channel) {
    CompChannel& ch = *to_channel(cq->channel)->core;
    pthread_mutex_lock(&cq->mutex);
    while (ch.unacked(*to_cq(cq)->core) > 0) pthread_cond_wait(&cq->cond, &cq->mutex);
    pthread_mutex_unlock(&cq->mutex);
  }
  if (auto r = to_cq(cq)->core->destroy(); !r) return fail("ibv_destroy_cq", r.error());
  retire_async_events(*to_ctx(cq->context), cq);
  if (cq->channel) --cq->channel->refcnt;
  pthread_mutex_destroy(&cq->mutex);
  pthread_cond_destroy(&cq->cond);
  to_ctx(cq->context)->release(Kind::kCq, cq);
  delete_object(to_cq(cq));
  return 0;
}

int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  if (!channel || !cq || !cq_context) {
    fail("ibv_get_cq_event", EINVAL, "NULL argument");
    return -1;
  }
  // Blocks unless the program made the channel's fd non-blocking
  // (fcntl O_NONBLOCK): then EAGAIN when no event waits, as libibverbs'
  // read(2) of the fd returns. An event already waiting is taken without
  // asking the fd's flags (a system call).
  CompChannel& core = *to_channel(channel)->core;
  auto got = core.get_event(false);
  if (!got && got.error().code == EAGAIN) {
    const int fl = ::fcntl(channel->fd, F_GETFL);
    if (fl < 0 || (fl & O_NONBLOCK) == 0) got = core.get_event(true);
  }
  if (!got) {
    fail("ibv_get_cq_event", got.error());
    return -1;
  }
  auto* w = static_cast<Cq*>((*got)->context());
  *cq = &w->ibv;
  *cq_context = w->ibv.cq_context;
  return 0;
}

int srdma_poll_receiving(ibv_context* context, pollfd* fds, unsigned long nfds, int timeout) {
  if (!context || (nfds && !fds)) {
    fail("srdma_poll_receiving", EINVAL, "NULL argument");
    return -1;
  }
  return to_ctx(context)->dev.poll_receiving(fds, nfds, timeout);
}

void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  if (!cq || !cq->channel || nevents == 0) return;
  pthread_mutex_lock(&cq->mutex);
  to_channel(cq->channel)->core->ack_events(*to_cq(cq)->core, nevents);
  pthread_cond_broadcast(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}

}  // extern "C"
