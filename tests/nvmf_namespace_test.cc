// Namespaces, both backends through the same tests: data round trips,
// refusals with the NVMe status the target will send, flush, and several
// threads submitting at once. The file backend skips where io_uring is not
// allowed (containers and seccomp return ENOSYS or EPERM).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "nvmf/namespace.h"

namespace srdma::nvmf {
namespace {

// Waits for one I/O's status.
struct Waiter {
  std::promise<NvmeStatus> promise;
  IoDone callback() {
    return [this](NvmeStatus s) { promise.set_value(s); };
  }
  NvmeStatus get() { return promise.get_future().get(); }
};

NvmeStatus do_read(Namespace& ns, std::uint64_t slba, std::uint32_t nlb, std::span<std::byte> dst) {
  Waiter w;
  ns.read(slba, nlb, dst, w.callback());
  return w.get();
}
NvmeStatus do_write(Namespace& ns, std::uint64_t slba, std::uint32_t nlb,
                    std::span<const std::byte> src) {
  Waiter w;
  ns.write(slba, nlb, src, w.callback());
  return w.get();
}
NvmeStatus do_flush(Namespace& ns) {
  Waiter w;
  ns.flush(w.callback());
  return w.get();
}

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte((i * 131 + seed * 7 + (i >> 9)) & 0xFF);
  return v;
}

class TempFile {
 public:
  TempFile() {
    char tmpl[] = "/tmp/srdma_nvmf_ns_XXXXXX";
    const int fd = ::mkstemp(tmpl);
    EXPECT_GE(fd, 0);
    ::close(fd);
    path_ = tmpl;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

enum class Backend { kRam, kFile };

class NvmfNamespace : public ::testing::TestWithParam<Backend> {
 protected:
  // 256 blocks of 512 bytes, or skips the test when io_uring is forbidden.
  std::unique_ptr<Namespace> make(std::uint64_t blocks = 256, std::uint32_t bs = 512) {
    if (GetParam() == Backend::kRam) return make_ram_namespace(blocks, bs).value();
    auto ns = open_file_namespace(file_.path(), {.block_size = bs, .create_blocks = blocks,
                                                 .queue_depth = 8});
    if (!ns && (ns.error().code == ENOSYS || ns.error().code == EPERM)) {
      skipped_ = ns.error().to_string();
      return nullptr;
    }
    EXPECT_TRUE(ns.has_value()) << ns.error().to_string();
    return ns ? std::move(*ns) : nullptr;
  }
  TempFile file_;
  std::string skipped_;
};

#define MAKE_OR_SKIP(var, ...)                          \
  auto var = make(__VA_ARGS__);                          \
  if (!var && !skipped_.empty()) GTEST_SKIP() << skipped_; \
  ASSERT_TRUE(var)

TEST_P(NvmfNamespace, ReadsZerosThenWhatWasWritten) {
  MAKE_OR_SKIP(ns);
  EXPECT_EQ(ns->block_size(), 512u);
  EXPECT_EQ(ns->block_count(), 256u);
  std::vector<std::byte> buf(4 * 512, std::byte{0xAA});
  ASSERT_TRUE(do_read(*ns, 10, 4, buf).ok());
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](std::byte b) { return b == std::byte{0}; }));

  auto data = pattern(8 * 512, 1);
  ASSERT_TRUE(do_write(*ns, 100, 8, data).ok());
  std::vector<std::byte> back(8 * 512);
  ASSERT_TRUE(do_read(*ns, 100, 8, back).ok());
  EXPECT_EQ(back, data);
  // A sub-range at an offset.
  std::vector<std::byte> mid(2 * 512);
  ASSERT_TRUE(do_read(*ns, 103, 2, mid).ok());
  EXPECT_EQ(0, std::memcmp(mid.data(), data.data() + 3 * 512, mid.size()));
  // The last block is addressable.
  ASSERT_TRUE(do_write(*ns, 255, 1, std::span(data).first(512)).ok());
  EXPECT_TRUE(do_flush(*ns).ok());

