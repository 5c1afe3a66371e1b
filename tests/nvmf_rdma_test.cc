// The NVMe-oF target and host over softrdma: every command end to end,
// refusals with their NVMe status, and failures in the middle of I/O.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "nvmf/capsule.h"
#include "nvmf/namespace.h"
#include "nvmf/rdma_host.h"
#include "nvmf/rdma_target.h"
#include "nvmf/subsystem.h"
#include "test_profile.h"
#include "wait.h"

namespace srdma::nvmf {
namespace {

constexpr std::uint16_t kPort = 4420;
constexpr std::uint32_t kBlock = 4096;
constexpr std::uint64_t kBlocks = 256;
const char* kNqn = "nqn.2026-11.io.softrdma:test";

// Waits for one I/O.
struct Waiter {
  BlockIo io;
  std::promise<void> p;
  std::future<void> f = p.get_future();
  std::uint64_t result = 0;
  Waiter() {
    io.context = this;
    io.done = [](BlockIo& b) { static_cast<Waiter*>(b.context)->p.set_value(); };
  }
  bool wait() { return f.wait_for(std::chrono::seconds(20)) == std::future_status::ready; }
};

// A namespace that holds every completion back until released (slow media).
class HeldNamespace final : public Namespace {
 public:
  HeldNamespace(std::uint32_t block_size, std::uint64_t blocks)
      : Namespace(block_size, blocks), data_(block_size * blocks) {}
  std::string_view backend() const override { return "held"; }
  void do_read(std::uint64_t off, std::span<std::byte> dst, IoDone done) override {
    hold([=, this, done = std::move(done)]() mutable {
      std::memcpy(dst.data(), data_.data() + off, dst.size());
      done(NvmeStatus::success());
    });
  }
  void do_write(std::uint64_t off, std::span<const std::byte> src, IoDone done) override {
    hold([=, this, done = std::move(done)]() mutable {
      std::memcpy(data_.data() + off, src.data(), src.size());
      done(NvmeStatus::success());
    });
  }
  void do_flush(IoDone done) override { done(NvmeStatus::success()); }
  std::size_t held() {
    std::lock_guard lock(mu_);
    return held_.size();
  }
  void release() {
    std::vector<std::move_only_function<void()>> h;
    {
      std::lock_guard lock(mu_);
      h.swap(held_);
      holding_ = false;
    }
    for (auto& f : h) f();
  }

 private:
  void hold(std::move_only_function<void()> f) {
    {
      std::lock_guard lock(mu_);
      if (holding_) {
        held_.push_back(std::move(f));
        return;
      }
    }
    f();
  }
  std::vector<std::byte> data_;
  std::mutex mu_;
  bool holding_ = true;
  std::vector<std::move_only_function<void()>> held_;
};

class NvmfRdmaTest : public ::testing::Test {
 protected:
  void SetUp() override { start(nullptr); }

  void start(std::shared_ptr<Namespace> ns, bool pool = true, std::shared_ptr<Clock> clock = Clock::steady()) {
    host_dev_ = *Device::open(test::small_profile(), "host");
    target_dev_ = *Device::open(test::small_profile(), "target");
    TargetOptions to;
    to.pool_cqs = pool;
    to.clock = std::move(clock);
    to.limits.in_capsule_data_size = 4096;
    target_ = *RdmaTarget::create(target_dev_, to);
    if (!ns) ns = *make_ram_namespace(kBlocks, kBlock);
    ns_ = ns;
    auto sub = *Subsystem::create(kNqn, "SRDMATEST", "softrdma test");
    ASSERT_TRUE(sub->add_namespace(ns));
    ASSERT_TRUE(target_->add_subsystem(sub));
    ASSERT_TRUE(target_->listen(kPort));
  }

  std::unique_ptr<HostController> connect(HostOptions o = {}) {
    if (o.subnqn.empty()) o.subnqn = kNqn;
    if (o.nr_io_queues == 0) o.nr_io_queues = 2;
    if (o.queue_size == 128) o.queue_size = 16;
    auto c = HostController::connect(host_dev_, target_dev_.address(), kPort, o);
    EXPECT_TRUE(c) << c.error().to_string();
    return c ? std::move(*c) : nullptr;
  }

  // One synchronous read or write.
  BlockIo io_sync(HostController& c, BlockIo::Op op, std::uint64_t lba, std::uint32_t n, void* buf, std::uint32_t q = 0) {
    Waiter w;
    w.io.op = op;
    w.io.lba = lba;
    w.io.nblocks = n;
    w.io.buf = buf;
    auto r = c.submit(w.io, q);
    EXPECT_TRUE(r) << r.error().to_string();
    EXPECT_TRUE(w.wait());
    return w.io;
  }

