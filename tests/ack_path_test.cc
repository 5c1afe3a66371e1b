// The plain ACK's short path: the responder hands the link an Ack
// (Link::send_ack), the send side keeps it in a slot of its own, and the
// completer, on the ACK of a WQE's last PSN, retires that WQE and the
// SENDs and WRITEs before it directly; every other ACK goes through the
// completer's state machine as a packet.
#include <gtest/gtest.h>

#include <array>

#include "hca/link.h"
#include "hca_pair.h"

namespace srdma::hca {
namespace {

using pair::connect;
using pair::poll_n;
using pair::post;
using pair::Side;
using pair::write_wr;

Ack sample_ack() { return Ack{0x11, 0x22, 5, 6, 0xabcdef, 42, 0xc123}; }

TEST(AckPath, AnAckIsExactlyAPlainAckPacket) {
  const Packet p = sample_ack().packet();
  EXPECT_TRUE(Ack::is(p));
  EXPECT_EQ(p.op, Opcode::kAck);
  EXPECT_EQ(p.syndrome, Syndrome::kAck);
  EXPECT_EQ(p.transport, QpType::kRc);
  EXPECT_EQ(p.count, 1u);
  EXPECT_EQ(p.payload_length, 0u);
  const Ack back = Ack::of(p);
  EXPECT_EQ(back.src_addr, 0x11u);
  EXPECT_EQ(back.dst_addr, 0x22u);
  EXPECT_EQ(back.src_qpn, 5u);
  EXPECT_EQ(back.dst_qpn, 6u);
  EXPECT_EQ(back.psn, 0xabcdefu);
  EXPECT_EQ(back.msn, 42u);
  EXPECT_EQ(back.udp_sport, 0xc123u);
}

TEST(AckPath, AnythingButAPlainAckIsNotOne) {
  std::array<std::byte, 8> data{};
  auto changed = [](auto f) {
    Packet p = sample_ack().packet();
    f(p);
    return Ack::is(p);
  };
  EXPECT_FALSE(changed([](Packet& p) { p.syndrome = Syndrome::kRnrNak; }));
  EXPECT_FALSE(changed([](Packet& p) { p.syndrome = Syndrome::kPsnSequenceError; }));
  EXPECT_FALSE(changed([](Packet& p) { p.op = Opcode::kAtomicAck; }));
  EXPECT_FALSE(changed([](Packet& p) { p.op = Opcode::kReadResponseOnly; }));
  EXPECT_FALSE(changed([](Packet& p) { p.count = 2; }));
  EXPECT_FALSE(changed([](Packet& p) { p.transport = QpType::kUc; }));
  EXPECT_FALSE(changed([](Packet& p) { p.corrupted = true; }));
  EXPECT_FALSE(changed([&](Packet& p) {
    p.payload.push_back(MemPiece{data.data(), data.size()});
    p.payload_length = data.size();
  }));
  EXPECT_FALSE(changed([](Packet& p) { p.owned = std::make_shared<const std::vector<std::byte>>(); }));
}

// A link without a send_ack of its own gets the packet.
TEST(AckPath, ALinkWithoutItsOwnSendAckIsSentThePacket) {
  class Recording final : public Link {
   public:
    bool send(Packet&& p) override {
      got.push_back(std::move(p));
      return true;
    }
    bool knows(std::uint64_t) const override { return true; }
    std::vector<Packet> got;
  } link;
  ASSERT_TRUE(link.send_ack(sample_ack()));
  ASSERT_EQ(link.got.size(), 1u);
  EXPECT_TRUE(Ack::is(link.got[0]));
  EXPECT_EQ(link.got[0].psn, 0xabcdefu);
  EXPECT_EQ(link.got[0].dst_qpn, 6u);
  EXPECT_EQ(link.got[0].udp_sport, 0xc123u);
}

// Each signaled WRITE's ACK names its own last PSN: the short path
// completes each, in order, one response each way.
TEST(AckPath, EachSignaledWriteCompletesOnItsAck) {
  Side a, b;
  connect(a, b, pair::PathParams{.path_mtu = 1024});
  Sge small{a.addr(), 256, a.key}, big{a.addr(), 16384, a.key};  // 1 and 16 PSNs
  ASSERT_TRUE(post(a, write_wr(1, small, b.addr(), b.key)));
  ASSERT_TRUE(post(a, write_wr(2, big, b.addr(), b.key)));
  ASSERT_TRUE(post(a, write_wr(3, small, b.addr(), b.key)));
  const auto wcs = poll_n(*a.scq, 3);
  ASSERT_EQ(wcs.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(wcs[i].wr_id, i + 1);
    EXPECT_EQ(wcs[i].status, WcStatus::kSuccess);
    EXPECT_EQ(wcs[i].opcode, WcOpcode::kRdmaWrite);
  }
  EXPECT_EQ(wcs[1].byte_len, 16384u);
  const TransportCounters ca = a.qp->counters(), cb = b.qp->counters();
  EXPECT_EQ(ca.requests_sent, 18u);
  EXPECT_EQ(cb.responses_sent, 3u);
  EXPECT_EQ(ca.responses_received, 3u);
  EXPECT_EQ(ca.dropped_total(), 0u);
}

// An unsignaled WRITE asks for no ACK; the signaled one after it does, and
// its ACK retires both (the first implied), one CQE.
TEST(AckPath, AnAckAlsoRetiresTheUnsignaledWqeBeforeIt) {
  Side a, b;
  connect(a, b);
  Sge sge{a.addr(), 256, a.key};
  ASSERT_TRUE(post(a, write_wr(1, sge, b.addr(), b.key, 0)));
  ASSERT_TRUE(post(a, write_wr(2, sge, b.addr(), b.key)));
  const auto wcs = poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 2u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  const TransportCounters ca = a.qp->counters(), cb = b.qp->counters();
  EXPECT_EQ(cb.responses_sent, 1u);
  EXPECT_EQ(ca.responses_received, 1u);
  // Both WQEs left the queue: a full queue's worth can be posted again.
  for (std::uint64_t i = 0; i < 64; ++i) ASSERT_TRUE(post(a, write_wr(10 + i, sge, b.addr(), b.key)));
  EXPECT_EQ(poll_n(*a.scq, 64).size(), 64u);
}

// An Ack that arrives from anyone but the peer, or for a PSN already
// acknowledged, is dropped and counted, and completes nothing.
TEST(AckPath, AnAckFromAStrangerOrForAnOldPsnIsDropped) {
  Side a, b;
  connect(a, b);
  Sge sge{a.addr(), 256, a.key};
  ASSERT_TRUE(post(a, write_wr(1, sge, b.addr(), b.key)));
  ASSERT_EQ(poll_n(*a.scq, 1).size(), 1u);
  Link& link = b.dev->engine().link();
  const std::uint64_t a_addr = a.dev->engine().address(), b_addr = b.dev->engine().address();
  Ack stranger{b_addr + 1000, a_addr, b.qp->qpn(), a.qp->qpn(), 0, 1, 0};
  Ack wrong_qpn{b_addr, a_addr, b.qp->qpn() + 1, a.qp->qpn(), 0, 1, 0};
  Ack old{b_addr, a_addr, b.qp->qpn(), a.qp->qpn(), 0, 1, 0};  // PSN 0 was acknowledged
  ASSERT_TRUE(link.send_ack(stranger));
  ASSERT_TRUE(link.send_ack(wrong_qpn));
  ASSERT_TRUE(link.send_ack(old));
  const TransportCounters ca = a.qp->counters();
  EXPECT_EQ(ca.dropped_for(DropReason::kBadSource), 2u);
  EXPECT_EQ(ca.dropped_for(DropReason::kBadPsn), 1u);
  EXPECT_EQ(ca.responses_received, 1u);
  EXPECT_TRUE(poll_n(*a.scq, 1, std::chrono::milliseconds(0)).empty());
}

// CQ moderation's run through the short path: two unsignaled WRITEs, then
// a signaled one whose ACK (the only one asked for) retires all three.
TEST(AckPath, TheSignaledWritesAckRetiresTheUnsignaledRunBeforeIt) {
  Side a, b;
  connect(a, b);
  Sge sge{a.addr(), 256, a.key};
  ASSERT_TRUE(post(a, write_wr(1, sge, b.addr(), b.key, 0)));
  ASSERT_TRUE(post(a, write_wr(2, sge, b.addr(512), b.key, 0)));
  ASSERT_TRUE(post(a, write_wr(3, sge, b.addr(1024), b.key)));
  const auto wcs = poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 3u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(b.qp->counters().responses_sent, 1u);
  EXPECT_EQ(a.qp->counters().responses_received, 1u);
  for (std::uint64_t i = 0; i < 64; ++i) ASSERT_TRUE(post(a, write_wr(10 + i, sge, b.addr(), b.key, 0))) << i;
}

// A READ in the run answers with its data, ahead of the ACK after it: the
// data lands, and the last WRITE's ACK then finds only that WRITE left.
TEST(AckPath, AReadInTheRunIsAnsweredBeforeTheAckAfterIt) {
  Side a, b;
  connect(a, b);
  for (std::size_t i = 0; i < 64; ++i) b.buf[8192 + i] = static_cast<std::uint8_t>(i + 1);
  Sge src{a.addr(), 256, a.key}, dst{a.addr(4096), 64, a.key};
  ASSERT_TRUE(post(a, write_wr(1, src, b.addr(), b.key, 0)));
  SendWr rd = write_wr(2, dst, b.addr(8192), b.key, 0);
  rd.opcode = WrOpcode::kRdmaRead;
  ASSERT_TRUE(post(a, rd));
  ASSERT_TRUE(post(a, write_wr(3, src, b.addr(), b.key)));
  const auto wcs = poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 3u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  for (std::size_t i = 0; i < 64; ++i) ASSERT_EQ(a.buf[4096 + i], i + 1) << i;
  EXPECT_EQ(a.qp->counters().responses_received, 2u);
  for (std::uint64_t i = 0; i < 64; ++i) ASSERT_TRUE(post(a, write_wr(10 + i, src, b.addr(), b.key, 0))) << i;
}

// The ACKs below are the test's own, sent from outside the send side, so
// they take the state machine: what the short path must agree with. The
// peer stays in RESET (it drops every request), and the clock never moves
// (no transport timeout).
struct Unanswered {
  ManualClock clock;
  Side a{&clock}, b;
  Unanswered() { pair::bring_up(a, b.dev->engine().address(), b.qp->qpn(), pair::PathParams{.path_mtu = 1024}); }
  void ack(std::uint32_t psn) {
    ASSERT_TRUE(b.dev->engine().link().send_ack(
        Ack{b.dev->engine().address(), a.dev->engine().address(), b.qp->qpn(), a.qp->qpn(), psn, 1, 0}));
  }
};

// CQ moderation's run: two unsignaled WRITEs (1 and 16 PSNs) and a signaled
// one. The ACK of the last one's PSN retires all three, one CQE.
TEST(AckPath, AnInjectedAckRetiresTheUnsignaledRunBeforeItsWqe) {
  Unanswered u;
  Sge small{u.a.addr(), 256, u.a.key}, big{u.a.addr(), 16384, u.a.key};
  ASSERT_TRUE(post(u.a, write_wr(1, small, u.b.addr(), u.b.key, 0)));
  ASSERT_TRUE(post(u.a, write_wr(2, big, u.b.addr(), u.b.key, 0)));
  ASSERT_TRUE(post(u.a, write_wr(3, small, u.b.addr(), u.b.key)));
  ASSERT_EQ(u.a.qp->counters().requests_sent, 18u);
  u.ack(17);
  const auto wcs = poll_n(*u.a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 3u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  const TransportCounters c = u.a.qp->counters();
  EXPECT_EQ(c.responses_received, 1u);
  EXPECT_EQ(c.dropped_total(), 0u);
  // All three left the queue: its whole depth can be posted again.
  for (std::uint64_t i = 0; i < 64; ++i) ASSERT_TRUE(post(u.a, write_wr(10 + i, small, u.b.addr(), u.b.key, 0)));
}

// A READ cannot be implied by a later ACK (its data did not come): the
// WRITE after it does not complete, and the READ and that WRITE are sent
// again (IBA 9.7.5.1.2). The WRITE before it is retired.
TEST(AckPath, AnAckBeyondAnUnansweredReadCompletesNothingAfterIt) {
  Unanswered u;
  Sge src{u.a.addr(), 256, u.a.key}, dst{u.a.addr(4096), 64, u.a.key};
  ASSERT_TRUE(post(u.a, write_wr(1, src, u.b.addr(), u.b.key, 0)));
  SendWr rd = write_wr(2, dst, u.b.addr(), u.b.key, 0);
  rd.opcode = WrOpcode::kRdmaRead;
  ASSERT_TRUE(post(u.a, rd));
  ASSERT_TRUE(post(u.a, write_wr(3, src, u.b.addr(), u.b.key)));
  ASSERT_EQ(u.a.qp->counters().requests_sent, 3u);
  u.ack(2);
  EXPECT_TRUE(poll_n(*u.a.scq, 1, std::chrono::milliseconds(0)).empty());
  const TransportCounters c = u.a.qp->counters();
  EXPECT_EQ(c.requests_sent, 5u) << "the READ and the WRITE after it, again";
  EXPECT_EQ(c.responses_received, 1u);
  // The first WRITE left the queue (64 deep), the other two did not.
  for (std::uint64_t i = 0; i < 62; ++i) ASSERT_TRUE(post(u.a, write_wr(10 + i, src, u.b.addr(), u.b.key, 0))) << i;
  EXPECT_FALSE(post(u.a, write_wr(99, src, u.b.addr(), u.b.key, 0)));
}

// An ACK inside a WQE (not its last PSN) completes nothing: it moves the
// window, and the WQEs before it are retired.
TEST(AckPath, AnAckInsideAWqeCompletesNothing) {
  Unanswered u;
  Sge small{u.a.addr(), 256, u.a.key}, big{u.a.addr(), 16384, u.a.key};
  ASSERT_TRUE(post(u.a, write_wr(1, small, u.b.addr(), u.b.key)));
  ASSERT_TRUE(post(u.a, write_wr(2, big, u.b.addr(), u.b.key)));
  u.ack(8);  // the 8th of the second WRITE's 16 PSNs
  const auto wcs = poll_n(*u.a.scq, 2, std::chrono::milliseconds(0));
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  u.ack(16);
  const auto last = poll_n(*u.a.scq, 1);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].wr_id, 2u);
  EXPECT_EQ(u.a.qp->counters().responses_received, 2u);
}

}  // namespace
}  // namespace srdma::hca
