// The RC engine at the device level: two software HCAs, every opcode, every
// error status, RNR, flush, ordering; each test over the in-process link
// and over RoCEv2 on this process's loopback addresses (loopback.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <optional>
#include <thread>
#include <vector>

#include "hca/soft_hca.h"
#include "hca_pair.h"
#include "loopback.h"
#include "srdma/access.h"
#include "wait.h"

namespace srdma::hca {
namespace {

using pair::Side;
using test::LinkKind;

using pair::poll_n;

// The link is the parameter.
class RcEngine : public ::testing::TestWithParam<LinkKind> {
 protected:
  // The test's k-th device (1..3: on RoCEv2, this process's k-th loopback
  // address), with CQs of `cqe` and a QP of `caps`, its timers on `clock`.
  Side side(unsigned k, std::uint32_t cqe = 256, QpCaps caps = pair::kSideCaps, ManualClock* clock = nullptr) {
    return pair::side_on(GetParam(), k, cqe, caps, clock);
  }
  // pair::connect, but on RoCEv2 with a transport timeout of at least 67 ms
  // (14) for the default's 4 ms (10), and 7 retries: there the timer runs on real time
  // against a real wire and receive threads that share two cores with the
  // test's, and a busy host must not look like a lost peer.
  void connect(Side& a, Side& b, pair::PathParams p = {}) {
    if (GetParam() != LinkKind::kInproc) {
      p.timeout = std::max<std::uint8_t>(p.timeout, 14);
      p.retry_cnt = std::max<std::uint8_t>(p.retry_cnt, 7);  // half a second of silence before retry exceeded
    }
    pair::connect(a, b, p);
  }
};

// A signaled 8-byte WRITE after what was posted before: RC completes in
// order, so once its completion is the next one, nothing posted earlier
// will still complete (the check for "no completion" without a sleep).
constexpr std::uint64_t kFenceId = 0xfe9ce;
void post_fence(Side& a, Side& b) {
  Sge s{a.addr(), 8, a.key};
  SendWr w = pair::write_wr(kFenceId, s, b.addr(60000), b.key);
  const SendWr* bad = nullptr;
  ASSERT_TRUE(a.qp->post_send(&w, &bad));
}

TEST_P(RcEngine, WriteThenReadSeesIt) {
  Side a = side(1), b = side(2);
  connect(a, b);
  std::iota(a.buf.begin(), a.buf.begin() + 4096, 0);
  Sge sge{a.addr(), 4096, a.key};
  SendWr w = pair::write_wr(1, sge, b.addr(100), b.key);
  ASSERT_TRUE(post(a, w));
  Sge back{a.addr(8192), 4096, a.key};
  SendWr r = w;
  r.wr_id = 2;
  r.opcode = WrOpcode::kRdmaRead;
  r.sg_list = &back;
  ASSERT_TRUE(post(a, r));
  auto wcs = poll_n(*a.scq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[0].opcode, WcOpcode::kRdmaWrite);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].opcode, WcOpcode::kRdmaRead);
  EXPECT_EQ(wcs[1].byte_len, 4096u);
  EXPECT_EQ(std::memcmp(b.buf.data() + 100, a.buf.data(), 4096), 0);
  EXPECT_EQ(std::memcmp(a.buf.data() + 8192, a.buf.data(), 4096), 0);
}

TEST_P(RcEngine, SendWithImmAndScatterGather) {
  Side a = side(1), b = side(2);
  connect(a, b);
  std::memcpy(a.buf.data(), "hello, ", 7);
  std::memcpy(a.buf.data() + 1000, "world", 5);
  Sge r[2] = {{b.addr(0), 4, b.key}, {b.addr(5000), 100, b.key}};
  RecvWr rw;
  rw.wr_id = 77;
  rw.sg_list = r;
  rw.num_sge = 2;
  ASSERT_TRUE(b.qp->post_recv(&rw, nullptr));
  Sge s[2] = {{a.addr(0), 7, a.key}, {a.addr(1000), 5, a.key}};
  SendWr w;
  w.wr_id = 5;
  w.opcode = WrOpcode::kSendWithImm;
  w.imm_data = 0xabcd;
  w.sg_list = s;
  w.num_sge = 2;
  ASSERT_TRUE(post(a, w));  // unsignaled: no send CQE
  auto rc = poll_n(*b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].wr_id, 77u);
  EXPECT_EQ(rc[0].status, WcStatus::kSuccess);
  EXPECT_EQ(rc[0].opcode, WcOpcode::kRecv);
  EXPECT_EQ(rc[0].byte_len, 12u);
  EXPECT_TRUE(rc[0].wc_flags & WC_WITH_IMM);
  EXPECT_EQ(rc[0].imm_data, 0xabcdu);
  EXPECT_EQ(rc[0].src_qp, a.qp->qpn());
  EXPECT_EQ(std::memcmp(b.buf.data(), "hell", 4), 0);
  EXPECT_EQ(std::memcmp(b.buf.data() + 5000, "o, world", 8), 0);
  post_fence(a, b);
  auto sc = poll_n(*a.scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].wr_id, kFenceId) << "the unsignaled SEND made no CQE";
}

