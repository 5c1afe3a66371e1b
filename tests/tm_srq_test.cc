// Tag-matching SRQs (SrqInitAttr::max_num_tags, SharedReceiveQueue::
// post_srq_ops): eager messages that match a posted tag land in its buffer
// without their TMH; unmatched ones take an ordinary receive, are counted
// unexpected and stop matching until the consumer syncs; NO_TAG; the list
// operations' completions; malformed TMHs from the wire.
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "connected_pair.h"
#include "link_nodes.h"
#include "srdma/net.h"

namespace srdma::test {
namespace {

class TmSrq : public ::testing::TestWithParam<LinkKind> {};

// This test's devices: on the RoCEv2 link, on 127.213.128.0/17 (tag
// matching's own range), from the PID as loopback_ip() does.
Device tm_device(LinkKind link, unsigned k) {
  if (link == LinkKind::kInproc) return open_device(link, k);
  const auto pid = static_cast<std::uint32_t>(::getpid());
  NetConfig net;
  net.ip = ipv4_str((127u << 24) | (213u << 16) | ((128u | ((pid >> 6) & 0x7f)) << 8) | ((pid & 63) << 2) | (k & 3));
  auto d = Device::open(small_profile(), "srdma" + std::to_string(k), net);
  EXPECT_TRUE(d) << d.error().reason;
  return std::move(*d);
}

const RcConnection kPath{.access = kAccessAll, .path_mtu = 1024};
constexpr std::uint8_t kNoTag = static_cast<std::uint8_t>(TmhOpcode::kNoTag);
constexpr std::uint8_t kRndv = static_cast<std::uint8_t>(TmhOpcode::kRndv);
constexpr std::uint8_t kFin = static_cast<std::uint8_t>(TmhOpcode::kFin);
constexpr std::uint8_t kEager = static_cast<std::uint8_t>(TmhOpcode::kEager);

// The receiving side: a TM SRQ (its ops complete on `opcq`) with `n` plain
// receives of 4096 bytes at 64K + i*4K (wr_id 1000 + i).
struct Receiver {
  LinkNode node;
  std::unique_ptr<CompletionQueue> opcq;
  std::unique_ptr<SharedReceiveQueue> srq;
  Receiver(LinkKind link, unsigned k, std::uint32_t tags = 8) : node(tm_device(link, k)) {
    opcq = node.dev.create_cq(CqInit{.cqe = 256}).value();
    SrqInitAttr a{64, 2, 0, nullptr};
    a.cq = opcq.get();
    a.max_num_tags = tags;
    a.max_ops = 8;
    auto s = node.pd.create_srq(a);
    EXPECT_TRUE(s) << s.error().reason;
    srq = std::move(*s);
  }
  void post_plain(int n) {
    for (int i = 0; i < n; ++i) {
      const Sge s = node.sge(65536 + i * 4096, 4096);
      ASSERT_TRUE(srq->post_recv(recv_wr(1000 + i, s)));
    }
  }
  // ADD a tag whose buffer is 4096 bytes at slot*4K; returns its handle.
  std::uint32_t add(std::uint64_t tag, std::uint64_t recv_wr_id, std::size_t slot, std::uint64_t mask = ~0ull,
                    std::uint32_t flags = TM_OP_SIGNALED) {
    const Sge s = node.sge(slot * 4096, 4096);
    TmOpWr op;
    op.wr_id = 500 + recv_wr_id;
    op.opcode = TmOpcode::kAdd;
    op.flags = flags;
    op.recv_wr_id = recv_wr_id;
    op.sg_list = &s;
    op.num_sge = 1;
    op.tag = tag;
    op.mask = mask;
    auto r = srq->post_srq_ops(op);
    EXPECT_TRUE(r) << r.error().reason;
    return op.handle;
  }
  Wc op(TmOpcode code, std::uint64_t wr_id, std::uint32_t flags, std::uint32_t cnt = 0, std::uint32_t handle = 0) {
    TmOpWr w;
    w.wr_id = wr_id;
    w.opcode = code;
    w.flags = flags;
    w.unexpected_cnt = cnt;
    w.handle = handle;
    auto r = srq->post_srq_ops(w);
    EXPECT_TRUE(r) << r.error().reason;
    auto wcs = poll_n(*opcq, 1);
    EXPECT_EQ(wcs.size(), 1u);
    return wcs.empty() ? Wc{} : wcs[0];
  }
};

// A TMH (big-endian fields) at the start of `p`, the rest `fill`.
void write_msg(std::uint8_t* p, std::size_t len, std::uint8_t opcode, std::uint64_t tag, std::uint32_t app_ctx,
               std::uint8_t fill) {
  std::memset(p, fill, len);
  if (len < kTmhSize) return;
  std::memset(p, 0, kTmhSize);
  p[0] = opcode;
  for (int i = 0; i < 4; ++i) p[4 + i] = static_cast<std::uint8_t>(app_ctx >> (24 - 8 * i));
  for (int i = 0; i < 8; ++i) p[8 + i] = static_cast<std::uint8_t>(tag >> (56 - 8 * i));
}

struct Pair {
  LinkNode a;
  Receiver b;
  std::unique_ptr<QueuePair> qa, qb;
  Pair(LinkKind link, std::uint32_t tags = 8) : a(tm_device(link, 1)), b(link, 2, tags) {
    qa = a.rc_qp();
    qb = b.node.rc_qp(b.srq.get());
    connect_qps(*qa, a.dev, *qb, b.node.dev, kPath);
  }
  // Sends `len` bytes from offset 0 of a's buffer; returns the receive's CQE.
  Wc send(std::uint32_t len, std::uint64_t id) {
    const Sge s = a.sge(0, len);
    EXPECT_TRUE(qa->post_send(send_wr(id, s)));
    auto sent = poll_n(*a.scq, 1);
    EXPECT_EQ(sent.size(), 1u);
    if (!sent.empty()) EXPECT_EQ(sent[0].status, WcStatus::kSuccess) << wc_status_str(sent[0].status);
    auto got = poll_n(*b.node.rcq, 1);
    EXPECT_EQ(got.size(), 1u);
    return got.empty() ? Wc{} : got[0];
  }
};

TEST_P(TmSrq, AnEagerMessageMatchingAPostedTagLandsInItsBufferWithoutTheTmh) {
  Pair p(GetParam());
  p.b.post_plain(4);
  for (std::uint64_t t = 1; t <= 3; ++t) {
    p.b.add(t, 10 + t, t);
    auto wcs = poll_n(*p.b.opcq, 1);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].opcode, WcOpcode::kTmAdd);
    EXPECT_EQ(wcs[0].wr_id, 510 + t);
    EXPECT_EQ(wcs[0].wc_flags, 0u);
  }
  p.b.add(9, 19, 9, ~0ull, 0);  // unsignaled: no completion (the next one is the SYNC's)
  EXPECT_EQ(p.b.op(TmOpcode::kSync, 29, TM_OP_SIGNALED).wr_id, 29u);
  // 1500 bytes: two packets at MTU 1024; the TMH is only in the first.
  write_msg(p.a.buf.data(), 1500, kEager, 2, 0xabcdef01, 0x5a);
  const Wc wc = p.send(1500, 1);
  EXPECT_EQ(wc.status, WcStatus::kSuccess) << wc_status_str(wc.status);
  EXPECT_EQ(wc.opcode, WcOpcode::kTmRecv);
  EXPECT_EQ(wc.wr_id, 12u);
  EXPECT_EQ(wc.wc_flags, std::uint32_t{WC_TM_MATCH | WC_TM_DATA_VALID});
  EXPECT_EQ(wc.tm_tag, 2u);
  EXPECT_EQ(wc.tm_priv, 0xabcdef01u);
  EXPECT_EQ(wc.byte_len, 1500u - kTmhSize);
  const auto* got = p.b.node.buf.data() + 2 * 4096;
  EXPECT_TRUE(std::all_of(got, got + 1500 - kTmhSize, [](auto v) { return v == 0x5a; }));
  EXPECT_EQ(got[1500 - kTmhSize], 0);  // nothing beyond
  // Tag 2 was consumed; 1, 3 and 9 remain; no plain receive taken.
  EXPECT_EQ(p.b.srq->tm_counts().tags, 3u);
  EXPECT_EQ(p.b.srq->query().max_wr, 64u);
  EXPECT_EQ(p.b.srq->tm_counts().unexpected, 0u);
}

