// Service ID resolution between two SIDR engines wired back to back through
// a fake port, every timer on a made-up clock: the exchange, refusals, a
// lost SIDR_REP, a service nobody listens on, and a stranger's floods,
// stray replies and malformed MADs, each bounded, dropped and counted.
#include "cm/sidr.h"

#include <gtest/gtest.h>

#include <deque>
#include <vector>

namespace srdma::cm {
namespace {

constexpr std::uint64_t kA = 0xA, kB = 0xB, kMallory = 0xE;
constexpr std::uint64_t kService = 0x0000000001110000ull | 7174;  // RDMA_PS_UDP, udaddy's port
constexpr std::uint32_t kUdpQkey = 0x01234567;                   // RDMA_UDP_QKEY

struct Sent {
  std::uint64_t to;
  Mad mad;
};

struct Side : CmEngine::Port {
  std::deque<Sent> out;
  std::vector<CmEvent> events;
  void send_mad(std::uint64_t peer, const Mad& mad) override { out.push_back({peer, mad}); }
  void on_event(const CmEvent& e) override { events.push_back(e); }
  CmMad front() const {
    CmMad m;
    EXPECT_TRUE(decode(out.front().mad, m).ok());
    return m;
  }
  template <class T>
  T front_as() const {
    return std::get<T>(front().message);
  }
};

class SidrTest : public ::testing::Test {
 protected:
  static constexpr SidrLimits kLimits{.max_pending_per_source = 4, .max_pending = 8, .max_answers = 8};
  Side a_, b_;
  SidrEngine ea_{a_, CmEngine::sequential_ids(100), 0x1000, kLimits};
  SidrEngine eb_{b_, CmEngine::sequential_ids(500), 0x2000, kLimits};
  CmTime now_{};
  int listen_ctx_ = 0;

  void SetUp() override { ASSERT_TRUE(eb_.listen(kService, &listen_ctx_)); }

