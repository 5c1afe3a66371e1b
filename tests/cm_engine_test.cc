// The CM state machine between two engines wired back to back through a
// fake port: the handshake, REJ, DREQ/DREP and time wait, every timeout
// and retry on a made-up clock, lost, duplicated and stale MADs, and MADs
// from someone who is not the connection's peer.
#include "cm/cm_engine.h"

#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <vector>

namespace srdma::cm {
namespace {

constexpr std::uint64_t kA = 0xA, kB = 0xB, kMallory = 0xE;
constexpr std::uint64_t kService = 0x0000000001060000ull | 4420;
// The tests' connections: response timeout 10, max_cm_retries 2.
const auto kTimewait = cm_timeout(10) * 3;

struct Sent {
  std::uint64_t to;
  Mad mad;
};

// One side: what its engine sent (not yet delivered) and reported.
struct Side : CmEngine::Port {
  std::deque<Sent> out;
  std::vector<CmEvent> events;
  void send_mad(std::uint64_t peer, const Mad& mad) override { out.push_back({peer, mad}); }
  void on_event(const CmEvent& e) override { events.push_back(e); }
  AttributeId next_attr() const {
    MadHeader h;
    EXPECT_TRUE(decode_header(out.front().mad, h).ok());
    return h.attribute_id;
  }
  template <class T>
  T front_as() const {
    CmMad m;
    EXPECT_TRUE(decode(out.front().mad, m).ok());
    return std::get<T>(m.message);
  }
};

class CmEngineTest : public ::testing::Test {
 protected:
  Side a_, b_;
  // Timeouts as short as the tests' own (10): the admission limits'
  // floor is tested apart (CmAdmissionTest).
  static constexpr CmLimits kFastLimits{.min_remote_timeout = 0};
  CmEngine ea_{a_, 0xAAAA, CmEngine::sequential_ids(100), kFastLimits};
  CmEngine eb_{b_, 0xBBBB, CmEngine::sequential_ids(500), kFastLimits};
  CmTime now_{};
  int listen_ctx_ = 0;

  void SetUp() override { ASSERT_TRUE(eb_.listen(kService, &listen_ctx_)); }

  // Hands `from`'s oldest MAD to its addressee (or drops it).
  void pass(Side& from, std::uint64_t from_addr, bool drop = false) {
    ASSERT_FALSE(from.out.empty());
    Sent s = from.out.front();
    from.out.pop_front();
    if (drop) return;
    CmEngine& to = s.to == kA ? ea_ : eb_;
    to.receive(from_addr, s.mad, now_);
  }
  void pass_a(bool drop = false) { pass(a_, kA, drop); }
  void pass_b(bool drop = false) { pass(b_, kB, drop); }

  ConnectParams params() {
    ConnectParams p;
    p.peer = kB;
    p.service_id = kService;
    p.req.local_qpn = 0x123;
    p.req.starting_psn = 0x456;
    p.req.path_mtu = PathMtu::k4096;
    p.req.private_data[0] = std::byte{0x42};
    p.response_timeout = 10;  // 4.2 ms
    p.max_cm_retries = 2;
    return p;
  }
  void advance(std::chrono::nanoseconds d) {
    now_ += std::chrono::duration_cast<CmClock::duration>(d);
    ea_.tick(now_);
    eb_.tick(now_);
  }

