// Identifiers a stranger on the network must not guess: MR keys, QPNs and
// starting PSNs. A fresh device's first rkey and QPN are not mthca's 0x100
// and 2, successive keys do not step by one slot, two devices do not agree,
// a freed key never comes back on its slot's next allocation, the random
// rotation replays from a seed (SRDMA_DETERMINISTIC_IDS) where a test asks
// for it, and a sweep of forged RC packets with guessed PSNs, from the
// peer's own address, executes nothing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "alloc/index_allocator.h"
#include "common/secure_random.h"
#include "hca/keys.h"
#include "hca/roce_frame.h"
#include "hca_pair.h"
#include "loopback.h"

namespace srdma::hca {
namespace {

using namespace pair;
using alloc::IndexAllocator;
using alloc::TopRotation;
using test::eventually;
using test::loopback_ip;
using test::loopback_net;

// SRDMA_DETERMINISTIC_IDS set for one scope (and unset after it).
class DeterministicIds {
 public:
  explicit DeterministicIds(const char* seed) { ::setenv("SRDMA_DETERMINISTIC_IDS", seed, 1); }
  ~DeterministicIds() { ::unsetenv("SRDMA_DETERMINISTIC_IDS"); }
  DeterministicIds(const DeterministicIds&) = delete;
  DeterministicIds& operator=(const DeterministicIds&) = delete;
};

// Keys of `n` regions registered one after the other on `s`'s device.
std::vector<std::uint32_t> keys_of(Side& s, int n) {
  std::vector<std::uint32_t> keys;
  for (int i = 0; i < n; ++i) keys.push_back(s.reg(s.buf.data(), 4096, kAccessAll));
  return keys;
}

std::vector<std::uint32_t> qpns_of(Side& s, int n) {
  std::vector<std::uint32_t> qpns{s.qp->qpn()};
  for (int i = 1; i < n; ++i)
    qpns.push_back(s.dev->engine().create_qp(QpInit{s.pdn, s.scq, s.rcq, {4, 4, 1, 1, 0}}).value()->qpn());
  return qpns;
}

TEST(RandomTop, StartsAnywhereAndStepsByRandomMultiplesOfNum) {
  // 2^14 tops: two allocators agreeing on a start by chance is 2^-14; on
  // four values in a row, never.
  std::vector<std::uint32_t> first, second;
  for (auto* v : {&first, &second}) {
    auto a = IndexAllocator::create(1u << 10, (1u << 24) - 1, 2, TopRotation::random()).value();
    for (int i = 0; i < 4; ++i) v->push_back(a.alloc().value());
  }
  EXPECT_NE(first, second);
  for (std::size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i] & 1023, i + 2) << "the index is mthca's: lowest free first";
    EXPECT_LE(first[i], (1u << 24) - 1) << "inside the mask";
    if (i > 0) {
      EXPECT_NE(first[i] & ~1023u, first[i - 1] & ~1023u) << "every allocation moves the top";
    }
  }
}

TEST(RandomTop, AReusedSlotNeverComesBackWithItsLastValue) {
  // 8 tops: random steps come back to a slot's old top often; the
  // allocator must step past it every time.
  auto a = IndexAllocator::create(8, 63, 1, TopRotation::random()).value();
  std::uint32_t last = a.alloc().value();
  std::set<std::uint32_t> seen{last & ~7u};
  for (int i = 0; i < 20000; ++i) {
    ASSERT_TRUE(a.free(last));
    ASSERT_FALSE(a.is_allocated(last));
    const std::uint32_t v = a.alloc().value();
    ASSERT_EQ(v & 7, last & 7) << "the same slot (the only free one below it)";
    ASSERT_NE(v, last) << "iteration " << i;
    EXPECT_EQ(a.free(last).error().code, EINVAL) << "a stale value is refused";
    seen.insert(v & ~7u);
    last = v;
  }
  EXPECT_EQ(seen.size(), 8u) << "every top is reached";
}

