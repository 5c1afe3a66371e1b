// The host across a target's loss: I/O waits while the target is away and
// goes to the controller connected again; when the loss timeout ends it
// fails. Time is a ManualClock: every reconnect attempt happens when the
// test moves it.
#include "nvmf/reconnecting_host.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "nvmf/namespace.h"
#include "nvmf/rdma_target.h"
#include "nvmf/subsystem.h"
#include "nvmf/wire_cm.h"
#include "test_profile.h"
#include "wait.h"

namespace srdma::nvmf {
namespace {

constexpr std::uint16_t kPort = 4420;
constexpr std::uint32_t kBlock = 4096;
const char* kNqn = "nqn.2026-12.io.softrdma:reconnect";

struct Io {
  BlockIo io;
  std::atomic<bool> done{false};
  Io(BlockIo::Op op, std::uint64_t lba, void* buf) {
    io.op = op;
    io.lba = lba;
    io.nblocks = 1;
    io.buf = buf;
    io.context = this;
    io.done = [](BlockIo& b) { static_cast<Io*>(b.context)->done.store(true); };
  }
};

class ReconnectingHostTest : public ::testing::Test {
 protected:
  Device host_dev_ = *Device::open(test::small_profile(), "host");
  Device target_dev_ = *Device::open(test::small_profile(), "target");
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  std::shared_ptr<Namespace> ns_ = *make_ram_namespace(64, kBlock);  // outlives the targets: the "disk"
  // The target's host outlives its NVMe target, and so does its CM (as the
  // kernel's ib_cm outlives nvmet): an attempt while nothing listens is
  // refused at once (REJ), not left to the CM's timeout.
  std::shared_ptr<cm::CmAgent> target_cm_ = *device_cm_agent(target_dev_);
  std::unique_ptr<RdmaTarget> target_;
  ReconnectOptions ropts_{std::chrono::milliseconds(1000), std::chrono::milliseconds(5000)};

  void start_target() {
    target_ = *RdmaTarget::create(target_dev_, TargetOptions{});
    auto sub = *Subsystem::create(kNqn, "SRDMARC", "reconnect test");
    ASSERT_TRUE(sub->add_namespace(ns_));
    ASSERT_TRUE(target_->add_subsystem(sub));
    ASSERT_TRUE(target_->listen(kPort));
  }
  void SetUp() override { start_target(); }
  std::unique_ptr<ReconnectingHost> connect() {
    HostOptions o;
    o.subnqn = kNqn;
    o.nr_io_queues = 1;
    o.queue_size = 8;
    o.kato_ms = 0;  // no keep-alive: the test moves time
    o.clock = clock_;
    auto h = ReconnectingHost::connect(host_dev_, target_dev_.address(), kPort, o, ropts_);
    EXPECT_TRUE(h) << h.error().to_string();
    return h ? std::move(*h) : nullptr;
  }
};

TEST_F(ReconnectingHostTest, IoWaitsForTheTargetToComeBack) {
  auto h = connect();
  ASSERT_TRUE(h);
  std::vector<std::byte> a(kBlock, std::byte{0x11}), b(kBlock, std::byte{0x22}), in(kBlock);
  Io w1(BlockIo::Op::kWrite, 3, a.data());
  ASSERT_TRUE(h->submit(w1.io, 0));
  ASSERT_TRUE(test::eventually([&] { return w1.done.load(); }));
  EXPECT_TRUE(w1.io.ok());

  target_.reset();  // the target goes away
  Io w2(BlockIo::Op::kWrite, 4, b.data());
  ASSERT_TRUE(h->submit(w2.io, 0)) << "accepted: it waits";
  ASSERT_TRUE(test::eventually([&] { return !h->connected(); }));
  EXPECT_FALSE(w2.done.load());
  clock_->advance(std::chrono::milliseconds(1000));  // an attempt while nothing listens
  EXPECT_FALSE(w2.done.load());
  EXPECT_FALSE(h->lost());

  start_target();
  clock_->advance(std::chrono::milliseconds(1000));
  ASSERT_TRUE(test::eventually([&] { return w2.done.load(); }));
  EXPECT_TRUE(w2.io.ok()) << w2.io.transport_error;
  EXPECT_EQ(h->reconnects(), 1u);
  EXPECT_TRUE(h->connected());
  Io r1(BlockIo::Op::kRead, 4, in.data());
  ASSERT_TRUE(h->submit(r1.io, 0));
  ASSERT_TRUE(test::eventually([&] { return r1.done.load(); }));
  EXPECT_EQ(in, b) << "the write that waited landed once the target was back";
  Io r2(BlockIo::Op::kRead, 3, in.data());
  ASSERT_TRUE(h->submit(r2.io, 0));
  ASSERT_TRUE(test::eventually([&] { return r2.done.load(); }));
  EXPECT_EQ(in, a) << "and what was written before the loss is there";
}

TEST_F(ReconnectingHostTest, WaitingIoFailsWhenTheLossTimeoutEnds) {
  auto h = connect();
  ASSERT_TRUE(h);
  target_.reset();
  std::vector<std::byte> buf(kBlock);
  Io w(BlockIo::Op::kWrite, 1, buf.data());
  ASSERT_TRUE(h->submit(w.io, 0));
  ASSERT_TRUE(test::eventually([&] { return !h->connected(); }));
  for (int i = 0; i < 4; ++i) clock_->advance(std::chrono::milliseconds(1000));
  EXPECT_FALSE(w.done.load()) << "4 s of a 5 s loss timeout";
  clock_->advance(std::chrono::milliseconds(1000));
  ASSERT_TRUE(test::eventually([&] { return w.done.load(); }));
  EXPECT_EQ(w.io.transport_error, ENOTCONN);
  EXPECT_TRUE(h->lost());
  Io late(BlockIo::Op::kRead, 1, buf.data());
  EXPECT_EQ(h->submit(late.io, 0).error().code, ENOTCONN);
}

TEST_F(ReconnectingHostTest, BadArgumentsAndTheFirstConnect) {
  HostOptions o;
  o.subnqn = kNqn;
  o.nr_io_queues = 1;
  o.clock = clock_;
  EXPECT_EQ(ReconnectingHost::connect(host_dev_, target_dev_.address(), kPort + 1, o, ropts_).error().code,
            ECONNREFUSED)
      << "the first connect is not retried";
  ReconnectOptions bad{std::chrono::milliseconds(0), std::chrono::milliseconds(1)};
  EXPECT_EQ(ReconnectingHost::connect(host_dev_, target_dev_.address(), kPort, o, bad).error().code, EINVAL);
  auto h = connect();
  ASSERT_TRUE(h);
  std::vector<std::byte> buf(kBlock);
  Io io(BlockIo::Op::kRead, 0, buf.data());
  EXPECT_EQ(h->submit(io.io, 1).error().code, EINVAL) << "one I/O queue";
  io.io.lba = 64;  // beyond the namespace
  EXPECT_EQ(h->submit(io.io, 0).error().code, EINVAL);
}

}  // namespace
}  // namespace srdma::nvmf
