// Two QPs on software HCAs, for tests at the device level: a Side is a
// device (on the in-process link, or RoCEv2 on a loopback address:
// loopback.h), a PD, a registered buffer, a send and a receive CQ and an RC
// QP; bring_up() and connect() take QPs to RTS, with post() and CQ polling.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "hca/soft_hca.h"
#include "loopback.h"
#include "srdma/access.h"
#include "srdma/impair.h"
#include "test_profile.h"
#include "wait.h"

namespace srdma::hca::pair {

// The shared small profile (test_profile.h), validated.
inline Profile small_profile() { return validate_profile(test::small_profile()).value(); }

inline constexpr QpCaps kSideCaps{64, 64, 4, 4, 128};

struct Side {
  // First, so that it outlives the device: a peer's WRITE may still be
  // landing in it while the test ends, and only closing the device stops it.
  std::vector<std::uint8_t> buf = std::vector<std::uint8_t>(1 << 16);
  std::shared_ptr<SoftHca> dev;
  std::uint32_t pdn = 0;
  std::shared_ptr<Cq> scq, rcq;
  std::shared_ptr<Qp> qp;
  std::uint32_t key = 0;

  // CQs of `cqe` entries, a QP of `caps`; `clock`: the transport and RNR
  // timers run on it (nullptr: real time).
  // `impair`: the device sends through an impairing link (impair.h).
  // `net`: the device speaks RoCEv2 on that address (udp_link.h).
  explicit Side(std::uint32_t cqe = 256, QpCaps caps = kSideCaps, ManualClock* clock = nullptr,
                const ImpairSpec* impair = nullptr, const NetConfig* net = nullptr) {
    dev = SoftHca::open(small_profile(), net).value();
    if (clock) dev->engine().use_manual_clock(*clock);
    if (impair) {
      EXPECT_TRUE(dev->engine().impair(*impair));
    }
    pdn = dev->tables().alloc_pd().value();
    scq = dev->engine().create_cq(cqe, 0, nullptr).value();
    rcq = dev->engine().create_cq(cqe, 1, nullptr).value();
    qp = dev->engine().create_qp(QpInit{pdn, scq, rcq, caps, false, nullptr}).value();
    key = reg(buf.data(), buf.size(), kAccessAll);
  }
  explicit Side(ManualClock* clock) : Side(256, kSideCaps, clock) {}
  // Replaces the QP (still in RESET) by one whose machines take no early
  // entry (QpInit::fast_entries): the differential test's reference.
  void use_full_machines() {
    QpInit init{pdn, scq, rcq, qp->caps(), false, nullptr};
    init.fast_entries = false;
    EXPECT_TRUE(dev->engine().destroy_qp(qp));
    qp = dev->engine().create_qp(init).value();
  }
  std::uint32_t reg(void* p, std::size_t len, std::uint32_t access) {
    std::uint64_t a = reinterpret_cast<std::uint64_t>(p);
    std::vector<std::uint64_t> pages;
    for (std::uint64_t x = a & ~std::uint64_t{4095}; x < a + len; x += 4096) pages.push_back(x);
    return dev->tables().reg_mr(MrAttr{pdn, a, len, access, 12}, pages).value();
  }
  std::uint64_t addr(std::size_t off = 0) { return reinterpret_cast<std::uint64_t>(buf.data()) + off; }
};

// A test's k-th side on `link`: the device in-process, or RoCEv2 on this
// process's k-th loopback address; the rest as Side's constructor.
inline Side side_on(test::LinkKind link, unsigned k, std::uint32_t cqe = 256, QpCaps caps = kSideCaps,
                    ManualClock* clock = nullptr, const ImpairSpec* impair = nullptr) {
  const std::optional<NetConfig> net = test::link_net(link, k);
  return Side(cqe, caps, clock, impair, net ? &*net : nullptr);
}

struct PathParams {
  std::uint8_t rnr_retry = 7;
  std::uint8_t retry_cnt = 2;
  std::uint8_t timeout = 10;
  std::uint8_t min_rnr_timer = 1;
  std::uint32_t access = kAccessAll;  // qp_access_flags on both sides
  std::uint32_t path_mtu = 4096;
  std::uint32_t sq_psn = 0;  // both sides start at these
  std::uint32_t rq_psn = 0;
  std::uint8_t max_rd_atomic = 16;
  std::uint8_t max_dest_rd_atomic = 16;
};

// Brings `qp` from RESET to RTS towards `peer_addr`/`peer_qpn`.
inline void bring_up(Qp& qp, std::uint64_t peer_addr, std::uint32_t peer_qpn, const PathParams& p = {}) {
  QpAttr at;
  at.qp_state = QpState::kInit;
  at.qp_access_flags = p.access;
  ASSERT_TRUE(qp.modify(at, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS));
  at.qp_state = QpState::kRtr;
  at.dest_addr = peer_addr;
  at.dest_qp_num = peer_qpn;
  at.min_rnr_timer = p.min_rnr_timer;
  at.path_mtu = p.path_mtu;
  at.max_rd_atomic = p.max_rd_atomic;
  at.max_dest_rd_atomic = p.max_dest_rd_atomic;
  at.rq_psn = p.rq_psn;
  at.sq_psn = p.sq_psn;
  ASSERT_TRUE(qp.modify(at, QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC |
                              QP_MIN_RNR_TIMER));
  at.qp_state = QpState::kRts;
  at.rnr_retry = p.rnr_retry;
  at.timeout = p.timeout;
  at.retry_cnt = p.retry_cnt;
  ASSERT_TRUE(qp.modify(at, QP_STATE | QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC));
}
// Brings `s`'s QP from RESET to RTS towards `peer_addr`/`peer_qpn`.
inline void bring_up(Side& s, std::uint64_t peer_addr, std::uint32_t peer_qpn, const PathParams& p = {}) {
  bring_up(*s.qp, peer_addr, peer_qpn, p);
}

// Connects a's QP with b's (a QP connected to itself when &a == &b).
inline void connect(Side& a, Side& b, const PathParams& p = {}) {
  bring_up(a, b.dev->engine().address(), b.qp->qpn(), p);
  if (&a != &b) bring_up(b, a.dev->engine().address(), a.qp->qpn(), p);
}

inline Result<void> post(Side& s, SendWr wr) {
  const SendWr* bad = nullptr;
  return s.qp->post_send(&wr, &bad);
}

using srdma::test::poll_n;  // wait.h: polls until n completions arrived or a generous deadline passed

// For a QP on a manual clock: polls `cq` until n completions arrived,
// advancing the clock 1 ms between polls (the transport and RNR timers
// run on it), or until 10 s of real time passed (a hang fails, it does not
// wait forever).
inline std::vector<Wc> poll_n_advancing(ManualClock& clock, Cq& cq, std::size_t n) {
  std::vector<Wc> wcs;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (wcs.size() < n && std::chrono::steady_clock::now() < deadline) {
    clock.advance(std::chrono::milliseconds(1));
    auto more = poll_n(cq, n - wcs.size(), std::chrono::milliseconds(1));
    wcs.insert(wcs.end(), more.begin(), more.end());
  }
  return wcs;
}

inline SendWr write_wr(std::uint64_t wr_id, const Sge& sge, std::uint64_t remote_addr, std::uint32_t rkey,
                       std::uint32_t flags = SEND_SIGNALED) {
  SendWr w;
  w.wr_id = wr_id;
  w.opcode = WrOpcode::kRdmaWrite;
  w.sg_list = &sge;
  w.num_sge = 1;
  w.send_flags = flags;
  w.remote_addr = remote_addr;
  w.rkey = rkey;
  return w;
}

}  // namespace srdma::hca::pair