  // A connection set up all the way: the active ID and the passive's.
  std::pair<std::uint32_t, std::uint32_t> establish() {
    const std::size_t seen = b_.events.size();
    auto id = ea_.connect(params(), now_);
    EXPECT_TRUE(id);
    pass_a();  // REQ
    EXPECT_EQ(b_.events.size(), seen + 1);
    const std::uint32_t pid = b_.events.back().id;
    Rep rep;
    rep.local_qpn = 0x789;
    rep.starting_psn = 0xabc;
    EXPECT_TRUE(eb_.accept(pid, rep, now_));
    pass_b();  // REP
    EXPECT_TRUE(ea_.ready(*id));
    pass_a();  // RTU
    EXPECT_EQ(ea_.state(*id), CmState::kEstablished);
    EXPECT_EQ(eb_.state(pid), CmState::kEstablished);
    return {*id, pid};
  }
};

TEST_F(CmEngineTest, TheHandshakeCarriesQpnsPsnsAndPrivateData) {
  auto id = ea_.connect(params(), now_);
  ASSERT_TRUE(id);
  EXPECT_EQ(ea_.state(*id), CmState::kReqSent);
  ASSERT_EQ(a_.next_attr(), AttributeId::kReq);
  const Req sent = a_.front_as<Req>();
  EXPECT_EQ(sent.local_comm_id, *id);
  EXPECT_EQ(sent.service_id, kService);
  EXPECT_EQ(sent.local_ca_guid, 0xAAAAu);
  EXPECT_EQ(sent.max_cm_retries, 2);
  pass_a();

  ASSERT_EQ(b_.events.size(), 1u);
  const CmEvent req = b_.events[0];  // a copy: more events follow
  EXPECT_EQ(req.type, CmEventType::kReqReceived);
  EXPECT_EQ(req.peer, kA);
  EXPECT_EQ(req.listen_context, &listen_ctx_);
  const Req& got = std::get<Req>(*req.message);
  EXPECT_EQ(got.local_qpn, 0x123u);
  EXPECT_EQ(got.starting_psn, 0x456u);
  EXPECT_EQ(got.private_data[0], std::byte{0x42});

  Rep rep;
  rep.local_qpn = 0x789;
  rep.starting_psn = 0xabc;
  rep.private_data[1] = std::byte{0x17};
  ASSERT_TRUE(eb_.accept(req.id, rep, now_));
  EXPECT_EQ(eb_.state(req.id), CmState::kRepSent);
  EXPECT_EQ(eb_.accept(req.id, rep, now_).error().code, EINVAL) << "accepted once";
  pass_b();

  ASSERT_EQ(a_.events.size(), 1u);
  EXPECT_EQ(a_.events[0].type, CmEventType::kRepReceived);
  const Rep& r = std::get<Rep>(*a_.events[0].message);
  EXPECT_EQ(r.local_qpn, 0x789u);
  EXPECT_EQ(r.starting_psn, 0xabcu);
  EXPECT_EQ(r.remote_comm_id, *id);
  EXPECT_EQ(r.private_data[1], std::byte{0x17});
  EXPECT_EQ(ea_.state(*id), CmState::kRepRcvd);

  ASSERT_TRUE(ea_.ready(*id));
  EXPECT_EQ(ea_.state(*id), CmState::kEstablished);
  pass_a();
  ASSERT_EQ(b_.events.size(), 2u);
  EXPECT_EQ(b_.events[1].type, CmEventType::kEstablished);
  EXPECT_EQ(eb_.state(req.id), CmState::kEstablished);
  EXPECT_FALSE(ea_.next_deadline()) << "nothing left to time";
  EXPECT_FALSE(eb_.next_deadline());
}

TEST_F(CmEngineTest, NoListenerIsAnInvalidServiceIdRejectOnceTheGraceEnds) {
  ConnectParams p = params();
  p.service_id = kService + 1;
  p.response_timeout = 20;  // 4.3 s: the REQ is not resent meanwhile
  auto id = ea_.connect(p, now_);
  ASSERT_TRUE(id);
  pass_a();
  EXPECT_TRUE(b_.events.empty());
  EXPECT_EQ(eb_.connections(), 0u) << "nothing kept for a refused REQ";
  EXPECT_TRUE(b_.out.empty()) << "it waits for a listener first";
  EXPECT_EQ(eb_.next_deadline(), now_ + kListenGrace);
  EXPECT_EQ(eb_.counters().reqs_parked, 1u);
  advance(kListenGrace - std::chrono::milliseconds(1));
  EXPECT_TRUE(b_.out.empty());
  advance(std::chrono::milliseconds(1));
  ASSERT_EQ(b_.next_attr(), AttributeId::kRej);
  pass_b();
  ASSERT_EQ(a_.events.size(), 1u);
  EXPECT_EQ(a_.events[0].type, CmEventType::kRejected);
  EXPECT_EQ(std::get<Rej>(*a_.events[0].message).reason, RejectReason::kInvalidServiceId);
  EXPECT_EQ(std::get<Rej>(*a_.events[0].message).remote_comm_id, *id);
  EXPECT_EQ(ea_.state(*id), CmState::kIdle);
  EXPECT_FALSE(ea_.next_deadline());
  EXPECT_FALSE(eb_.next_deadline()) << "nothing parked any more";
}

TEST_F(CmEngineTest, AListenInsideTheGraceTakesTheReqThatCameEarly) {
  ConnectParams p = params();
  p.service_id = kService + 1;
  p.response_timeout = 20;
  auto id = ea_.connect(p, now_);
  ASSERT_TRUE(id);
  const Sent req = a_.out.front();
  pass_a();
  eb_.receive(kA, req.mad, now_);  // the same REQ again (a duplicate): parked once
  EXPECT_EQ(eb_.counters().reqs_parked, 1u);
  EXPECT_EQ(eb_.counters().duplicates, 1u);
  advance(kListenGrace / 2);
  int ctx = 0;
  ASSERT_TRUE(eb_.listen(kService + 1, &ctx));
  ASSERT_EQ(b_.events.size(), 1u) << "the early REQ, now the listener's";
  EXPECT_EQ(b_.events[0].type, CmEventType::kReqReceived);
  EXPECT_EQ(b_.events[0].listen_context, &ctx);
  Rep rep;
  rep.local_qpn = 0x789;
  ASSERT_TRUE(eb_.accept(b_.events[0].id, rep, now_));
  pass_b();
  ASSERT_EQ(a_.events.size(), 1u);
  EXPECT_EQ(a_.events[0].type, CmEventType::kRepReceived);
  ASSERT_TRUE(ea_.ready(*id));
  pass_a();
  EXPECT_EQ(eb_.state(b_.events[0].id), CmState::kEstablished);
  advance(kListenGrace);
  EXPECT_TRUE(b_.out.empty()) << "no REJ for a REQ a listener took";
}

TEST_F(CmEngineTest, OnlySoManyReqsWaitForAListener) {
  ConnectParams p = params();
  p.service_id = kService + 1;
  p.response_timeout = 20;
  for (std::size_t i = 0; i <= kMaxParkedReqs; ++i) {
    ASSERT_TRUE(ea_.connect(p, now_));
    pass_a();
  }
  EXPECT_EQ(eb_.counters().reqs_parked, kMaxParkedReqs);
  ASSERT_EQ(b_.out.size(), 1u) << "the one beyond the limit is refused at once";
  EXPECT_EQ(b_.next_attr(), AttributeId::kRej);
  advance(kListenGrace);
  EXPECT_EQ(b_.out.size(), 1u + kMaxParkedReqs);
  EXPECT_EQ(eb_.counters().rejects_sent, 1u + kMaxParkedReqs);
}

TEST_F(CmEngineTest, TheConsumerRejectsWithPrivateData) {
  auto id = ea_.connect(params(), now_);
  pass_a();
  const std::uint32_t pid = b_.events.at(0).id;
  const std::byte why[3] = {std::byte{1}, std::byte{2}, std::byte{3}};
  ASSERT_TRUE(eb_.reject(pid, why));
  pass_b();
  ASSERT_EQ(a_.events.size(), 1u);
  const Rej& rej = std::get<Rej>(*a_.events[0].message);
  EXPECT_EQ(rej.reason, RejectReason::kConsumerDefined);
  EXPECT_EQ(rej.message_rejected, MsgRejected::kReq);
  EXPECT_EQ(rej.private_data[2], std::byte{3});
  EXPECT_EQ(ea_.state(*id), CmState::kIdle);
  std::vector<std::byte> too_much(kRejPrivateDataBytes + 1);
  EXPECT_EQ(eb_.reject(pid, too_much).error().code, EINVAL);
}

TEST_F(CmEngineTest, ALostReqIsResentThenTimesOut) {
  auto id = ea_.connect(params(), now_);
  pass_a(/*drop=*/true);
  const auto t = cm_timeout(10);
  advance(t - std::chrono::nanoseconds(1));
  EXPECT_TRUE(a_.out.empty()) << "not before the timeout";
  advance(std::chrono::nanoseconds(1));
  ASSERT_EQ(a_.out.size(), 1u);
  EXPECT_EQ(a_.next_attr(), AttributeId::kReq);
  pass_a(true);
  advance(t);
  pass_a(true);  // the second and last retry
  EXPECT_TRUE(a_.events.empty());
  advance(t);
  EXPECT_TRUE(a_.out.empty()) << "max_cm_retries 2: three REQs in all";
  ASSERT_EQ(a_.events.size(), 1u);
  EXPECT_EQ(a_.events[0].type, CmEventType::kTimedOut);
  EXPECT_EQ(ea_.state(*id), CmState::kIdle);
  EXPECT_EQ(ea_.counters().resent, 2u);
}

TEST_F(CmEngineTest, ADuplicateReqIsOneConnectionAndALostRepIsResent) {
  auto id = ea_.connect(params(), now_);
  Sent req = a_.out.front();
  pass_a();
  const std::uint32_t pid = b_.events.at(0).id;
  eb_.receive(kA, req.mad, now_);  // the same REQ again, before the answer
  EXPECT_EQ(b_.events.size(), 1u) << "not a second connection";
  EXPECT_EQ(eb_.connections(), 1u);
  ASSERT_TRUE(eb_.accept(pid, Rep{.local_qpn = 9}, now_));
  pass_b(/*drop=*/true);  // the REP is lost
  // The active side resends its REQ; the passive answers with its REP again.
  advance(cm_timeout(10));
  ASSERT_EQ(a_.next_attr(), AttributeId::kReq);
  pass_a();
  ASSERT_FALSE(b_.out.empty());
  EXPECT_EQ(b_.next_attr(), AttributeId::kRep);
  pass_b();
  EXPECT_EQ(ea_.state(*id), CmState::kRepRcvd);
  ASSERT_TRUE(ea_.ready(*id));
  pass_a();
  EXPECT_EQ(eb_.state(pid), CmState::kEstablished);
  EXPECT_EQ(eb_.counters().duplicates, 2u);
}

TEST_F(CmEngineTest, ALostRtuIsResentForTheRepeatedRep) {
  auto id = ea_.connect(params(), now_);
  pass_a();
  const std::uint32_t pid = b_.events.at(0).id;
  ASSERT_TRUE(eb_.accept(pid, Rep{.local_qpn = 9}, now_));
  pass_b();
  ASSERT_TRUE(ea_.ready(*id));
  pass_a(/*drop=*/true);  // the RTU is lost
  advance(cm_timeout(10));  // the passive's REP timer
  ASSERT_EQ(b_.next_attr(), AttributeId::kRep);
  pass_b();
  ASSERT_EQ(a_.next_attr(), AttributeId::kRtu) << "the active side answers the REP it already had";
  pass_a();
  EXPECT_EQ(eb_.state(pid), CmState::kEstablished);
  EXPECT_EQ(a_.events.size(), 1u) << "one REP received event";
}

TEST_F(CmEngineTest, NoRtuTimesThePassiveSideOutWithARej) {
  auto id = ea_.connect(params(), now_);
  pass_a();
  const std::uint32_t pid = b_.events.at(0).id;
  ASSERT_TRUE(eb_.accept(pid, Rep{.local_qpn = 9}, now_));
  pass_b(true);
  for (int i = 0; i < 2; ++i) {
    advance(cm_timeout(10));
    while (!a_.out.empty()) pass_a(true);  // the active side's REQ resends
    ASSERT_EQ(b_.next_attr(), AttributeId::kRep);
    pass_b(true);
  }
  a_.events.clear();
  advance(cm_timeout(10));
  ASSERT_EQ(b_.events.back().type, CmEventType::kTimedOut);
  EXPECT_EQ(eb_.state(pid), CmState::kIdle);
  while (!b_.out.empty() && b_.next_attr() != AttributeId::kRej) b_.out.pop_front();
  ASSERT_FALSE(b_.out.empty());
  EXPECT_EQ(b_.front_as<Rej>().reason, RejectReason::kTimeout);
  (void)id;
}

TEST_F(CmEngineTest, ARejAfterOurRtuEndsTheConnectionAsADreqWould) {
  // The passive side gives up (here its consumer destroys the ID) before
  // the active side's RTU reaches it: the active side, already connected,
  // takes the REJ as the end of the connection.
  auto id = ea_.connect(params(), now_);
  pass_a();  // REQ
  const std::uint32_t pid = b_.events.at(0).id;
  ASSERT_TRUE(eb_.accept(pid, Rep{.local_qpn = 9}, now_));
  pass_b();  // REP
  ASSERT_TRUE(ea_.ready(*id));
  ASSERT_EQ(ea_.state(*id), CmState::kEstablished);
  eb_.destroy(pid, now_);  // before the RTU came
  pass_a();                // the RTU, for a forgotten ID
  ASSERT_EQ(b_.next_attr(), AttributeId::kRej);
  while (!b_.out.empty() && b_.next_attr() != AttributeId::kRej) b_.out.pop_front();
  pass_b();
  ASSERT_FALSE(a_.events.empty());
  EXPECT_EQ(a_.events.back().type, CmEventType::kDisconnected);
  EXPECT_EQ(ea_.state(*id), CmState::kTimewait);
  // A REJ from someone else, or naming another comm ID, changes nothing.
  auto [aid, bid] = establish();
  Rej forged;
  forged.local_comm_id = 0x1234;
  forged.remote_comm_id = aid;
  const std::size_t seen = a_.events.size();
  Mad mad;
  ASSERT_TRUE(encode(forged, 5, mad).ok());
  ea_.receive(kB, mad, now_);
  forged.local_comm_id = bid;  // the right ID, from the wrong address
  ASSERT_TRUE(encode(forged, 6, mad).ok());
  ea_.receive(kMallory, mad, now_);
  EXPECT_EQ(ea_.state(aid), CmState::kEstablished);
  EXPECT_EQ(a_.events.size(), seen);
}

TEST_F(CmEngineTest, DisconnectIsDreqDrepThenTimeWait) {
  auto [aid, bid] = establish();
  ASSERT_TRUE(ea_.disconnect(aid, now_));
  EXPECT_EQ(ea_.state(aid), CmState::kDreqSent);
  ASSERT_EQ(a_.next_attr(), AttributeId::kDreq);
  EXPECT_EQ(a_.front_as<Dreq>().remote_qpn_eecn, 0x789u) << "the peer's QP";
  pass_a();
  ASSERT_EQ(b_.events.back().type, CmEventType::kDisconnected);
  EXPECT_EQ(eb_.state(bid), CmState::kTimewait);
  ASSERT_EQ(b_.next_attr(), AttributeId::kDrep);
  pass_b();
  ASSERT_EQ(a_.events.back().type, CmEventType::kDisconnected);
  EXPECT_EQ(ea_.state(aid), CmState::kTimewait);
  EXPECT_TRUE(ea_.disconnect(aid, now_)) << "idempotent";
  advance(kTimewait - std::chrono::nanoseconds(1));
  EXPECT_EQ(ea_.state(aid), CmState::kTimewait) << "as long as the peer's DREQ retries may come";
  EXPECT_EQ(a_.events.back().type, CmEventType::kDisconnected);
  advance(std::chrono::nanoseconds(1));
  EXPECT_EQ(ea_.state(aid), CmState::kIdle);
  EXPECT_EQ(eb_.state(bid), CmState::kIdle);
  // Time wait's end is an event of its own (ib_cm's TIMEWAIT_EXIT), once.
  ASSERT_EQ(a_.events.back().type, CmEventType::kTimewaitExit);
  EXPECT_EQ(a_.events.back().id, aid);
  ASSERT_EQ(b_.events.back().type, CmEventType::kTimewaitExit);
  EXPECT_EQ(b_.events.back().id, bid);
  const std::size_t na = a_.events.size();
  advance(kTimewait);
  EXPECT_EQ(a_.events.size(), na);
  ea_.destroy(aid, now_);
  eb_.destroy(bid, now_);
  EXPECT_EQ(ea_.connections(), 0u);
  EXPECT_EQ(eb_.connections(), 0u);
}

TEST_F(CmEngineTest, ALostDrepIsAnsweredAgainAndAnUnansweredDreqStillDisconnects) {
  auto [aid, bid] = establish();
  ASSERT_TRUE(ea_.disconnect(aid, now_));
  pass_a();
  pass_b(true);  // the DREP is lost
  advance(cm_timeout(10) / 2);
  EXPECT_TRUE(a_.out.empty());
  advance(cm_timeout(10) / 2);
  ASSERT_EQ(a_.next_attr(), AttributeId::kDreq) << "resent";
  pass_a();
  ASSERT_EQ(b_.next_attr(), AttributeId::kDrep) << "time wait answers the duplicate";
  pass_b();
  EXPECT_EQ(ea_.state(aid), CmState::kTimewait);

  // Another connection whose peer never answers the DREQ.
  auto [aid2, bid2] = establish();
  ASSERT_TRUE(ea_.disconnect(aid2, now_));
  for (int i = 0; i < 3; ++i) {
    pass_a(true);
    advance(cm_timeout(10));
  }
  EXPECT_EQ(ea_.state(aid2), CmState::kTimewait);
  EXPECT_EQ(a_.events.back().type, CmEventType::kDisconnected);
  EXPECT_FALSE(a_.events.back().message) << "no DREP behind it";
  (void)bid;
  (void)bid2;
}

TEST_F(CmEngineTest, AnIdDestroyedInTimeWaitGetsNoTimewaitExit) {
  auto [aid, bid] = establish();
  ASSERT_TRUE(ea_.disconnect(aid, now_));
  pass_a();
  pass_b();
  ASSERT_EQ(ea_.state(aid), CmState::kTimewait);
  ea_.destroy(aid, now_);
  const std::size_t na = a_.events.size();
  advance(kTimewait);
  EXPECT_EQ(a_.events.size(), na) << "nobody listens for it any more";
  EXPECT_EQ(ea_.connections(), 0u) << "forgotten once time wait ended";
  EXPECT_EQ(b_.events.back().type, CmEventType::kTimewaitExit);
  (void)bid;
}

TEST_F(CmEngineTest, BothSidesDisconnectAtOnce) {
  auto [aid, bid] = establish();
  ASSERT_TRUE(ea_.disconnect(aid, now_));
  ASSERT_TRUE(eb_.disconnect(bid, now_));
  pass_a();  // A's DREQ reaches B in DREQ sent: B answers and is done
  pass_b();  // B's DREQ reaches A: A answers
  EXPECT_EQ(ea_.state(aid), CmState::kTimewait);
  EXPECT_EQ(eb_.state(bid), CmState::kTimewait);
  while (!b_.out.empty()) pass_b();
  while (!a_.out.empty()) pass_a();
  EXPECT_EQ(a_.events.back().type, CmEventType::kDisconnected);
  EXPECT_EQ(b_.events.back().type, CmEventType::kDisconnected);
}

TEST_F(CmEngineTest, MadsForOthersOrFromOthersAreDroppedAndCounted) {
  auto [aid, bid] = establish();
  // Mallory replays A's DREQ from her own address: not the peer.
  ASSERT_TRUE(ea_.disconnect(aid, now_));
  Sent dreq = a_.out.front();
  eb_.receive(kMallory, dreq.mad, now_);
  EXPECT_EQ(eb_.state(bid), CmState::kEstablished);
  EXPECT_EQ(eb_.counters().dropped_wrong_peer, 1u);
  // A DREQ naming another QP than ours is not for this connection.
  Dreq forged = std::get<Dreq>([&] {
    CmMad m;
    EXPECT_TRUE(decode(dreq.mad, m).ok());
    return m.message;
  }());
  forged.remote_qpn_eecn ^= 1;
  Mad mad;
  ASSERT_TRUE(encode(forged, 77, mad).ok());
  eb_.receive(kA, mad, now_);
  EXPECT_EQ(eb_.state(bid), CmState::kEstablished);
  EXPECT_EQ(eb_.counters().dropped_unexpected, 1u);
  // An RTU for a comm ID nobody has; garbage; a short MAD.
  Rtu rtu;
  rtu.remote_comm_id = 0xdead;
  ASSERT_TRUE(encode(rtu, 1, mad).ok());
  eb_.receive(kA, mad, now_);
  EXPECT_EQ(eb_.counters().dropped_unknown_id, 1u);
  std::array<std::byte, 256> junk;
  junk.fill(std::byte{0xff});
  eb_.receive(kA, junk, now_);
  eb_.receive(kA, std::span(junk).first(10), now_);
  EXPECT_EQ(eb_.counters().dropped_malformed, 2u);
  EXPECT_EQ(b_.events.size(), 2u) << "no event from any of it";
  // A REP for an unknown connection is refused (IBA 12.9.6), a DREQ for one
  // answered with a DREP.
  Rep rep;
  rep.remote_comm_id = 0xbeef;
  rep.local_comm_id = 5;
  ASSERT_TRUE(encode(rep, 2, mad).ok());
  b_.out.clear();
  eb_.receive(kA, mad, now_);
  ASSERT_EQ(b_.next_attr(), AttributeId::kRej);
  EXPECT_EQ(b_.front_as<Rej>().reason, RejectReason::kInvalidCommId);
  EXPECT_EQ(b_.front_as<Rej>().remote_comm_id, 5u);
  b_.out.clear();
  Dreq stray;
  stray.remote_comm_id = 0xbeef;
  stray.local_comm_id = 6;
  ASSERT_TRUE(encode(stray, 3, mad).ok());
  eb_.receive(kA, mad, now_);
  ASSERT_EQ(b_.next_attr(), AttributeId::kDrep);
  EXPECT_EQ(b_.front_as<Drep>().remote_comm_id, 6u);
}

TEST_F(CmEngineTest, AStaleReqInTimeWaitIsRejected) {
  auto id = ea_.connect(params(), now_);
  Sent req = a_.out.front();
  pass_a();
  const std::uint32_t pid = b_.events.at(0).id;
  ASSERT_TRUE(eb_.accept(pid, Rep{.local_qpn = 9}, now_));
  pass_b();
  ASSERT_TRUE(ea_.ready(*id));
  pass_a();
  ASSERT_TRUE(ea_.disconnect(*id, now_));
  pass_a();
  pass_b();
  ASSERT_EQ(eb_.state(pid), CmState::kTimewait);
  eb_.receive(kA, req.mad, now_);  // the old REQ, late
  ASSERT_FALSE(b_.out.empty());
  ASSERT_EQ(b_.next_attr(), AttributeId::kRej);
  EXPECT_EQ(b_.front_as<Rej>().reason, RejectReason::kStaleConnection);
}

TEST_F(CmEngineTest, AnMraStopsTheResendsForItsServiceTimeout) {
  auto id = ea_.connect(params(), now_);
  pass_a();
  const std::uint32_t pid = b_.events.at(0).id;
  Mra mra;
  mra.local_comm_id = pid;
  mra.remote_comm_id = *id;
  mra.service_timeout = 14;  // 67 ms, far beyond the REQ's 4 ms
  Mad mad;
  ASSERT_TRUE(encode(mra, 1, mad).ok());
  ea_.receive(kB, mad, now_);
  EXPECT_EQ(ea_.state(*id), CmState::kMraReqRcvd);
  advance(cm_timeout(10) * 4);
  EXPECT_TRUE(a_.out.empty()) << "no REQ resent while the peer works";
  ASSERT_TRUE(eb_.accept(pid, Rep{.local_qpn = 9}, now_));
  pass_b();
  EXPECT_EQ(ea_.state(*id), CmState::kRepRcvd);
}

TEST_F(CmEngineTest, BadCallsAreRefusedAndChangeNothing) {
  EXPECT_EQ(eb_.listen(kService, nullptr).error().code, EADDRINUSE);
  ConnectParams p = params();
  p.peer = 0;
  EXPECT_EQ(ea_.connect(p, now_).error().code, EINVAL);
  p = params();
  p.max_cm_retries = 16;
  EXPECT_EQ(ea_.connect(p, now_).error().code, EINVAL);
  p = params();
  p.req.local_qpn = 1u << 24;  // wider than its field
  EXPECT_EQ(ea_.connect(p, now_).error().code, EINVAL);
  EXPECT_EQ(ea_.connections(), 0u);
  EXPECT_TRUE(a_.out.empty());
  EXPECT_EQ(ea_.ready(12345).error().code, EINVAL);
  EXPECT_EQ(ea_.disconnect(12345, now_).error().code, EINVAL);
  auto id = ea_.connect(params(), now_);
  EXPECT_EQ(ea_.ready(*id).error().code, EINVAL) << "no REP yet";
  EXPECT_EQ(ea_.reject(*id).error().code, EINVAL);
  pass_a();
  const std::uint32_t pid = b_.events.at(0).id;
  Rep bad;
  bad.local_qpn = 1u << 24;
  EXPECT_EQ(eb_.accept(pid, bad, now_).error().code, EINVAL);
  EXPECT_EQ(eb_.state(pid), CmState::kReqRcvd);
}

TEST_F(CmEngineTest, DestroyMidHandshakeRejectsAndForgets) {
  auto id = ea_.connect(params(), now_);
  pass_a();
  const std::uint32_t pid = b_.events.at(0).id;
  eb_.destroy(pid, now_);
  EXPECT_EQ(eb_.connections(), 0u);
  pass_b();
  EXPECT_EQ(a_.events.back().type, CmEventType::kRejected);
  ea_.destroy(*id, now_);
  EXPECT_EQ(ea_.connections(), 0u);
  // An established one: a DREQ, and the ID is forgotten after time wait.
  auto [aid, bid] = establish();
  ea_.destroy(aid, now_);
  EXPECT_EQ(a_.next_attr(), AttributeId::kDreq);
  pass_a();
  EXPECT_EQ(b_.events.back().type, CmEventType::kDisconnected);
  pass_b();
  advance(kTimewait);
  EXPECT_EQ(ea_.connections(), 0u);
  EXPECT_EQ(eb_.state(bid), CmState::kIdle);
}

// A passive side with the default limits, and REQs made by engines that
// play the peers (hostile or not).
class CmAdmissionTest : public ::testing::Test {
 protected:
  Side b_, peer_;
  CmEngine eb_{b_, 0xBBBB, CmEngine::sequential_ids(500)};
  CmTime now_{};
  int listen_ctx_ = 0;
  std::uint32_t next_peer_id_ = 0x1000;

