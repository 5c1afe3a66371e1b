// Tag-matching SRQs (SrqInitAttr::max_num_tags, SharedReceiveQueue::
// post_srq_ops): eager messages that match a posted tag land in its buffer
// without their TMH; unmatched ones take an ordinary receive, are counted
// unexpected and stop matching until the consumer syncs; NO_TAG; the list
// operations' completions; malformed TMHs from the wire. Rendezvous: a
// request that matches is READ by the receiving device into the tag's
// buffer (two completions), and the sender gets the FIN; a hostile RVH
// (a key that grants nothing, a length of 0 or beyond the tag's buffer)
// ends in an error completion, nothing written outside the tag's buffer.
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>
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
  // ADD a tag whose buffer is `len` bytes at slot*4K; returns its handle.
  std::uint32_t add(std::uint64_t tag, std::uint64_t recv_wr_id, std::size_t slot, std::uint64_t mask = ~0ull,
                    std::uint32_t flags = TM_OP_SIGNALED, std::uint32_t len = 4096) {
    const Sge s = node.sge(slot * 4096, len);
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

void put_be(std::uint8_t* p, std::uint64_t v, int n) {
  for (int i = n - 1; i >= 0; --i, v >>= 8) p[i] = static_cast<std::uint8_t>(v);
}

// A rendezvous request of `total` bytes at `p`: the TMH (RNDV), the RVH
// naming `va`, `rkey`, `len`, and 0xee after them.
void write_rndv(std::uint8_t* p, std::size_t total, std::uint64_t tag, std::uint32_t app_ctx, std::uint64_t va,
                std::uint32_t rkey, std::uint32_t len) {
  write_msg(p, total, kRndv, tag, app_ctx, 0xee);
  put_be(p + kTmhSize, va, 8);
  put_be(p + kTmhSize + 8, rkey, 4);
  put_be(p + kTmhSize + 12, len, 4);
}

struct Pair {
  LinkNode a;
  Receiver b;
  std::unique_ptr<QueuePair> qa, qb;
  // `b_caps`: the receiving QP's (default: rc_qp's).
  Pair(LinkKind link, std::uint32_t tags = 8, std::optional<QpCaps> b_caps = std::nullopt)
      : a(tm_device(link, 1)), b(link, 2, tags) {
    qa = a.rc_qp();
    if (b_caps) {
      QpInitAttr init{b.node.scq.get(), b.node.rcq.get(), *b_caps, false, nullptr};
      init.srq = b.srq.get();
      qb = b.node.pd.create_qp(init).value();
    } else {
      qb = b.node.rc_qp(b.srq.get());
    }
    connect_qps(*qa, a.dev, *qb, b.node.dev, kPath);
  }
  // Sends `len` bytes from offset `off` of a's buffer; the SEND completes.
  void post(std::uint32_t len, std::uint64_t id, std::size_t off = 0) {
    const Sge s = a.sge(off, len);
    EXPECT_TRUE(qa->post_send(send_wr(id, s)));
    const Wc sent = poll_one(*a.scq);
    EXPECT_EQ(sent.status, WcStatus::kSuccess) << wc_status_str(sent.status);
  }
  // a posts the receive a FIN (or anything b sends) lands in: 64 bytes at 60K.
  void post_fin_recv(std::uint64_t id) { ASSERT_TRUE(qa->post_recv(recv_wr(id, a.sge(61440, 64)))); }
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
  p.b.post_plain(7);
  p.b.add(0, 9, 1, 0);  // mask 0: matches any tag
  ASSERT_EQ(poll_n(*p.b.opcq, 1).size(), 1u);
  // Shorter than a TMH; empty; FIN; an unknown opcode; RNDV that is not
  // one packet of TMH, RVH and at most max_rndv_hdr_size bytes (its RVH
  // cut short, too long, two packets). The consumer syncs after each, so
  // matching is on for the next.
  std::vector<Wc> got;
  auto send_synced = [&](std::uint32_t len) {
    got.push_back(p.send(len, got.size()));
    const Wc s = p.b.op(TmOpcode::kSync, 27, TM_OP_SIGNALED | TM_OP_SYNC, static_cast<std::uint32_t>(got.size()));
    EXPECT_EQ(s.wc_flags, 0u);
  };
  write_msg(p.a.buf.data(), 8, kEager, 0, 0, 0x01);
  send_synced(8);
  send_synced(0);
  for (std::uint8_t opcode : {kFin, std::uint8_t{0xff}}) {
    write_msg(p.a.buf.data(), 48, opcode, 0, 0, 0x02);
    send_synced(48);
  }
  const std::uint32_t max_rndv = p.b.node.dev.query().tm_max_rndv_hdr_size;
  ASSERT_GE(max_rndv, kTmhSize + kRvhSize);
  for (std::uint32_t len : {kTmhSize + kRvhSize - 8, max_rndv + 1, 1500u}) {
    write_rndv(p.a.buf.data(), len, 0, 0, p.a.addr(8192), p.a.mr.rkey(), 16);
    send_synced(len);
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].status, WcStatus::kSuccess) << i;
    EXPECT_EQ(got[i].opcode, WcOpcode::kTmRecv) << i;
    EXPECT_EQ(got[i].wr_id, 1000 + i) << i;
    EXPECT_EQ(got[i].wc_flags, 0u) << i;
  }
  EXPECT_EQ(got[0].byte_len, 8u);
  EXPECT_EQ(got[1].byte_len, 0u);
  EXPECT_EQ(got[3].byte_len, 48u);
  EXPECT_EQ(got[4].byte_len, kTmhSize + kRvhSize - 8);
  EXPECT_EQ(got[5].byte_len, max_rndv + 1);
  EXPECT_EQ(got[6].byte_len, 1500u);
  EXPECT_EQ(p.b.srq->tm_counts().unexpected, 7u);
  EXPECT_EQ(p.b.srq->tm_counts().tags, 1u);  // the catch-all tag is still there
  EXPECT_EQ(p.qb->counters().requests_sent, 0u);  // no READ for any of them
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