  // A raw command on queue `qid`; the completion's status.
  BlockIo raw(HostController& c, const HostCommand& cmd, std::uint32_t qid, std::uint64_t* result = nullptr) {
    Waiter w;
    auto r = c.submit_command(cmd, qid, w.io, &w.result);
    EXPECT_TRUE(r) << r.error().to_string();
    EXPECT_TRUE(w.wait());
    if (result) *result = w.result;
    return w.io;
  }

  Device host_dev_, target_dev_;
  std::unique_ptr<RdmaTarget> target_;
  std::shared_ptr<Namespace> ns_;
};

TEST_F(NvmfRdmaTest, ConnectIdentifiesControllerAndNamespace) {
  auto c = connect();
  ASSERT_TRUE(c);
  EXPECT_NE(c->cntlid(), 0);
  EXPECT_EQ(c->io_queues(), 2u);
  ASSERT_EQ(c->namespaces().size(), 1u);
  EXPECT_EQ(c->namespaces()[0].nsid, 1u);
  EXPECT_EQ(c->namespaces()[0].block_size, kBlock);
  EXPECT_EQ(c->namespaces()[0].num_blocks, kBlocks);
  EXPECT_STREQ(c->identify().subnqn, kNqn);
  EXPECT_EQ(c->identify().cntlid, c->cntlid());
  EXPECT_EQ(c->identify().nn, Subsystem::kMaxNamespaces);  // NN: the highest nsid possible
  EXPECT_EQ(target_->stats().controllers, 1u);
  EXPECT_EQ(target_->stats().queues, 3u);  // admin + 2 I/O
}

TEST_F(NvmfRdmaTest, WriteThenReadReturnsTheData) {
  auto c = connect();
  ASSERT_TRUE(c);
  std::vector<std::byte> out(3 * kBlock), in(3 * kBlock);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = std::byte(i * 7 + 3);
  EXPECT_TRUE(io_sync(*c, BlockIo::Op::kWrite, 10, 3, out.data(), 0).ok());
  EXPECT_TRUE(io_sync(*c, BlockIo::Op::kRead, 10, 3, in.data(), 1).ok());
  EXPECT_EQ(in, out);
  Waiter f;
  f.io.op = BlockIo::Op::kFlush;
  ASSERT_TRUE(c->submit(f.io, 0));
  ASSERT_TRUE(f.wait());
  EXPECT_TRUE(f.io.ok());
}

TEST_F(NvmfRdmaTest, UnalignedHostBufferIsRegisteredAndRead) {
  auto c = connect();
  ASSERT_TRUE(c);
  std::vector<std::byte> out(kBlock), in(2 * kBlock + 100);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = std::byte(i ^ 0x5a);
  EXPECT_TRUE(io_sync(*c, BlockIo::Op::kWrite, 0, 1, out.data()).ok());
  std::byte* odd = in.data() + 77;  // the MR starts mid-page
  EXPECT_TRUE(io_sync(*c, BlockIo::Op::kRead, 0, 1, odd).ok());
  EXPECT_EQ(std::memcmp(odd, out.data(), kBlock), 0);
}

TEST_F(NvmfRdmaTest, PropertiesAndKeepAliveOnTheAdminQueue) {
  auto c = connect();
  ASSERT_TRUE(c);
  std::uint64_t v = 0;
  EXPECT_TRUE(raw(*c, HostCommand{build_property_get(0, Property::kVs)}, 0, &v).ok());
  EXPECT_EQ(v, kVersion1_4);
  EXPECT_TRUE(raw(*c, HostCommand{build_property_get(0, Property::kCsts)}, 0, &v).ok());
  EXPECT_TRUE(v & kCstsReady);
  EXPECT_TRUE(raw(*c, HostCommand{build_keep_alive(0)}, 0).ok());
  std::vector<std::byte> list(kIdentifyDataSize);
  HostCommand id{build_identify(0, Cns::kActiveNamespaceList, 0, null_sgl()), list.data(), kIdentifyDataSize, false};
  EXPECT_TRUE(raw(*c, id, 0).ok());
  std::uint32_t first;
  std::memcpy(&first, list.data(), 4);
  EXPECT_EQ(first, 1u);
}

TEST_F(NvmfRdmaTest, RefusalsCarryTheirStatusAndTheQueueKeepsServing) {
  auto c = connect();
  ASSERT_TRUE(c);
  std::vector<std::byte> buf(kBlock);
  // Invalid namespace (Identify CNS 00h for nsid 9).
  HostCommand idns{build_identify(0, Cns::kNamespace, 9, null_sgl()), buf.data(), kIdentifyDataSize, false};
  EXPECT_EQ(raw(*c, idns, 0).status.code, StatusCode::kInvalidNamespace);
  // Read beyond the namespace: LBA Out of Range.
  HostCommand rd{*build_read(0, 1, kBlocks - 1, 2, null_sgl()), buf.data(), 2 * kBlock, false};
  std::vector<std::byte> two(2 * kBlock);
  rd.data = two.data();
  EXPECT_EQ(raw(*c, rd, 1).status.code, StatusCode::kLbaOutOfRange);
  // Read of a namespace that does not exist.
  HostCommand rd9{*build_read(0, 9, 0, 1, null_sgl()), buf.data(), kBlock, false};
  EXPECT_EQ(raw(*c, rd9, 1).status.code, StatusCode::kInvalidNamespace);
  // An opcode the I/O queue does not know.
  NvmeCommand bad{};
  bad.opcode = 0x55;
  bad.flags = kPsdtSglMetaBuffer;
  bad.nsid = 1;
  HostCommand hb{bad};
  EXPECT_EQ(raw(*c, hb, 1).status.code, StatusCode::kInvalidOpcode);
  // A data descriptor of a type the target does not take.
  NvmeCommand badsgl = *build_read(0, 1, 0, 1, null_sgl());
  badsgl.dptr.type_subtype = 0x30;  // segment descriptor
  HostCommand hs{badsgl};
  hs.raw_dptr = true;
  EXPECT_FALSE(raw(*c, hs, 1).status.ok());
  // A transfer length that does not match nlb.
  HostCommand shortlen{*build_read(0, 1, 0, 2, null_sgl()), buf.data(), kBlock, false};
  EXPECT_FALSE(raw(*c, shortlen, 1).status.ok());
  // The queue still serves well-formed commands.
  EXPECT_TRUE(io_sync(*c, BlockIo::Op::kRead, 0, 1, buf.data(), 0).ok());
  EXPECT_GE(target_->stats().errors, 6u);
}

TEST_F(NvmfRdmaTest, HostRefusesBadRequestsBeforeTheWire) {
  auto c = connect();
  ASSERT_TRUE(c);
  std::vector<std::byte> buf(kBlock);
  BlockIo io;
  io.done = [](BlockIo&) {};
  io.buf = buf.data();
  io.nblocks = 1;
  io.lba = kBlocks;
  EXPECT_EQ(c->submit(io, 0).error().code, EINVAL);  // beyond the namespace
  io.lba = 0;
  io.nsid = 7;
  EXPECT_EQ(c->submit(io, 0).error().code, EINVAL);  // no such namespace
  io.nsid = 1;
  EXPECT_EQ(c->submit(io, 5).error().code, EINVAL);  // no such queue
  io.nblocks = 0;
  EXPECT_EQ(c->submit(io, 0).error().code, EINVAL);
  io.nblocks = 1;
  io.done = nullptr;
  EXPECT_EQ(c->submit(io, 0).error().code, EINVAL);
}

TEST_F(NvmfRdmaTest, ConnectToUnknownSubsystemIsRefused) {
  HostOptions o;
  o.subnqn = "nqn.2026-11.io.softrdma:nothing";
  o.nr_io_queues = 1;
  auto c = HostController::connect(host_dev_, target_dev_.address(), kPort, o);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ECONNREFUSED);
  auto none = HostController::connect(host_dev_, target_dev_.address(), kPort + 1, HostOptions{.subnqn = kNqn});
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ECONNREFUSED);
}