TEST_P(RcEngine, InlineSendIgnoresLkey) {
  Side a = side(1), b = side(2);
  connect(a, b);
  char msg[] = "inline!";
  Sge r{b.addr(), 64, b.key};
  RecvWr rw;
  rw.sg_list = &r;
  rw.num_sge = 1;
  ASSERT_TRUE(b.qp->post_recv(&rw, nullptr));
  Sge s{reinterpret_cast<std::uint64_t>(msg), 8, 0xdead};
  SendWr w;
  w.opcode = WrOpcode::kSend;
  w.sg_list = &s;
  w.num_sge = 1;
  w.send_flags = SEND_INLINE | SEND_SIGNALED;
  ASSERT_TRUE(post(a, w));
  ASSERT_EQ(poll_n(*a.scq, 1)[0].status, WcStatus::kSuccess);
  EXPECT_STREQ(reinterpret_cast<char*>(b.buf.data()), "inline!");
  s.length = 129;  // beyond max_inline_data
  EXPECT_EQ(post(a, w).error().code, EINVAL);
}

TEST_P(RcEngine, WriteWithImmConsumesAReceive) {
  Side a = side(1), b = side(2);
  connect(a, b);
  RecvWr rw;
  rw.wr_id = 9;
  ASSERT_TRUE(b.qp->post_recv(&rw, nullptr));
  a.buf[0] = 42;
  Sge s{a.addr(), 1, a.key};
  SendWr w;
  w.opcode = WrOpcode::kRdmaWriteWithImm;
  w.imm_data = 7;
  w.sg_list = &s;
  w.num_sge = 1;
  w.remote_addr = b.addr(10);
  w.rkey = b.key;
  ASSERT_TRUE(post(a, w));
  auto rc = poll_n(*b.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(rc[0].imm_data, 7u);
  EXPECT_EQ(b.buf[10], 42);
}

TEST_P(RcEngine, AtomicsAreAtomicUnderContention) {
  Side a = side(1), b = side(2);
  connect(a, b);
  Side& target = b;
  std::memset(target.buf.data(), 0, 8);
  constexpr int kPerThread = 2000;
  // Two requesters (a, and the CPU itself) add to the same word.
  std::thread cpu([&] {
    auto word = std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(target.buf.data()));
    for (int i = 0; i < kPerThread; ++i) word.fetch_add(1);
  });
  for (int i = 0; i < kPerThread; ++i) {
    Sge s{a.addr(64), 8, a.key};
    SendWr w;
    w.opcode = WrOpcode::kAtomicFetchAndAdd;
    w.sg_list = &s;
    w.num_sge = 1;
    w.remote_addr = target.addr();
    w.rkey = target.key;
    w.compare_add = 1;
    w.send_flags = SEND_SIGNALED;
    ASSERT_TRUE(post(a, w));
    ASSERT_EQ(poll_n(*a.scq, 1)[0].status, WcStatus::kSuccess);
  }
  cpu.join();
  EXPECT_EQ(*reinterpret_cast<std::uint64_t*>(target.buf.data()), 2u * kPerThread);
  // Compare and swap returns the original value.
  Sge s{a.addr(64), 8, a.key};
  SendWr cs;
  cs.opcode = WrOpcode::kAtomicCmpAndSwp;
  cs.sg_list = &s;
  cs.num_sge = 1;
  cs.remote_addr = target.addr();
  cs.rkey = target.key;
  cs.compare_add = 2 * kPerThread;
  cs.swap = 99;
  cs.send_flags = SEND_SIGNALED;
  ASSERT_TRUE(post(a, cs));
  ASSERT_EQ(poll_n(*a.scq, 1)[0].status, WcStatus::kSuccess);
  EXPECT_EQ(*reinterpret_cast<std::uint64_t*>(a.buf.data() + 64), 2u * kPerThread);
  EXPECT_EQ(*reinterpret_cast<std::uint64_t*>(target.buf.data()), 99u);
  // Misaligned: remote invalid request.
  cs.remote_addr = target.addr(4);
  ASSERT_TRUE(post(a, cs));
  EXPECT_EQ(poll_n(*a.scq, 1)[0].status, WcStatus::kRemInvReqErr);
}

