// The machines' early entries against the machines alone: the plain-WR
// post, the whole-message send, the responder's unlocked WRITE and the
// completer's compact ACK are entries into the same state machines, so a
// workload run with them (QpInit::fast_entries) and without them must end
// in the same QP states, completions, counters and bytes.
//
// Each run drives the same WR stream (SENDs, WRITEs, with and without
// immediate, READs, atomics; 0 bytes to several MTUs; some unsignaled) from
// PSNs just below the 24-bit wrap, over the in-process link: as it is
// (trains, compact ACKs), and through an impairing link that loses,
// duplicates and reorders requests and responses from fixed seeds. Time is
// a manual clock, advanced by one transport timeout only when the devices
// are quiet (drain_timer), so both runs see the same packets in the same
// order and differ only in which entry took them.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "hca_pair.h"
#include "srdma/impair.h"

namespace srdma::hca {
namespace {

using pair::PathParams;
using pair::Side;

constexpr std::uint32_t kMtu = 256;
constexpr std::uint32_t kDepth = 16;  // WRs posted at once
constexpr std::uint32_t kSlot = 4 * kMtu + 64;
constexpr QpCaps kCaps{64, 64, 4, 4, 64};

// What a run ends with, everything but the QPNs (which are random).
struct Outcome {
  struct Completion {
    std::uint64_t wr_id;
    WcStatus status;
    WcOpcode opcode;
    std::uint32_t byte_len, imm, flags;
    bool operator==(const Completion&) const = default;
  };
  std::vector<Completion> send_wcs, recv_wcs;
  TransportCounters a, b;
  QpState a_state = QpState::kReset, b_state = QpState::kReset;
  std::vector<std::uint8_t> a_mem, b_mem, recv_mem;
};

enum class Op { kSend, kSendImm, kWrite, kWriteImm, kRead, kCmpSwap, kFetchAdd };

struct Planned {
  Op op;
  std::uint32_t len;
  bool signaled;
};

std::vector<Planned> plan(std::uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  std::vector<Planned> out;
  const std::uint32_t sizes[] = {0, 1, 8, kMtu - 1, kMtu, kMtu + 1, 3 * kMtu + 5, 4 * kMtu};
  for (int i = 0; i < n; ++i) {
    Planned p{static_cast<Op>(rng() % 7), sizes[rng() % 8], rng() % 3 != 0 || i % kDepth == kDepth - 1};
    if (p.op == Op::kCmpSwap || p.op == Op::kFetchAdd) p.len = 8;
    out.push_back(p);
  }
  return out;
}

class Workload {
 public:
  Workload(bool fast, const ImpairSpec* a_spec, const ImpairSpec* b_spec)
      : a_(256, kCaps, &clock_, a_spec), b_(256, kCaps, &clock_, b_spec) {
    if (!fast) {
      a_.use_full_machines();
      b_.use_full_machines();
    }
    a_mem_.assign(2 * kDepth * kSlot, 0);
    b_mem_.assign(kDepth * kSlot + 8 * kDepth, 0);
    recv_mem_.assign(kDepth * kSlot, 0);
    for (std::size_t i = 0; i < a_mem_.size(); ++i) a_mem_[i] = static_cast<std::uint8_t>(i * 7 + 3);
    for (std::size_t i = 0; i < b_mem_.size(); ++i) b_mem_[i] = static_cast<std::uint8_t>(i * 13 + 5);
    a_key_ = a_.reg(a_mem_.data(), a_mem_.size(), kAccessAll);
    b_key_ = b_.reg(b_mem_.data(), b_mem_.size(), kAccessAll);
    recv_key_ = b_.reg(recv_mem_.data(), recv_mem_.size(), kAccessAll);
    PathParams p;
    p.path_mtu = kMtu;
    p.timeout = 1;  // 8 us of the manual clock
    p.retry_cnt = 7;
    p.rnr_retry = 7;
    p.sq_psn = p.rq_psn = 0xffffe0;  // the stream wraps its PSNs
    pair::connect(a_, b_, p);
  }