  void SetUp() override { ASSERT_TRUE(eb_.listen(kService, &listen_ctx_)); }

  // A REQ as `peer` would send it, with the peer's choice of CM timeout
  // and retries (the largest the format allows by default).
  Mad req_mad(std::uint8_t timeout = 31, std::uint8_t retries = 15) {
    CmEngine e{peer_, 0xEEEE, CmEngine::sequential_ids(next_peer_id_++)};
    ConnectParams p;
    p.peer = kB;
    p.service_id = kService;
    p.req.local_qpn = 0x321;
    p.req.path_mtu = PathMtu::k1024;
    p.response_timeout = timeout;
    p.max_cm_retries = retries;
    EXPECT_TRUE(e.connect(p, now_));
    Mad m = peer_.out.back().mad;
    peer_.out.clear();
    return m;
  }
  // Accepts every REQ the listener has been given so far.
  void accept_all() {
    for (const CmEvent& e : b_.events)
      if (e.type == CmEventType::kReqReceived && eb_.state(e.id) == CmState::kReqRcvd) {
        Rep rep;
        rep.local_qpn = 0x999;
        ASSERT_TRUE(eb_.accept(e.id, rep, now_));
      }
  }
  std::size_t sent(AttributeId what) {
    std::size_t n = 0;
    for (const Sent& s : b_.out) {
      MadHeader h;
      EXPECT_TRUE(decode_header(s.mad, h).ok());
      n += h.attribute_id == what;
    }
    return n;
  }
};

TEST_F(CmAdmissionTest, AReqsOwnTimeoutAndRetriesAreClampedSoItGetsAFewFramesInSeconds) {
  // Timeout 31 and 15 retries would keep a REP going out for 16 x 2.4 h.
  eb_.receive(kMallory, req_mad(31, 15), now_);
  accept_all();
  EXPECT_EQ(eb_.counters().clamped_timeouts, 1u);
  const CmLimits lim;
  const auto deadline = now_ + std::chrono::duration_cast<CmClock::duration>(
                                   cm_timeout(lim.max_remote_timeout) * (lim.max_remote_retries + 1));
  while (auto d = eb_.next_deadline()) {
    ASSERT_LE(*d, deadline) << "a REQ's timer runs past the clamped bound";
    now_ = *d;
    eb_.tick(now_);
  }
  EXPECT_EQ(sent(AttributeId::kRep), 1u + lim.max_remote_retries);
  EXPECT_EQ(sent(AttributeId::kRej), 1u);  // the timeout's
  EXPECT_EQ(eb_.half_open(), 0u);
}

TEST_F(CmAdmissionTest, ReplayedReqsShareTheRepsResendBudget) {
  const Mad req = req_mad();
  eb_.receive(kMallory, req, now_);
  accept_all();
  for (int i = 0; i < 100; ++i) eb_.receive(kMallory, req, now_);  // a reflection attempt
  EXPECT_EQ(sent(AttributeId::kRep), 1u + CmLimits{}.max_remote_retries);
  EXPECT_EQ(eb_.counters().duplicates_unanswered, 100u - CmLimits{}.max_remote_retries);
}

TEST_F(CmAdmissionTest, HalfOpenConnectionsAreCappedPerSourceAndInTotal) {
  const CmLimits lim;
  for (std::size_t i = 0; i < lim.max_half_open_per_source; ++i) eb_.receive(kMallory, req_mad(), now_);
  accept_all();  // REP sent, no RTU ever: half open
  EXPECT_EQ(eb_.half_open(), lim.max_half_open_per_source);
  b_.out.clear();
  eb_.receive(kMallory, req_mad(), now_);
  ASSERT_EQ(b_.out.size(), 1u);
  const Rej rej = b_.front_as<Rej>();
  EXPECT_EQ(rej.reason, RejectReason::kConsumerDefined);
  EXPECT_EQ(eb_.counters().refused_half_open_per_source, 1u);
  EXPECT_EQ(eb_.half_open(), lim.max_half_open_per_source) << "a refused REQ keeps nothing";

  // Spoofed sources fill the total. A real host's REQ still gets in: the
  // oldest half-open connection makes room (a REJ and kTimedOut for it).
  const std::uint32_t oldest = b_.events.front().id;
  std::uint64_t src = 0x100;
  while (eb_.half_open() < lim.max_half_open) {
    eb_.receive(src++, req_mad(), now_);
    accept_all();
  }
  b_.out.clear();
  const std::size_t before = b_.events.size();
  eb_.receive(kA, req_mad(), now_);
  ASSERT_EQ(b_.events.size(), before + 2);
  EXPECT_EQ(b_.events[before].type, CmEventType::kTimedOut);
  EXPECT_EQ(b_.events[before].id, oldest);
  EXPECT_EQ(b_.events[before + 1].type, CmEventType::kReqReceived);
  EXPECT_EQ(b_.events[before + 1].peer, kA);
  EXPECT_EQ(eb_.state(oldest), CmState::kIdle);
  EXPECT_EQ(eb_.counters().evicted_half_open, 1u);
  EXPECT_EQ(eb_.half_open(), lim.max_half_open);
  ASSERT_EQ(b_.out.size(), 1u);  // the evicted one's REJ, nothing more
  EXPECT_EQ(b_.front_as<Rej>().reason, RejectReason::kTimeout);
  // Every timer ends within the clamped bound, and nothing stays half open.
  accept_all();
  while (auto d = eb_.next_deadline()) {
    now_ = *d;
    eb_.tick(now_);
  }
  EXPECT_EQ(eb_.half_open(), 0u);
}

// The engine under a storm of MADs a stranger could send: REQs from many
// sources with any timeout and retries, replays, guessed RTUs, REJs and
// DREQs, bytes that do not decode, and time moving on. Whatever comes,
// the limits hold at every step: half-open connections within the cap, no
// timer past the clamped bound, a few frames out per frame in.
TEST_F(CmAdmissionTest, AStormOfHostileMadsKeepsEveryBound) {
  std::mt19937 rng(20261205);  // fixed: a failure is reproducible
  const CmLimits lim;
  const auto max_wait = std::chrono::duration_cast<CmClock::duration>(cm_timeout(lim.max_remote_timeout) *
                                                                      (lim.max_remote_retries + 1));
  std::vector<std::pair<std::uint64_t, Mad>> seen;
  for (int step = 0; step < 20000; ++step) {
    const unsigned what = rng() % 100;
    const std::uint64_t src = 0x100 + rng() % 64;
    if (what < 40) {
      Mad m = req_mad(static_cast<std::uint8_t>(rng() % 32), static_cast<std::uint8_t>(rng() % 16));
      eb_.receive(src, m, now_);
      seen.emplace_back(src, m);
    } else if (what < 55 && !seen.empty()) {
      const auto& [from, m] = seen[rng() % seen.size()];
      eb_.receive(from, m, now_);  // a replay
    } else if (what < 75) {
      Message msg;
      switch (rng() % 3) {
        case 0: {
          Rtu r;
          r.local_comm_id = rng();
          r.remote_comm_id = 500 + rng() % 2000;  // near the engine's IDs: some exist
          msg = r;
          break;
        }
        case 1: {
          Rej r;
          r.local_comm_id = rng() % 2 ? 0 : rng();
          r.remote_comm_id = 500 + rng() % 2000;
          msg = r;
          break;
        }
        default: {
          Dreq d;
          d.local_comm_id = rng();
          d.remote_comm_id = 500 + rng() % 2000;
          d.remote_qpn_eecn = 0x999;
          msg = d;
        }
      }
      Mad m;
      ASSERT_TRUE(encode(msg, rng(), m).ok());
      eb_.receive(src, m, now_);
    } else if (what < 85) {
      Mad m;
      for (auto& b : m) b = static_cast<std::byte>(rng());
      eb_.receive(src, m, now_);
    } else if (what < 95) {
      accept_all();
    } else {
      now_ += std::chrono::milliseconds(rng() % 2000);
      eb_.tick(now_);
    }
    ASSERT_LE(eb_.half_open(), lim.max_half_open) << step;
    if (auto d = eb_.next_deadline()) ASSERT_LE(*d, now_ + max_wait + kListenGrace) << step;
    b_.events.clear();  // (accept_all looks at the ones since the last step)
  }
  const CmCounters& c = eb_.counters();
  EXPECT_LE(c.sent, 5 * c.received) << "a few frames out per frame in";
  EXPECT_GT(c.dropped_malformed, 0u);
  EXPECT_GT(c.clamped_timeouts, 0u);
}

TEST_F(CmEngineTest, ARejMustNameThePeersCommIdOnceItIsKnown) {
  auto id = ea_.connect(params(), now_);
  ASSERT_TRUE(id);
  pass_a();  // REQ
  Rep rep;
  ASSERT_TRUE(eb_.accept(b_.events.back().id, rep, now_));
  pass_b();  // REP: A knows B's comm ID now
  ASSERT_EQ(ea_.state(*id), CmState::kRepRcvd);
  Rej forged;
  forged.local_comm_id = 0;  // "no ID": once skipped the check
  forged.remote_comm_id = *id;
  forged.reason = RejectReason::kConsumerDefined;
  Mad mad;
  ASSERT_TRUE(encode(forged, 1, mad).ok());
  const auto dropped = ea_.counters().dropped_unexpected;
  ea_.receive(kB, mad, now_);
  EXPECT_EQ(ea_.counters().dropped_unexpected, dropped + 1);
  EXPECT_EQ(ea_.state(*id), CmState::kRepRcvd);
}

TEST(CmEngineIds, RandomCommIdsAreNotASequence) {
  Side s;
  CmEngine e{s, 1, CmEngine::random_ids()};
  std::vector<std::uint32_t> ids;
  for (int i = 0; i < 32; ++i) {
    ConnectParams p;
    p.peer = kB;
    p.service_id = kService;
    auto id = e.connect(p, CmTime{});
    ASSERT_TRUE(id);
    ids.push_back(*id);
  }
  int steps_of_one = 0;
  for (std::size_t i = 1; i < ids.size(); ++i) steps_of_one += ids[i] == ids[i - 1] + 1;
  EXPECT_LT(steps_of_one, 2);
}

}  // namespace
}  // namespace srdma::cm
