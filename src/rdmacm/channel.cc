// Event channels: a queue of events per channel and an eventfd that is
// readable while the queue holds one (poll() on channel->fd works as on
// librdmacm's /dev/infiniband/rdma_cm fd). rdma_get_cm_event blocks in
// poll(), a cancellation point, as librdmacm blocks in read().
//
// Teardown follows librdmacm: rdma_destroy_id waits until the events it was
// given are acked, so a handler never runs on a freed ID, and a thread
// blocked in rdma_get_cm_event when its channel is destroyed stays blocked
// (as a read() on the closed fd would) rather than waking with an error.
// Programs such as rping, whose CM thread is still waiting when main tears
// down, depend on both.
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "errors.h"
#include "objects.h"

namespace srdma::rdmacm {
namespace {

// REQUIRES c.mu.
void set_readable(Channel& c) {
  if (c.queue.empty() && c.readable) {
    std::uint64_t n;
    (void)!::read(c.ch.fd, &n, sizeof n);
    c.readable = false;
  } else if (!c.queue.empty() && !c.readable) {
    std::uint64_t one = 1;
    (void)!::write(c.ch.fd, &one, sizeof one);
    c.readable = true;
  }
}

}  // namespace

Channel* new_channel() {
  auto* c = new (std::nothrow) Channel;
  if (!c) return fail_null<Channel>("rdma_create_event_channel", ENOMEM, "out of memory");
  c->ch.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);  // our reads never block; the user's O_NONBLOCK is F_SETFL's
  if (c->ch.fd < 0) {
    int e = errno;
    delete c;
    return fail_null<Channel>("rdma_create_event_channel", e, "eventfd");
  }
  // Blocking unless the application sets O_NONBLOCK (rping, ucmatose poll it).
  fcntl(c->ch.fd, F_SETFL, fcntl(c->ch.fd, F_GETFL) & ~O_NONBLOCK);
  std::lock_guard lock(g_mu);
  g_channels.insert(c);
  return c;
}

namespace {

// An event for `id` on its channel, its header filled (nullptr: no channel,
// or out of memory: the event is lost, as a kernel would drop it).
Event* new_event(Id& id, rdma_cm_event_type type, int status, Id* listen) {
  Channel* c = to_channel(id.id.channel);
  if (!c) return nullptr;
  auto* e = new (std::nothrow) Event;
  if (!e) return nullptr;
  std::memset(&e->ev, 0, sizeof e->ev);
  e->channel = c;
  e->ev.id = &id.id;
  e->ev.listen_id = listen ? &listen->id : nullptr;
  e->ev.event = type;
  e->ev.status = status;
  return e;
}

void push_event(Event* e) {
  Channel& c = *e->channel;
  std::lock_guard lock(c.mu);
  c.queue.push_back(e);
  set_readable(c);
}

}  // namespace

void queue_event(Id& id, rdma_cm_event_type type, int status, const rdma_conn_param* conn, Id* listen) {
  Event* e = new_event(id, type, status, listen);
  if (!e) return;
  if (conn) {
    e->ev.param.conn = *conn;
    const std::size_t n = std::min<std::size_t>(conn->private_data_len, sizeof e->data);
    if (conn->private_data && n) {
      std::memcpy(e->data, conn->private_data, n);
      e->ev.param.conn.private_data = e->data;
    } else {
      e->ev.param.conn.private_data = nullptr;
      e->ev.param.conn.private_data_len = 0;
    }
  }
  push_event(e);
}

void queue_ud_event(Id& id, rdma_cm_event_type type, int status, const rdma_ud_param& ud, Id* listen) {
  Event* e = new_event(id, type, status, listen);
  if (!e) return;
  e->ev.param.ud = ud;
  // Private data is copied; a pointer without a length (MULTICAST_JOIN's
  // context, as librdmacm gives it) is passed as it is.
  const std::size_t n = std::min<std::size_t>(ud.private_data_len, sizeof e->data);
  if (ud.private_data && n) {
    std::memcpy(e->data, ud.private_data, n);
    e->ev.param.ud.private_data = e->data;
  }
  push_event(e);
}

void drop_events(Id& id) {
  Channel* c = to_channel(id.id.channel);
  if (!c) return;
  std::lock_guard lock(c->mu);
  auto mine = [&](Event* e) { return e->ev.id == &id.id || e->ev.listen_id == &id.id; };
  auto keep = std::stable_partition(c->queue.begin(), c->queue.end(), [&](Event* e) { return !mine(e); });
  for (auto it = keep; it != c->queue.end(); ++it) delete *it;
  c->queue.erase(keep, c->queue.end());
  set_readable(*c);
}

