// The impairing link against a fake wire that records what reaches it: the
// rates, the replay by seed, the reorder bound, payload ownership, and
// sends from inside a delivery and from two threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "hca/impaired_link.h"

namespace srdma::hca {
namespace {

// What arrived, read at arrival as a receiver would read it.
struct Arrival {
  std::uint32_t psn = 0;
  bool corrupted = false;
  std::vector<std::byte> bytes;
  const std::byte* first_piece = nullptr;
};

class RecordingLink final : public Link {
 public:
  bool send(Packet&& p) override {
    Arrival a{p.psn, p.corrupted, {}, p.payload.empty() ? nullptr : p.payload.front().addr};
    for (const MemPiece& m : std::span<const MemPiece>(p.payload))
      a.bytes.insert(a.bytes.end(), m.addr, m.addr + m.length);
    {
      std::lock_guard lock(mu);
      got.push_back(std::move(a));
      counts.push_back(p.count);
    }
    if (on_arrival) on_arrival(p);
    return p.dst_addr != kUnknown;
  }
  bool knows(std::uint64_t addr) const override { return addr != kUnknown; }
  std::vector<std::uint32_t> psns() const {
    std::vector<std::uint32_t> v;
    for (const Arrival& a : got) v.push_back(a.psn);
    return v;
  }
  bool carries_trains() const override { return trains; }
  static constexpr std::uint64_t kUnknown = 99;
  bool trains = false;
  std::vector<std::uint32_t> counts;  // each arrival's packets (a train's count)
  std::mutex mu;
  std::vector<Arrival> got;
  std::function<void(const Packet&)> on_arrival;
};

Packet packet(std::uint32_t psn, std::byte* data = nullptr, std::size_t len = 0) {
  Packet p;
  p.op = Opcode::kWriteOnly;
  p.psn = psn;
  if (data) {
    p.payload.push_back(MemPiece{data, len});
    p.payload_length = static_cast<std::uint32_t>(len);
  }
  return p;
}

ImpairSpec spec(double loss, double dup, double reorder, double corrupt, std::uint64_t seed = 1,
                std::uint32_t depth = 4) {
  ImpairSpec s;
  s.loss = loss;
  s.dup = dup;
  s.reorder = reorder;
  s.corrupt = corrupt;
  s.seed = seed;
  s.reorder_depth = depth;
  return s;
}

std::vector<std::uint32_t> run(const ImpairSpec& s, std::uint32_t n) {
  RecordingLink wire;
  ImpairedLink link(wire, s);
  for (std::uint32_t i = 0; i < n; ++i) link.send(packet(i));
  link.flush();
  return wire.psns();
}

TEST(ImpairedLink, NoImpairmentPassesEveryPacketByReferenceInOrder) {
  RecordingLink wire;
  ImpairedLink link(wire, spec(0, 0, 0, 0));
  std::array<std::byte, 16> buf{};
  for (std::uint32_t i = 0; i < 1000; ++i) EXPECT_TRUE(link.send(packet(i, buf.data(), buf.size())));
  ASSERT_EQ(wire.got.size(), 1000u);  // nothing held: all there before flush
  for (std::uint32_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(wire.got[i].psn, i);
    EXPECT_FALSE(wire.got[i].corrupted);
    EXPECT_EQ(wire.got[i].first_piece, buf.data());  // not copied
  }
  EXPECT_EQ(link.stats(), (ImpairStats{1000, 0, 0, 0, 0}));
}

TEST(ImpairedLink, RatesFollowTheSpec) {
  constexpr std::uint32_t kN = 100000;
  RecordingLink wire;
  ImpairedLink link(wire, spec(0.1, 0.05, 0.05, 0.02, 42));
  for (std::uint32_t i = 0; i < kN; ++i) link.send(packet(i));
  link.flush();
  ImpairStats st = link.stats();
  EXPECT_EQ(st.passed + st.dropped, kN);
  EXPECT_EQ(wire.got.size(), st.passed + st.duplicated);
  // Loose bounds: many standard deviations wide, never flaky for one seed.
  EXPECT_NEAR(st.dropped, 0.1 * kN, 1000);
  EXPECT_NEAR(st.duplicated, 0.05 * 0.9 * kN, 700);
  EXPECT_NEAR(st.reordered, 0.05 * 0.9 * kN, 700);
  EXPECT_NEAR(st.corrupted, 0.02 * 0.9 * kN, 400);
  auto flagged = std::count_if(wire.got.begin(), wire.got.end(), [](const Arrival& a) { return a.corrupted; });
  EXPECT_GE(static_cast<std::uint64_t>(flagged), st.corrupted);  // a corrupted duplicate arrives twice
}

TEST(ImpairedLink, OneSeedReplaysTheSameSequence) {
  ImpairSpec s = spec(0.1, 0.1, 0.1, 0.1, 7);
  auto first = run(s, 5000);
  EXPECT_EQ(run(s, 5000), first);
  s.seed = 8;
  EXPECT_NE(run(s, 5000), first);
}

// A train of `n` packets of `mtu` bytes from PSN `psn` (a WRITE FIRST..LAST).
Packet train(std::uint32_t psn, std::uint32_t n, std::byte* data, std::uint32_t mtu) {
  Packet p = packet(psn, data, std::size_t{n} * mtu);
  p.op = Opcode::kWriteFirst;
  p.last_op = Opcode::kWriteLast;
  p.count = n;
  return p;
}

// Over a link that carries trains, a train's packets meet the fates they
// would one by one (the same seed loses the same PSNs); an untouched train
// goes on whole, by reference; a touched one packet by packet, each with
// its own MTU of the payload.
TEST(ImpairedLink, ATrainsPacketsMeetTheFatesTheyWouldOneByOne) {
  constexpr std::uint32_t kMtu = 256, kTrain = 16, kTrains = 200;
  const ImpairSpec s = spec(0.01, 0.01, 0.01, 0.01, 38);
  RecordingLink single;
  {
    ImpairedLink link(single, s);
    for (std::uint32_t i = 0; i < kTrain * kTrains; ++i) link.send(packet(i));
    link.flush();
  }
  std::vector<std::byte> buf(kTrain * kMtu);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = std::byte(i / kMtu);
  RecordingLink wire;
  wire.trains = true;
  ImpairedLink link(wire, s);
  EXPECT_TRUE(link.carries_trains());
  for (std::uint32_t t = 0; t < kTrains; ++t) link.send(train(t * kTrain, kTrain, buf.data(), kMtu));
  link.flush();
  std::vector<std::uint32_t> psns;
  std::size_t whole = 0;
  for (std::size_t i = 0; i < wire.got.size(); ++i) {
    const Arrival& a = wire.got[i];
    if (wire.counts[i] > 1) {  // whole: by reference, every packet of it
      ++whole;
      EXPECT_EQ(wire.counts[i], kTrain);
      EXPECT_EQ(a.first_piece, buf.data());
      for (std::uint32_t k = 0; k < kTrain; ++k) psns.push_back(a.psn + k);
      continue;
    }
    psns.push_back(a.psn);
    if (!a.corrupted) {  // its own MTU of the payload, or none
      ASSERT_EQ(a.bytes.size(), kMtu);
      EXPECT_EQ(a.bytes[0], std::byte(a.psn % kTrain));
    }
  }
  EXPECT_EQ(psns, single.psns()) << "the same packets lost, duplicated and reordered";
  EXPECT_GT(whole, kTrains / 4) << "many untouched at 4% per packet (and nothing of the flow held)";
  EXPECT_LT(whole, kTrains);
  EXPECT_EQ(link.stats().passed + link.stats().dropped, kTrain * kTrains);
}

TEST(ImpairedLink, OverAWireOfSinglePacketsNoTrains) {
  RecordingLink wire;
  ImpairedLink link(wire, spec(0.01, 0, 0, 0));
  EXPECT_FALSE(link.carries_trains());
  RecordingLink trains;
  trains.trains = true;
  ImpairSpec alone = spec(0.01, 0, 0, 0);
  alone.single_packets = true;
  ImpairedLink asked(trains, alone);
  EXPECT_FALSE(asked.carries_trains()) << "asked for single packets";
}

// A held packet is overtaken by at most reorder_depth packets sent after it.
TEST(ImpairedLink, ReorderStaysWithinDepth) {
  for (std::uint32_t depth : {1u, 3u, 8u}) {
    auto got = run(spec(0.05, 0, 0.3, 0, depth, depth), 20000);
    std::uint32_t max_overtakers = 0;
    std::vector<std::uint32_t> max_after(got.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      std::uint32_t overtakers = 0;
      for (std::size_t j = (i > 64 ? i - 64 : 0); j < i; ++j) overtakers += got[j] > got[i];
      max_overtakers = std::max(max_overtakers, overtakers);
    }
    EXPECT_LE(max_overtakers, depth) << "depth " << depth;
    EXPECT_GE(max_overtakers, 1u) << "depth " << depth;  // it did reorder
    auto sorted = got;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());  // no packet twice
  }
}

// Only a later packet of its own flow (one QP's requests, or its
// responses, to one peer) lets a held packet go.
TEST(ImpairedLink, AHeldPacketWaitsForItsOwnFlow) {
  RecordingLink wire;
  ImpairedLink link(wire, spec(0, 0, 0.999999, 0, 1, 1));  // everything held behind one packet
  auto from = [](std::uint32_t qpn, std::uint32_t psn, Opcode op = Opcode::kWriteOnly) {
    Packet p = packet(psn);
    p.src_qpn = qpn;
    p.op = op;
    return p;
  };
  link.send(from(1, 10));
  link.send(from(2, 20));                    // another QP
  link.send(from(1, 30, Opcode::kAck));      // the same QP's responses
  EXPECT_TRUE(wire.got.empty());
  link.send(from(1, 11));                    // releases 10, is held itself
  EXPECT_EQ(wire.psns(), (std::vector<std::uint32_t>{10}));
  link.send(from(2, 21));
  link.send(from(1, 31, Opcode::kAck));
  EXPECT_EQ(wire.psns(), (std::vector<std::uint32_t>{10, 20, 30}));
  link.flush();
  EXPECT_EQ(wire.psns(), (std::vector<std::uint32_t>{10, 20, 30, 11, 21, 31}));
}

// A held packet does not outlive its resend: the resend discards it and
// goes on at once (a late original could reach the responder after its WR
// completed).
TEST(ImpairedLink, AResendDiscardsTheHeldOriginalAndIsNotHeld) {
  RecordingLink wire;
  // (Seed 3 holds packet 1 for more than one later send.)
  ImpairedLink link(wire, spec(0, 0, 0.999999, 0, 3, 4));
  link.send(packet(1));  // held
  link.send(packet(2));  // held
  EXPECT_TRUE(wire.got.empty());
  link.send(packet(1));  // go-back-N from 1
  EXPECT_EQ(wire.psns(), (std::vector<std::uint32_t>{1}));
  link.send(packet(2));
  EXPECT_EQ(wire.psns(), (std::vector<std::uint32_t>{1, 2}));
  link.flush();  // nothing left
  EXPECT_EQ(wire.psns(), (std::vector<std::uint32_t>{1, 2}));
  EXPECT_EQ(link.stats(), (ImpairStats{2, 2, 0, 2, 0}));
}

TEST(ImpairedLink, HeldPacketOwnsItsPayload) {
  RecordingLink wire;
  ImpairedLink link(wire, spec(0, 0, 0.999999, 0, 1, 1));
  std::array<std::byte, 64> buf;
  buf.fill(std::byte{0xab});
  link.send(packet(0, buf.data(), buf.size()));
  ASSERT_TRUE(wire.got.empty());
  buf.fill(std::byte{0x00});  // the WR completed, the buffer is reused
  link.flush();
  ASSERT_EQ(wire.got.size(), 1u);
  EXPECT_NE(wire.got[0].first_piece, buf.data());
  EXPECT_EQ(wire.got[0].bytes, std::vector<std::byte>(64, std::byte{0xab}));
}

TEST(ImpairedLink, DuplicateOwnsItsPayload) {
  RecordingLink wire;
  ImpairedLink link(wire, spec(0, 0.999999, 0, 0));
  std::array<std::byte, 64> buf;
  buf.fill(std::byte{0xcd});
  // The first copy completes the WR and the consumer reuses the buffer
  // before the second copy arrives.
  wire.on_arrival = [&](const Packet&) { buf.fill(std::byte{0x00}); };
  link.send(packet(0, buf.data(), buf.size()));
  ASSERT_EQ(wire.got.size(), 2u);
  for (const Arrival& a : wire.got) EXPECT_EQ(a.bytes, std::vector<std::byte>(64, std::byte{0xcd}));
  EXPECT_EQ(link.stats().duplicated, 1u);
}

// A receiver may keep a packet past send() (a completer's inbox): the copy
// a held packet carries lives as long as any copy of the packet does.
TEST(ImpairedLink, AKeptPacketKeepsItsCopyAlive) {
  RecordingLink wire;
  std::vector<Packet> inbox;
  wire.on_arrival = [&](const Packet& p) { inbox.push_back(p); };
  {
    ImpairedLink link(wire, spec(0, 0, 0.999999, 0, 1, 1));
    std::array<std::byte, 64> buf;
    buf.fill(std::byte{0x42});
    Packet p = packet(0, buf.data(), buf.size());
    p.op = Opcode::kReadResponseOnly;
    link.send(std::move(p));
    buf.fill(std::byte{0});
    link.flush();
  }  // the link and its held list are gone
  ASSERT_EQ(inbox.size(), 1u);
  ASSERT_TRUE(inbox[0].owned);
  const MemPiece& m = inbox[0].payload.front();
  EXPECT_EQ(std::vector<std::byte>(m.addr, m.addr + m.length), std::vector<std::byte>(64, std::byte{0x42}));
}

TEST(ImpairedLink, CorruptionFlagsThePacketAndFlipsOneBitOfACopy) {
  RecordingLink wire;
  ImpairedLink link(wire, spec(0, 0, 0, 0.999999));
  std::array<std::byte, 100> buf;
  buf.fill(std::byte{0x5a});
  const std::array<std::byte, 100> orig = buf;
  link.send(packet(0, buf.data(), buf.size()));
  link.send(packet(1));  // no payload: only the flag
  ASSERT_EQ(wire.got.size(), 2u);
  EXPECT_TRUE(wire.got[0].corrupted);
  EXPECT_TRUE(wire.got[1].corrupted);
  EXPECT_EQ(buf, orig);  // the sender's memory is untouched
  int flipped = 0;
  for (std::size_t i = 0; i < buf.size(); ++i)
    flipped += std::popcount(static_cast<unsigned>(wire.got[0].bytes[i] ^ orig[i]));
  EXPECT_EQ(flipped, 1);
  EXPECT_EQ(link.stats().corrupted, 2u);
}

TEST(ImpairedLink, PassesTheInnerAnswerForThePacketSentNow) {
  RecordingLink wire;
  ImpairedLink plain(wire, spec(0, 0, 0, 0));
  Packet p = packet(0);
  p.dst_addr = RecordingLink::kUnknown;
  EXPECT_FALSE(plain.send(std::move(p)));
  ImpairedLink lossy(wire, spec(0.999999, 0, 0, 0));
  p = packet(1);
  p.dst_addr = RecordingLink::kUnknown;
  EXPECT_TRUE(lossy.send(std::move(p)));  // lost before the wire could say
}

TEST(ImpairedLink, DestructionLosesWhatIsHeld) {
  RecordingLink wire;
  {
    ImpairedLink link(wire, spec(0, 0, 0.999999, 0, 3, 4));  // (seed 3: 0 waits for more than 1)
    link.send(packet(0));
    link.send(packet(1));
  }
  EXPECT_TRUE(wire.got.empty());
}

// The in-process wire delivers in the sender's thread and the receiver
// answers through the same link, from inside send().
TEST(ImpairedLink, SendFromInsideADeliveryDoesNotDeadlock) {
  RecordingLink wire;
  ImpairedLink link(wire, spec(0.1, 0.1, 0.3, 0.1, 5));
  wire.on_arrival = [&](const Packet& p) {
    if (p.psn >= 1000) return;
    Packet ack = packet(p.psn + 1000);
    ack.op = Opcode::kAck;
    link.send(std::move(ack));
  };
  for (std::uint32_t i = 0; i < 1000; ++i) link.send(packet(i));
  link.flush();
  ImpairStats st = link.stats();
  EXPECT_GT(st.passed + st.dropped, 1000u);  // the answers went through it too
  EXPECT_EQ(wire.got.size(), st.passed + st.duplicated);
}

TEST(ImpairedLink, TwoSendersAtOnce) {
  constexpr std::uint32_t kPerThread = 20000;
  RecordingLink wire;
  ImpairedLink link(wire, spec(0.05, 0.05, 0.1, 0.05, 3));
  std::array<std::byte, 32> buf{};
  auto sender = [&](std::uint32_t base) {
    for (std::uint32_t i = 0; i < kPerThread; ++i) link.send(packet(base + i, buf.data(), buf.size()));
  };
  std::thread t1(sender, 0), t2(sender, 1u << 20);
  t1.join();
  t2.join();
  link.flush();
  ImpairStats st = link.stats();
  EXPECT_EQ(st.passed + st.dropped, 2 * kPerThread);
  EXPECT_EQ(wire.got.size(), st.passed + st.duplicated);
}

}  // namespace
}  // namespace srdma::hca