TEST_P(RcEngine, BadRkeyIsRemoteAccessErrorAndFlushesTheRest) {
  Side a = side(1), b = side(2);
  connect(a, b);
  std::memset(b.buf.data(), 0x11, 64);
  Sge s{a.addr(), 64, a.key};
  SendWr w = pair::write_wr(0, s, b.addr(), b.key ^ 1, 0);  // stale key byte
  SendWr w2 = w, w3 = w;
  w.wr_id = 1;
  w2.wr_id = 2;
  w2.rkey = b.key;
  w3.wr_id = 3;
  w3.rkey = b.key;
  w.next = &w2;
  w2.next = &w3;
  RecvWr rw;
  rw.wr_id = 50;
  ASSERT_TRUE(a.qp->post_recv(&rw, nullptr));
  const SendWr* bad = nullptr;
  ASSERT_TRUE(a.qp->post_send(&w, &bad));
  auto wcs = poll_n(*a.scq, 3);
  ASSERT_EQ(wcs.size(), 3u);  // unsignaled, yet every one completes
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(wcs[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(wcs[2].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(a.qp->state(), QpState::kErr);
  auto rc = poll_n(*a.rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(b.buf[0], 0x11) << "nothing written through a bad key";
  // A WR posted in ERR flushes too.
  ASSERT_TRUE(post(a, w3));
  EXPECT_EQ(poll_n(*a.scq, 1)[0].status, WcStatus::kWrFlushErr);
}

TEST_P(RcEngine, LocalProtectionAndLengthErrors) {
  {
    Side a = side(1), b = side(2);
    connect(a, b);
    Sge s{a.addr(), 64, a.key + 0x100};  // an lkey with no region
    SendWr w = pair::write_wr(0, s, b.addr(), b.key, 0);
    ASSERT_TRUE(post(a, w));
    EXPECT_EQ(poll_n(*a.scq, 1)[0].status, WcStatus::kLocProtErr);
  }
  // (a and b gone: their loopback addresses are free again.)
  Side c = side(1), d = side(2);
  connect(c, d);
  Sge r{d.addr(), 4, d.key};
  RecvWr rw;
  rw.sg_list = &r;
  rw.num_sge = 1;
  ASSERT_TRUE(d.qp->post_recv(&rw, nullptr));
  Sge big{c.addr(), 64, c.key};
  SendWr sw;
  sw.opcode = WrOpcode::kSend;
  sw.sg_list = &big;
  sw.num_sge = 1;
  ASSERT_TRUE(post(c, sw));
  EXPECT_EQ(poll_n(*d.rcq, 1)[0].status, WcStatus::kLocLenErr);
  EXPECT_EQ(poll_n(*c.scq, 1)[0].status, WcStatus::kRemInvReqErr);
}

// A WRITE of several packets goes whole as one train on the in-process
// link: a local key that does not cover all of it fails the WQE with
// LOC_PROT_ERR before anything is sent, an unknown lkey and an SGE running
// past its region's end alike.
// In-process only: RoCEv2 carries single packets, and those before the bad part go out.
TEST(RcEngineInproc, AMultiPacketWriteWithBadLocalMemoryIsLocProtErr) {
  for (int bad_end = 0; bad_end < 2; ++bad_end) {
    Side a, b;
    connect(a, b);
    std::memset(b.buf.data(), 0x5a, b.buf.size());
    std::memset(a.buf.data(), 0x33, a.buf.size());
    const std::uint32_t len = 4 * 4096;  // four packets at the MTU of 4096
    Sge s = bad_end ? Sge{a.addr(a.buf.size() - len / 2), len, a.key} : Sge{a.addr(), len, a.key + 0x100};
    ASSERT_TRUE(post(a, pair::write_wr(1, s, b.addr(), b.key)));
    auto wcs = poll_n(*a.scq, 1);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, WcStatus::kLocProtErr) << "bad_end " << bad_end;
    EXPECT_EQ(a.qp->counters().requests_sent, 0u);
    for (std::size_t i = 0; i < len; ++i) ASSERT_EQ(b.buf[i], 0x5a) << "byte " << i;
  }
}

// IBA 1.5 ATOMIC WRITE: 8 bytes stored as one (a reader polling the word
// sees the old value or the new, never a mix), completing as kAtomicWrite;
// exactly 8 bytes at post, 8-byte alignment and remote write access at the
// responder.
TEST_P(RcEngine, AtomicWriteStoresEightBytesAtOnce) {
  Side a = side(1), b = side(2);
  connect(a, b);
  auto word = std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(b.buf.data()));
  word.store(0);
  constexpr std::uint64_t kOnes = 0x1111111111111111ull, kTwos = 0x2222222222222222ull;
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::thread reader([&] {
    while (!done.load()) {
      const std::uint64_t v = word.load();
      if (v != 0 && v != kOnes && v != kTwos) ++torn;
    }
  });
  auto atomic_write = [&](std::uint64_t wr_id, std::uint64_t remote, std::uint32_t len) {
    Sge s{a.addr(64), len, a.key};
    SendWr w = pair::write_wr(wr_id, s, remote, b.key, SEND_SIGNALED);
    w.opcode = WrOpcode::kAtomicWrite;
    return post(a, w);
  };
  for (int i = 0; i < 400; ++i) {
    const std::uint64_t v = (i % 2) ? kOnes : kTwos;
    std::memcpy(a.buf.data() + 64, &v, 8);
    // (No ASSERT while the reader runs: it is joined below.)
    const bool posted = atomic_write(i, b.addr(), 8).has_value();
    const auto wc = posted ? poll_n(*a.scq, 1) : std::vector<Wc>{};
    const bool ok = wc.size() == 1 && wc[0].status == WcStatus::kSuccess && wc[0].opcode == WcOpcode::kAtomicWrite &&
                    word.load() == v;
    EXPECT_TRUE(ok) << "ATOMIC WRITE " << i;
    if (!ok) break;
  }
  done = true;
  reader.join();
  EXPECT_EQ(torn.load(), 0);
  // Not 8 bytes: refused at post, nothing queued.
  auto r = atomic_write(1000, b.addr(), 4);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EINVAL);
  // Misaligned: the responder refuses it (remote invalid request), the
  // word untouched.
  ASSERT_TRUE(atomic_write(1001, b.addr(4), 8));
  EXPECT_EQ(poll_n(*a.scq, 1)[0].status, WcStatus::kRemInvReqErr);
  EXPECT_EQ(word.load(), kOnes);
}

TEST_P(RcEngine, AtomicWriteNeedsRemoteWriteAccess) {
  Side a = side(1), b = side(2);
  connect(a, b, {.access = ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC});  // no remote write on the QPs
  std::memset(b.buf.data(), 0x5a, 8);
  Sge s{a.addr(), 8, a.key};
  SendWr w = pair::write_wr(1, s, b.addr(), b.key, SEND_SIGNALED);
  w.opcode = WrOpcode::kAtomicWrite;
  ASSERT_TRUE(post(a, w));
  EXPECT_EQ(poll_n(*a.scq, 1)[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(b.buf[0], 0x5a);
  EXPECT_FALSE(opcode_row(QpType::kUc, Opcode::kAtomicWrite).valid()) << "RC only";
}

TEST_P(RcEngine, RemoteAccessDeniedByQpAccessFlags) {
  Side a = side(1), b = side(2);
  connect(a, b, {.access = ACCESS_REMOTE_READ});  // no remote write on either QP
  Sge s{a.addr(), 8, a.key};
  SendWr w = pair::write_wr(0, s, b.addr(), b.key, 0);
  ASSERT_TRUE(post(a, w));
  EXPECT_EQ(poll_n(*a.scq, 1)[0].status, WcStatus::kRemAccessErr);
  EXPECT_TRUE(test::eventually([&] { return b.qp->state() == QpState::kErr; })) << "class C error ends the responder too";
}

TEST_P(RcEngine, RnrRetryExceeded) {
  Side a = side(1), b = side(2);
  connect(a, b, {.rnr_retry = 2, .min_rnr_timer = 1});
  Sge s{a.addr(), 8, a.key};
  SendWr w;
  w.opcode = WrOpcode::kSend;
  w.sg_list = &s;
  w.num_sge = 1;
  ASSERT_TRUE(post(a, w));
  auto wcs = poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRnrRetryExcErr);
}

TEST_P(RcEngine, RnrRetrySucceedsOnceAReceiveIsPosted) {
  // The RNR timer runs on a manual clock: each advance lets one retry out,
  // and between advances the SEND provably waits (no real time involved).
  ManualClock clock;
  Side a = side(1, 256, pair::kSideCaps, &clock), b = side(2, 256, pair::kSideCaps, &clock);
  pair::PathParams p;
  p.rnr_retry = 7;  // for ever
  p.min_rnr_timer = 3;  // 0.03 ms
  // The transport timer shares the clock, which moves 1 ms per 0.2 ms of
  // real time below: a 4 s timeout (20) keeps a busy host's slow round
  // trip from reading as a lost peer (retry exceeded) on the way.
  p.timeout = 20;
  pair::connect(a, b, p);
  Sge s{a.addr(), 8, a.key};
  SendWr w;
  w.wr_id = 11;
  w.opcode = WrOpcode::kSend;
  w.sg_list = &s;
  w.num_sge = 1;
  w.send_flags = SEND_SIGNALED;
  ASSERT_TRUE(pair::post(a, w));
  // The first NAK comes without the clock; the next waits for it.
  ASSERT_TRUE(test::eventually([&] { return a.qp->counters().rnr_naks_received >= 1; }));
  EXPECT_EQ(a.qp->counters().rnr_naks_received, 1u);
  ASSERT_TRUE(test::eventually([&] {
    clock.advance(std::chrono::milliseconds(1));
    return a.qp->counters().rnr_naks_received >= 3;
  }));
  Wc none[1];
  EXPECT_EQ(a.scq->poll(none), 0) << "an RNR-NAKed SEND does not complete";
  RecvWr rw;
  rw.wr_id = 12;
  Sge r{b.addr(), 64, b.key};
  rw.sg_list = &r;
  rw.num_sge = 1;
  ASSERT_TRUE(b.qp->post_recv(&rw, nullptr));
  std::vector<Wc> wcs;
  ASSERT_TRUE(test::eventually([&] {
    clock.advance(std::chrono::milliseconds(1));
    Wc wc[1];
    if (a.scq->poll(wc) == 1) wcs.push_back(wc[0]);
    return !wcs.empty();
  }));
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[0].wr_id, 11u);
  EXPECT_EQ(test::poll_n(*b.rcq, 1)[0].wr_id, 12u);
  EXPECT_EQ(a.qp->counters().rnr_retries, a.qp->counters().rnr_naks_received);
}

TEST_P(RcEngine, LostPeerIsRetryExceeded) {
  Side a = side(1), b = side(2);
  connect(a, b);
  ASSERT_TRUE(b.qp->modify(QpAttr{.qp_state = QpState::kReset}, QP_STATE));  // drops what arrives
  Sge s{a.addr(), 8, a.key};
  SendWr w = pair::write_wr(0, s, b.addr(), b.key, 0);
  ASSERT_TRUE(post(a, w));
  auto wcs = poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRetryExcErr);
}