TEST(RandomTop, ASeedReplaysAndSequentialIsMthcas) {
  auto run = [](TopRotation r) {
    auto a = IndexAllocator::create(64, ~0u, 1, r).value();
    std::vector<std::uint32_t> v;
    for (int i = 0; i < 50; ++i) {
      const std::uint32_t x = a.alloc().value();
      v.push_back(x);
      if (i % 3 == 0) {
        EXPECT_TRUE(a.free(x));
      }
    }
    return v;
  };
  EXPECT_EQ(run(TopRotation::seeded(7)), run(TopRotation::seeded(7)));
  EXPECT_NE(run(TopRotation::seeded(7)), run(TopRotation::seeded(8)));
  EXPECT_NE(run(TopRotation::random()), run(TopRotation::random()));
  const auto seq = run(TopRotation::sequential());
  EXPECT_EQ(seq[0], 1u);
  EXPECT_EQ(seq[1], 1u | 64u) << "mthca: the free of 1 advanced top by num";
}

TEST(RandomTop, AMaskWithoutHighBitsHasNothingToRotate) {
  auto a = IndexAllocator::create(16, 15, 1, TopRotation::random()).value();
  EXPECT_FALSE(a.random_top());
  EXPECT_EQ(a.alloc().value(), 1u);
}

TEST(Identifiers, AFreshDeviceIsNotMthcasFirstKeyAndQpn) {
  // Over a few fresh devices, at least one differs from each of mthca's
  // deterministic first values (each alone matches with p ~ 2^-22, 2^-18).
  bool key_differs = false, qpn_differs = false;
  for (int i = 0; i < 3; ++i) {
    Side s;
    key_differs |= s.key != hw_index_to_key(1);  // 0x100: MPT 1 (0 is reserved), key byte 0
    qpn_differs |= s.qp->qpn() != 2;
  }
  EXPECT_TRUE(key_differs);
  EXPECT_TRUE(qpn_differs);
}

TEST(Identifiers, SuccessiveMrKeysAreNotSequential) {
  Side s;
  const auto keys = keys_of(s, 16);
  for (std::size_t i = 1; i < keys.size(); ++i) {
    // The slots follow each other; the bits above them and the key byte
    // do not: the next key is not the last one plus a slot.
    EXPECT_EQ((keys[i] >> 8) & 1023, ((keys[i - 1] >> 8) & 1023) + 1);
    EXPECT_NE(keys[i] - keys[i - 1], 0x100u) << "key " << i;
  }
  std::set<std::uint32_t> bytes;
  for (std::uint32_t k : keys) bytes.insert(k & 0xff);
  EXPECT_GT(bytes.size(), 4u) << "the key byte moves at random, not by one per reuse";
}

TEST(Identifiers, TwoDevicesDisagreeOnKeysAndQpns) {
  Side a, b;
  EXPECT_NE(keys_of(a, 4), keys_of(b, 4));
  EXPECT_NE(qpns_of(a, 4), qpns_of(b, 4));
}

TEST(Identifiers, QpnsAre24BitsAndNeverTheReservedOnes) {
  Side s;
  for (std::uint32_t qpn : qpns_of(s, 40)) {
    EXPECT_LE(qpn, 0xffffffu);
    EXPECT_GE(qpn & 63, 2u) << "index 0 and 1 are QP0 and QP1's";
    EXPECT_NE(qpn, 0u);
    EXPECT_NE(qpn, 1u);
  }
}

TEST(Identifiers, AStaleKeyAfterFreeAndReallocationIsRefused) {
  Side s;
  std::uint32_t key = s.reg(s.buf.data(), 4096, kAccessAll);
  const std::uint64_t va = s.addr();
  for (int i = 0; i < 2000; ++i) {
    ASSERT_TRUE(s.dev->tables().dereg_mr(key));
    const std::uint32_t next = s.reg(s.buf.data(), 4096, kAccessAll);
    ASSERT_EQ(next >> 8 & 1023, key >> 8 & 1023) << "the slot is reused";
    ASSERT_NE(next, key) << "iteration " << i;
    auto t = s.dev->tables().translate(key, va, 8, ACCESS_REMOTE_WRITE, s.pdn);
    ASSERT_FALSE(t);
    EXPECT_EQ(t.error(), Refusal::kKeyMismatch);
    key = next;
  }
}

