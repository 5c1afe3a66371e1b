// The public verbs end to end: device, PD, MR, CQ, QP, a connection between
// two devices, completion events through a channel and a handler.
#include <poll.h>

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <cstring>
#include <thread>
#include <vector>

#include "connected_pair.h"
#include "srdma/access.h"
#include "srdma/device.h"
#include "test_profile.h"
#include "wait.h"

namespace srdma {
namespace {

Profile profile() { return test::small_profile(); }

using test::PairNode;

// The RC QPs' path: remote WRITE, READ and atomics allowed.
const RcConnection kPath{.access = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC};

using test::poll_one;

TEST(Verbs, SendRecvThroughTheRealApi) {
  PairNode a, b;
  test::connect(a, b, kPath);
  std::memcpy(a.buf.data(), "ping", 4);
  Sge rs{b.addr(), 64, b.mr.lkey()};
  RecvWr rw;
  rw.wr_id = 1;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ASSERT_TRUE(b.qp->post_recv(rw));
  Sge ss{a.addr(), 4, a.mr.lkey()};
  SendWr sw;
  sw.wr_id = 2;
  sw.opcode = WrOpcode::kSend;
  sw.sg_list = &ss;
  sw.num_sge = 1;
  sw.send_flags = SEND_SIGNALED;
  ASSERT_TRUE(a.qp->post_send(sw));
  Wc s = poll_one(*a.cq), r = poll_one(*b.cq);
  EXPECT_EQ(s.wr_id, 2u);
  EXPECT_EQ(r.wr_id, 1u);
  EXPECT_EQ(r.byte_len, 4u);
  EXPECT_EQ(std::memcmp(b.buf.data(), "ping", 4), 0);
  EXPECT_EQ(a.pd.usecnt(), 2);  // the MR and the QP
  EXPECT_EQ(a.qp->connect(RcConnection{.peer_addr = b.dev.address(), .peer_qpn = b.qp->qp_num()}).error().code,
            EINVAL)
      << "connect starts from RESET";
  EXPECT_EQ(a.pd.dealloc().error().code, EBUSY);
  EXPECT_EQ(a.cq->destroy().error().code, EBUSY);
}

// A WrCqe carries the completion to its owner's callback.
struct Request {
  WrCqe cqe{&Request::done};
  int completions = 0;
  static void done(CompletionQueue&, const Wc& wc) {
    auto* r = reinterpret_cast<Request*>(wc.wr_cqe);
    ++r->completions;
  }
};

TEST(Verbs, WrCqeCallbacksAndChannelEvents) {
  auto dev = Device::open(profile()).value();
  auto channel = dev.create_comp_channel().value();
  PairNode a({.cq = CqInit{64, 1, nullptr, channel.get(), {}}}), b;
  test::connect(a, b, kPath);
  ASSERT_EQ(a.cq->req_notify(CQ_NEXT_COMP).value(), 0);
  Request req;
  Sge ss{a.addr(), 8, a.mr.lkey()};
  SendWr w;
  w.wr_cqe = &req.cqe;
  w.opcode = WrOpcode::kRdmaWrite;
  w.sg_list = &ss;
  w.num_sge = 1;
  w.remote_addr = b.addr();
  w.rkey = b.mr.rkey();
  w.send_flags = SEND_SIGNALED;
  ASSERT_TRUE(a.qp->post_send(w));
  pollfd pfd{channel->fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 2000), 1) << "the channel's fd became readable";
  auto ev = channel->get_event(false);
  ASSERT_TRUE(ev);
  EXPECT_EQ(*ev, a.cq.get());
  channel->ack_events(**ev, 1);
  Wc wc = poll_one(*a.cq);
  ASSERT_EQ(wc.status, WcStatus::kSuccess);
  wc.wr_cqe->done(*a.cq, wc);
  EXPECT_EQ(req.completions, 1);
  EXPECT_EQ(channel->get_event(false).error().code, EAGAIN);
}

TEST(Verbs, EventHandlerRunsOnTheVectorThread) {
  std::atomic<int> events{0};
  PairNode a({.cq = CqInit{64, 0, nullptr, nullptr, [&](CompletionQueue&) { ++events; }}}), b;
  test::connect(a, b, kPath);
  ASSERT_TRUE(a.cq->req_notify(CQ_NEXT_COMP));
  Sge ss{a.addr(), 8, a.mr.lkey()};
  SendWr w;
  w.opcode = WrOpcode::kRdmaWrite;
  w.sg_list = &ss;
  w.num_sge = 1;
  w.remote_addr = b.addr();
  w.rkey = b.mr.rkey();
  w.send_flags = SEND_SIGNALED;
  ASSERT_TRUE(a.qp->post_send(w));
  ASSERT_TRUE(a.qp->post_send(w));
  // Both CQEs are in (the second one's push has published it), then every
  // event scheduled so far has been handled: exactly one.
  EXPECT_EQ(test::poll_n(*a.cq, 2).size(), 2u);
  ASSERT_TRUE(test::eventually([&] { return events.load() > 0; }));
  test::drain_cq(*a.cq);
  EXPECT_EQ(events.load(), 1) << "one event per arming";
}

TEST(Verbs, CompVectorCountersCountEventsAndCqes) {
  std::atomic<int> events{0};
  PairNode a({.cq = CqInit{.cqe = 64, .comp_vector = 1, .handler = [&](CompletionQueue& cq) {
                              ++events;
                              (void)cq.req_notify(CQ_NEXT_COMP);
                            }}}),
      b;
  test::connect(a, b, kPath);
  ASSERT_TRUE(a.cq->req_notify(CQ_NEXT_COMP));
  Sge ss{a.addr(), 8, a.mr.lkey()};
  SendWr w;
  w.opcode = WrOpcode::kRdmaWrite;
  w.sg_list = &ss;
  w.num_sge = 1;
  w.remote_addr = b.addr();
  w.rkey = b.mr.rkey();
  w.send_flags = SEND_SIGNALED;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(a.qp->post_send(w));
    ASSERT_TRUE(test::eventually([&] { return events.load() > i; }));
  }
  Wc wc[8];
  EXPECT_EQ(a.cq->poll(wc), 3);
  auto stats = a.dev.comp_vector_stats();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[1].cqes, 3u);
  EXPECT_EQ(stats[1].events, 3u);
  EXPECT_GE(stats[1].interrupts, 1u);
  EXPECT_EQ(stats[1].completions_handled, 3u);
  EXPECT_EQ(stats[0].cqes, 0u);
}