TEST_P(RcEngine, PostListReportsBadWr) {
  Side a = side(1), b = side(2);
  connect(a, b);
  Sge s{a.addr(), 8, a.key};
  SendWr w[3];
  for (int i = 0; i < 3; ++i) {
    w[i].wr_id = i;
    w[i].opcode = WrOpcode::kRdmaWrite;
    w[i].sg_list = &s;
    w[i].num_sge = 1;
    w[i].remote_addr = b.addr();
    w[i].rkey = b.key;
    w[i].send_flags = SEND_SIGNALED;
    if (i) w[i - 1].next = &w[i];
  }
  w[1].num_sge = 99;  // beyond max_send_sge
  const SendWr* bad = nullptr;
  auto r = a.qp->post_send(&w[0], &bad);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EINVAL);
  EXPECT_EQ(bad, &w[1]);
  auto wcs = poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 0u);
  post_fence(a, b);
  wcs = poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, kFenceId) << "nothing after bad_wr was posted";
}

TEST_P(RcEngine, ModifyQpRules) {
  Side a = side(1), b = side(2);
  QpAttr at;
  at.qp_state = QpState::kRtr;
  EXPECT_EQ(a.qp->modify(at, QP_STATE).error().code, EINVAL);  // RESET -> RTR
  at.qp_state = QpState::kInit;
  auto missing = a.qp->modify(at, QP_STATE | QP_PORT | QP_ACCESS_FLAGS);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().reason.find("PKEY_INDEX"), std::string::npos);
  EXPECT_EQ(a.qp->modify(at, QP_STATE | QP_PORT | QP_ACCESS_FLAGS | QP_PKEY_INDEX | QP_SQ_PSN).error().code,
            EINVAL);  // SQ_PSN not accepted here
  EXPECT_EQ(a.qp->state(), QpState::kReset) << "unchanged";
  connect(a, b);
  EXPECT_EQ(a.qp->state(), QpState::kRts);
  at.qp_state = QpState::kSqd;
  EXPECT_TRUE(a.qp->modify(at, QP_STATE));
  at.qp_state = QpState::kRts;
  EXPECT_TRUE(a.qp->modify(at, QP_STATE));
  // Posting before RTS is refused.
  Side c = side(3);
  Sge s{c.addr(), 8, c.key};
  SendWr w;
  w.sg_list = &s;
  w.num_sge = 1;
  EXPECT_EQ(post(c, w).error().code, EINVAL);
}

