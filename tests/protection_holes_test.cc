// The holes a hostile pass over the device found, each provoked the way
// the attacker did, deterministically where a race was involved (a test
// hook holds one thread at the exact point, the other runs to completion).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <future>
#include <thread>

#include "hca/delivery_scope.h"
#include "hca/keys.h"
#include "hca_pair.h"

namespace srdma::hca {
namespace {

using pair::connect;
using pair::poll_n;
using pair::post;
using pair::Side;
using pair::write_wr;

// Holds the first thread whose translation misses on `index` between its
// MPT read and its cache fill, until released.
struct FillGate {
  static inline std::atomic<std::uint32_t> index{~0u};
  static inline std::atomic<bool> reached{false};
  static inline std::atomic<bool> released{false};
  static void hook(std::uint32_t i) {
    if (i != index.load() || reached.exchange(true)) return;
    while (!released.load()) std::this_thread::yield();
  }
  explicit FillGate(std::uint32_t i) {
    index = i;
    reached = false;
    released = false;
    TptCache::set_fill_hook_for_test(&FillGate::hook);
  }
  ~FillGate() {
    release();
    TptCache::set_fill_hook_for_test(nullptr);
  }
  void wait_reached() const {
    while (!reached.load()) std::this_thread::yield();
  }
  void release() { released = true; }
};

std::uint32_t index_of(const SoftHca& dev, std::uint32_t key) {
  return key_to_hw_index(key) & static_cast<std::uint32_t>(dev.profile().num_mpt - 1);
}

// Hole 1: a refill that read the FMR's MPT just before unmap_fmr stored
// its line just after, and the unmapped key kept translating.
TEST(ProtectionHoles, FmrRefillRacingUnmapLeavesNoTranslation) {
  Side b;
  std::uint64_t page = b.addr(4096) & ~std::uint64_t{4095};
  std::uint32_t fmr = b.dev->tables().alloc_fmr(b.pdn, kAccessAll, {1, 4, 12}).value();
  std::uint32_t key = b.dev->tables().map_phys_fmr(fmr, std::span(&page, 1), 0x10000).value();

  FillGate gate(index_of(*b.dev, key));
  auto filler = std::async(std::launch::async, [&] { return b.dev->tables().translate(key, 0x10000, 8, 0, b.pdn).has_value(); });
  gate.wait_reached();  // the filler has read the mapped MPT, not yet filled
  ASSERT_TRUE(b.dev->tables().unmap_fmr(std::span(&key, 1)));
  gate.release();
  EXPECT_TRUE(filler.get());  // it translated before the unmap: fine
  // Once unmap_fmr has returned, the key translates nowhere.
  auto after = b.dev->tables().translate(key, 0x10000, 8, 0, b.pdn);
  ASSERT_FALSE(after.has_value());
  EXPECT_EQ(after.error(), Refusal::kNotHwOwned);
}

// Hole 1, end to end: a peer's RDMA WRITE posted after the unmap returned
// never lands in the unmapped page.
TEST(ProtectionHoles, WriteThroughUnmappedFmrKeyNeverLands) {
  Side a, b;
  connect(a, b);
  std::uint64_t page = b.addr(8192) & ~std::uint64_t{4095};
  std::uint32_t fmr = b.dev->tables().alloc_fmr(b.pdn, kAccessAll, {1, 4, 12}).value();
  std::uint32_t key = b.dev->tables().map_phys_fmr(fmr, std::span(&page, 1), 0x20000).value();
  {
    FillGate gate(index_of(*b.dev, key));
    auto filler = std::async(std::launch::async, [&] { (void)b.dev->tables().translate(key, 0x20000, 8, 0, b.pdn); });
    gate.wait_reached();
    ASSERT_TRUE(b.dev->tables().unmap_fmr(std::span(&key, 1)));
    gate.release();
    filler.get();
  }
  auto* target = reinterpret_cast<std::uint8_t*>(page);
  std::memset(target, 0x11, 4096);
  std::memset(a.buf.data(), 0xee, 64);
  Sge sge{a.addr(), 64, a.key};
  ASSERT_TRUE(post(a, write_wr(1, sge, 0x20000, key)));
  auto wcs = poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemAccessErr);
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(target[i], 0x11) << "byte " << i;
}

// Hole 2: a WRITE translated before dereg_mr landed after it returned.
// The responder is held between its translation and its store; dereg_mr
// must not return before the store has landed.
TEST(ProtectionHoles, DeregMrWaitsForAStoreTranslatedBeforeIt) {
  Side a, b;
  connect(a, b);
  std::vector<std::uint8_t> region(8192, 0);
  std::uint32_t key = b.reg(region.data(), region.size(), kAccessAll);
  std::uint64_t va = reinterpret_cast<std::uint64_t>(region.data());

  FillGate gate(index_of(*b.dev, key));
  std::uint64_t payload = 0x5a5a5a5a5a5a5a5aull;
  Sge sge{reinterpret_cast<std::uint64_t>(&payload), 8, 0};
  // Inline: the requester translates no lkey, so the gate can only catch
  // the responder's translation of `key`.
  auto poster = std::async(std::launch::async, [&] {
    return post(a, write_wr(1, sge, va, key, SEND_SIGNALED | SEND_INLINE)).has_value();
  });
  gate.wait_reached();  // translated (MPT read), nothing stored yet

  std::uint64_t seen_at_return = 0;
  auto dereg = std::async(std::launch::async, [&] {
    bool ok = b.dev->tables().dereg_mr(key).has_value();
    std::memcpy(&seen_at_return, region.data(), 8);
    return ok;
  });
  // dereg_mr has taken the key away (the MPT no longer translates it) ...
  while (b.dev->tables().translate(key, va, 8, 0, b.pdn)) std::this_thread::yield();
  // ... and now the held store may go on.
  gate.release();
  ASSERT_TRUE(poster.get());
  ASSERT_TRUE(dereg.get());
  EXPECT_EQ(seen_at_return, payload) << "dereg_mr returned before the store through its key landed";
  auto wcs = poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
}

// The primitive itself: a window open on another thread for a key holds
// quiesce_translations of that key (or of any key, for a window over
// several) until it closes, and not a quiesce of another key.
TEST(ProtectionHoles, QuiesceTranslationsWaitsForOpenWindowsOfItsKey) {
  for (std::uint32_t window_key : {0x1234u, detail::kAnyKey}) {
    std::atomic<bool> opened{false}, close{false}, quiesced{false};
    std::thread holder([&] {
      TranslationWindow w(window_key);
      opened = true;
      while (!close.load()) std::this_thread::yield();
      EXPECT_FALSE(quiesced.load());  // still waiting for us
    });
    while (!opened.load()) std::this_thread::yield();
    if (window_key != detail::kAnyKey) quiesce_translations(0x9999u);  // another key: returns while open
    std::thread quiescer([&] {
      quiesce_translations(0x1234u);
      quiesced = true;
    });
    close = true;
    holder.join();
    quiescer.join();
    EXPECT_TRUE(quiesced.load());
  }
  quiesce_translations(0x1234u);  // nothing open: returns at once
}

// Hole 3: num_sge > 0 with a NULL sg_list crashed (SEGV).
TEST(ProtectionHoles, NullSgListIsEinvalAndPostsNothing) {
  Side a, b;
  connect(a, b);
  SendWr w;
  w.wr_id = 7;
  w.opcode = WrOpcode::kSend;
  w.num_sge = 2;
  w.sg_list = nullptr;
  w.send_flags = SEND_SIGNALED;
  const SendWr* bad = nullptr;
  auto r = a.qp->post_send(&w, &bad);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EINVAL);
  EXPECT_EQ(bad, &w);
  RecvWr rw;
  rw.num_sge = 1;
  const RecvWr* rbad = nullptr;
  auto rr = b.qp->post_recv(&rw, &rbad);
  ASSERT_FALSE(rr);
  EXPECT_EQ(rr.error().code, EINVAL);
  EXPECT_EQ(rbad, &rw);
  // Nothing was posted: the QPs still work and nothing completes for them.
  Wc wc[4];
  EXPECT_EQ(a.scq->poll(wc), 0);
  EXPECT_EQ(a.qp->counters().requests_sent, 0u);
  Sge sge{a.addr(), 8, a.key};
  ASSERT_TRUE(post(a, write_wr(8, sge, b.addr(), b.key)));
  auto wcs = poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 8u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
}