  void pass(Side& from, std::uint64_t from_addr, bool drop = false) {
    ASSERT_FALSE(from.out.empty());
    Sent s = from.out.front();
    from.out.pop_front();
    if (drop) return;
    (s.to == kA ? ea_ : eb_).receive(from_addr, s.mad, now_);
  }
  void pass_a(bool drop = false) { pass(a_, kA, drop); }
  void pass_b(bool drop = false) { pass(b_, kB, drop); }
  void advance(std::chrono::nanoseconds d) {
    now_ += std::chrono::duration_cast<CmClock::duration>(d);
    ea_.tick(now_);
    eb_.tick(now_);
  }
  SidrParams params() {
    SidrParams p;
    p.peer = kB;
    p.service_id = kService;
    p.private_data[0] = std::byte{0x42};
    p.response_timeout = 10;  // 4.2 ms
    p.max_cm_retries = 2;
    return p;
  }
  SidrRep accepted() {
    SidrRep r;
    r.qpn = 0x1234;
    r.qkey = kUdpQkey;
    r.private_data[0] = std::byte{0x17};
    return r;
  }
  // A stranger's SIDR_REQ for `service` from `from`.
  void stranger_req(std::uint64_t from, std::uint32_t request_id, std::uint64_t service = kService) {
    SidrReq r;
    r.request_id = request_id;
    r.service_id = service;
    Mad mad;
    ASSERT_TRUE(encode(r, request_id, mad).ok());
    eb_.receive(from, mad, now_);
  }
};

TEST_F(SidrTest, TheExchangeCarriesTheQpnTheQkeyAndPrivateData) {
  auto id = ea_.request(params(), now_);
  ASSERT_TRUE(id);
  ASSERT_EQ(a_.front().header.attribute_id, AttributeId::kSidrReq);
  const SidrReq sent = a_.front_as<SidrReq>();
  EXPECT_EQ(sent.request_id, *id);
  EXPECT_EQ(sent.service_id, kService);
  const std::uint64_t tid = a_.front().header.transaction_id;
  pass_a();

  ASSERT_EQ(b_.events.size(), 1u);
  const CmEvent req = b_.events[0];
  EXPECT_EQ(req.type, CmEventType::kSidrReqReceived);
  EXPECT_EQ(req.peer, kA);
  EXPECT_EQ(req.listen_context, &listen_ctx_);
  EXPECT_EQ(std::get<SidrReq>(*req.message).private_data[0], std::byte{0x42});
  EXPECT_EQ(eb_.pending(), 1u);

  ASSERT_TRUE(eb_.reply(req.id, accepted(), now_));
  EXPECT_EQ(eb_.reply(req.id, accepted(), now_).error().code, EINVAL) << "answered once";
  EXPECT_EQ(eb_.pending(), 0u);
  EXPECT_EQ(b_.front().header.transaction_id, tid) << "the reply carries the request's transaction ID";
  pass_b();

  ASSERT_EQ(a_.events.size(), 1u);
  EXPECT_EQ(a_.events[0].type, CmEventType::kSidrRepReceived);
  EXPECT_EQ(a_.events[0].id, *id);
  const SidrRep& rep = std::get<SidrRep>(*a_.events[0].message);
  EXPECT_EQ(rep.status, SidrStatus::kSuccess);
  EXPECT_EQ(rep.request_id, *id);
  EXPECT_EQ(rep.service_id, kService);
  EXPECT_EQ(rep.qpn, 0x1234u);
  EXPECT_EQ(rep.qkey, kUdpQkey);
  EXPECT_EQ(rep.private_data[0], std::byte{0x17});
  EXPECT_FALSE(ea_.next_deadline()) << "answered: nothing left to time";
}

TEST_F(SidrTest, ARejectIsAStatusAndALeftRequestIsRejected) {
  auto id = ea_.request(params(), now_);
  ASSERT_TRUE(id);
  pass_a();
  SidrRep no;
  no.status = SidrStatus::kReject;
  ASSERT_TRUE(eb_.reply(b_.events[0].id, no, now_));
  pass_b();
  ASSERT_EQ(a_.events.size(), 1u);
  EXPECT_EQ(std::get<SidrRep>(*a_.events[0].message).status, SidrStatus::kReject);

  // A consumer that goes away without answering: the requester hears "rejected" at once.
  auto id2 = ea_.request(params(), now_);
  ASSERT_TRUE(id2);
  pass_a();
  ASSERT_EQ(b_.events.size(), 2u);
  eb_.destroy(b_.events[1].id);
  EXPECT_EQ(eb_.pending(), 0u);
  pass_b();
  ASSERT_EQ(a_.events.size(), 2u);
  EXPECT_EQ(std::get<SidrRep>(*a_.events[1].message).status, SidrStatus::kReject);
}

TEST_F(SidrTest, NoListenerIsUnsupportedOnceTheGraceEnds) {
  SidrParams p = params();
  p.service_id = kService + 1;
  p.response_timeout = 20;  // not resent meanwhile
  auto id = ea_.request(p, now_);
  ASSERT_TRUE(id);
  pass_a();
  EXPECT_TRUE(b_.out.empty()) << "it waits for a listener first";
  EXPECT_EQ(eb_.parked(), 1u);
  advance(kListenGrace - std::chrono::milliseconds(1));
  EXPECT_TRUE(b_.out.empty());
  advance(std::chrono::milliseconds(1));
  ASSERT_EQ(b_.out.size(), 1u);
  pass_b();
  ASSERT_EQ(a_.events.size(), 1u);
  EXPECT_EQ(std::get<SidrRep>(*a_.events[0].message).status, SidrStatus::kUnsupported);
  EXPECT_EQ(eb_.counters().refused_unsupported, 1u);
  EXPECT_EQ(eb_.parked(), 0u);
}

TEST_F(SidrTest, AListenInsideTheGraceTakesTheEarlyRequest) {
  SidrParams p = params();
  p.service_id = kService + 1;
  auto id = ea_.request(p, now_);
  ASSERT_TRUE(id);
  pass_a();
  advance(kListenGrace / 2);
  int ctx = 0;
  ASSERT_TRUE(eb_.listen(kService + 1, &ctx));
  ASSERT_EQ(b_.events.size(), 1u);
  EXPECT_EQ(b_.events[0].listen_context, &ctx);
  EXPECT_EQ(eb_.parked(), 0u);
}

TEST_F(SidrTest, NoAnswerIsResentThenTimesOutOnTheClock) {
  auto id = ea_.request(params(), now_);  // timeout 10 (4.2 ms), 2 retries
  ASSERT_TRUE(id);
  pass_a(true);
  const auto step = cm_timeout(10);
  EXPECT_EQ(ea_.next_deadline(), now_ + std::chrono::duration_cast<CmClock::duration>(step));
  for (int resend = 1; resend <= 2; ++resend) {
    advance(step - std::chrono::nanoseconds(1));
    EXPECT_TRUE(a_.out.empty()) << "not before its time";
    advance(std::chrono::nanoseconds(1));
    ASSERT_EQ(a_.out.size(), 1u) << "resend " << resend;
    EXPECT_EQ(a_.front_as<SidrReq>().request_id, *id);
    pass_a(true);
  }
  EXPECT_TRUE(a_.events.empty());
  advance(step);
  ASSERT_EQ(a_.events.size(), 1u);
  EXPECT_EQ(a_.events[0].type, CmEventType::kTimedOut);
  EXPECT_EQ(a_.events[0].id, *id);
  EXPECT_TRUE(a_.out.empty()) << "no resend past max_cm_retries";
  EXPECT_EQ(ea_.counters().resent, 2u);
  EXPECT_EQ(ea_.counters().timed_out, 1u);
  EXPECT_FALSE(ea_.next_deadline());
}

TEST_F(SidrTest, ALostReplyIsSentAgainNotAskedAgain) {
  auto id = ea_.request(params(), now_);
  ASSERT_TRUE(id);
  pass_a();
  ASSERT_TRUE(eb_.reply(b_.events[0].id, accepted(), now_));
  pass_b(true);  // lost
  advance(cm_timeout(10));
  pass_a();  // the resent SIDR_REQ
  EXPECT_EQ(b_.events.size(), 1u) << "the consumer is not asked twice";
  EXPECT_EQ(eb_.counters().duplicates, 1u);
  pass_b();
  ASSERT_EQ(a_.events.size(), 1u);
  EXPECT_EQ(std::get<SidrRep>(*a_.events[0].message).qpn, 0x1234u);
  // The kept answer ends with its time.
  EXPECT_EQ(eb_.answers(), 1u);
  advance(kLimits.answer_kept);
  EXPECT_EQ(eb_.answers(), 0u);
  EXPECT_FALSE(eb_.next_deadline());
}

TEST_F(SidrTest, AReplayedRequestGetsNoMoreRepliesThanItsBudget) {
  auto id = ea_.request(params(), now_);
  ASSERT_TRUE(id);
  const Sent req = a_.out.front();
  pass_a();
  ASSERT_TRUE(eb_.reply(b_.events[0].id, accepted(), now_));
  b_.out.clear();
  for (int i = 0; i < 100; ++i) eb_.receive(kA, req.mad, now_);
  EXPECT_EQ(b_.out.size(), static_cast<std::size_t>(kLimits.max_answer_resends));
  EXPECT_EQ(eb_.counters().duplicates_unanswered, 100u - kLimits.max_answer_resends);
  EXPECT_EQ(b_.events.size(), 1u);
}

TEST_F(SidrTest, AReplyForNoOutstandingRequestIsDroppedAndCounted) {
  SidrRep stray = accepted();
  stray.request_id = 0xdead;
  stray.service_id = kService;
  Mad mad;
  ASSERT_TRUE(encode(stray, 1, mad).ok());
  ea_.receive(kMallory, mad, now_);
  EXPECT_EQ(ea_.counters().dropped_unknown_id, 1u);

  // A live request ID, but not from the request's peer.
  auto id = ea_.request(params(), now_);
  ASSERT_TRUE(id);
  a_.out.clear();
  stray.request_id = *id;
  ASSERT_TRUE(encode(stray, 1, mad).ok());
  ea_.receive(kMallory, mad, now_);
  EXPECT_EQ(ea_.counters().dropped_wrong_peer, 1u);
  // Answered once, a second reply is a duplicate.
  ea_.receive(kB, mad, now_);
  ea_.receive(kB, mad, now_);
  EXPECT_EQ(ea_.counters().duplicates, 1u);
  ASSERT_EQ(a_.events.size(), 1u) << "only the peer's first reply reaches the consumer";
  EXPECT_TRUE(a_.out.empty()) << "nothing answers a stray SIDR_REP";
}

TEST_F(SidrTest, MalformedSidrMadsAreDroppedAndCounted) {
  SidrReq r;
  r.request_id = 7;
  r.service_id = kService;
  Mad good;
  ASSERT_TRUE(encode(r, 1, good).ok());
  std::vector<std::vector<std::byte>> bad;
  bad.emplace_back(good.begin(), good.begin() + 100);  // truncated
  auto v = std::vector<std::byte>(good.begin(), good.end());
  v[2] = std::byte{1};  // class version 1
  bad.push_back(v);
  v = std::vector<std::byte>(good.begin(), good.end());
  v[3] = std::byte{kMethodGet};  // not a Send
  bad.push_back(v);
  SidrRep rep;
  Mad rep_mad;
  ASSERT_TRUE(encode(rep, 1, rep_mad).ok());
  v = std::vector<std::byte>(rep_mad.begin(), rep_mad.end());
  v[kMadHeaderBytes + 5] = std::byte{0xff};  // Additional Information Length 255 > 72
  bad.push_back(v);
  for (const auto& m : bad) {
    eb_.receive(kMallory, m, now_);
    ea_.receive(kMallory, m, now_);
  }
  EXPECT_EQ(eb_.counters().dropped_malformed, bad.size());
  EXPECT_EQ(ea_.counters().dropped_malformed, bad.size());
  EXPECT_TRUE(b_.events.empty());
  EXPECT_TRUE(b_.out.empty());
  EXPECT_EQ(eb_.pending(), 0u);
}

TEST_F(SidrTest, AFloodFromOneStrangerCommitsAtMostThePerSourceBound) {
  for (std::uint32_t i = 1; i <= 1000; ++i) stranger_req(kMallory, i);
  EXPECT_EQ(eb_.pending(), kLimits.max_pending_per_source);
  EXPECT_EQ(b_.events.size(), kLimits.max_pending_per_source);
  EXPECT_EQ(eb_.counters().refused_per_source, 1000u - kLimits.max_pending_per_source);
  EXPECT_EQ(b_.out.size(), 1000u - kLimits.max_pending_per_source) << "one SIDR_REP per refused REQ, no more";
  EXPECT_EQ(b_.front_as<SidrRep>().status, SidrStatus::kNoQp);
  EXPECT_EQ(eb_.answers(), 0u) << "a refusal keeps nothing";

  // A real requester still gets through.
  auto id = ea_.request(params(), now_);
  ASSERT_TRUE(id);
  b_.out.clear();
  pass_a();
  EXPECT_EQ(b_.events.back().peer, kA);
}

TEST_F(SidrTest, AFloodFromSpoofedSourcesEvictsTheOldestAndStaysBounded) {
  for (std::uint32_t i = 1; i <= 1000; ++i) stranger_req(0x1000 + i, i);
  EXPECT_EQ(eb_.pending(), kLimits.max_pending);
  EXPECT_EQ(eb_.counters().evicted, 1000u - kLimits.max_pending);
  // The flood of a service nobody listens on: parked up to its bound, then refused at once.
  b_.out.clear();
  for (std::uint32_t i = 1; i <= 1000; ++i) stranger_req(0x5000 + i, i, kService + 9);
  EXPECT_EQ(eb_.parked(), kMaxParkedReqs);
  EXPECT_EQ(b_.out.size(), 1000u - kMaxParkedReqs);
  advance(kListenGrace);
  EXPECT_EQ(eb_.parked(), 0u);
  EXPECT_EQ(eb_.counters().refused_unsupported, 1000u);
}

}  // namespace
}  // namespace srdma::cm