TEST_P(RcEngine, CapsBeyondTheDeviceAreEinval) {
  const std::optional<NetConfig> net = test::link_net(GetParam(), 1);
  auto dev = SoftHca::open(pair::small_profile(), net ? &*net : nullptr).value();
  auto pd = dev->tables().alloc_pd().value();
  auto cq = dev->engine().create_cq(16, 0, nullptr).value();
  auto r = dev->engine().create_qp(QpInit{pd, cq, cq, QpCaps{100000, 1, 1, 1, 0}, false, nullptr});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().reason.find("max_send_wr"), std::string::npos);
  r = dev->engine().create_qp(QpInit{pd, cq, cq, QpCaps{1, 1, 1, 1, 100000}, false, nullptr});
  EXPECT_NE(r.error().reason.find("max_inline_data"), std::string::npos);
  EXPECT_EQ(dev->engine().create_cq(0, 0, nullptr).error().code, EINVAL);
  EXPECT_EQ(dev->engine().create_cq(16, 5, nullptr).error().code, EINVAL);
  auto qp = dev->engine().create_qp(QpInit{pd, cq, cq, QpCaps{1, 1, 1, 1, 0}, false, nullptr}).value();
  EXPECT_EQ(dev->engine().destroy_cq(cq).error().code, EBUSY);
  ASSERT_TRUE(dev->engine().destroy_qp(qp));
  EXPECT_TRUE(dev->engine().destroy_cq(cq));
}