TEST_P(TmSrq, ARendezvousThatMatchesIsReadIntoTheTagsBufferAndTheSenderGetsTheFin) {
  Pair p(GetParam());
  p.b.add(7, 70, 1);
  ASSERT_EQ(poll_n(*p.b.opcq, 1).size(), 1u);
  // 3000 bytes at 8K of a's buffer: three READ responses at MTU 1024.
  constexpr std::size_t kData = 8192;
  constexpr std::uint32_t kLen = 3000;
  for (std::uint32_t i = 0; i < kLen; ++i) p.a.buf[kData + i] = static_cast<std::uint8_t>(i * 7 + 1);
  p.post_fin_recv(900);
  write_rndv(p.a.buf.data(), 48, 7, 0xfeed0001, p.a.addr(kData), p.a.mr.rkey(), kLen);
  p.post(48, 1);
  // The match at once, then the data.
  const auto got = poll_n(*p.b.node.rcq, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].status, WcStatus::kSuccess) << wc_status_str(got[0].status);
  EXPECT_EQ(got[0].opcode, WcOpcode::kTmRecv);
  EXPECT_EQ(got[0].wr_id, 70u);
  EXPECT_EQ(got[0].wc_flags, std::uint32_t{WC_TM_MATCH});
  EXPECT_EQ(got[0].tm_tag, 7u);
  EXPECT_EQ(got[0].tm_priv, 0xfeed0001u);
  EXPECT_EQ(got[0].byte_len, 0u);
  EXPECT_EQ(got[1].status, WcStatus::kSuccess) << wc_status_str(got[1].status);
  EXPECT_EQ(got[1].opcode, WcOpcode::kTmRecv);
  EXPECT_EQ(got[1].wr_id, 70u);
  EXPECT_EQ(got[1].wc_flags, std::uint32_t{WC_TM_DATA_VALID});
  EXPECT_EQ(got[1].byte_len, kLen);
  EXPECT_EQ(got[1].qp_num, p.qb->qp_num());
  const std::uint8_t* tagbuf = p.b.node.buf.data() + 4096;
  EXPECT_EQ(std::memcmp(tagbuf, p.a.buf.data() + kData, kLen), 0);
  EXPECT_TRUE(std::all_of(tagbuf + kLen, tagbuf + 4096, [](auto v) { return v == 0; }));
  // The FIN: the request's TMH and RVH again, opcode FIN.
  const Wc fin = poll_one(*p.a.rcq);
  EXPECT_EQ(fin.status, WcStatus::kSuccess) << wc_status_str(fin.status);
  EXPECT_EQ(fin.opcode, WcOpcode::kRecv);
  EXPECT_EQ(fin.wr_id, 900u);
  EXPECT_EQ(fin.byte_len, kTmhSize + kRvhSize);
  EXPECT_EQ(fin.wc_flags, 0u);
  EXPECT_EQ(p.a.buf[61440], kFin);
  EXPECT_EQ(std::memcmp(p.a.buf.data() + 61441, p.a.buf.data() + 1, kTmhSize + kRvhSize - 1), 0);
  EXPECT_EQ(p.b.srq->tm_counts().tags, 0u);
  EXPECT_EQ(p.b.srq->tm_counts().unexpected, 0u);
  EXPECT_EQ(p.qb->state(), QpState::kRts);
  EXPECT_EQ(p.qa->state(), QpState::kRts);
}

