// For the FRWR and security tests: a target that owns memory and registers
// it, and a peer that accesses it with RDMA, a connected pair
// (connected_pair.h); the work requests that register and invalidate, and
// an RDMA access's completion.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "connected_pair.h"
#include "srdma/access.h"
#include "srdma/device.h"
#include "srdma/mr_pool.h"
#include "test_profile.h"
#include "wait.h"

namespace srdma::test {

// A node of the FRWR and security tests (connected_pair.h): 16 pages of
// memory, a CQ of 1024, a QP of 64 WRs and 4 SGEs each way.
struct FrwrNode : PairNode {
  FrwrNode() : PairNode({.buf_bytes = 16 * kPage, .cq = {.cqe = 1024}, .caps = {64, 64, 4, 4, 64}}) {}
};

// The path the tests connect with: the peer may WRITE, READ and use atomics.
inline const RcConnection kFrwrPath{.access = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC};

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
inline Wc rdma(PairNode& from, std::size_t local_off, std::uint32_t len, WrOpcode op, std::uint64_t raddr,
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