TEST_P(RcEngine, CqOverrunMovesQpsToError) {
  Side a = side(1, /*cqe=*/2), b = side(2);
  connect(a, b);
  Sge s{a.addr(), 8, a.key};
  for (int i = 0; i < 4; ++i) {
    SendWr w = pair::write_wr(static_cast<std::uint64_t>(i), s, b.addr(), b.key);
    (void)post(a, w);
  }
  EXPECT_TRUE(test::eventually([&] { return a.qp->state() == QpState::kErr; }));
  EXPECT_TRUE(a.scq->in_error());
  Wc wc[4];
  EXPECT_EQ(a.scq->poll(wc), 2) << "the two CQEs written were not overwritten";
  EXPECT_EQ(wc[0].wr_id, 0u);
  EXPECT_EQ(wc[1].wr_id, 1u);
  a.dev->engine().async_events().flush();
  EXPECT_EQ(a.dev->engine().async_events().count(AsyncEventType::kCqErr), 1u);
}

TEST_P(RcEngine, LoopbackToItself) {
  Side a = side(1);
  connect(a, a);
  std::memset(a.buf.data(), 7, 100);
  Sge s{a.addr(), 100, a.key};
  SendWr w = pair::write_wr(0, s, a.addr(1000), a.key);
  ASSERT_TRUE(post(a, w));
  EXPECT_EQ(poll_n(*a.scq, 1)[0].status, WcStatus::kSuccess);
  EXPECT_EQ(a.buf[1099], 7);
}

// Posting from one thread while another polls, both directions at once. The
// poster keeps at most a send queue's worth unacknowledged by the poller, as
// a consumer must (more would overrun the CQ, which is the consumer's bug).
TEST_P(RcEngine, ConcurrentPostAndPoll) {
  Side a = side(1, /*cqe=*/4096, QpCaps{256, 256, 1, 1, 0}), b = side(2, 4096, QpCaps{256, 256, 1, 1, 0});
  connect(a, b);
  constexpr int kOps = 5000;
  std::atomic<int> done_a{0}, done_b{0};
  // Every wait is bounded: a failure ends the test, it does not hang it.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto poster = [&](Side& s, Side& peer, std::atomic<int>& done) {
    Sge sge{s.addr(), 64, s.key};
    for (int i = 0; i < kOps; ++i) {
      SendWr w = pair::write_wr(static_cast<std::uint64_t>(i), sge, peer.addr(128), peer.key);
      while (i - done.load() >= 256) {
        ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "the poller stopped at " << done.load();
        std::this_thread::yield();
      }
      while (true) {
        auto r = post(s, w);
        if (r) break;
        ASSERT_EQ(r.error().code, ENOMEM);  // queue full: wait for the poller
        std::this_thread::yield();
      }
    }
  };
  auto poller = [&](Side& s, std::atomic<int>& done) {
    std::uint64_t expect = 0;
    while (done.load() < kOps) {
      ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "completions stopped at " << done.load();
      Wc wc[32];
      int n = s.scq->poll(wc);
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(wc[i].status, WcStatus::kSuccess) << wc_status_str(wc[i].status);
        EXPECT_EQ(wc[i].wr_id, expect++) << "completions in order";
      }
      done += n;  // a failure counts too: the poster's window moves on
    }
  };
  std::thread t1(poster, std::ref(a), std::ref(b), std::ref(done_a));
  std::thread t2(poster, std::ref(b), std::ref(a), std::ref(done_b));
  std::thread t3(poller, std::ref(a), std::ref(done_a));
  std::thread t4(poller, std::ref(b), std::ref(done_b));
  t1.join();
  t2.join();
  t3.join();
  t4.join();
  EXPECT_EQ(done_a.load(), kOps);
  EXPECT_EQ(done_b.load(), kOps);
}