TEST_P(TmSrq, AMaskedTagMatchesTheOldestPostedTagThatFits) {
  Pair p(GetParam());
  p.b.add(0x1200, 1, 1, 0xff00);
  p.b.add(0x1234, 2, 2);
  ASSERT_EQ(poll_n(*p.b.opcq, 2).size(), 2u);
  write_msg(p.a.buf.data(), 100, kEager, 0x1234, 0, 0x11);
  Wc wc = p.send(100, 1);
  EXPECT_EQ(wc.wr_id, 1u);  // 0x1234 & 0xff00 == 0x1200 & 0xff00, and it came first
  wc = p.send(100, 2);
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.wc_flags, std::uint32_t{WC_TM_MATCH | WC_TM_DATA_VALID});
}

TEST_P(TmSrq, AnUnmatchedTagIsUnexpectedAndMatchingWaitsForTheConsumersSync) {
  Pair p(GetParam());
  p.b.post_plain(4);
  p.b.add(7, 77, 1);
  ASSERT_EQ(poll_n(*p.b.opcq, 1).size(), 1u);
  write_msg(p.a.buf.data(), 200, kEager, 0x99, 5, 0x33);
  Wc wc = p.send(200, 1);
  EXPECT_EQ(wc.opcode, WcOpcode::kTmRecv);
  EXPECT_EQ(wc.wr_id, 1000u);
  EXPECT_EQ(wc.wc_flags, 0u);
  EXPECT_EQ(wc.byte_len, 200u);  // whole, TMH included
  EXPECT_EQ(p.b.node.buf[65536], kEager);
  EXPECT_EQ(p.b.node.buf[65536 + 15], 0x99);
  EXPECT_EQ(p.b.srq->tm_counts().unexpected, 1u);
  // Tag 7 is posted, but the consumer has not synced: unexpected too.
  write_msg(p.a.buf.data(), 200, kEager, 7, 0, 0x44);
  wc = p.send(200, 2);
  EXPECT_EQ(wc.wr_id, 1001u);
  EXPECT_EQ(wc.wc_flags, 0u);
  // A sync that is still behind says so; one that catches up clears it.
  Wc s = p.b.op(TmOpcode::kSync, 27, TM_OP_SIGNALED | TM_OP_SYNC, 1);
  EXPECT_EQ(s.opcode, WcOpcode::kTmSync);
  EXPECT_EQ(s.wc_flags, std::uint32_t{WC_TM_SYNC_REQ});
  s = p.b.op(TmOpcode::kSync, 28, TM_OP_SIGNALED | TM_OP_SYNC, 2);
  EXPECT_EQ(s.wr_id, 28u);
  EXPECT_EQ(s.wc_flags, 0u);
  wc = p.send(200, 3);
  EXPECT_EQ(wc.wr_id, 77u);
  EXPECT_EQ(wc.wc_flags, std::uint32_t{WC_TM_MATCH | WC_TM_DATA_VALID});
  EXPECT_EQ(wc.tm_tag, 7u);
  EXPECT_EQ(p.b.srq->tm_counts().tags, 0u);
}