  Outcome go(const std::vector<Planned>& wrs) {
    for (std::size_t first = 0; first < wrs.size(); first += kDepth) {
      const std::size_t n = std::min<std::size_t>(kDepth, wrs.size() - first);
      std::size_t signaled = 0, recvs = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const Planned& w = wrs[first + i];
        if (w.op == Op::kSend || w.op == Op::kSendImm || w.op == Op::kWriteImm) post_recv(recvs++);
        signaled += w.signaled;
      }
      for (std::size_t i = 0; i < n; ++i) post(first + i, i, wrs[first + i]);
      wait(*a_.scq, signaled, out_.send_wcs);
      wait(*b_.rcq, recvs, out_.recv_wcs);
      if (::testing::Test::HasFatalFailure()) break;
    }
    out_.a = a_.qp->counters();
    out_.b = b_.qp->counters();
    out_.a_state = a_.qp->state();
    out_.b_state = b_.qp->state();
    out_.a_mem = a_mem_;
    out_.b_mem = b_mem_;
    out_.recv_mem = recv_mem_;
    return out_;
  }

 private:
  void post_recv(std::size_t slot) {
    Sge sge{reinterpret_cast<std::uint64_t>(recv_mem_.data() + slot * kSlot), kSlot, recv_key_};
    RecvWr r;
    r.wr_id = 1000 + recv_id_++;
    r.sg_list = &sge;
    r.num_sge = 1;
    const RecvWr* bad = nullptr;
    ASSERT_TRUE(b_.qp->post_recv(&r, &bad));
  }

  void post(std::size_t id, std::size_t slot, const Planned& w) {
    // Sources in a's first half, READ and atomic results in its second;
    // b's slot `slot` is the WRITE target and READ source, the atomic
    // words after the slots.
    const bool into_a = w.op == Op::kRead || w.op == Op::kCmpSwap || w.op == Op::kFetchAdd;
    Sge sge{reinterpret_cast<std::uint64_t>(a_mem_.data() + (into_a ? kDepth + slot : slot) * kSlot), w.len, a_key_};
    SendWr wr;
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = w.signaled ? static_cast<std::uint32_t>(SEND_SIGNALED) : 0u;
    wr.remote_addr = reinterpret_cast<std::uint64_t>(b_mem_.data() + slot * kSlot);
    wr.rkey = b_key_;
    wr.imm_data = static_cast<std::uint32_t>(id * 2654435761u);
    switch (w.op) {
      case Op::kSend: wr.opcode = WrOpcode::kSend; break;
      case Op::kSendImm: wr.opcode = WrOpcode::kSendWithImm; break;
      case Op::kWrite: wr.opcode = WrOpcode::kRdmaWrite; break;
      case Op::kWriteImm: wr.opcode = WrOpcode::kRdmaWriteWithImm; break;
      case Op::kRead: wr.opcode = WrOpcode::kRdmaRead; break;
      case Op::kCmpSwap:
      case Op::kFetchAdd:
        wr.opcode = w.op == Op::kCmpSwap ? WrOpcode::kAtomicCmpAndSwp : WrOpcode::kAtomicFetchAndAdd;
        wr.remote_addr = reinterpret_cast<std::uint64_t>(b_mem_.data() + kDepth * kSlot + 8 * slot);
        wr.compare_add = id;
        wr.swap = id * 3 + 1;
        break;
    }
    ASSERT_TRUE(pair::post(a_, wr)) << "WR " << id;
  }

  // Polls until `n` completions are in; when nothing comes, the devices'
  // timers are drained (everything due has run) and the clock moves by a
  // transport timeout. Bounded in rounds, not in real time.
  void wait(Cq& cq, std::size_t n, std::vector<Outcome::Completion>& into) {
    std::size_t got = 0;
    for (int round = 0; got < n && round < 20000; ++round) {
      Wc wc[16];
      const int k = cq.poll(wc);
      for (int i = 0; i < k; ++i)
        into.push_back({wc[i].wr_id, wc[i].status, wc[i].opcode, wc[i].byte_len,
                        (wc[i].wc_flags & WC_WITH_IMM) ? wc[i].imm_data : 0, wc[i].wc_flags});
      got += static_cast<std::size_t>(k);
      if (k == 0) {
        a_.dev->engine().drain_timer();
        b_.dev->engine().drain_timer();
        clock_.advance(std::chrono::microseconds(16));
        a_.dev->engine().drain_timer();
        b_.dev->engine().drain_timer();
      }
    }
    ASSERT_EQ(got, n) << "completions missing";
  }