  NamespaceCounters c = ns->counters();
  EXPECT_EQ(c.writes, 2u);
  EXPECT_EQ(c.reads, 3u);
  EXPECT_EQ(c.flushes, 1u);
  EXPECT_EQ(c.bytes_written, 9u * 512);
  EXPECT_EQ(c.errors, 0u);
}

TEST_P(NvmfNamespace, RefusalsCarryTheirNvmeStatus) {
  MAKE_OR_SKIP(ns);
  std::vector<std::byte> buf(2 * 512);
  EXPECT_EQ(do_read(*ns, 255, 2, buf).code, StatusCode::kLbaOutOfRange);
  EXPECT_EQ(do_write(*ns, 256, 1, std::span(buf).first(512)).code, StatusCode::kLbaOutOfRange);
  EXPECT_EQ(do_read(*ns, ~0ull, 2, buf).code, StatusCode::kLbaOutOfRange) << "no wrap";
  EXPECT_EQ(do_read(*ns, 0, 0, std::span(buf).first(0)).code, StatusCode::kInvalidField);
  EXPECT_EQ(do_read(*ns, 0, 1, buf).code, StatusCode::kDataSglLengthInvalid);
  EXPECT_EQ(do_write(*ns, 0, 3, buf).code, StatusCode::kDataSglLengthInvalid);
  EXPECT_TRUE(do_read(*ns, 0, 1, std::span(buf).first(512)).ok()) << "still serving";
  EXPECT_EQ(ns->counters().refused, 6u);
  EXPECT_TRUE(NvmeStatus::of(StatusCode::kLbaOutOfRange).dnr);
}

TEST_P(NvmfNamespace, LargerBlocks) {
  MAKE_OR_SKIP(ns, 16, 4096);
  auto data = pattern(3 * 4096, 5);
  ASSERT_TRUE(do_write(*ns, 13, 3, data).ok());
  std::vector<std::byte> back(3 * 4096);
  ASSERT_TRUE(do_read(*ns, 13, 3, back).ok());
  EXPECT_EQ(back, data);
  EXPECT_EQ(identify_namespace(*ns).lbaf[0].lbads, 12);
  EXPECT_EQ(identify_namespace(*ns).nsze, 16u);
}

TEST_P(NvmfNamespace, ConcurrentSubmitters) {
  // Each thread owns a stripe of blocks and keeps many I/Os in flight at once
  // (more than the file backend's ring depth of 8, so submitters must wait).
  constexpr int kThreads = 4, kBlocksPerThread = 32, kRounds = 3;
  MAKE_OR_SKIP(ns, kThreads * kBlocksPerThread);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        std::vector<std::vector<std::byte>> bufs;
        for (int b = 0; b < kBlocksPerThread; ++b) bufs.push_back(pattern(512, t * 1000 + round * 100 + b));
        std::mutex mu;
        std::condition_variable cv;
        int pending = kBlocksPerThread;
        auto done = [&](NvmeStatus s) {
          if (!s.ok()) ++failures;
          std::lock_guard lock(mu);
          if (--pending == 0) cv.notify_one();
        };
        for (int b = 0; b < kBlocksPerThread; ++b)
          ns->write(static_cast<std::uint64_t>(t * kBlocksPerThread + b), 1, bufs[b], done);
        {
          std::unique_lock lock(mu);
          cv.wait(lock, [&] { return pending == 0; });
        }
        std::vector<std::vector<std::byte>> back(kBlocksPerThread, std::vector<std::byte>(512));
        pending = kBlocksPerThread;
        for (int b = 0; b < kBlocksPerThread; ++b)
          ns->read(static_cast<std::uint64_t>(t * kBlocksPerThread + b), 1, back[b], done);
        {
          std::unique_lock lock(mu);
          cv.wait(lock, [&] { return pending == 0; });
        }
        for (int b = 0; b < kBlocksPerThread; ++b)
          if (back[b] != bufs[b]) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(ns->counters().writes, std::uint64_t{kThreads * kBlocksPerThread * kRounds});
}

