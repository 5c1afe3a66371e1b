// Devices of the public API on either link (loopback.h), for the SRQ, UC
// and UD tests: a LinkNode is a device (in-process, or RoCEv2 on this
// process's k-th loopback address), a PD, a registered buffer and a send
// and a receive CQ. Tests take the link as their parameter so that every
// path runs over both wires. (A connected pair of RC QPs: connected_pair.h.)
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loopback.h"
#include "srdma/access.h"
#include "srdma/device.h"
#include "test_profile.h"
#include "wait.h"

namespace srdma::test {

// A device on `link`: in-process, or RoCEv2 on this process's k-th loopback
// address (named srdma<k>).
inline Device open_device(LinkKind link, unsigned k, const Profile& profile = small_profile()) {
  if (link == LinkKind::kInproc) return Device::open(profile).value();
  auto d = Device::open(profile, "srdma" + std::to_string(k), *link_net(link, k));
  EXPECT_TRUE(d) << d.error().reason;
  return std::move(*d);
}

struct LinkNode {
  Device dev;
  ProtectionDomain pd;
  std::vector<std::uint8_t> buf = std::vector<std::uint8_t>(1 << 18);
  MemoryRegion mr;
  std::unique_ptr<CompletionQueue> scq, rcq;

  LinkNode(LinkKind link, unsigned k) : LinkNode(open_device(link, k)) {}
  explicit LinkNode(Device d) : dev(std::move(d)) {
    pd = dev.alloc_pd().value();
    mr = pd.reg_mr(buf.data(), buf.size(), kAccessAll).value();
    scq = dev.create_cq(CqInit{.cqe = 1024}).value();
    rcq = dev.create_cq(CqInit{.cqe = 1024, .comp_vector = 1}).value();
  }
  std::uint64_t addr(std::size_t off = 0) const { return reinterpret_cast<std::uint64_t>(buf.data()) + off; }
  Sge sge(std::size_t off, std::uint32_t len) const { return Sge{addr(off), len, mr.lkey()}; }
  // An RC QP on this node's CQs (or on `rcq`), its receives from `srq`.
  std::unique_ptr<QueuePair> rc_qp(SharedReceiveQueue* srq = nullptr, CompletionQueue* rcq_override = nullptr) {
    QpInitAttr a{scq.get(), rcq_override ? rcq_override : rcq.get(), QpCaps{64, 64, 2, 2, 64}, false, nullptr};
    a.srq = srq;
    return pd.create_qp(a).value();
  }
  std::unique_ptr<QueuePair> ud_qp(std::uint32_t qkey, SharedReceiveQueue* srq = nullptr);
};

// A UD QP brought to RTS with `qkey` (its receives from `srq`).
inline constexpr std::uint32_t kGrh = 40;
inline std::unique_ptr<QueuePair> make_ud_qp(LinkNode& n, std::uint32_t qkey, SharedReceiveQueue* srq,
                                            std::uint32_t create_flags = 0) {
  QpInitAttr init{n.scq.get(), n.rcq.get(), QpCaps{64, 64, 2, 2, 64}, false, nullptr};
  init.srq = srq;
  init.create_flags = create_flags;
  init.qp_type = QpType::kUd;
  auto qp = n.pd.create_qp(init).value();
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qkey = qkey;
  EXPECT_TRUE(qp->modify(a, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_QKEY));
  a.qp_state = QpState::kRtr;
  EXPECT_TRUE(qp->modify(a, QP_STATE));
  a.qp_state = QpState::kRts;
  a.sq_psn = 0x123;
  EXPECT_TRUE(qp->modify(a, QP_STATE | QP_SQ_PSN));
  return qp;
}

inline std::unique_ptr<QueuePair> LinkNode::ud_qp(std::uint32_t qkey, SharedReceiveQueue* srq) {
  return make_ud_qp(*this, qkey, srq);
}

inline RecvWr recv_wr(std::uint64_t wr_id, const Sge& sge) {
  RecvWr w;
  w.wr_id = wr_id;
  w.sg_list = &sge;
  w.num_sge = 1;
  return w;
}

inline SendWr send_wr(std::uint64_t wr_id, const Sge& sge, WrOpcode op = WrOpcode::kSend,
                      std::uint32_t flags = SEND_SIGNALED) {
  SendWr w;
  w.wr_id = wr_id;
  w.opcode = op;
  w.sg_list = &sge;
  w.num_sge = 1;
  w.send_flags = flags;
  return w;
}

}  // namespace srdma::test
