// The NVMe-oF host and target connected through the CM on the wire (REQ
// with the RDMA CM header and the NVMe-oF RDMA request, REP, RTU; DREQ/DREP
// when either leaves), over RoCEv2 between two devices (what a host in
// another process does) and over the in-process link: one CM for both.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <future>
#include <vector>

#include "link_nodes.h"
#include "nvmf/namespace.h"
#include "nvmf/rdma_host.h"
#include "nvmf/rdma_target.h"
#include "nvmf/subsystem.h"
#include "nvmf/wire_cm.h"
#include "wait.h"

namespace srdma::nvmf {
namespace {

constexpr std::uint16_t kPort = 4420;
constexpr std::uint32_t kBlock = 4096;
constexpr std::uint64_t kBlocks = 64;
const char* kNqn = "nqn.2026-12.io.softrdma:wire";

struct Waiter {
  BlockIo io;
  std::promise<void> p;
  std::future<void> f = p.get_future();
  Waiter() {
    io.context = this;
    io.done = [](BlockIo& b) { static_cast<Waiter*>(b.context)->p.set_value(); };
  }
  bool wait() { return f.wait_for(test::kDeadline) == std::future_status::ready; }
};

class NvmfWireCm : public ::testing::TestWithParam<test::LinkKind> {
 protected:
  Device host_dev_ = test::open_device(GetParam(), 1);
  Device target_dev_ = test::open_device(GetParam(), 2);
  std::unique_ptr<RdmaTarget> target_;