TEST_P(TmSrq, NoTagTakesAnOrdinaryReceiveAndIsNotUnexpected) {
  Pair p(GetParam());
  p.b.post_plain(2);
  p.b.add(0x1234, 5, 1);
  ASSERT_EQ(poll_n(*p.b.opcq, 1).size(), 1u);
  write_msg(p.a.buf.data(), 64, kNoTag, 0x1234, 0, 0x77);
  const Wc wc = p.send(64, 1);
  EXPECT_EQ(wc.opcode, WcOpcode::kTmNoTag);
  EXPECT_EQ(wc.wr_id, 1000u);
  EXPECT_EQ(wc.wc_flags, 0u);
  EXPECT_EQ(wc.tm_tag, 0u);
  EXPECT_EQ(wc.byte_len, 64u);
  EXPECT_EQ(p.b.srq->tm_counts().unexpected, 0u);
  EXPECT_EQ(p.b.srq->tm_counts().tags, 1u);
}

TEST_P(TmSrq, MalformedTmhsAreUnexpectedAndNeverMatch) {
  Pair p(GetParam());
  p.b.post_plain(5);
  p.b.add(0, 9, 1, 0);  // mask 0: matches any tag
  ASSERT_EQ(poll_n(*p.b.opcq, 1).size(), 1u);
  // Shorter than a TMH; empty; FIN; RNDV (not offloaded); an unknown
  // opcode. The consumer syncs after each, so matching is on for the next.
  std::vector<Wc> got;
  auto send_synced = [&](std::uint32_t len) {
    got.push_back(p.send(len, got.size()));
    const Wc s = p.b.op(TmOpcode::kSync, 27, TM_OP_SIGNALED | TM_OP_SYNC, static_cast<std::uint32_t>(got.size()));
    EXPECT_EQ(s.wc_flags, 0u);
  };
  write_msg(p.a.buf.data(), 8, kEager, 0, 0, 0x01);
  send_synced(8);
  send_synced(0);
  for (std::uint8_t opcode : {kFin, kRndv, std::uint8_t{0xff}}) {
    write_msg(p.a.buf.data(), 48, opcode, 0, 0, 0x02);
    send_synced(48);
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].status, WcStatus::kSuccess) << i;
    EXPECT_EQ(got[i].opcode, WcOpcode::kTmRecv) << i;
    EXPECT_EQ(got[i].wr_id, 1000 + i) << i;
    EXPECT_EQ(got[i].wc_flags, 0u) << i;
  }
  EXPECT_EQ(got[0].byte_len, 8u);
  EXPECT_EQ(got[1].byte_len, 0u);
  EXPECT_EQ(got[4].byte_len, 48u);
  EXPECT_EQ(p.b.srq->tm_counts().unexpected, 5u);
  EXPECT_EQ(p.b.srq->tm_counts().tags, 1u);  // the catch-all tag is still there
  // And it does match a well-formed eager message.
  write_msg(p.a.buf.data(), 48, kEager, 0x4242, 0, 0x03);
  EXPECT_EQ(p.send(48, 9).wr_id, 9u);
}

