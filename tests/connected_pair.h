// The tests' one connected pair at the public API. A PairNode is a device
// (in-process, or RoCEv2 on one of this process's loopback addresses), a
// PD, a registered page-aligned buffer, a CQ and an RC QP on it; connect()
// brings two nodes' QPs to RTS towards each other. A test states only what
// it needs other than the defaults: the node's Options (link, profile,
// impairment, buffer, CQ, QP caps) and the RcConnection it connects with
// (access, path MTU, timers, PSNs).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "link_nodes.h"
#include "srdma/access.h"
#include "srdma/device.h"
#include "srdma/impair.h"
#include "test_profile.h"
#include "wait.h"

namespace srdma::test {

inline constexpr std::size_t kPage = 4096;

// Zeroed page-aligned memory (page lists can be checked exactly), read
// like a vector of bytes.
class PageBuf {
 public:
  explicit PageBuf(std::size_t n) : size_(n), p_(static_cast<std::uint8_t*>(std::aligned_alloc(kPage, round_up(n)))) {
    std::memset(p_.get(), 0, n);
  }
  std::uint8_t* data() const { return p_.get(); }
  std::size_t size() const { return size_; }
  std::uint8_t& operator[](std::size_t i) const { return p_.get()[i]; }
  std::uint8_t* begin() const { return p_.get(); }
  std::uint8_t* end() const { return p_.get() + size_; }
  std::uint64_t addr(std::size_t off = 0) const { return reinterpret_cast<std::uint64_t>(p_.get()) + off; }
  std::vector<std::uint8_t> snapshot() const { return {begin(), end()}; }

 private:
  static std::size_t round_up(std::size_t n) { return (n + kPage - 1) / kPage * kPage; }  // aligned_alloc's rule
  struct Free {
    void operator()(std::uint8_t* q) const { std::free(q); }
  };
  std::size_t size_;
  std::unique_ptr<std::uint8_t, Free> p_;
};

// How a PairNode is made (outside it: a default argument may use its
// member initializers only once the class is complete).
struct PairNodeOptions {
  LinkKind link = LinkKind::kInproc;
  unsigned k = 1;  // on the RoCEv2 link: this process's k-th loopback address (loopback.h)
  Profile profile = small_profile();
  std::optional<ImpairSpec> impair = std::nullopt;  // the device sends through an impairing link
  std::size_t buf_bytes = 1 << 16;
  CqInit cq{.cqe = 256};
  QpCaps caps{32, 32, 2, 2, 64};
};

struct PairNode {
  using Options = PairNodeOptions;

  Device dev;
  ProtectionDomain pd;
  PageBuf buf;
  MemoryRegion mr;  // over buf, kAccessAll
  std::unique_ptr<CompletionQueue> cq;  // the QP's send and receive CQ
  std::unique_ptr<QueuePair> qp;  // RC, in RESET until connect()

  explicit PairNode(const Options& o = {}) : dev(open_device(o.link, o.k, o.profile)), buf(o.buf_bytes) {
    if (o.impair) {
      EXPECT_TRUE(dev.impair(*o.impair));  // before the QP: its roles keep the link they start with
    }
    pd = dev.alloc_pd().value();
    mr = pd.reg_mr(buf.data(), buf.size(), kAccessAll).value();
    cq = dev.create_cq(o.cq).value();
    qp = pd.create_qp(QpInitAttr{cq.get(), cq.get(), o.caps, false, nullptr}).value();
  }
  std::uint64_t addr(std::size_t off = 0) const { return buf.addr(off); }
};

// Brings `qa` (a QP of device `da`) and `qb` (of `db`) from RESET to RTS
// towards each other, both with the attributes of `c` (its peer_addr and
// peer_qpn are filled in here).
inline void connect_qps(QueuePair& qa, const Device& da, QueuePair& qb, const Device& db,
                        RcConnection c = {.access = kAccessAll}) {
  c.peer_addr = db.address();
  c.peer_qpn = qb.qp_num();
  ASSERT_TRUE(qa.connect(c));
  EXPECT_EQ(qa.state(), QpState::kRts);
  c.peer_addr = da.address();
  c.peer_qpn = qa.qp_num();
  ASSERT_TRUE(qb.connect(c));
  EXPECT_EQ(qb.state(), QpState::kRts);
}

inline void connect(PairNode& a, PairNode& b, const RcConnection& c = {.access = kAccessAll}) {
  connect_qps(*a.qp, a.dev, *b.qp, b.dev, c);
}

// Posts `w` on n's QP and returns its completion (a refused post is a test
// failure and an empty Wc).
inline Wc post_and_poll(PairNode& n, const SendWr& w) {
  if (auto r = n.qp->post_send(w); !r) {
    ADD_FAILURE() << r.error().reason;
    return Wc{};
  }
  return poll_one(*n.cq);
}

}  // namespace srdma::test