TEST_F(NvmfRdmaTest, SetupRefusesBadArguments) {
  // The target's options.
  TargetOptions to;
  to.limits.max_queue_size = 1;
  EXPECT_EQ(RdmaTarget::create(target_dev_, to).error().code, EINVAL);
  to = {};
  to.limits.max_io_size = 5000;
  EXPECT_EQ(RdmaTarget::create(target_dev_, to).error().code, EINVAL);
  to = {};
  to.poll_ctx = PollContext::kDirect;
  EXPECT_EQ(RdmaTarget::create(target_dev_, to).error().code, EINVAL);
  // A second subsystem of the same NQN, a second listener on the port.
  auto dup = *Subsystem::create(kNqn, "DUP", "dup");
  EXPECT_EQ(target_->add_subsystem(dup).error().code, EEXIST);
  EXPECT_EQ(target_->add_subsystem(nullptr).error().code, EINVAL);
  EXPECT_EQ(target_->listen(kPort).error().code, EADDRINUSE);
  // The host's options.
  HostOptions o;
  EXPECT_EQ(HostController::connect(host_dev_, target_dev_.address(), kPort, o).error().code, EINVAL);  // no NQN
  o.subnqn = kNqn;
  o.queue_size = 1;
  EXPECT_EQ(HostController::connect(host_dev_, target_dev_.address(), kPort, o).error().code, EINVAL);
  // I/O queues larger than the controller's CAP.MQES + 1 (the admin queue
  // connected first, then goes).
  o.queue_size = 1024;
  o.nr_io_queues = 1;
  EXPECT_EQ(HostController::connect(host_dev_, target_dev_.address(), kPort, o).error().code, EINVAL);
  EXPECT_TRUE(test::eventually([&] { return target_->stats().queues == 0; }));
}