// Hole 4: an out-of-range qp_state read the transition table out of
// bounds and wedged the QP.
TEST(ProtectionHoles, UnknownQpStateIsEinvalAndChangesNothing) {
  Side a, b;
  connect(a, b);
  for (unsigned bad : {7u, 8u, 13u, 255u}) {
    QpAttr at;
    at.qp_state = static_cast<QpState>(bad);
    auto r = a.qp->modify(at, QP_STATE);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, EINVAL);
    EXPECT_EQ(a.qp->state(), QpState::kRts);
    at.qp_state = QpState::kRts;
    at.cur_qp_state = static_cast<QpState>(bad);
    EXPECT_FALSE(a.qp->modify(at, QP_STATE | QP_CUR_STATE)) << bad;
  }
  QpAttr at;
  EXPECT_FALSE(a.qp->modify(at, 1u << 20)) << "an unknown attr_mask bit";
  // Still a working QP, and RESET is still allowed.
  Sge sge{a.addr(), 8, a.key};
  ASSERT_TRUE(post(a, write_wr(1, sge, b.addr(), b.key)));
  ASSERT_EQ(poll_n(*a.scq, 1).size(), 1u);
  at.qp_state = QpState::kReset;
  EXPECT_TRUE(a.qp->modify(at, QP_STATE));
  EXPECT_EQ(a.qp->state(), QpState::kReset);
}