TEST_P(TmSrq, ManyRendezvousAtOnceCompleteOnAQpWithTheSmallestSendQueue) {
  // One send WR (the least a QP has): the READs and FINs use the slots the
  // device keeps for them, more requests than slots at once.
  constexpr int kN = 7;
  Pair p(GetParam(), 8, QpCaps{1, 1, 1, 1, 0});
  for (int i = 0; i < kN; ++i) p.b.add(100 + i, 10 + i, 1 + i, ~0ull, 0);
  for (int i = 0; i < kN; ++i) p.post_fin_recv(900 + i);
  std::vector<Sge> sges(kN);
  std::vector<SendWr> wrs(kN);
  for (int i = 0; i < kN; ++i) {
    const std::size_t data = 16384 + i * 4096;
    const std::uint32_t len = 1000 + 300 * i;
    for (std::uint32_t j = 0; j < len; ++j) p.a.buf[data + j] = static_cast<std::uint8_t>(i + 3 * j);
    write_rndv(p.a.buf.data() + 64 * i, 32 + i, 100 + i, i, p.a.addr(data), p.a.mr.rkey(), len);
    sges[i] = p.a.sge(64 * i, 32 + i);
    wrs[i] = send_wr(i, sges[i]);
    if (i > 0) wrs[i - 1].next = &wrs[i];
  }
  ASSERT_TRUE(p.qa->post_send(wrs[0]));
  const auto sent = poll_n(*p.a.scq, kN);
  ASSERT_EQ(sent.size(), static_cast<std::size_t>(kN));
  for (const Wc& wc : sent) EXPECT_EQ(wc.status, WcStatus::kSuccess);
  const auto got = poll_n(*p.b.node.rcq, 2 * kN);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(2 * kN));
  std::vector<int> seen(kN, 0);
  for (const Wc& wc : got) {
    ASSERT_EQ(wc.status, WcStatus::kSuccess) << wc_status_str(wc.status);
    ASSERT_GE(wc.wr_id, 10u);
    const auto i = static_cast<std::size_t>(wc.wr_id - 10);
    ASSERT_LT(i, static_cast<std::size_t>(kN));
    // Each tag: its match, then its data.
    EXPECT_EQ(wc.wc_flags, seen[i] == 0 ? std::uint32_t{WC_TM_MATCH} : std::uint32_t{WC_TM_DATA_VALID}) << i;
    if (seen[i]++ == 1) {
      EXPECT_EQ(wc.byte_len, 1000 + 300 * i);
      EXPECT_EQ(std::memcmp(p.b.node.buf.data() + (1 + i) * 4096, p.a.buf.data() + 16384 + i * 4096, wc.byte_len), 0)
          << i;
    }
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 2), kN);
  // A FIN for each, in the order the READs completed: the requests'.
  const auto fins = poll_n(*p.a.rcq, kN);
  ASSERT_EQ(fins.size(), static_cast<std::size_t>(kN));
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(fins[i].status, WcStatus::kSuccess);
    EXPECT_EQ(fins[i].wr_id, 900u + i);
    EXPECT_EQ(fins[i].byte_len, kTmhSize + kRvhSize);
  }
  EXPECT_EQ(p.qb->state(), QpState::kRts);
}

TEST_P(TmSrq, TheFinWaitsForTheSendersReceive) {
  // No receive at the sender yet: the FIN is NAKed RNR (rnr_retry 7, for
  // ever) until there is one; the tag's data completion does not wait.
  Pair p(GetParam());
  p.b.add(3, 30, 1);
  ASSERT_EQ(poll_n(*p.b.opcq, 1).size(), 1u);
  write_rndv(p.a.buf.data(), 32, 3, 0, p.a.addr(8192), p.a.mr.rkey(), 100);
  p.post(32, 1);
  const auto got = poll_n(*p.b.node.rcq, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].wc_flags, std::uint32_t{WC_TM_DATA_VALID});
  ASSERT_TRUE(eventually([&] { return p.qa->counters().rnr_naks_sent > 0; }));
  p.post_fin_recv(901);
  const Wc fin = poll_one(*p.a.rcq);
  EXPECT_EQ(fin.status, WcStatus::kSuccess);
  EXPECT_EQ(fin.wr_id, 901u);
  EXPECT_EQ(p.a.buf[61440], kFin);
  EXPECT_EQ(p.qb->state(), QpState::kRts);
}