void move_events(Id& id, Channel* to) {
  Channel* from = to_channel(id.id.channel);
  if (!from || from == to) return;
  std::scoped_lock lock(from->mu, to->mu);
  for (Event* e : from->queue)
    if (e->ev.id == &id.id) {
      e->channel = to;
      to->queue.push_back(e);
    }
  std::erase_if(from->queue, [&](Event* e) { return e->ev.id == &id.id; });
  set_readable(*from);
  set_readable(*to);
}

void wait_for_acks(Id& id, std::unique_lock<std::mutex>& lock) {
  const auto me = std::this_thread::get_id();
  auto mine = [&] {
    int n = 0;
    for (Event* e : g_given) n += e->counted == &id && e->taker == me;
    return n;
  };
  g_acked.wait(lock, [&] { return id.unacked == mine(); });
  for (Event* e : g_given)
    if (e->counted == &id) e->counted = nullptr;  // acked after the ID is gone
  id.unacked = 0;
}

bool retire_channel(Channel& c) {
  if (c.waiters == 0) return true;
  c.destroyed = true;
  return false;
}

void free_channel(Channel* c) {
  for (Event* e : c->queue) delete e;
  ::close(c->ch.fd);
  delete c;
}

int sync_wait(rdma_cm_id* id, rdma_cm_event_type expected) {
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(id->channel, &ev)) return -1;
  const int status = ev->status;
  const rdma_cm_event_type got = ev->event;
  rdma_ack_cm_event(ev);
  if (got == expected) return 0;
  return fail("rdma_cm", status < 0 ? -status : (got == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED : EIO),
              rdma_event_str(got));
}

}  // namespace srdma::rdmacm

using namespace srdma::rdmacm;

extern "C" {

rdma_event_channel* rdma_create_event_channel(void) {
  Channel* c = new_channel();
  return c ? &c->ch : nullptr;
}

void rdma_destroy_event_channel(rdma_event_channel* channel) {
  Channel* c = to_channel(channel);
  {
    std::lock_guard lock(g_mu);
    if (!c || !g_channels.erase(c)) {
      fail("rdma_destroy_event_channel", EINVAL, "not an event channel");
      return;
    }
    if (!retire_channel(*c)) return;
  }
  free_channel(c);
}

int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (!channel || !event) return fail("rdma_get_cm_event", EINVAL, "NULL channel or event");
  Channel* c = to_channel(channel);
  {
    std::lock_guard lock(g_mu);
    if (!g_channels.count(c)) return fail("rdma_get_cm_event", EINVAL, "not an event channel");
    ++c->waiters;
  }
  // On every way out, a cancellation's unwinding too: the last waiter on a
  // destroyed channel frees it.
  struct Leave {
    Channel* c;
    ~Leave() {
      bool free_it;
      {
        std::lock_guard lock(g_mu);
        free_it = --c->waiters == 0 && c->destroyed;
      }
      if (free_it) free_channel(c);
    }
  } leave{c};
  for (;;) {
    {
      std::lock_guard lock(g_mu);
      if (c->destroyed) return fail("rdma_get_cm_event", EINVAL, "the channel was destroyed");
      std::lock_guard qlock(c->mu);
      if (!c->queue.empty()) {
        Event* e = c->queue.front();
        c->queue.pop_front();
        set_readable(*c);
        Id* owner = to_id(e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST ? e->ev.listen_id : e->ev.id);
        if (owner && g_ids.count(owner)) {
          e->counted = owner;
          ++owner->unacked;
        }
        e->taker = std::this_thread::get_id();
        g_given.insert(e);
        *event = &e->ev;
        return 0;
      }
    }
    if (fcntl(c->ch.fd, F_GETFL) & O_NONBLOCK) return fail("rdma_get_cm_event", EAGAIN, "no event queued");
    // A destroyed channel's fd stays open while we wait: nothing wakes it.
    pollfd p{c->ch.fd, POLLIN, 0};
    if (poll(&p, 1, -1) < 0 && errno != EINTR) return fail("rdma_get_cm_event", errno, "poll");
  }
}

int rdma_ack_cm_event(rdma_cm_event* event) {
  if (!event) return fail("rdma_ack_cm_event", EINVAL, "NULL event");
  Event* e = reinterpret_cast<Event*>(event);
  {
    std::lock_guard lock(g_mu);
    if (!g_given.erase(e)) return fail("rdma_ack_cm_event", EINVAL, "not an event rdma_get_cm_event gave, or acked");
    if (e->counted && --e->counted->unacked == 0) g_acked.notify_all();
  }
  delete e;
  return 0;
}

const char* rdma_event_str(rdma_cm_event_type event) {
  switch (event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
  }
  return "UNKNOWN EVENT";
}

}  // extern "C"