  ManualClock clock_;
  Side a_, b_;
  std::vector<std::uint8_t> a_mem_, b_mem_, recv_mem_;
  std::uint32_t a_key_ = 0, b_key_ = 0, recv_key_ = 0;
  std::uint64_t recv_id_ = 0;
  Outcome out_;
};

void expect_same_counters(const TransportCounters& fast, const TransportCounters& full, const char* side) {
  SCOPED_TRACE(side);
  EXPECT_EQ(fast.requests_sent, full.requests_sent);
  EXPECT_EQ(fast.requests_received, full.requests_received);
  EXPECT_EQ(fast.responses_sent, full.responses_sent);
  EXPECT_EQ(fast.responses_received, full.responses_received);
  EXPECT_EQ(fast.retransmissions, full.retransmissions);
  EXPECT_EQ(fast.timeouts, full.timeouts);
  EXPECT_EQ(fast.rnr_naks_sent, full.rnr_naks_sent);
  EXPECT_EQ(fast.rnr_naks_received, full.rnr_naks_received);
  EXPECT_EQ(fast.rnr_retries, full.rnr_retries);
  EXPECT_EQ(fast.seq_naks_sent, full.seq_naks_sent);
  EXPECT_EQ(fast.seq_naks_received, full.seq_naks_received);
  EXPECT_EQ(fast.duplicate_requests, full.duplicate_requests);
  EXPECT_EQ(fast.dropped, full.dropped);
  EXPECT_EQ(fast.naks_sent, full.naks_sent);
  EXPECT_EQ(fast.naks_received, full.naks_received);
}

struct Case {
  std::string name;
  bool impaired;
  ImpairSpec spec;
  std::uint64_t seed;
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
};

class FastEntryDifferential : public ::testing::TestWithParam<Case> {};

TEST_P(FastEntryDifferential, EntriesEndWhereTheMachinesAloneEnd) {
  const Case& c = GetParam();
  ImpairSpec b_spec = c.spec;
  b_spec.seed = c.spec.seed * 7919 + 1;
  const std::vector<Planned> wrs = plan(c.seed, 12 * static_cast<int>(kDepth));
  Outcome fast, full;
  {
    Workload r(true, c.impaired ? &c.spec : nullptr, c.impaired ? &b_spec : nullptr);
    fast = r.go(wrs);
  }
  ASSERT_FALSE(HasFatalFailure());
  {
    Workload r(false, c.impaired ? &c.spec : nullptr, c.impaired ? &b_spec : nullptr);
    full = r.go(wrs);
  }
  ASSERT_FALSE(HasFatalFailure());
  for (const auto& wc : fast.send_wcs) ASSERT_EQ(wc.status, WcStatus::kSuccess) << "WR " << wc.wr_id;
  EXPECT_EQ(fast.a_state, QpState::kRts);
  EXPECT_EQ(fast.a_state, full.a_state);
  EXPECT_EQ(fast.b_state, full.b_state);
  EXPECT_TRUE(fast.send_wcs == full.send_wcs) << "send completions differ";
  EXPECT_TRUE(fast.recv_wcs == full.recv_wcs) << "receive completions differ";
  expect_same_counters(fast.a, full.a, "requester side");
  expect_same_counters(fast.b, full.b, "responder side");
  EXPECT_TRUE(fast.a_mem == full.a_mem) << "READ and atomic results differ";
  EXPECT_TRUE(fast.b_mem == full.b_mem) << "WRITE targets differ";
  EXPECT_TRUE(fast.recv_mem == full.recv_mem) << "received bytes differ";
  if (c.impaired) {
    // The impairment did something to compare: the transport recovered.
    EXPECT_GT(fast.a.retransmissions + fast.b.duplicate_requests, 0u);
  }
}

ImpairSpec spec(double loss, double dup, double reorder, std::uint64_t seed) {
  ImpairSpec s;
  s.loss = loss;
  s.dup = dup;
  s.reorder = reorder;
  s.reorder_depth = 3;
  s.seed = seed;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Links, FastEntryDifferential,
    ::testing::Values(Case{"InOrder", false, {}, 1}, Case{"InOrderOtherStream", false, {}, 2},
                      Case{"Lost", true, spec(0.05, 0, 0, 11), 3}, Case{"Duplicated", true, spec(0, 0.1, 0, 12), 4},
                      Case{"Reordered", true, spec(0, 0, 0.1, 13), 5},
                      Case{"AllOfThem", true, spec(0.03, 0.05, 0.05, 14), 6},
                      Case{"AllOfThemAgain", true, spec(0.03, 0.05, 0.05, 15), 7}),
    [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

}  // namespace
}  // namespace srdma::hca