TEST_P(TmSrq, AnUnmatchedRendezvousIsUnexpectedWithItsHeadersAndReadsNothing) {
  Pair p(GetParam());
  p.b.post_plain(1);
  p.b.add(5, 50, 1);
  ASSERT_EQ(poll_n(*p.b.opcq, 1).size(), 1u);
  write_rndv(p.a.buf.data(), 40, 6, 0x77, p.a.addr(8192), p.a.mr.rkey(), 100);
  const Wc wc = p.send(40, 1);
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(wc.opcode, WcOpcode::kTmRecv);
  EXPECT_EQ(wc.wr_id, 1000u);
  EXPECT_EQ(wc.wc_flags, 0u);
  EXPECT_EQ(wc.byte_len, 40u);
  EXPECT_EQ(std::memcmp(p.b.node.buf.data() + 65536, p.a.buf.data(), 40), 0);  // TMH and RVH included
  EXPECT_EQ(p.b.srq->tm_counts().unexpected, 1u);
  EXPECT_EQ(p.b.srq->tm_counts().tags, 1u);
  EXPECT_EQ(p.qb->counters().requests_sent, 0u);
}

// What b sends next lands in a's first receive (RC keeps the order): no
// FIN went before it.
void expect_no_fin_before(Pair& p, std::uint64_t fin_recv) {
  const Sge s = p.b.node.sge(200000, 8);
  ASSERT_TRUE(p.qb->post_send(send_wr(77, s)));
  EXPECT_EQ(poll_one(*p.b.node.scq).status, WcStatus::kSuccess);
  const Wc wc = poll_one(*p.a.rcq);
  EXPECT_EQ(wc.wr_id, fin_recv);
  EXPECT_EQ(wc.byte_len, 8u);  // not a FIN's 32
}

TEST_P(TmSrq, ARendezvousOfZeroBytesOrMoreThanTheTagHoldsIsIncompleteWithItsHeadersInTheTag) {
  Pair p(GetParam());
  int n = 0;
  // More than the tag's 4096 bytes; none; more than a message may be.
  for (std::uint32_t len : {4097u, 0u, 0x80000001u}) {
    SCOPED_TRACE(len);
    p.b.add(9, 90 + n, 1);
    ASSERT_EQ(poll_n(*p.b.opcq, 1).size(), 1u);
    p.post_fin_recv(900 + n);
    std::memset(p.b.node.buf.data() + 4096, 0, 4096);
    write_rndv(p.a.buf.data(), 48, 9, 0xc0de, p.a.addr(8192), p.a.mr.rkey(), len);
    p.post(48, n);
    const Wc wc = poll_one(*p.b.node.rcq);
    EXPECT_EQ(wc.status, WcStatus::kTmRndvIncomplete) << wc_status_str(wc.status);
    EXPECT_EQ(wc.opcode, WcOpcode::kTmRecv);
    EXPECT_EQ(wc.wr_id, 90u + n);
    EXPECT_EQ(wc.wc_flags, std::uint32_t{WC_TM_MATCH | WC_TM_DATA_VALID});
    EXPECT_EQ(wc.tm_tag, 9u);
    EXPECT_EQ(wc.tm_priv, 0xc0deu);
    EXPECT_EQ(wc.byte_len, kTmhSize + kRvhSize);
    const std::uint8_t* tagbuf = p.b.node.buf.data() + 4096;
    EXPECT_EQ(std::memcmp(tagbuf, p.a.buf.data(), kTmhSize + kRvhSize), 0);
    EXPECT_TRUE(std::all_of(tagbuf + kTmhSize + kRvhSize, tagbuf + 4096, [](auto v) { return v == 0; }));
    EXPECT_EQ(p.qb->counters().requests_sent, std::uint64_t(n));  // no READ: only the probes below
    expect_no_fin_before(p, 900 + n);
    EXPECT_EQ(p.qb->state(), QpState::kRts);
    ++n;
  }
  // A tag's buffer shorter than the headers takes what fits, nothing beyond.
  p.b.add(9, 99, 1, ~0ull, TM_OP_SIGNALED, 20);
  ASSERT_EQ(poll_n(*p.b.opcq, 1).size(), 1u);
  std::memset(p.b.node.buf.data() + 4096, 0, 4096);
  write_rndv(p.a.buf.data(), 48, 9, 0, p.a.addr(8192), p.a.mr.rkey(), 100);
  p.post(48, 9);
  const Wc wc = poll_one(*p.b.node.rcq);
  EXPECT_EQ(wc.status, WcStatus::kTmRndvIncomplete);
  EXPECT_EQ(wc.byte_len, 20u);
  EXPECT_EQ(std::memcmp(p.b.node.buf.data() + 4096, p.a.buf.data(), 20), 0);
  EXPECT_EQ(p.b.node.buf[4096 + 20], 0);
}