TEST(Verbs, CqOverrunRaisesCqErrorAndQpFatal) {
  PairNode a({.cq = CqInit{.cqe = 1}}), b;
  std::mutex mu;
  std::vector<AsyncEvent> seen;
  a.dev.set_async_event_handler([&](const AsyncEvent& e) {
    std::lock_guard lock(mu);
    seen.push_back(e);
  });
  test::connect(a, b, kPath);
  Sge ss{a.addr(), 8, a.mr.lkey()};
  SendWr w;
  w.opcode = WrOpcode::kRdmaWrite;
  w.sg_list = &ss;
  w.num_sge = 1;
  w.remote_addr = b.addr();
  w.rkey = b.mr.rkey();
  w.send_flags = SEND_SIGNALED;
  ASSERT_TRUE(a.qp->post_send(w));
  ASSERT_TRUE(a.qp->post_send(w));  // the second CQE does not fit
  // Events are asynchronous: the QP fatal event follows the move to ERR.
  auto events = [&] {
    std::lock_guard lock(mu);
    return seen.size();
  };
  ASSERT_TRUE(test::eventually([&] { return events() >= 2; }));
  a.dev.flush_async_events();
  EXPECT_EQ(a.qp->state(), QpState::kErr);
  a.dev.set_async_event_handler({});  // `seen` dies before the device
  std::lock_guard lock(mu);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].type, AsyncEventType::kCqErr);
  EXPECT_EQ(seen[0].cqn, a.cq->cqn());
  EXPECT_EQ(seen[0].context, a.cq.get());
  EXPECT_EQ(seen[1].type, AsyncEventType::kQpFatal);
  EXPECT_EQ(seen[1].qpn, a.qp->qp_num());
  EXPECT_EQ(async_event_str(seen[1].type), "QP fatal error");
}

TEST(Verbs, CreateErrors) {
  auto dev = Device::open(profile()).value();
  EXPECT_EQ(dev.create_cq(CqInit{.cqe = 0}).error().code, EINVAL);
  EXPECT_EQ(dev.create_cq(CqInit{.cqe = 1u << 22}).error().code, EINVAL);
  EXPECT_EQ(dev.create_cq(CqInit{.cqe = 8, .comp_vector = 2}).error().code, EINVAL);
  auto ch = dev.create_comp_channel().value();
  EXPECT_EQ(dev.create_cq(CqInit{8, 0, nullptr, ch.get(), [](CompletionQueue&) {}}).error().code, EINVAL);
  auto cq = dev.create_cq(CqInit{.cqe = 8}).value();
  EXPECT_EQ(cq->cqe(), 8u);
  auto pd = dev.alloc_pd().value();
  EXPECT_EQ(pd.create_qp(QpInitAttr{.send_cq = nullptr, .recv_cq = cq.get(), .cap = QpCaps{1, 1, 1, 1, 0}}).error().code, EINVAL);
  auto r = pd.create_qp(QpInitAttr{.send_cq = cq.get(), .recv_cq = cq.get(), .cap = QpCaps{1, 1, 64, 1, 0}});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().reason.find("max_send_sge"), std::string::npos);
  auto other = Device::open(profile()).value();
  auto foreign = other.create_cq(CqInit{.cqe = 8}).value();
  EXPECT_EQ(pd.create_qp(QpInitAttr{.send_cq = foreign.get(), .recv_cq = cq.get(), .cap = QpCaps{1, 1, 1, 1, 0}}).error().code, EINVAL);
  EXPECT_TRUE(cq->resize(16));
  EXPECT_EQ(cq->cqe(), 16u);
  EXPECT_EQ(cq->resize(0).error().code, EINVAL);
  EXPECT_TRUE(cq->destroy());
}

}  // namespace
}  // namespace srdma