// Receives posted from one thread while SENDs arrive from another (RNR
// retries cover a momentarily empty queue) are consumed once each, in
// order, and a full queue answers ENOMEM until the responder frees a slot.
TEST_P(RcEngine, ReceivesPostedWhileSendsArrive) {
  Side a = side(1, 4096, QpCaps{64, 64, 1, 1, 0}), b = side(2, 4096, QpCaps{64, 16, 1, 1, 0});
  connect(a, b, {.rnr_retry = 7});  // 7: retry forever
  constexpr int kMsgs = 3000;
  std::thread poster([&] {
    Sge sge{b.addr(0), 64, b.key};
    for (int i = 0; i < kMsgs;) {
      RecvWr rw;
      rw.wr_id = static_cast<std::uint64_t>(i);
      rw.sg_list = &sge;
      rw.num_sge = 1;
      auto r = b.qp->post_recv(&rw, nullptr);
      if (r) {
        ++i;
        continue;
      }
      ASSERT_EQ(r.error().code, ENOMEM);  // full: the responder frees slots as it goes
      std::this_thread::yield();
    }
  });
  Sge s{a.addr(0), 8, a.key};
  std::vector<Wc> recvs;
  for (int sent = 0; sent < kMsgs; ++sent) {
    SendWr w;
    w.wr_id = static_cast<std::uint64_t>(sent);
    w.opcode = WrOpcode::kSend;
    w.sg_list = &s;
    w.num_sge = 1;
    w.send_flags = SEND_SIGNALED;
    ASSERT_TRUE(post(a, w));
    auto sc = poll_n(*a.scq, 1);
    ASSERT_EQ(sc.size(), 1u);
    ASSERT_EQ(sc[0].status, WcStatus::kSuccess);
  }
  poster.join();
  auto rc = poll_n(*b.rcq, kMsgs);
  ASSERT_EQ(rc.size(), static_cast<std::size_t>(kMsgs));
  for (int i = 0; i < kMsgs; ++i) {
    ASSERT_EQ(rc[i].status, WcStatus::kSuccess);
    ASSERT_EQ(rc[i].wr_id, static_cast<std::uint64_t>(i));
  }
}

// A QP that enters ERR while another thread posts receives: every receive
// that was accepted completes exactly once (flushed), none is stranded in
// the queue by posting just as the flush ran.
TEST_P(RcEngine, ReceivesPostedAsTheQpEntersErrorAllFlush) {
  for (int round = 0; round < 50; ++round) {
    Side a = side(1, 4096, QpCaps{16, 256, 1, 1, 0}), b = side(2, 4096, QpCaps{16, 256, 1, 1, 0});
    connect(a, b);
    std::atomic<bool> go{false};
    std::atomic<int> accepted{0};
    std::thread poster([&] {
      Sge sge{b.addr(0), 64, b.key};
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < 200; ++i) {
        RecvWr rw;
        rw.wr_id = static_cast<std::uint64_t>(i);
        rw.sg_list = &sge;
        rw.num_sge = 1;
        if (b.qp->post_recv(&rw, nullptr)) accepted.fetch_add(1);
      }
    });
    go.store(true);
    for (int spin = 0; spin < round * 10; ++spin) std::this_thread::yield();  // land the ERR at varied points
    // A bad rkey: b's responder moves b to ERR and flushes its receive
    // queue while the poster keeps posting (from the sending thread on the
    // in-process link, from b's receive thread on RoCEv2).
    Sge s{a.addr(0), 8, a.key};
    SendWr w = pair::write_wr(0, s, b.addr(0), b.key ^ 0x100, 0);
    ASSERT_TRUE(post(a, w));
    poster.join();
    ASSERT_TRUE(test::eventually([&] { return b.qp->state() == QpState::kErr; })) << "round " << round;
    const auto n = static_cast<std::size_t>(accepted.load());
    auto rc = poll_n(*b.rcq, n);
    ASSERT_EQ(rc.size(), n) << "round " << round;
    std::vector<bool> seen(200);
    for (const Wc& wc : rc) {
      EXPECT_EQ(wc.status, WcStatus::kWrFlushErr);
      ASSERT_LT(wc.wr_id, 200u);
      EXPECT_FALSE(seen[wc.wr_id]) << "flushed twice";
      seen[wc.wr_id] = true;
    }
    EXPECT_TRUE(poll_n(*b.rcq, 1, std::chrono::milliseconds(0)).empty());
  }
}