TEST(Identifiers, FastRegistrationKeysStartAtARandomKeyByte) {
  Side s;
  std::set<std::uint32_t> bytes;
  for (int i = 0; i < 8; ++i) bytes.insert(s.dev->tables().alloc_fast_reg_mr(s.pdn, 4).value() & 0xff);
  EXPECT_GT(bytes.size(), 1u) << "not one fixed key byte for every MR";
}

TEST(Identifiers, DeterministicIdsReplayAndStillAreNotMthcas) {
  std::vector<std::uint32_t> keys[2], qpns[2];
  for (int run = 0; run < 2; ++run) {
    DeterministicIds ids("12345");
    Side s;
    keys[run] = keys_of(s, 6);
    qpns[run] = qpns_of(s, 6);
  }
  EXPECT_EQ(keys[0], keys[1]);
  EXPECT_EQ(qpns[0], qpns[1]);
  {
    DeterministicIds ids("12346");
    Side s;
    EXPECT_NE(keys_of(s, 6), keys[0]) << "another seed, other values";
  }
  Side s;  // unset again: random
  EXPECT_NE(keys_of(s, 6), keys[0]);
}

TEST(Identifiers, StartingPsnsAreNotASequence) {
  // What librdmacm's connect and accept, srdma perf and the examples draw.
  std::vector<std::uint32_t> psns;
  for (int i = 0; i < 256; ++i) psns.push_back(random_psn());
  for (std::uint32_t p : psns) EXPECT_LE(p, 0xffffffu);
  EXPECT_GT(std::set<std::uint32_t>(psns.begin(), psns.end()).size(), 250u);
  std::set<std::uint32_t> steps;
  for (std::size_t i = 1; i < psns.size(); ++i) steps.insert((psns[i] - psns[i - 1]) & 0xffffff);
  EXPECT_GT(steps.size(), 250u) << "not a linear sequence (minstd_rand's multiplier shows as one step)";
}

