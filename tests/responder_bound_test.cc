// The responder's work per request is bounded (qp.h, kResponseBurst and the
// duplicate-READ budget): a READ's responses go out a burst per turn where
// the link takes single packets, other QPs' work between the bursts; a
// duplicate READ is executed again only within its QP's budget, the rest
// dropped and counted; answers behind a READ's responses keep their order.
//
// The storm and the fairness are measured in device turns, not wall time:
// the devices speak through a link of single packets that delivers in the
// sender's thread (an impairing link whose rates never fire), on a manual
// clock, so the engine thread runs a turn only when the test advances the
// clock by a tick and drains it, and every count replays exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "hca_pair.h"
#include "loopback.h"

namespace srdma::hca {
namespace {

using namespace pair;

// Single packets, delivered at once, in the sender's thread: the impairing
// link with a rate that never fires (the seed replays the same draws),
// asked not to carry trains.
ImpairSpec single_packets() {
  ImpairSpec s;
  s.corrupt = 1e-15;
  s.seed = 1;
  s.single_packets = true;
  return s;
}

SendWr read_wr(std::uint64_t wr_id, const Sge& sge, std::uint64_t remote_addr, std::uint32_t rkey) {
  SendWr w;
  w.wr_id = wr_id;
  w.opcode = WrOpcode::kRdmaRead;
  w.sg_list = &sge;
  w.num_sge = 1;
  w.send_flags = SEND_SIGNALED;
  w.remote_addr = remote_addr;
  w.rkey = rkey;
  return w;
}

Result<void> post_on(Qp& qp, SendWr wr) {
  const SendWr* bad = nullptr;
  return qp.post_send(&wr, &bad);
}

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7 + (i >> 12));
  return v;
}

// Two devices on single packets and one manual clock; `a` reads from `b`.
struct Stepped {
  ManualClock clock;
  ImpairSpec spec = single_packets();
  Side a{256, {64, 64, 4, 4, 128}, &clock, &spec};
  Side b{256, {64, 64, 4, 4, 128}, &clock, &spec};

  // One device turn: a tick of the clock, then everything due on b's
  // engine thread (one responder turn per QP with answers waiting).
  void turn() {
    clock.advance(Clock::duration(1));
    b.dev->engine().drain_timer();
    settle_a();
  }
  // a's engine thread runs a's transport timers when the clock passes them:
  // a response b delivers meanwhile waits in the QP's inbox for that thread.
  // Waiting for what fell due on a as well makes a turn whole however the
  // threads are scheduled (a preempted timer thread held up the victim).
  void settle_a() { a.dev->engine().drain_timer(); }
  // Turns until `cq` holds n completions (at most `limit` turns).
  std::vector<Wc> turns_until(Cq& cq, std::size_t n, int limit = 100000) {
    std::vector<Wc> out;
    for (int i = 0; i < limit && out.size() < n; ++i) {
      Wc wc[16];
      const int k = cq.poll(std::span<Wc>(wc, std::min<std::size_t>(16, n - out.size())));
      out.insert(out.end(), wc, wc + k);
      if (out.size() < n) turn();
    }
    return out;
  }
};

// A READ of several MiB (2048 packets at MTU 4096, 8192 at 1024) goes out a
// burst per turn and lands whole; the first burst leaves with the request,
// and no turn sends more than a burst.
TEST(ResponderBound, ALargeReadIsPacedAndLandsWhole) {
  for (std::uint32_t mtu : {4096u, 1024u}) {
    SCOPED_TRACE(mtu);
    Stepped s;
    PathParams path;
    path.path_mtu = mtu;
    connect(s.a, s.b, path);
    constexpr std::size_t kLen = 8u << 20;
    auto src = pattern(kLen, static_cast<std::uint8_t>(mtu));
    std::vector<std::uint8_t> dst(kLen, 0);
    const std::uint32_t rkey = s.b.reg(src.data(), kLen, kAccessAll);
    const std::uint32_t lkey = s.a.reg(dst.data(), kLen, kAccessAll);
    Sge sge{reinterpret_cast<std::uint64_t>(dst.data()), kLen, lkey};
    ASSERT_TRUE(post_on(*s.a.qp, read_wr(1, sge, reinterpret_cast<std::uint64_t>(src.data()), rkey)));
    const std::uint64_t packets = kLen / mtu;
    EXPECT_EQ(s.b.qp->counters().responses_sent, kResponseBurst) << "the first burst, with the request";
    std::uint64_t turns = 0, last = s.b.qp->counters().responses_sent;
    std::vector<Wc> wcs;
    while (wcs.empty() && turns < 2 * packets) {
      s.turn();
      ++turns;
      const std::uint64_t now = s.b.qp->counters().responses_sent;
      ASSERT_LE(now - last, kResponseBurst) << "turn " << turns;
      last = now;
      Wc wc[1];
      if (s.a.scq->poll(std::span<Wc>(wc, 1)) == 1) wcs.push_back(wc[0]);
    }
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
    EXPECT_EQ(wcs[0].byte_len, kLen);
    EXPECT_EQ(turns, packets / kResponseBurst - 1) << "a burst per turn after the first";
    EXPECT_EQ(s.b.qp->counters().responses_sent, packets);
    EXPECT_TRUE(dst == src) << "every byte read";
    EXPECT_EQ(s.a.qp->counters().retransmissions, 0u);
    EXPECT_EQ(s.b.dev->engine().counters().dropped_total(), 0u);
  }
}