TEST_F(NvmfRdmaTest, BadKeyEndsTheQueueAndEveryIoCompletes) {
  auto c = connect();
  ASSERT_TRUE(c);
  // A write whose SGL names a key the host never registered: the target's
  // RDMA READ fails, the connection ends, the command completes with an
  // error instead of hanging.
  NvmeCommand w = *build_write(0, 1, 0, 1, *keyed_sgl(0x1000, kBlock, 0xdead00, false));
  HostCommand hw{w};
  hw.raw_dptr = true;
  BlockIo io = raw(*c, hw, 1);
  EXPECT_FALSE(io.ok());
  // That queue is gone: the error completed it after the queue closed.
  std::vector<std::byte> buf(kBlock);
  Waiter dead;
  dead.io.buf = buf.data();
  dead.io.nblocks = 1;
  EXPECT_EQ(c->submit(dead.io, 0).error().code, ENOTCONN);
  // The other I/O queue and the admin queue are unaffected: the controller
  // fails only when its admin queue goes or a command times out.
  EXPECT_FALSE(c->failed());
  Waiter r;
  r.io.buf = buf.data();
  r.io.nblocks = 1;
  ASSERT_TRUE(c->submit(r.io, 1));
  ASSERT_TRUE(r.wait());
  EXPECT_TRUE(r.io.ok());
  EXPECT_TRUE(raw(*c, HostCommand{build_keep_alive(0)}, 0).ok());
}

TEST_F(NvmfRdmaTest, TargetDisconnectInTheMiddleOfIoCompletesEveryIo) {
  auto held = std::make_shared<HeldNamespace>(kBlock, kBlocks);
  target_.reset();
  start(held);
  auto c = connect();
  ASSERT_TRUE(c);  // Connect and Identify do not touch the namespace
  constexpr int kIos = 24;
  std::vector<std::byte> buf(kIos * kBlock);
  std::vector<Waiter> ws(kIos);
  for (int i = 0; i < kIos; ++i) {
    ws[i].io.op = i % 2 ? BlockIo::Op::kRead : BlockIo::Op::kWrite;
    ws[i].io.lba = i;
    ws[i].io.nblocks = 1;
    ws[i].io.buf = buf.data() + i * kBlock;
    ASSERT_TRUE(c->submit(ws[i].io, i % 2));
  }
  ASSERT_TRUE(test::eventually([&] { return held->held() == kIos; }));
  // Every queue is closed when disconnect_all() returns; the namespace
  // finishes its I/O only after that, so no response can go out.
  target_->disconnect_all();
  held->release();
  for (auto& w : ws) ASSERT_TRUE(w.wait());
  int failed = 0;
  for (auto& w : ws) failed += !w.io.ok();
  EXPECT_EQ(failed, kIos);  // the responses could not go out
  // The host learns: new I/O is refused or fails, never hangs.
  // The I/O completed because its queue closed, so the queue refuses now.
  Waiter late;
  late.io.buf = buf.data();
  late.io.nblocks = 1;
  EXPECT_EQ(c->submit(late.io, 0).error().code, ENOTCONN);
}

// The host leaving closes its queues, and the reaper frees them while
// disconnect_all() may still hold their pointers: it must not free one
// under it. (The target's teardown does the same after every test.)
TEST_F(NvmfRdmaTest, DisconnectAllRacesQueuesThatCloseOnTheirOwn) {
  for (int i = 0; i < 30; ++i) {
    auto c = connect();
    ASSERT_TRUE(c);
    c.reset();  // the host disconnects every queue
    target_->disconnect_all();
  }
  EXPECT_TRUE(test::eventually([&] { return target_->stats().queues == 0; }));
}