// Every caller-supplied flag word and opcode is range-checked.
TEST(ProtectionHoles, UnknownOpcodeSendFlagsAndAccessAreEinval) {
  Side a, b;
  connect(a, b);
  Sge sge{a.addr(), 8, a.key};
  SendWr w = write_wr(1, sge, b.addr(), b.key);
  w.opcode = static_cast<WrOpcode>(42);
  EXPECT_EQ(post(a, w).error().code, EINVAL);
  w = write_wr(1, sge, b.addr(), b.key, SEND_SIGNALED | (1u << 9));
  EXPECT_EQ(post(a, w).error().code, EINVAL);
  QpAttr at;
  at.qp_access_flags = 1u << 7;
  EXPECT_EQ(a.qp->modify(at, QP_ACCESS_FLAGS).error().code, EINVAL);
  at = QpAttr{};
  at.path_mtu = 300;
  at.qp_state = QpState::kRts;
  EXPECT_EQ(a.qp->modify(at, QP_STATE | QP_PATH_MTU).error().code, EINVAL);
  at.port_num = 2;
  EXPECT_EQ(a.qp->modify(at, QP_STATE | QP_PORT).error().code, EINVAL);
  EXPECT_EQ(a.qp->counters().requests_sent, 0u);
}

// Hole 5: the responder executes requests only in RTR, RTS and SQD; a QP
// in any other state drops them, counted, and its memory stays as it was.
// The requester's transport timer (on a manual clock: no real seconds)
// then gives up after exactly retry_cnt retransmissions.
TEST(ProtectionHoles, ResponderOutsideRtrRtsSqdDropsRequests) {
  ManualClock clock;
  Side a(&clock), b(&clock);
  pair::PathParams p;
  p.retry_cnt = 3;
  p.timeout = 1;
  connect(a, b, p);
  QpAttr at;
  at.qp_state = QpState::kErr;
  ASSERT_TRUE(b.qp->modify(at, QP_STATE));
  std::memset(b.buf.data(), 0x22, 64);
  std::memset(a.buf.data(), 0x99, 64);
  Sge sge{a.addr(), 64, a.key};
  ASSERT_TRUE(post(a, write_wr(1, sge, b.addr(), b.key)));
  std::vector<Wc> wcs = pair::poll_n_advancing(clock, *a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRetryExcErr);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(b.buf[i], 0x22);
  TransportCounters ca = a.qp->counters(), cb = b.qp->counters();
  EXPECT_EQ(ca.requests_sent, 4u);  // the first send and retry_cnt retransmissions
  EXPECT_EQ(ca.retransmissions, 3u);
  EXPECT_EQ(ca.timeouts, 4u);
  EXPECT_EQ(cb.dropped_for(DropReason::kBadState), 4u);
  EXPECT_EQ(cb.requests_received, 0u);
}

// Hole 6: a QP on a third device that knows b's QPN injected a WRITE and
// moved b's expected PSN, so the real peer's next WRITE "succeeded" while
// its data never landed. Now: dropped and counted; the peer is unaffected.
TEST(ProtectionHoles, ConnectedQpHearsOnlyItsPeer) {
  ManualClock clock;  // c's retries never run: nobody advances it
  Side a, b, c(&clock);
  connect(a, b);
  pair::bring_up(c, b.dev->engine().address(), b.qp->qpn());
  std::memset(b.buf.data(), 0, 128);
  std::memset(c.buf.data(), 0x66, 64);
  Sge csge{c.addr(), 64, c.key};
  ASSERT_TRUE(post(c, write_wr(1, csge, b.addr(), b.key)));
  EXPECT_EQ(b.qp->counters().dropped_for(DropReason::kBadSource), 1u);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(b.buf[i], 0) << "the intruder's byte landed at " << i;
  // The real peer's WRITE lands and completes.
  std::memset(a.buf.data(), 0x77, 64);
  Sge asge{a.addr(), 64, a.key};
  ASSERT_TRUE(post(a, write_wr(2, asge, b.addr(), b.key)));
  auto wcs = poll_n(*a.scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(b.buf[i], 0x77);
  EXPECT_EQ(b.qp->counters().requests_received, 1u);
}

}  // namespace
}  // namespace srdma::hca