// What follows a READ waits for its responses: a WRITE's ACK and an
// atomic's ACK never overtake them (an ACK would imply the READ done and
// have it asked again), and everything completes once, in order.
TEST(ResponderBound, AnswersBehindAPacedReadKeepTheirOrder) {
  Stepped s;
  connect(s.a, s.b);
  constexpr std::size_t kLen = 1u << 20;
  auto src = pattern(kLen, 3);
  std::vector<std::uint8_t> dst(kLen, 0);
  const std::uint32_t rkey = s.b.reg(src.data(), kLen, kAccessAll);
  const std::uint32_t lkey = s.a.reg(dst.data(), kLen, kAccessAll);
  Sge rsge{reinterpret_cast<std::uint64_t>(dst.data()), kLen, lkey};
  ASSERT_TRUE(post_on(*s.a.qp, read_wr(1, rsge, reinterpret_cast<std::uint64_t>(src.data()), rkey)));
  std::fill(s.a.buf.begin(), s.a.buf.begin() + 64, 0x5c);
  Sge wsge{s.a.addr(), 64, s.a.key};
  ASSERT_TRUE(post(s.a, write_wr(2, wsge, s.b.addr(256), s.b.key)));
  s.b.buf[512] = 0;
  SendWr fa;
  Sge asge{s.a.addr(1024), 8, s.a.key};
  fa.wr_id = 3;
  fa.opcode = WrOpcode::kAtomicFetchAndAdd;
  fa.sg_list = &asge;
  fa.num_sge = 1;
  fa.send_flags = SEND_SIGNALED;
  fa.remote_addr = s.b.addr(512);
  fa.rkey = s.b.key;
  fa.compare_add = 5;
  ASSERT_TRUE(post(s.a, fa));
  ASSERT_TRUE(post(s.a, write_wr(4, wsge, s.b.addr(2048), s.b.key)));
  const auto wcs = s.turns_until(*s.a.scq, 4);
  ASSERT_EQ(wcs.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(wcs[i].wr_id, i + 1);
    EXPECT_EQ(wcs[i].status, WcStatus::kSuccess) << i;
  }
  EXPECT_TRUE(dst == src);
  EXPECT_EQ(s.b.buf[256], 0x5c);
  EXPECT_EQ(s.b.buf[2048], 0x5c);
  EXPECT_EQ(s.b.buf[512], 5);
  EXPECT_EQ(s.a.qp->counters().retransmissions, 0u) << "no READ asked again: no ACK overtook its responses";
  EXPECT_EQ(s.a.qp->counters().dropped_total(), 0u);
}