// A UDP socket on `ip` (the peer's own address: a stranger on its host or
// one spoofing it), for frames of our making.
class Spoofer {
 public:
  explicit Spoofer(std::uint32_t ip) : ip_(ip) {
    fd_ = ::socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(ip_);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    sport_ = ntohs(a.sin_port);
    const int pmtu = IP_PMTUDISC_DO;
    ::setsockopt(fd_, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
  }
  ~Spoofer() { ::close(fd_); }
  void send(const Packet& p, std::uint32_t dst_ip) {
    FrameHeaders h = build_headers(p);
    std::vector<std::byte> f(h.bytes.begin(), h.bytes.begin() + h.length);
    for (const MemPiece& m : std::span<const MemPiece>(p.payload)) f.insert(f.end(), m.addr, m.addr + m.length);
    f.resize(f.size() + h.pad);
    const IpUdpFields ip{ip_, dst_ip, sport_, kRoceV2Port, 0, true};
    const std::uint32_t icrc = compute_icrc(ip, f);
    for (int i = 0; i < 4; ++i) f.push_back(static_cast<std::byte>(icrc >> (8 * i)));
    sockaddr_in d{};
    d.sin_family = AF_INET;
    d.sin_addr.s_addr = htonl(dst_ip);
    d.sin_port = htons(kRoceV2Port);
    ASSERT_EQ(::sendto(fd_, f.data(), f.size(), 0, reinterpret_cast<sockaddr*>(&d), sizeof d),
              static_cast<ssize_t>(f.size()))
        << std::strerror(errno);
  }

 private:
  int fd_ = -1;
  std::uint32_t ip_ = 0;
  std::uint16_t sport_ = 0;
};

// An attacker who knows b's QPN, its rkey and where its buffer is, and
// sends from a's own address, but not the PSN b expects: a sweep of RC
// SEND ONLY and WRITE ONLY frames over guessed PSNs (mthca's and srdma's
// old starting points first, then random ones) and guessed QPNs executes
// nothing, and every frame is accounted for as a drop, a sequence NAK or
// an acknowledged duplicate.
TEST(Identifiers, ForgedRequestsWithGuessedPsnsExecuteNothing) {
  NetConfig na = loopback_net(1), nb = loopback_net(2);
  Side a{256, {64, 64, 4, 4, 128}, nullptr, nullptr, &na};
  Side b{256, {64, 64, 4, 4, 128}, nullptr, nullptr, &nb};
  PathParams path;
  path.sq_psn = path.rq_psn = random_psn();
  connect(a, b, path);
  std::fill(b.buf.begin(), b.buf.end(), 0x11);
  Sge rsge{b.addr(4096), 256, b.key};
  RecvWr rwr;
  rwr.wr_id = 7;
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  const RecvWr* bad = nullptr;
  ASSERT_TRUE(b.qp->post_recv(&rwr, &bad));

  const std::uint32_t a_ip = roce_ipv4(a.dev->engine().address()), b_ip = roce_ipv4(b.dev->engine().address());
  Spoofer spoof(a_ip);
  std::array<std::byte, 64> evil{};
  evil.fill(std::byte{0xee});
  constexpr int kFrames = 2000;
  for (int i = 0; i < kFrames; ++i) {
    std::uint32_t psn = i < 512 ? static_cast<std::uint32_t>(i) : random_psn();
    if (psn == path.rq_psn) psn = (psn + 1) & 0xffffff;  // the one guess that would be right
    Packet p;
    p.op = i % 2 ? Opcode::kWriteOnly : Opcode::kSendOnly;
    p.dst_qpn = b.qp->qpn();  // most with the right QPN
    if (i % 4 == 3) {  // a guessed QPN, never b's by chance
      p.dst_qpn = random_psn() | 0x40;
      if (p.dst_qpn == b.qp->qpn()) p.dst_qpn ^= 1;
    }
    p.psn = psn;
    p.ack_req = true;
    if (p.op == Opcode::kWriteOnly) {
      p.va = b.addr(0);
      p.rkey = b.key;
      p.dma_length = evil.size();
    }
    p.payload_length = evil.size();
    p.payload.push_back(MemPiece{evil.data(), evil.size()});
    spoof.send(p, b_ip);
  }
  auto accounted = [&] {
    const TransportCounters c = b.dev->engine().counters();
    return c.dropped_total() + c.duplicate_requests + c.seq_naks_sent;
  };
  ASSERT_TRUE(eventually([&] { return accounted() >= kFrames; })) << accounted() << " of " << kFrames;
  const TransportCounters c = b.dev->engine().counters();
  EXPECT_EQ(accounted(), static_cast<std::uint64_t>(kFrames));
  EXPECT_GT(c.dropped_for(DropReason::kUnknownQp), 0u);
  EXPECT_GT(c.dropped_for(DropReason::kBadPsn), 0u);
  EXPECT_LE(c.seq_naks_sent, 1u) << "one NAK per gap";

  // Nothing landed and nothing completed: the buffer is as it was and the
  // receive is still posted (the real peer's SEND takes it below).
  EXPECT_TRUE(std::all_of(b.buf.begin(), b.buf.end(), [](std::uint8_t x) { return x == 0x11; }));
  Wc wc[1];
  EXPECT_EQ(b.rcq->poll(std::span<Wc>(wc, 1)), 0);
  // b's expected PSN did not move: a's own SEND and WRITE land.
  std::fill(a.buf.begin(), a.buf.begin() + 32, 0x22);
  Sge s{a.addr(), 32, a.key};
  SendWr send;
  send.wr_id = 1;
  send.opcode = WrOpcode::kSend;
  send.sg_list = &s;
  send.num_sge = 1;
  send.send_flags = SEND_SIGNALED;
  ASSERT_TRUE(post(a, send));
  ASSERT_TRUE(post(a, write_wr(2, s, b.addr(0), b.key)));
  const auto done = poll_n(*a.scq, 2);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].status, WcStatus::kSuccess);
  EXPECT_EQ(done[1].status, WcStatus::kSuccess);
  const auto got = poll_n(*b.rcq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 7u);
  EXPECT_EQ(got[0].byte_len, 32u);
  EXPECT_EQ(b.buf[0], 0x22);
  EXPECT_EQ(b.buf[4096], 0x22);
}

}  // namespace
}  // namespace srdma::hca
