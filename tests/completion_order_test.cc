// One QP's completions in the order its packets arrived, across threads.
//
// An HCA acknowledges a message on arrival and completes a send when its
// ACK arrives, so a program that waits for its send and its receive CQ on
// one completion channel and polls one CQE per event (perftest's -e
// loops: take an event, re-arm the CQ that fired, poll the CQ it expects)
// sees its send complete before the reply to that send. Here a response
// that finds the QP's send side busy is left in its inbox and completed by
// the thread that holds the send side; a request that arrives meanwhile
// must wait for those completions. These tests force each interleaving of
// that hand-over by parking the completing thread inside the completion
// (an inline CQ event handler), with the engine's timers on a manual clock.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "hca/fast_mutex.h"
#include "hca_pair.h"

namespace srdma::hca {
namespace {

using pair::Side;

constexpr std::uint32_t kFakePeerQpn = 0x4321;  // on b's device, and no QP of it
constexpr std::uint64_t kRecvId = 100;

// Waits (yielding, bounded: a failure must not hang the test) until
// `done()` holds.
template <class F>
bool wait_until(F done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

struct Fixture {
  ManualClock clock;  // no transport timer runs unless a test advances it
  Side a{&clock};
  Side b{&clock};  // only an address: a's peer QP is not on it, so nothing answers a
  std::shared_ptr<Cq> cq;

  Fixture() {
    // One CQ for both of a's queues: its order is the order of the pushes.
    cq = a.scq;
    EXPECT_TRUE(a.dev->engine().destroy_qp(a.qp));
    a.qp = a.dev->engine().create_qp(QpInit{a.pdn, cq, cq, pair::kSideCaps, false, nullptr}).value();
    pair::bring_up(a, b.dev->engine().address(), kFakePeerQpn);
  }
  Packet from_peer(Opcode op, std::uint32_t psn) {
    Packet p;
    p.op = op;
    p.transport = QpType::kRc;
    p.src_addr = b.dev->engine().address();
    p.dst_addr = a.dev->engine().address();
    p.src_qpn = kFakePeerQpn;
    p.dst_qpn = a.qp->qpn();
    p.psn = psn;
    return p;
  }
  // The peer's ACK of a's first `n` messages (PSNs 0 .. n-1).
  Packet ack(std::uint32_t n) {
    Packet p = from_peer(Opcode::kAck, n - 1);
    p.syndrome = Syndrome::kAck;
    p.msn = n;
    return p;
  }
  // The peer's first SEND (PSN 0), 8 bytes of its own.
  Packet send() {
    static std::uint8_t data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    Packet p = from_peer(Opcode::kSendOnly, 0);
    p.payload.push_back(MemPiece{reinterpret_cast<std::byte*>(data), sizeof data});
    p.payload_length = sizeof data;
    return p;
  }
  void post_sends(int n) {
    const Sge sge{a.addr(0), 8, a.key};
    for (int i = 1; i <= n; ++i) {
      SendWr w;
      w.wr_id = static_cast<std::uint64_t>(i);
      w.opcode = WrOpcode::kSend;
      w.sg_list = &sge;
      w.num_sge = 1;
      w.send_flags = SEND_SIGNALED;
      ASSERT_TRUE(pair::post(a, w));
    }
  }
  void post_recv() {
    const Sge sge{a.addr(4096), 64, a.key};
    RecvWr r;
    r.wr_id = kRecvId;
    r.sg_list = &sge;
    r.num_sge = 1;
    const RecvWr* bad = nullptr;
    ASSERT_TRUE(a.qp->post_recv(&r, &bad));
  }
  std::vector<std::uint64_t> polled() {
    std::vector<std::uint64_t> ids;
    Wc wc[8];
    int n;
    while ((n = cq->poll(std::span<Wc>(wc, 8))) > 0)
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(wc[i].status, WcStatus::kSuccess) << "wr_id " << wc[i].wr_id;
        ids.push_back(wc[i].wr_id);
      }
    return ids;
  }
};

// The ACK of two SENDs is completed by one thread (the inbox's taker), which
// is parked between the first SEND's CQE and the second's; meanwhile another
// thread delivers the peer's next message. Its CQE must come after both
// send CQEs: the second thread waits for the send side. (Before, the taker
// cleared the inbox's flag when it took the ACK, and the request's CQE went
// in between.)
TEST(CompletionOrder, ARequestWaitsForTheResponsesAnotherThreadIsCompleting) {
  Fixture f;
  f.post_sends(2);
  f.post_recv();
  std::atomic<bool> parked{false}, release{false};
  f.cq->set_event_handler(
      [&](Cq&) {  // the first send CQE's event, on the completing thread
        parked.store(true);
        while (!release.load()) std::this_thread::yield();
      },
      Cq::Delivery::kInline);
  ASSERT_EQ(f.cq->req_notify(NOTIFY_NEXT_COMP).value(), 0);

  std::thread taker([&] { f.a.dev->engine().receive(f.ack(2)); });
  ASSERT_TRUE(wait_until([&] { return parked.load(); })) << "the ACK was not completed";
  std::thread receiver([&] { f.a.dev->engine().receive(f.send()); });
  // Until the receiver either pushed its CQE (the order broken) or waits
  // for the send side that the taker holds.
  const bool settled = wait_until([&] {
    return f.cq->cqes_written() == 2 || sq_mutex(*f.a.qp).sleepers() > 0;
  });
  release.store(true);
  taker.join();
  receiver.join();
  ASSERT_TRUE(settled);
  EXPECT_EQ(f.polled(), (std::vector<std::uint64_t>{1, 2, kRecvId}));
}

// The same with nothing parked: the ACK completed by its own delivering
// thread before the request arrives, and the request first with the ACK
// after it, each complete in arrival order.
TEST(CompletionOrder, ArrivalOrderWithoutContention) {
  {
    Fixture f;
    f.post_sends(2);
    f.post_recv();
    f.a.dev->engine().receive(f.ack(2));
    f.a.dev->engine().receive(f.send());
    EXPECT_EQ(f.polled(), (std::vector<std::uint64_t>{1, 2, kRecvId}));
  }
  {
    Fixture f;
    f.post_sends(2);
    f.post_recv();
    f.a.dev->engine().receive(f.send());
    f.a.dev->engine().receive(f.ack(2));
    EXPECT_EQ(f.polled(), (std::vector<std::uint64_t>{kRecvId, 1, 2}));
  }
}

// A response that arrives while the poster holds the send side stays in the
// inbox; the request behind it takes the send side and completes it first.
TEST(CompletionOrder, AStrandedResponseCompletesBeforeTheRequestBehindIt) {
  Fixture f;
  f.post_sends(2);
  f.post_recv();
  FastMutex& sq = sq_mutex(*f.a.qp);
  sq.lock();  // as a poster or the engine timer holds it
  f.a.dev->engine().receive(f.ack(2));  // into the inbox: the send side is busy
  EXPECT_EQ(f.cq->cqes_written(), 0u);
  std::thread receiver([&] { f.a.dev->engine().receive(f.send()); });
  const bool waiting = wait_until([&] { return sq.sleepers() > 0 || f.cq->cqes_written() > 0; });
  sq.unlock();
  f.a.qp->take_stranded_responses();
  receiver.join();
  ASSERT_TRUE(waiting);
  EXPECT_EQ(f.polled(), (std::vector<std::uint64_t>{1, 2, kRecvId}));
}

}  // namespace
}  // namespace srdma::hca