TEST_P(NvmfNamespace, CallbackMaySubmitMore) {
  // A completion handler that issues the next I/O (what a target does when a
  // read completes and it posts the next one) must not deadlock, even with
  // the ring full.
  MAKE_OR_SKIP(ns);
  auto data = pattern(512, 9);
  std::vector<std::byte> back(512);
  std::promise<NvmeStatus> read_status;
  ns->write(7, 1, data, [&](NvmeStatus s) {
    ASSERT_TRUE(s.ok());
    ns->read(7, 1, back, [&](NvmeStatus r) { read_status.set_value(r); });
  });
  EXPECT_TRUE(read_status.get_future().get().ok());
  EXPECT_EQ(back, data);
}

INSTANTIATE_TEST_SUITE_P(NvmfBackends, NvmfNamespace, ::testing::Values(Backend::kRam, Backend::kFile),
                         [](const auto& p) { return p.param == Backend::kRam ? "Ram" : "File"; });

TEST(NvmfNamespaceFactories, RefuseBadGeometryAndFiles) {
  EXPECT_EQ(make_ram_namespace(0).error().code, EINVAL);
  EXPECT_EQ(make_ram_namespace(8, 1000).error().code, EINVAL);
  EXPECT_EQ(make_ram_namespace(8, 256).error().code, EINVAL);
  EXPECT_EQ(make_ram_namespace(8, 1 << 17).error().code, EINVAL);
  EXPECT_EQ(make_ram_namespace(1ull << 60, 4096).error().code, EINVAL);
  auto big = make_ram_namespace(1ull << 27, 512);  // 64 GiB of address space, none touched
  ASSERT_TRUE(big.has_value()) << big.error().to_string();
  EXPECT_EQ((*big)->backend(), "ram");

  auto missing = open_file_namespace("/nonexistent/dir/ns.img");
  EXPECT_EQ(missing.error().code, ENOENT);
  EXPECT_NE(missing.error().reason.find("/nonexistent/dir/ns.img"), std::string::npos);
  TempFile empty;
  auto tiny = open_file_namespace(empty.path());
  EXPECT_EQ(tiny.error().code, EINVAL) << "an empty file has no block";
  EXPECT_EQ(open_file_namespace(empty.path(), {.queue_depth = 0}).error().code, EINVAL);
  EXPECT_EQ(open_file_namespace("/dev/null").error().code, EINVAL) << "a character device";
}

TEST(NvmfNamespaceFactories, FileKeepsDataAcrossReopen) {
  TempFile file;
  auto data = pattern(1024, 3);
  {
    auto ns = open_file_namespace(file.path(), {.block_size = 512, .create_blocks = 64});
    if (!ns && (ns.error().code == ENOSYS || ns.error().code == EPERM))
      GTEST_SKIP() << ns.error().to_string();
    ASSERT_TRUE(ns.has_value()) << ns.error().to_string();
    ASSERT_TRUE(do_write(**ns, 5, 2, data).ok());
    ASSERT_TRUE(do_flush(**ns).ok());
  }
  EXPECT_EQ(std::filesystem::file_size(file.path()), 64u * 512);
  // Existing file, its own size (not a multiple of 4096: rounded down).
  std::filesystem::resize_file(file.path(), 64 * 512 + 100);
  auto ns = open_file_namespace(file.path());
  ASSERT_TRUE(ns.has_value()) << ns.error().to_string();
  EXPECT_EQ((*ns)->block_count(), 64u);
  EXPECT_EQ((*ns)->backend(), "file");
  std::vector<std::byte> back(1024);
  ASSERT_TRUE(do_read(**ns, 5, 2, back).ok());
  EXPECT_EQ(back, data);
}

}  // namespace
}  // namespace srdma::nvmf
