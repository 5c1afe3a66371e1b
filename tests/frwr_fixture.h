// Two connected devices for the FRWR and security tests: a target that owns
// memory and registers it, and a peer that accesses it with RDMA.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "srdma/access.h"
#include "srdma/device.h"
#include "srdma/mr_pool.h"
#include "test_profile.h"
#include "wait.h"

namespace srdma::test {

inline constexpr std::size_t kPage = 4096;

// Page-aligned memory, so page lists can be checked exactly.
struct PageBuf {
  explicit PageBuf(std::size_t n) : size(n), p(static_cast<std::uint8_t*>(std::aligned_alloc(kPage, n))) {
    std::memset(p.get(), 0, n);
  }
  struct Free {
    void operator()(std::uint8_t* q) const { std::free(q); }
  };
  std::size_t size;
  std::unique_ptr<std::uint8_t, Free> p;
  std::uint8_t* data() const { return p.get(); }
  std::uint64_t addr(std::size_t off = 0) const { return reinterpret_cast<std::uint64_t>(p.get()) + off; }
  std::vector<std::uint8_t> snapshot() const { return {p.get(), p.get() + size}; }
};

struct Node {
  Device dev = Device::open(small_profile()).value();
  ProtectionDomain pd = dev.alloc_pd().value();
  PageBuf buf{16 * kPage};
  MemoryRegion mr = pd.reg_mr(buf.data(), buf.size, kAccessAll).value();  // the node's own lkey
  std::unique_ptr<CompletionQueue> cq = dev.create_cq(CqInit{.cqe = 1024}).value();
  std::unique_ptr<QueuePair> qp =
      pd.create_qp(QpInitAttr{cq.get(), cq.get(), QpCaps{64, 64, 4, 4, 64}, false, nullptr}).value();
};

inline void connect_qps(QueuePair& a, const Device& adev, QueuePair& b, const Device& bdev) {
  const std::uint32_t access = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
  ASSERT_TRUE(a.connect(RcConnection{.peer_addr = bdev.address(), .peer_qpn = b.qp_num(), .access = access}));
  ASSERT_TRUE(b.connect(RcConnection{.peer_addr = adev.address(), .peer_qpn = a.qp_num(), .access = access}));
}
inline void connect(Node& a, Node& b) { connect_qps(*a.qp, a.dev, *b.qp, b.dev); }

inline SendWr reg_wr(MemoryRegion& mr, std::uint32_t access, std::uint64_t wr_id = 0,
                     std::uint32_t flags = SEND_SIGNALED) {
  SendWr w;
  w.wr_id = wr_id;
  w.opcode = WrOpcode::kRegMr;
  w.mr = &mr;
  w.key = mr.rkey();
  w.access = access;
  w.send_flags = flags;
  return w;
}

inline SendWr inv_wr(std::uint32_t key, std::uint64_t wr_id = 0, std::uint32_t flags = SEND_SIGNALED) {
  SendWr w;
  w.wr_id = wr_id;
  w.opcode = WrOpcode::kLocalInv;
  w.invalidate_rkey = key;
  w.send_flags = flags;
  return w;
}

// Posts one signaled RDMA WRITE or READ from `from`'s buffer at `local_off`
// and returns its completion.
inline Wc rdma(QueuePair& qp, CompletionQueue& cq, const Sge& local, WrOpcode op, std::uint64_t raddr,
               std::uint32_t rkey) {
  SendWr w;
  w.wr_id = 77;
  w.opcode = op;
  w.sg_list = &local;
  w.num_sge = 1;
  w.remote_addr = raddr;
  w.rkey = rkey;
  w.send_flags = SEND_SIGNALED;
  if (auto r = qp.post_send(w); !r) {
    ADD_FAILURE() << r.error().reason;
    return Wc{};
  }
  return poll_one(cq);
}
inline Wc rdma(Node& from, std::size_t local_off, std::uint32_t len, WrOpcode op, std::uint64_t raddr,
               std::uint32_t rkey) {
  return rdma(*from.qp, *from.cq, Sge{from.buf.addr(local_off), len, from.mr.lkey()}, op, raddr, rkey);
}

// Maps `mr` over pages [first, first + n) of `buf` starting `offset` bytes
// in, `len` bytes, and registers it through `qp` (signaled; returns the WC).
inline Wc map_and_register(QueuePair& qp, CompletionQueue& cq, MemoryRegion& mr, const PageBuf& buf,
                           std::size_t off, std::uint32_t len, std::uint32_t access) {
  Sge sg{buf.addr(off), len, 0};
  auto n = mr.map_mr_sg(std::span<const Sge>(&sg, 1), kPage);
  EXPECT_TRUE(n && *n == 1);
  SendWr w = reg_wr(mr, access, 1);
  if (auto r = qp.post_send(w); !r) {
    ADD_FAILURE() << r.error().reason;
    return Wc{};
  }
  return poll_one(cq);
}

}  // namespace srdma::test