// A stranger who knows a READ the peer made (its PSN, address, key and
// length) and sends its duplicate from the peer's address: the first
// kDupReadBudget are executed again, every other one is dropped and
// counted as rate_limited; the bucket refills on the engine clock.
TEST(ResponderBound, ExcessDuplicateReadsAreDroppedAndCounted) {
  ManualClock clock;
  Side a(&clock), b(&clock);
  PathParams path;
  path.sq_psn = path.rq_psn = 0x123456;
  connect(a, b, path);
  Sge sge{a.addr(), 4096, a.key};
  ASSERT_TRUE(post(a, read_wr(1, sge, b.addr(), b.key)));
  ASSERT_EQ(poll_n(*a.scq, 1).size(), 1u);

  auto forged = [&] {
    Packet p;
    p.op = Opcode::kReadRequest;
    p.src_addr = a.dev->engine().address();
    p.dst_addr = b.dev->engine().address();
    p.src_qpn = a.qp->qpn();
    p.dst_qpn = b.qp->qpn();
    p.psn = path.sq_psn;
    p.ack_req = true;
    p.va = b.addr();
    p.rkey = b.key;
    p.dma_length = 4096;
    return p;
  };
  auto limited = [&] { return b.dev->engine().counters().dropped_for(DropReason::kRateLimited); };
  for (int i = 0; i < 100; ++i) b.dev->engine().receive(forged());
  EXPECT_EQ(b.qp->counters().duplicate_requests, 100u);
  EXPECT_EQ(limited(), 100u - kDupReadBudget);
  EXPECT_EQ(b.qp->counters().responses_sent, 1u + kDupReadBudget);
  // Ten refills' worth of engine time: ten more.
  clock.advance(10 * kDupReadRefill);
  for (int i = 0; i < 20; ++i) b.dev->engine().receive(forged());
  EXPECT_EQ(limited(), 100u - kDupReadBudget + 10);
  EXPECT_EQ(b.qp->counters().responses_sent, 1u + kDupReadBudget + 10);
  // The peer's QP carries on: its next READ is no duplicate.
  ASSERT_TRUE(post(a, read_wr(2, sge, b.addr(), b.key)));
  const auto wcs = poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
}