  void SetUp() override {
    TargetOptions to;
    to.clock = Clock::steady();
    target_ = *RdmaTarget::create(target_dev_, to);
    auto sub = *Subsystem::create(kNqn, "SRDMAWIRE", "softrdma wire CM test");
    ASSERT_TRUE(sub->add_namespace(*make_ram_namespace(kBlocks, kBlock)));
    ASSERT_TRUE(target_->add_subsystem(sub));
    ASSERT_TRUE(target_->listen(kPort));
  }
  HostOptions options() {
    HostOptions o;
    o.subnqn = kNqn;
    o.nr_io_queues = 2;
    o.queue_size = 16;
      return o;
  }
  bool io(HostController& c, BlockIo::Op op, std::uint64_t lba, void* buf) {
    Waiter w;
    w.io.op = op;
    w.io.lba = lba;
    w.io.nblocks = 1;
    w.io.buf = buf;
    if (!c.submit(w.io, 0)) return false;
    return w.wait() && w.io.ok();
  }
};

TEST_P(NvmfWireCm, AHostConnectsThroughTheCmAndMovesData) {
  auto c = HostController::connect(host_dev_, target_dev_.address(), kPort, options());
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(target_->stats().queues, 3u) << "the admin queue and two I/O queues";
  ASSERT_TRUE(target_->cm_counters());
  // The last queue's RTU goes out as its REP arrives and may still be on
  // its way to the target's agent when connect() returns.
  EXPECT_TRUE(srdma::test::eventually([&] { return target_->cm_counters()->received >= 2u * 3u; }))
      << "a REQ and an RTU per queue reached the target's CM agent";
  std::vector<std::byte> out(kBlock), in(kBlock);
  for (std::size_t i = 0; i < kBlock; ++i) out[i] = static_cast<std::byte>(i * 13);
  ASSERT_TRUE(io(**c, BlockIo::Op::kWrite, 7, out.data()));
  ASSERT_TRUE(io(**c, BlockIo::Op::kRead, 7, in.data()));
  EXPECT_EQ(in, out);
  // The host leaves: its DREQs close the target's queues.
  c->reset();
  EXPECT_TRUE(srdma::test::eventually([&] { return target_->stats().queues == 0; }));
}

TEST_P(NvmfWireCm, TheTargetLeavingReachesTheHost) {
  auto c = HostController::connect(host_dev_, target_dev_.address(), kPort, options());
  ASSERT_TRUE(c) << c.error().to_string();
  target_->disconnect_all();  // DREQs to the host
  std::vector<std::byte> buf(kBlock);
  EXPECT_TRUE(srdma::test::eventually([&] {
    Waiter w;
    w.io.lba = 0;
    w.io.nblocks = 1;
    w.io.buf = buf.data();
    auto r = (*c)->submit(w.io, 0);
    if (!r) return r.error().code == ENOTCONN;
    return w.wait() && !w.io.ok();
  })) << "the host's queues learn that the target left";
}

TEST_P(NvmfWireCm, NoTargetOnThatPortIsARefusal) {
  auto c = HostController::connect(host_dev_, target_dev_.address(), kPort + 1, options());
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ECONNREFUSED) << c.error().to_string();
  HostOptions bad = options();
  bad.subnqn = "nqn.2026-12.io.softrdma:nobody";
  auto d = HostController::connect(host_dev_, target_dev_.address(), kPort, bad);
  EXPECT_FALSE(d) << "an unknown subsystem is refused by Fabrics Connect";
}

TEST_P(NvmfWireCm, OnlyAllowedHostsConnect) {
  auto sub = *Subsystem::create("nqn.2026-12.io.softrdma:guarded", "SRDMAG", "guarded");
  ASSERT_TRUE(sub->add_namespace(*make_ram_namespace(kBlocks, kBlock)));
  ASSERT_TRUE(sub->allow_host("nqn.2026-12.io.softrdma:friend"));
  EXPECT_EQ(sub->allow_host("").error().code, EINVAL);
  ASSERT_TRUE(target_->add_subsystem(sub));
  HostOptions o = options();
  o.subnqn = "nqn.2026-12.io.softrdma:guarded";
  auto stranger = HostController::connect(host_dev_, target_dev_.address(), kPort, o);
  ASSERT_FALSE(stranger);
  EXPECT_NE(stranger.error().reason.find("Invalid Host"), std::string::npos) << stranger.error().to_string();
  o.hostnqn = "nqn.2026-12.io.softrdma:friend";
  auto friendly = HostController::connect(host_dev_, target_dev_.address(), kPort, o);
  EXPECT_TRUE(friendly) << friendly.error().to_string();
}

// A listener that leaves from inside its own connection request: the
// device's CM agent then loses its last reference on the agent's thread
// and is destroyed on another one.
class LeavingListener : public CmListener {
 public:
  std::atomic<WireListener*> listener{nullptr};
  Result<CmReply> on_connect_request(const CmRequest&, const std::shared_ptr<CmConnection>&) override {
    delete listener.exchange(nullptr, std::memory_order_acq_rel);
    return make_error(ECONNREFUSED, "the listener left");
  }
};

TEST_P(NvmfWireCm, AnAgentGoneInItsOwnHandlerGivesWayToTheNext) {
  constexpr std::uint16_t kOtherPort = kPort + 7;
  for (int round = 0; round < 20; ++round) {
    LeavingListener l;
    // The next agent on the device waits for the old one to release the
    // GSI QP (QP1) rather than failing with EBUSY while it still exists.
    auto w = wire_listen(host_dev_, kOtherPort, &l);
    ASSERT_TRUE(w) << "round " << round << ": " << w.error().to_string();
    l.listener.store(w->release(), std::memory_order_release);
    CmRequest req;
    req.peer_qpn = 0x100;
    auto c = wire_connect(target_dev_, host_dev_.address(), kOtherPort, req);
    ASSERT_FALSE(c);
    EXPECT_EQ(c.error().code, ECONNREFUSED) << c.error().to_string();
    delete l.listener.exchange(nullptr, std::memory_order_acq_rel);
  }
  // One more waits for the last round's agent, and this one goes here: no
  // agent outlives the test holding the device's address.
  LeavingListener last;
  EXPECT_TRUE(wire_listen(host_dev_, kOtherPort, &last));
}

TEST_P(NvmfWireCm, DiscoveryListsWhatThisHostMayReach) {
  auto hidden = *Subsystem::create("nqn.2026-12.io.softrdma:hidden", "SRDMAH", "hidden");
  ASSERT_TRUE(hidden->add_namespace(*make_ram_namespace(kBlocks, kBlock)));
  ASSERT_TRUE(hidden->allow_host("nqn.2026-12.io.softrdma:someone-else"));
  ASSERT_TRUE(target_->add_subsystem(hidden));
  HostOptions o = options();
  o.subnqn = std::string(kDiscoveryNqn);
  auto d = HostController::connect(host_dev_, target_dev_.address(), kPort, o);
  ASSERT_TRUE(d) << d.error().to_string();
  EXPECT_EQ((*d)->io_queues(), 0u) << "a discovery controller has no I/O queues";
  auto page = (*d)->get_log_page(kLogPageDiscovery, 0, 2048);
  ASSERT_TRUE(page) << page.error().to_string();
  DiscoveryLogHeader h;
  std::memcpy(&h, page->data(), sizeof h);
  ASSERT_EQ(h.numrec, 1u) << "the hidden subsystem does not allow this host";
  DiscoveryLogEntry e;
  std::memcpy(&e, page->data() + 1024, sizeof e);
  EXPECT_EQ(e.trtype, kTrtypeRdma);
  EXPECT_EQ(e.adrfam, kAdrfamIpv4);
  EXPECT_EQ(e.subtype, kSubtypeNvme);
  EXPECT_EQ(std::string(e.subnqn), kNqn);
  EXPECT_EQ(std::string(e.trsvcid, 4), "4420");
  if (GetParam() == test::LinkKind::kUdp) {
    EXPECT_EQ(std::string(e.traddr, test::loopback_ip(2).size()), test::loopback_ip(2));
    EXPECT_EQ(e.rdma.prtype, kRdmaPrtypeRoceV2);
  } else {
    const std::string addr = std::to_string(target_dev_.address());
    EXPECT_EQ(std::string(e.traddr, addr.size()), addr);
    EXPECT_EQ(e.rdma.prtype, kRdmaPrtypeNotSpecified);
  }
  EXPECT_EQ(e.rdma.cms, kRdmaCmsRdmaCm);
  // Past the end of the log reads zeros; another LID is not there.
  auto tail = (*d)->get_log_page(kLogPageDiscovery, 4096, 1024);
  ASSERT_TRUE(tail);
  EXPECT_EQ(std::count(tail->begin(), tail->end(), std::byte{0}), 1024);
  EXPECT_FALSE((*d)->get_log_page(0x02, 0, 512)) << "SMART: not on a discovery controller";
}

// A device reaches peers of its own family only (net.h): a host on IPv4
// asking for a target on IPv6, or the other way, is refused at once, before
// any MAD (rather than after the CM's retries).
TEST(NvmfWireCmFamilies, ATargetOfTheOtherFamilyIsRefusedAtOnce) {
  Device v4 = test::open_device(test::LinkKind::kUdp, 1);
  Device v6 = test::open_device(test::LinkKind::kUdp6, 2);
  CmRequest req;
  req.peer_qpn = 0x100;
  auto c = wire_connect(v4, v6.address(), kPort, req);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, EINVAL);
  EXPECT_NE(c.error().reason.find("the target is on IPv6, this device on IPv4"), std::string::npos)
      << c.error().reason;
  auto d = wire_connect(v6, v4.address(), kPort, req);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, EINVAL);
  EXPECT_NE(d.error().reason.find("the target is on IPv4, this device on IPv6"), std::string::npos)
      << d.error().reason;
}

INSTANTIATE_TEST_SUITE_P(Links, NvmfWireCm, ::testing::Values(test::LinkKind::kInproc, test::LinkKind::kUdp),
                         test::link_name);

}  // namespace
}  // namespace srdma::nvmf