// An in-sequence RDMA WRITE runs without the responder's lock, a SEND with
// it: interleaved, they still execute in PSN order (each SEND finds the
// WRITE posted before it in memory) and neither path loses a PSN.
TEST_P(RcEngine, WritesAndSendsInterleavedKeepRcOrder) {
  Side a = side(1, 4096, QpCaps{64, 64, 1, 1, 0}), b = side(2, 4096, QpCaps{64, 64, 1, 1, 0});
  connect(a, b);
  constexpr int kRounds = 500;
  auto* slot = reinterpret_cast<std::uint64_t*>(b.buf.data());
  auto* src = reinterpret_cast<std::uint64_t*>(a.buf.data());
  for (int i = 0; i < kRounds; ++i) {
    Sge rsge{b.addr(4096), 64, b.key};
    RecvWr rw;
    rw.wr_id = static_cast<std::uint64_t>(i);
    rw.sg_list = &rsge;
    rw.num_sge = 1;
    ASSERT_TRUE(b.qp->post_recv(&rw, nullptr));
    src[i % 64] = 1000 + static_cast<std::uint64_t>(i);
    Sge ws{a.addr(8 * (i % 64)), 8, a.key};
    SendWr w = pair::write_wr(0, ws, b.addr(8 * (i % 64)), b.key, 0);
    SendWr s;
    s.wr_id = static_cast<std::uint64_t>(i);
    s.opcode = WrOpcode::kSend;
    s.sg_list = &ws;
    s.num_sge = 1;
    s.send_flags = SEND_SIGNALED;
    w.next = &s;
    ASSERT_TRUE(post(a, w));
    auto rc = poll_n(*b.rcq, 1);
    ASSERT_EQ(rc.size(), 1u);
    ASSERT_EQ(rc[0].status, WcStatus::kSuccess);
    ASSERT_EQ(slot[i % 64], 1000 + static_cast<std::uint64_t>(i)) << "the WRITE before SEND " << i;
    auto sc = poll_n(*a.scq, 1);
    ASSERT_EQ(sc.size(), 1u);
    ASSERT_EQ(sc[0].status, WcStatus::kSuccess);
  }
}

// WRITEs stream in while another thread moves the responder's QP to ERR:
// every WRITE the requester posted completes, in order (delivered ones
// succeed, then one times out against the dropped requests and the rest
// flush), and no byte lands outside the registered buffer. The stream
// runs until the requester itself has failed, so every round races.
TEST_P(RcEngine, WritesArriveWhileTheResponderEntersError) {
  for (int round = 0; round < 8; ++round) {
    Side a = side(1, 4096, QpCaps{64, 16, 1, 1, 0}), b = side(2, 4096, QpCaps{64, 16, 1, 1, 0});
    connect(a, b);
    std::vector<std::uint8_t> guard_before(b.buf.begin(), b.buf.end());
    std::atomic<bool> go{false};
    std::thread killer([&] {
      while (!go.load()) std::this_thread::yield();
      for (int spin = 0; spin < round * 50; ++spin) std::this_thread::yield();
      QpAttr at;
      at.qp_state = QpState::kErr;
      ASSERT_TRUE(b.qp->modify(at, QP_STATE));
    });
    std::memset(a.buf.data(), 0x5a, 4096);
    int posted = 0;
    std::vector<Wc> done;
    go.store(true);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (a.qp->state() != QpState::kErr && std::chrono::steady_clock::now() < give_up) {
      Sge ws{a.addr(0), 512, a.key};
      SendWr w = pair::write_wr(static_cast<std::uint64_t>(posted), ws, b.addr(512 * (posted % 8)), b.key);
      if (post(a, w)) ++posted;
      auto got = poll_n(*a.scq, 1, std::chrono::milliseconds(0));
      done.insert(done.end(), got.begin(), got.end());
      if (posted - static_cast<int>(done.size()) >= 60) {  // the send queue is full: wait for it to move
        auto more = poll_n(*a.scq, 1, std::chrono::milliseconds(100));
        done.insert(done.end(), more.begin(), more.end());
      }
    }
    killer.join();
    ASSERT_EQ(a.qp->state(), QpState::kErr) << "the requester never noticed, round " << round;
    auto rest = poll_n(*a.scq, static_cast<std::size_t>(posted) - done.size());
    done.insert(done.end(), rest.begin(), rest.end());
    ASSERT_EQ(done.size(), static_cast<std::size_t>(posted)) << "round " << round;
    bool failed = false;
    for (std::size_t i = 0; i < done.size(); ++i) {
      ASSERT_EQ(done[i].wr_id, i) << "completions in order";
      if (done[i].status != WcStatus::kSuccess)
        failed = true;
      else
        ASSERT_FALSE(failed) << "a success after a failure";
    }
    EXPECT_TRUE(failed);
    for (std::size_t i = 4096; i < b.buf.size(); ++i) ASSERT_EQ(b.buf[i], guard_before[i]) << "byte " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Links, RcEngine, ::testing::Values(LinkKind::kInproc, LinkKind::kUdp, LinkKind::kSameHost), test::link_name);

}  // namespace
}  // namespace srdma::hca