TEST_P(TmSrq, ARendezvousWhoseKeyGrantsNoReadFailsTheTagAndWritesNothing) {
  // A key of a's that does not allow remote READ, and one that names
  // nothing: a's responder NAKs the READ (remote access error, which ends
  // both QPs); the tag's second completion carries the error.
  for (int variant = 0; variant < 2; ++variant) {
    SCOPED_TRACE(variant);
    Pair p(GetParam());
    auto local_only = p.a.pd.reg_mr(p.a.buf.data(), p.a.buf.size(), ACCESS_LOCAL_WRITE).value();
    const std::uint32_t rkey = variant == 0 ? local_only.rkey() : 0xdeadbeefu;
    p.b.add(4, 40, 1);
    ASSERT_EQ(poll_n(*p.b.opcq, 1).size(), 1u);
    p.post_fin_recv(900);
    std::memset(p.a.buf.data() + 8192, 0xab, 2000);
    write_rndv(p.a.buf.data(), 32, 4, 0, p.a.addr(8192), rkey, 2000);
    p.post(32, 1);
    const auto got = poll_n(*p.b.node.rcq, 2);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].status, WcStatus::kSuccess);
    EXPECT_EQ(got[0].wc_flags, std::uint32_t{WC_TM_MATCH});
    EXPECT_EQ(got[1].status, WcStatus::kRemAccessErr) << wc_status_str(got[1].status);
    EXPECT_EQ(got[1].opcode, WcOpcode::kTmRecv);
    EXPECT_EQ(got[1].wr_id, 40u);
    EXPECT_EQ(got[1].wc_flags, 0u);
    const std::uint8_t* tagbuf = p.b.node.buf.data() + 4096;
    EXPECT_TRUE(std::all_of(tagbuf, tagbuf + 4096, [](auto v) { return v == 0; }));
    EXPECT_EQ(p.qb->state(), QpState::kErr);
    // a's QP ended too: its receive for the FIN flushes, no FIN came.
    const Wc fin = poll_one(*p.a.rcq);
    EXPECT_EQ(fin.status, WcStatus::kWrFlushErr);
    EXPECT_EQ(fin.wr_id, 900u);
    EXPECT_EQ(p.a.buf[61440], 0);
    EXPECT_EQ(p.qa->state(), QpState::kErr);
  }
}

TEST_P(TmSrq, ARendezvousIntoATagWhoseKeyIsBadFailsLocally) {
  // The consumer's own mistake, caught before the READ goes out: a local
  // protection error on the tag, and the QP ends.
  Pair p(GetParam());
  Sge s = p.b.node.sge(4096, 4096);
  s.lkey ^= 0x80;
  TmOpWr op;
  op.opcode = TmOpcode::kAdd;
  op.recv_wr_id = 60;
  op.sg_list = &s;
  op.num_sge = 1;
  op.tag = 6;
  op.mask = ~0ull;
  ASSERT_TRUE(p.b.srq->post_srq_ops(op));
  write_rndv(p.a.buf.data(), 32, 6, 0, p.a.addr(8192), p.a.mr.rkey(), 500);
  p.post(32, 1);
  const auto got = poll_n(*p.b.node.rcq, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].wc_flags, std::uint32_t{WC_TM_MATCH});
  EXPECT_EQ(got[1].status, WcStatus::kLocProtErr) << wc_status_str(got[1].status);
  EXPECT_EQ(got[1].wr_id, 60u);
  EXPECT_EQ(p.qb->counters().requests_sent, 0u);
  EXPECT_EQ(p.qb->state(), QpState::kErr);
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

INSTANTIATE_TEST_SUITE_P(Links, TmSrq, ::testing::Values(LinkKind::kInproc, LinkKind::kUdp, LinkKind::kSameHost), link_name);

}  // namespace
}  // namespace srdma::test