TEST_P(TmSrq, DelRemovesATagAndFailsOnOneAlreadyConsumed) {
  Pair p(GetParam(), 2);
  const std::uint32_t h1 = p.b.add(1, 1, 1);
  const std::uint32_t h2 = p.b.add(2, 2, 2);
  ASSERT_EQ(poll_n(*p.b.opcq, 2).size(), 2u);
  EXPECT_NE(h1, h2);
  // The list is full.
  {
    const Sge s = p.b.node.sge(0, 64);
    TmOpWr w;
    w.sg_list = &s;
    w.num_sge = 1;
    TmOpWr* bad = nullptr;
    auto r = p.b.srq->post_srq_ops(w, &bad);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ENOMEM);
    EXPECT_EQ(bad, &w);
  }
  Wc d = p.b.op(TmOpcode::kDel, 41, TM_OP_SIGNALED, 0, h1);
  EXPECT_EQ(d.opcode, WcOpcode::kTmDel);
  EXPECT_EQ(d.status, WcStatus::kSuccess);
  EXPECT_EQ(p.b.srq->tm_counts().tags, 1u);
  // Tag 2 is consumed by a message; its DEL then fails (even unsignaled).
  write_msg(p.a.buf.data(), 32, kEager, 2, 0, 0x66);
  EXPECT_EQ(p.send(32, 1).wr_id, 2u);
  d = p.b.op(TmOpcode::kDel, 42, 0, 0, h2);
  EXPECT_EQ(d.wr_id, 42u);
  EXPECT_EQ(d.status, WcStatus::kTmErr);
  // A handle never returned.
  TmOpWr w;
  w.opcode = TmOpcode::kDel;
  w.handle = 1000;
  auto r = p.b.srq->post_srq_ops(w);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EINVAL);
  EXPECT_EQ(p.b.srq->tm_counts().tags, 0u);
}

TEST(TmSrqCreate, RefusesBadAttributesAndOpsOnABasicSrq) {
  LinkNode n(LinkKind::kInproc, 1);
  SrqInitAttr a{16, 1, 0, nullptr};
  a.max_num_tags = 4;
  a.max_ops = 4;
  auto r = n.pd.create_srq(a);  // no CQ
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EINVAL);
  a.cq = n.rcq.get();
  a.max_num_tags = 1u << 20;  // beyond the device
  EXPECT_FALSE(n.pd.create_srq(a));
  EXPECT_GT(n.dev.query().tm_max_num_tags, 0u);
  a.max_num_tags = n.dev.query().tm_max_num_tags;
  auto ok = n.pd.create_srq(a);
  ASSERT_TRUE(ok) << ok.error().reason;
  EXPECT_TRUE((*ok)->is_tm());
  auto basic = n.pd.create_srq(SrqInitAttr{16, 1, 0, nullptr}).value();
  EXPECT_FALSE(basic->is_tm());
  TmOpWr w;
  TmOpWr* bad = nullptr;
  auto e = basic->post_srq_ops(w, &bad);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code, EINVAL);
  EXPECT_EQ(bad, &w);
}

INSTANTIATE_TEST_SUITE_P(Links, TmSrq, ::testing::Values(LinkKind::kInproc, LinkKind::kUdp), link_name);

}  // namespace
}  // namespace srdma::test