TEST_F(NvmfRdmaTest, HostTimeoutFailsTheControllerAndEveryIo) {
  auto held = std::make_shared<HeldNamespace>(kBlock, kBlocks);
  target_.reset();
  start(held);
  auto clock = std::make_shared<ManualClock>();
  HostOptions o;
  o.io_timeout = std::chrono::milliseconds(200);
  o.kato_ms = 0;  // only the I/O timeout runs on this clock
  o.clock = clock;
  auto c = connect(o);
  ASSERT_TRUE(c);
  std::vector<std::byte> buf(4 * kBlock);
  std::vector<Waiter> ws(4);
  for (int i = 0; i < 4; ++i) {
    ws[i].io.lba = i;
    ws[i].io.nblocks = 1;
    ws[i].io.buf = buf.data() + i * kBlock;
    ASSERT_TRUE(c->submit(ws[i].io, 0));
  }
  ASSERT_TRUE(test::eventually([&] { return held->held() == 4; }));
  clock->advance(std::chrono::milliseconds(201));  // past the deadline; wakes the keeper
  for (auto& w : ws) {
    ASSERT_TRUE(w.wait());
    EXPECT_EQ(w.io.transport_error, ETIMEDOUT);
  }
  EXPECT_TRUE(c->failed());
  Waiter late;
  late.io.buf = buf.data();
  late.io.nblocks = 1;
  EXPECT_EQ(c->submit(late.io, 0).error().code, ENOTCONN);
  held->release();
}

TEST_F(NvmfRdmaTest, HostDisconnectLeavesNothingBehindOnTheTarget) {
  {
    auto c = connect();
    ASSERT_TRUE(c);
    EXPECT_EQ(target_->stats().queues, 3u);
  }
  EXPECT_TRUE(test::eventually([&] { return target_->stats().queues == 0; }));
  EXPECT_EQ(target_->stats().controllers, 0u);
  // Every pool CQ entry went back.
  for (const auto& s : target_dev_.cq_pool_stats()) EXPECT_EQ(s.cqe_used, 0u);
  for (const auto& s : host_dev_.cq_pool_stats()) EXPECT_EQ(s.cqe_used, 0u);
}

TEST_F(NvmfRdmaTest, TargetEndsAControllerWhoseHostStopsKeepingAlive) {
  auto clock = std::make_shared<ManualClock>();
  target_.reset();
  start(nullptr, true, clock);  // KATO runs on the test's clock
  HostOptions o;
  o.kato_ms = 1000;  // the target's minimum (ControllerLimits::min_kato_ms)
  o.keep_alive_interval_ms = 60'000;  // a host that falls silent
  auto c = connect(o);
  ASSERT_TRUE(c);
  clock->advance(std::chrono::milliseconds(1001));  // past KATO since Connect
  ASSERT_TRUE(test::eventually([&] { return c->failed(); }));  // the target closed its queues; the host noticed
  EXPECT_TRUE(test::eventually([&] { return target_->stats().queues == 0; }));
  std::vector<std::byte> buf(kBlock);
  BlockIo io;
  io.done = [](BlockIo&) {};
  io.buf = buf.data();
  io.nblocks = 1;
  EXPECT_EQ(c->submit(io, 0).error().code, ENOTCONN);
}

TEST_F(NvmfRdmaTest, KeepAliveKeepsAControllerAlive) {
  // Host and target on one test clock: 2.5 s of KATO 1 s pass in five
  // steps of 500 ms, each answered by the host's Keep Alive.
  auto clock = std::make_shared<ManualClock>();
  target_.reset();
  start(nullptr, true, clock);
  HostOptions o;
  o.kato_ms = 1000;  // Keep Alive every 500 ms
  o.clock = clock;
  auto c = connect(o);
  ASSERT_TRUE(c);
  for (int step = 0; step < 5; ++step) {
    const std::uint64_t before = target_->stats().commands;
    clock->advance(std::chrono::milliseconds(500));
    // The Keep Alive of this step reached the target before time moves on.
    ASSERT_TRUE(test::eventually([&] { return target_->stats().commands > before; })) << step;
  }
  EXPECT_FALSE(c->failed());
  EXPECT_EQ(target_->stats().queues, 3u);
}

