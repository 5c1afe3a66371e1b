// Two devices' CM agents on QP1, over the in-process link and over RoCEv2
// (IPv4, and IPv6 on ::1):
// an RC connection set up by REQ/REP/RTU carries a SEND on the QPNs and
// PSNs the MADs exchanged; a refused connection and one to a service
// nobody listens on come back as REJ; DREQ/DREP reach both sides.
#include "cm/cm_agent.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <vector>

#include "link_nodes.h"

namespace srdma::cm {
namespace {

using test::LinkKind;
using test::LinkNode;

constexpr std::uint64_t kService = 0x0000000001060000ull | 4420;

// The events a side's handlers saw, and a way to wait for one.
struct Events {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<CmEvent> seen;
  CmAgent::Handler handler() {
    return [this](const CmEvent& e) {
      std::lock_guard lock(mu);
      seen.push_back(e);
      cv.notify_all();
    };
  }
  // The first event of type `t` (waits up to the tests' deadline).
  std::optional<CmEvent> wait(CmEventType t) {
    std::unique_lock lock(mu);
    std::optional<CmEvent> got;
    cv.wait_for(lock, test::kDeadline, [&] {
      for (const CmEvent& e : seen)
        if (e.type == t) got = e;
      return got.has_value();
    });
    return got;
  }
};

class CmAgentTest : public ::testing::TestWithParam<LinkKind> {};

TEST_P(CmAgentTest, AnRcConnectionByTheCmCarriesASend) {
  LinkNode a(GetParam(), 1), b(GetParam(), 2);
  auto ca = CmAgent::create(a.dev).value();
  auto cb = CmAgent::create(b.dev).value();
  EXPECT_EQ(CmAgent::create(a.dev).error().code, EBUSY) << "one GSI QP, one agent per device";
  auto qa = a.rc_qp(), qb = b.rc_qp();

  Events pa, pb;
  // The passive side connects its QP to the requester's and replies.
  ASSERT_TRUE(cb->listen(kService, [&](const CmEvent& e) {
    const Req& req = std::get<Req>(*e.message);
    RcConnection c{.peer_addr = e.peer, .peer_qpn = req.local_qpn, .access = kAccessAll, .sq_psn = 0x2000,
                   .rq_psn = req.starting_psn, .path_mtu = 1024};
    ASSERT_TRUE(qb->connect(c));
    Rep rep;
    rep.local_qpn = qb->qp_num();
    rep.starting_psn = 0x2000;
    rep.private_data[0] = std::byte{0x5a};
    ASSERT_TRUE(cb->accept(e.id, rep, pb.handler()));
    pb.handler()(e);
  }));

  ConnectParams p;
  p.peer = b.dev.address();
  p.service_id = kService;
  p.req.local_qpn = qa->qp_num();
  p.req.starting_psn = 0x1000;
  p.req.path_mtu = PathMtu::k1024;
  // The active side connects its QP when the REP comes, then sends the RTU.
  auto id = ca->connect(p, [&](const CmEvent& e) {
    if (e.type == CmEventType::kRepReceived) {
      const Rep& rep = std::get<Rep>(*e.message);
      RcConnection c{.peer_addr = e.peer, .peer_qpn = rep.local_qpn, .access = kAccessAll, .sq_psn = 0x1000,
                     .rq_psn = rep.starting_psn, .path_mtu = 1024};
      ASSERT_TRUE(qa->connect(c));
      ASSERT_TRUE(ca->ready(e.id));
    }
    pa.handler()(e);
  });
  ASSERT_TRUE(id) << id.error().to_string();
  auto rep = pa.wait(CmEventType::kRepReceived);
  ASSERT_TRUE(rep);
  EXPECT_EQ(std::get<Rep>(*rep->message).private_data[0], std::byte{0x5a});
  auto est = pb.wait(CmEventType::kEstablished);
  ASSERT_TRUE(est);
  EXPECT_EQ(ca->state(*id), CmState::kEstablished);
  EXPECT_EQ(cb->state(est->id), CmState::kEstablished);

  // The QPs the MADs connected carry data.
  std::memcpy(a.buf.data(), "over the CM", 12);
  const Sge r = b.sge(0, 64), s = a.sge(0, 12);
  ASSERT_TRUE(qb->post_recv(test::recv_wr(1, r)));
  ASSERT_TRUE(qa->post_send(test::send_wr(2, s)));
  EXPECT_EQ(test::poll_one(*a.scq).status, WcStatus::kSuccess);
  EXPECT_EQ(test::poll_one(*b.rcq).status, WcStatus::kSuccess);
  EXPECT_STREQ(reinterpret_cast<const char*>(b.buf.data()), "over the CM");

  ASSERT_TRUE(ca->disconnect(*id));
  EXPECT_TRUE(pb.wait(CmEventType::kDisconnected));
  EXPECT_TRUE(pa.wait(CmEventType::kDisconnected));
  EXPECT_EQ(ca->counters().dropped_malformed + cb->counters().dropped_malformed, 0u);
  ca->destroy(*id);
  cb->destroy(est->id);
  cb->stop_listening(kService);
}

TEST_P(CmAgentTest, NoListenerAndAConsumerRejectAreRejects) {
  LinkNode a(GetParam(), 1), b(GetParam(), 2);
  auto ca = CmAgent::create(a.dev).value();
  auto cb = CmAgent::create(b.dev).value();
  ConnectParams p;
  p.peer = b.dev.address();
  p.service_id = kService;
  p.req.local_qpn = 0x42;
  Events nobody;
  auto id = ca->connect(p, nobody.handler());
  ASSERT_TRUE(id);
  auto rej = nobody.wait(CmEventType::kRejected);
  ASSERT_TRUE(rej);
  EXPECT_EQ(std::get<Rej>(*rej->message).reason, RejectReason::kInvalidServiceId);

  ASSERT_TRUE(cb->listen(kService, [&](const CmEvent& e) {
    const std::byte why[] = {std::byte{7}};
    ASSERT_TRUE(cb->reject(e.id, why));
  }));
  Events refused;
  auto id2 = ca->connect(p, refused.handler());
  ASSERT_TRUE(id2);
  rej = refused.wait(CmEventType::kRejected);
  ASSERT_TRUE(rej);
  EXPECT_EQ(std::get<Rej>(*rej->message).reason, RejectReason::kConsumerDefined);
  EXPECT_EQ(std::get<Rej>(*rej->message).private_data[0], std::byte{7});
  ca->destroy(*id);
  ca->destroy(*id2);
}

// SIDR on QP1: the requester learns the listener's UD QPN and Q_Key, and a
// datagram sent with them arrives; a service nobody listens on is
// "unsupported" once the listen grace ends.
TEST_P(CmAgentTest, SidrResolvesAUdQpThatReceivesADatagram) {
  constexpr std::uint64_t kUdService = 0x0000000001110000ull | 7174;
  constexpr std::uint32_t kQkey = 0x01234567;
  LinkNode a(GetParam(), 1), b(GetParam(), 2);
  auto ca = CmAgent::create(a.dev).value();
  auto cb = CmAgent::create(b.dev).value();
  auto qa = a.ud_qp(kQkey), qb = b.ud_qp(kQkey);
  ASSERT_TRUE(cb->listen(kUdService, [&](const CmEvent& e) {
    ASSERT_EQ(e.type, CmEventType::kSidrReqReceived);
    EXPECT_EQ(std::get<SidrReq>(*e.message).private_data[0], std::byte{0x42});
    SidrRep rep;
    rep.qpn = qb->qp_num();
    rep.qkey = kQkey;
    ASSERT_TRUE(cb->sidr_reply(e.id, rep));
  }));
  SidrParams p;
  p.peer = b.dev.address();
  p.service_id = kUdService;
  p.private_data[0] = std::byte{0x42};
  Events ev;
  auto id = ca->sidr_request(p, ev.handler());
  ASSERT_TRUE(id) << id.error().to_string();
  auto got = ev.wait(CmEventType::kSidrRepReceived);
  ASSERT_TRUE(got);
  const SidrRep& rep = std::get<SidrRep>(*got->message);
  EXPECT_EQ(rep.status, SidrStatus::kSuccess);
  EXPECT_EQ(rep.qpn, qb->qp_num());

  auto ah = a.pd.create_ah(AhAttr{.dest_addr = got->peer}).value();
  std::memcpy(a.buf.data(), "resolved", 9);
  const Sge r = b.sge(0, 64 + 40), s = a.sge(0, 9);
  ASSERT_TRUE(qb->post_recv(test::recv_wr(1, r)));
  SendWr w = test::send_wr(2, s);
  w.ud.ah = ah.get();
  w.ud.remote_qpn = rep.qpn;
  w.ud.remote_qkey = rep.qkey;
  ASSERT_TRUE(qa->post_send(w));
  EXPECT_EQ(test::poll_one(*b.rcq).status, WcStatus::kSuccess);
  EXPECT_STREQ(reinterpret_cast<const char*>(b.buf.data() + 40), "resolved");
  ca->destroy(*id);

  p.service_id = kUdService + 1;  // nobody listens
  Events nobody;
  auto id2 = ca->sidr_request(p, nobody.handler());
  ASSERT_TRUE(id2);
  got = nobody.wait(CmEventType::kSidrRepReceived);
  ASSERT_TRUE(got);
  EXPECT_EQ(std::get<SidrRep>(*got->message).status, SidrStatus::kUnsupported);
  EXPECT_EQ(ca->sidr_counters().dropped_malformed + cb->sidr_counters().dropped_malformed, 0u);
  ca->destroy(*id2);
  cb->stop_listening(kUdService);
}

INSTANTIATE_TEST_SUITE_P(Links, CmAgentTest, ::testing::Values(LinkKind::kInproc, LinkKind::kUdp, LinkKind::kUdp6),
                         test::link_name);

}  // namespace
}  // namespace srdma::cm