// A duplicate-READ storm against one QP of b while another QP of b serves
// a stream of READs: counted in device turns, the victim completes at least
// half of what it completes without the storm, and the storm's QP never
// sends more than two bursts a turn (one answering a duplicate that found
// nothing waiting, one turn of its train), however large its region.
TEST(ResponderBound, ADuplicateReadStormLeavesOtherQpsTheirShare) {
  constexpr std::size_t kStormLen = 4u << 20;   // each duplicate asks for 1024 packets
  constexpr std::size_t kVictimLen = 256u << 10;  // 64 packets: four bursts
  constexpr int kRounds = 400;
  constexpr int kDuplicatesPerRound = 4;
  constexpr int kOutstanding = 2;

  auto run = [&](bool storm, std::uint64_t* storm_packets, std::uint64_t* limited) {
    Stepped s;
    connect(s.a, s.b);
    auto vcq = s.a.dev->engine().create_cq(256, 0, nullptr).value();
    auto va = s.a.dev->engine().create_qp(QpInit{s.a.pdn, vcq, s.a.rcq, {64, 64, 4, 4, 128}}).value();
    auto vb = s.b.dev->engine().create_qp(QpInit{s.b.pdn, s.b.scq, s.b.rcq, {64, 64, 4, 4, 128}}).value();
    bring_up(*va, s.b.dev->engine().address(), vb->qpn());
    bring_up(*vb, s.a.dev->engine().address(), va->qpn());

    auto storm_src = pattern(kStormLen, 1), victim_src = pattern(kVictimLen, 2);
    std::vector<std::uint8_t> storm_dst(kStormLen), victim_dst(kOutstanding * kVictimLen);
    const std::uint32_t storm_rkey = s.b.reg(storm_src.data(), kStormLen, kAccessAll);
    const std::uint32_t victim_rkey = s.b.reg(victim_src.data(), kVictimLen, kAccessAll);
    const std::uint32_t storm_lkey = s.a.reg(storm_dst.data(), kStormLen, kAccessAll);
    const std::uint32_t victim_lkey = s.a.reg(victim_dst.data(), victim_dst.size(), kAccessAll);

    // The READ whose duplicates make the storm, done once for real.
    Sge ssge{reinterpret_cast<std::uint64_t>(storm_dst.data()), kStormLen, storm_lkey};
    const std::uint64_t storm_va = reinterpret_cast<std::uint64_t>(storm_src.data());
    EXPECT_TRUE(post_on(*s.a.qp, read_wr(1, ssge, storm_va, storm_rkey)));
    EXPECT_EQ(s.turns_until(*s.a.scq, 1).size(), 1u);
    EXPECT_TRUE(storm_dst == storm_src);
    const std::uint64_t storm_before = s.b.qp->counters().responses_sent;
    Packet dup;
    dup.op = Opcode::kReadRequest;
    dup.src_addr = s.a.dev->engine().address();
    dup.dst_addr = s.b.dev->engine().address();
    dup.src_qpn = s.a.qp->qpn();
    dup.dst_qpn = s.b.qp->qpn();
    dup.psn = 0;  // PathParams' sq_psn: the READ's
    dup.ack_req = true;
    dup.va = storm_va;
    dup.rkey = storm_rkey;
    dup.dma_length = kStormLen;

    std::vector<Sge> vsge;
    for (int k = 0; k < kOutstanding; ++k)
      vsge.push_back(Sge{reinterpret_cast<std::uint64_t>(victim_dst.data()) + k * kVictimLen, kVictimLen, victim_lkey});
    const std::uint64_t victim_va = reinterpret_cast<std::uint64_t>(victim_src.data());
    std::uint64_t posted = 0, done = 0;
    for (int round = 0; round < kRounds; ++round) {
      while (posted - done < kOutstanding) {
        EXPECT_TRUE(post_on(*va, read_wr(posted, vsge[posted % kOutstanding], victim_va, victim_rkey)));
        ++posted;
      }
      // A round: the storm, then one device turn, kDupReadRefill of engine
      // time on (one duplicate's budget back a round: the storm goes on all
      // along). Each QP's next turn is due a tick after its last: one each.
      const std::uint64_t before = s.b.qp->counters().responses_sent;
      if (storm)
        for (int d = 0; d < kDuplicatesPerRound; ++d) s.b.dev->engine().receive(Packet(dup));
      s.clock.advance(kDupReadRefill);
      s.b.dev->engine().drain_timer();
      s.settle_a();
      EXPECT_LE(s.b.qp->counters().responses_sent - before, 2 * kResponseBurst) << "round " << round;
      Wc wc[8];
      const int k = vcq->poll(std::span<Wc>(wc, 8));
      for (int i = 0; i < k; ++i) {
        EXPECT_EQ(wc[i].status, WcStatus::kSuccess);
        EXPECT_EQ(wc[i].wr_id, done);
        ++done;
      }
    }
    EXPECT_EQ(std::memcmp(victim_dst.data(), victim_src.data(), kVictimLen), 0);
    EXPECT_EQ(va->counters().retransmissions, 0u);
    *storm_packets = s.b.qp->counters().responses_sent - storm_before;
    *limited = s.b.dev->engine().counters().dropped_for(DropReason::kRateLimited);
    return done;
  };

  std::uint64_t clean_storm = 0, clean_limited = 0, storm_packets = 0, limited = 0;
  const std::uint64_t clean = run(false, &clean_storm, &clean_limited);
  const std::uint64_t stormy = run(true, &storm_packets, &limited);
  // Without the bound, each duplicate streamed 1024 packets at once.
  EXPECT_GT(clean, 50u) << "the victim's clean rate: a READ every few turns";
  EXPECT_EQ(clean_storm, 0u);
  EXPECT_GE(2 * stormy, clean) << "clean " << clean << ", under the storm " << stormy;
  EXPECT_GT(storm_packets, 0u) << "the storm was executed, within its budget";
  EXPECT_LE(storm_packets, std::uint64_t{kRounds} * 2 * kResponseBurst);
  EXPECT_GT(limited, 0u) << "duplicates beyond the budget were dropped and counted";
  RecordProperty("victim_clean", static_cast<int>(clean));
  RecordProperty("victim_under_storm", static_cast<int>(stormy));
  RecordProperty("storm_packets", static_cast<int>(storm_packets));
  RecordProperty("storm_rate_limited", static_cast<int>(limited));
}

// The same bounds on the RoCEv2 link: a READ of several MiB crosses real
// sockets a burst at a time and lands whole.
TEST(ResponderBound, ALargeReadCrossesTheWire) {
  Side a = side_on(test::LinkKind::kUdp, 1), b = side_on(test::LinkKind::kUdp, 2);
  PathParams path;
  path.timeout = 14;
  path.retry_cnt = 7;
  connect(a, b, path);
  constexpr std::size_t kLen = 4u << 20;
  auto src = pattern(kLen, 9);
  std::vector<std::uint8_t> dst(kLen, 0);
  const std::uint32_t rkey = b.reg(src.data(), kLen, kAccessAll);
  const std::uint32_t lkey = a.reg(dst.data(), kLen, kAccessAll);
  Sge sge{reinterpret_cast<std::uint64_t>(dst.data()), kLen, lkey};
  ASSERT_TRUE(post_on(*a.qp, read_wr(1, sge, reinterpret_cast<std::uint64_t>(src.data()), rkey)));
  const auto wcs = poll_n(*a.scq, 1, std::chrono::seconds(60));
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(dst == src);
  EXPECT_GE(b.qp->counters().responses_sent, kLen / 4096);
}

}  // namespace
}  // namespace srdma::hca