TEST_F(NvmfRdmaTest, ManualClockWakesItsSubscribersAndStopsAfterUnsubscribe) {
  ManualClock clock;
  EXPECT_EQ(clock.now().time_since_epoch().count(), 0);
  int wakes = 0;
  const auto id = clock.subscribe([&] { ++wakes; });
  clock.advance(std::chrono::milliseconds(5));
  EXPECT_EQ(clock.now().time_since_epoch(), std::chrono::milliseconds(5));
  EXPECT_EQ(wakes, 1);
  clock.unsubscribe(id);
  clock.advance(std::chrono::milliseconds(5));
  EXPECT_EQ(wakes, 1);
  // The defaults refuse a missing clock.
  TargetOptions to;
  to.clock = nullptr;
  EXPECT_EQ(RdmaTarget::create(target_dev_, to).error().code, EINVAL);
  HostOptions o;
  o.subnqn = kNqn;
  o.clock = nullptr;
  EXPECT_EQ(HostController::connect(host_dev_, target_dev_.address(), kPort, o).error().code, EINVAL);
}

TEST_F(NvmfRdmaTest, PoolCqsAreSizedLikeTheKernelUlps) {
  auto c = connect();
  ASSERT_TRUE(c);
  // Host: 4 x queue_size + 1 per queue (admin 32, two I/O queues of 16).
  std::uint32_t host_used = 0;
  for (const auto& s : host_dev_.cq_pool_stats()) host_used += s.cqe_used;
  EXPECT_EQ(host_used, (4 * 32 + 1) + 2 * (4 * 16 + 1));
  // Target: recv + 2 x send + 1 per queue, each side with the admission
  // slot's WRs (one receive, two sends) and the drain's.
  std::uint32_t target_used = 0;
  for (const auto& s : target_dev_.cq_pool_stats()) target_used += s.cqe_used;
  auto per_queue = [](std::uint32_t size) { return (size + 2) + (2 * size + 3); };
  EXPECT_EQ(target_used, per_queue(32) + 2 * per_queue(16));
}

TEST_F(NvmfRdmaTest, PrivateCqsWorkToo) {
  target_.reset();
  start(nullptr, /*pool=*/false);
  HostOptions o;
  o.pool_cqs = false;
  auto c = connect(o);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->cqs().size(), 3u);
  EXPECT_TRUE(host_dev_.cq_pool_stats().empty());
  std::vector<std::byte> buf(kBlock, std::byte{1});
  EXPECT_TRUE(io_sync(*c, BlockIo::Op::kWrite, 3, 1, buf.data(), 1).ok());
}

TEST_F(NvmfRdmaTest, FmrRegistrationMovesTheDataToo) {
  HostOptions o;
  o.reg = RegMode::kFmr;
  auto c = connect(o);
  ASSERT_TRUE(c);
  std::vector<std::byte> out(2 * kBlock), in(2 * kBlock + 512);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = std::byte(i * 13);
  for (int round = 0; round < 3; ++round) {  // the second and third map hit the pool's cache
    EXPECT_TRUE(io_sync(*c, BlockIo::Op::kWrite, 20, 2, out.data(), 1).ok());
    std::byte* odd = in.data() + 512;
    EXPECT_TRUE(io_sync(*c, BlockIo::Op::kRead, 20, 2, odd, 0).ok());
    EXPECT_EQ(std::memcmp(odd, out.data(), out.size()), 0);
  }
}

TEST_F(NvmfRdmaTest, ManyConcurrentIosFromSeveralThreads) {
  auto c = connect();
  ASSERT_TRUE(c);
  constexpr int kThreads = 4, kPer = 200;
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      std::vector<std::byte> out(kBlock), in(kBlock);
      for (int i = 0; i < kPer; ++i) {
        const std::uint64_t lba = t * 50 + i % 50;
        std::memset(out.data(), t * 31 + i, kBlock);
        for (;;) {
          Waiter w;
          w.io.op = BlockIo::Op::kWrite;
          w.io.lba = lba;
          w.io.nblocks = 1;
          w.io.buf = out.data();
          auto r = c->submit(w.io, t % 2);
          if (!r && r.error().code == EAGAIN) continue;
          if (!r || !w.wait() || !w.io.ok()) ++bad;
          break;
        }
        Waiter rd;
        rd.io.lba = lba;
        rd.io.nblocks = 1;
        rd.io.buf = in.data();
        if (!c->submit(rd.io, t % 2) || !rd.wait() || !rd.io.ok() || in != out) ++bad;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace srdma::nvmf
