// The RC engine through the public verbs: RDMA WRITE message rate and
// bandwidth against the copy rate of the same size, and SEND ping-pong
// latency, between two devices on the in-process link, and the same
// between two devices of this process on the RoCEv2 link (UDP on two
// loopback addresses: the /udp variants).
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "hca/copy.h"
#include "srdma/access.h"
#include "srdma/device.h"
#include "srdma/net.h"

#include <unistd.h>

namespace srdma {
namespace {

struct Pair {
  struct Node {
    Device dev;
    ProtectionDomain pd;
    std::vector<std::uint8_t> buf;
    MemoryRegion mr;
    std::unique_ptr<CompletionQueue> cq;
    std::unique_ptr<QueuePair> qp;
  };
  Node a, b;

  // `k` > 0: a RoCEv2 device on this process's k-th loopback address.
  static Node make(std::size_t bytes, unsigned k) {
    Profile p;
    p.num_comp_vectors = 1;
    Node n;
    if (k == 0) {
      n.dev = Device::open(p).value();
    } else {
      NetConfig net;
      const auto pid = static_cast<std::uint32_t>(::getpid());
      net.ip = ipv4_str((127u << 24) | ((pid & 0xffff) << 8) | k);
      n.dev = Device::open(p, "srdma_udp", net).value();
    }
    n.pd = n.dev.alloc_pd().value();
    n.buf.resize(bytes);
    n.mr = n.pd.reg_mr(n.buf.data(), bytes, kAccessAll).value();
    n.cq = n.dev.create_cq(CqInit{.cqe = 4096}).value();
    n.qp = n.pd.create_qp(QpInitAttr{n.cq.get(), n.cq.get(), QpCaps{256, 256, 1, 1, 64}, false, nullptr}).value();
    return n;
  }
  static void up(QueuePair& qp, const Device& peer, std::uint32_t qpn) {
    (void)qp.connect(RcConnection{.peer_addr = peer.address(), .peer_qpn = qpn, .access = kAccessAll & ~ACCESS_LOCAL_WRITE});
  }
  Pair(std::size_t bytes, bool udp) : a(make(bytes, udp ? 1 : 0)), b(make(bytes, udp ? 2 : 0)) {
    up(*a.qp, b.dev, b.qp->qp_num());
    up(*b.qp, a.dev, a.qp->qp_num());
  }
};

// RDMA WRITE of `size` bytes, one CQE per 16 WRs (perftest -Q 16), at most
// 128 outstanding.
void BM_WriteBw(benchmark::State& state) {
  const auto size = static_cast<std::uint32_t>(state.range(0));
  Pair p(std::max<std::size_t>(size, 4096), state.range(1) != 0);
  Sge sge{reinterpret_cast<std::uint64_t>(p.a.buf.data()), size, p.a.mr.lkey()};
  SendWr w;
  w.opcode = WrOpcode::kRdmaWrite;
  w.sg_list = &sge;
  w.num_sge = 1;
  w.remote_addr = reinterpret_cast<std::uint64_t>(p.b.buf.data());
  w.rkey = p.b.mr.rkey();
  std::uint64_t posted = 0, completed = 0;
  Wc wc[16];
  for (auto _ : state) {
    while (posted - completed >= 128) {
      int n = p.a.cq->poll(wc);
      completed += 16 * static_cast<std::uint64_t>(n);
    }
    w.send_flags = (posted % 16 == 15) ? std::uint32_t{SEND_SIGNALED} : 0u;
    if (!p.a.qp->post_send(w)) state.SkipWithError("post_send failed");
    ++posted;
  }
  while (completed + 16 <= posted) completed += 16 * static_cast<std::uint64_t>(p.a.cq->poll(wc));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * size);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_WriteBw)->ArgsProduct({{8, 4096, 65536, 1 << 20}, {0}});
BENCHMARK(BM_WriteBw)->ArgsProduct({{8, 4096, 65536, 1 << 20}, {1}})->Name("BM_WriteBw/udp")->UseRealTime();

// The copy the engine does, alone, for the same sizes.
void BM_EngineCopy(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  std::vector<std::uint8_t> src(size, 1), dst(size);
  for (auto _ : state) {
    hca::copy_bytes(dst.data(), src.data(), size);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * size));
}
BENCHMARK(BM_EngineCopy)->Arg(8)->Arg(4096)->Arg(65536)->Arg(1 << 20);

void BM_Memcpy(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  std::vector<std::uint8_t> src(size, 1), dst(size);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), size);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * size));
}
BENCHMARK(BM_Memcpy)->Arg(8)->Arg(4096)->Arg(65536)->Arg(1 << 20);

// SEND ping-pong of 8 bytes, busy polling: one iteration is a round trip.
void BM_SendPingPong(benchmark::State& state) {
  Pair p(4096, state.range(0) != 0);
  auto post_recv = [](Pair::Node& n) {
    Sge s{reinterpret_cast<std::uint64_t>(n.buf.data()) + 2048, 64, n.mr.lkey()};
    RecvWr r;
    r.sg_list = &s;
    r.num_sge = 1;
    (void)n.qp->post_recv(r);
  };
  auto send = [](Pair::Node& n) {
    Sge s{reinterpret_cast<std::uint64_t>(n.buf.data()), 8, n.mr.lkey()};
    SendWr w;
    w.opcode = WrOpcode::kSend;
    w.sg_list = &s;
    w.num_sge = 1;
    w.send_flags = SEND_SIGNALED | SEND_INLINE;
    (void)n.qp->post_send(w);
  };
  auto wait = [](Pair::Node& n, int count) {
    Wc wc[4];
    for (int got = 0; got < count;) got += n.cq->poll(std::span<Wc>(wc, 4));
  };
  for (int i = 0; i < 4; ++i) {
    post_recv(p.a);
    post_recv(p.b);
  }
  for (auto _ : state) {
    send(p.a);
    wait(p.b, 1);  // the receive
    post_recv(p.b);
    send(p.b);
    wait(p.a, 2);  // a's send and its receive
    post_recv(p.a);
    wait(p.b, 1);  // b's send
  }
  state.counters["half_rtt_us"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2, benchmark::Counter::kIsRate |
                                                                          benchmark::Counter::kInvert);
}
BENCHMARK(BM_SendPingPong)->Arg(0)->UseRealTime();
BENCHMARK(BM_SendPingPong)->Arg(1)->Name("BM_SendPingPong/udp")->UseRealTime();

}  // namespace
}  // namespace srdma
