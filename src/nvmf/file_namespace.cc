// The file / block device backend, through io_uring.
//
// One ring per namespace. Invariants / threading:
// - Submission side (io_uring_get_sqe, io_uring_submit) is not thread-safe in
//   liburing, so it is used only under sq_mu_. Every SQE is submitted at once,
//   so the SQ is empty whenever sq_mu_ is free and get_sqe cannot fail.
// - Completion side (io_uring_wait_cqe, io_uring_cqe_seen) is used only by
//   the reaper thread. The two sides share no index, so they may run at the
//   same time without a common lock (liburing's documented split).
// - inflight_ counts requests submitted and not yet finished (a request
//   resubmitted for a short transfer keeps its slot). Submitters wait while
//   it equals the ring depth, so the CQ (twice the SQ) never overflows. The
//   reaper itself never waits (a callback that submits more I/O would
//   otherwise deadlock on the room only the reaper can make); the kernel's
//   IORING_FEAT_NODROP, required at open, covers that rare excess.
// - A request is heap-allocated, its pointer is the SQE's user_data, and the
//   reaper owns it from the CQE on. user_data 0 is the stop sentinel.
// - Request::published orders the request's fields for TSan (see there).
// - The destructor waits until inflight_ is 0, then stops the reaper.
#include <fcntl.h>
#include <linux/fs.h>
#include <liburing.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "nvmf/namespace.h"

namespace srdma::nvmf {
namespace {

// One SQE moves at most this much; a larger transfer continues as if short.
constexpr std::size_t kMaxChunk = std::size_t{1} << 30;

enum class Op : std::uint8_t { kRead, kWrite, kFlush };

struct Request {
  Op op;
  std::byte* buf = nullptr;  // kWrite: really const; io_uring takes void*
  std::size_t length = 0;
  std::size_t done_bytes = 0;
  std::uint64_t offset = 0;
  IoDone done;
  // The ring hands the request to the reaper through the kernel, which
  // ThreadSanitizer cannot see; this release (before submit) / acquire
  // (after the CQE) pair states the ordering the ring already provides.
  std::atomic<bool> published{false};
};

// errno from a failed read/write/fsync -> the status the host sees
// (the mapping of Linux's nvmet file backend, with media errors for EIO).
NvmeStatus status_of_errno(int err, Op op) {
  switch (err) {
    case EIO:
      return NvmeStatus::of(op == Op::kRead ? StatusCode::kUnrecoveredReadError
                                            : StatusCode::kWriteFault);
    case ENOSPC:
    case EDQUOT:
      return NvmeStatus::of(StatusCode::kCapacityExceeded);
    default:
      return NvmeStatus::of(StatusCode::kInternalError);
  }
}

class FileNamespace final : public Namespace {
 public:
  // Takes ownership of fd. start() must succeed before any I/O.
  FileNamespace(std::uint32_t block_size, std::uint64_t block_count, int fd, unsigned depth)
      : Namespace(block_size, block_count), fd_(fd), depth_(depth) {}

  // Sets the ring up in place (liburing's struct stays where it was
  // initialised) and starts the reaper. Returns 0 or a negative errno.
  int start() {
    if (const int rc = io_uring_queue_init(depth_, &ring_, 0); rc < 0) return rc;
    ring_ready_ = true;
    if (!(ring_.features & IORING_FEAT_NODROP)) return -ENOSYS;
    reaper_ = std::thread([this] { reap(); });
    return 0;
  }

  ~FileNamespace() override {
    if (reaper_.joinable()) {
      std::unique_lock lock(sq_mu_);
      room_.wait(lock, [&] { return inflight_ == 0; });
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      io_uring_prep_nop(sqe);
      io_uring_sqe_set_data64(sqe, 0);  // the stop sentinel
      io_uring_submit(&ring_);
    }
    if (reaper_.joinable()) reaper_.join();
    if (ring_ready_) io_uring_queue_exit(&ring_);
    ::close(fd_);
  }

  std::string_view backend() const override { return "file"; }

 protected:
  void do_read(std::uint64_t offset, std::span<std::byte> dst, IoDone done) override {
    submit(new Request{Op::kRead, dst.data(), dst.size(), 0, offset, std::move(done)});
  }
  void do_write(std::uint64_t offset, std::span<const std::byte> src, IoDone done) override {
    submit(new Request{Op::kWrite, const_cast<std::byte*>(src.data()), src.size(), 0, offset,
                       std::move(done)});
  }
  void do_flush(IoDone done) override { submit(new Request{Op::kFlush, nullptr, 0, 0, 0, std::move(done)}); }

 private:
  // Takes a slot (waiting for one unless on the reaper) and submits.
  void submit(Request* r) {
    int rc;
    {
      std::unique_lock lock(sq_mu_);
      if (std::this_thread::get_id() != reaper_.get_id())
        room_.wait(lock, [&] { return inflight_ < depth_; });
      ++inflight_;
      rc = push_locked(r);
    }
    if (rc < 0) finish(r, status_of_errno(-rc, r->op));
  }

  // REQUIRES: sq_mu_ held. Prepares the SQE for what remains of `r`.
  int push_locked(Request* r) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return -EBUSY;  // cannot happen: see the invariants
    const std::size_t chunk = std::min(r->length - r->done_bytes, kMaxChunk);
    switch (r->op) {
      case Op::kRead:
        io_uring_prep_read(sqe, fd_, r->buf + r->done_bytes, static_cast<unsigned>(chunk),
                           r->offset + r->done_bytes);
        break;
      case Op::kWrite:
        io_uring_prep_write(sqe, fd_, r->buf + r->done_bytes, static_cast<unsigned>(chunk),
                            r->offset + r->done_bytes);
        break;
      case Op::kFlush:
        io_uring_prep_fsync(sqe, fd_, IORING_FSYNC_DATASYNC);
        break;
    }
    io_uring_sqe_set_data(sqe, r);
    r->published.store(true, std::memory_order_release);
    const int submitted = io_uring_submit(&ring_);
    return submitted < 0 ? submitted : 0;
  }

  void reap() {
    for (;;) {
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_wait_cqe(&ring_, &cqe);
      if (rc == -EINTR) continue;
      if (rc < 0) {
        // Not expected with a healthy ring; nothing to attribute it to.
        std::this_thread::yield();
        continue;
      }
      auto* r = static_cast<Request*>(io_uring_cqe_get_data(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      if (r == nullptr) return;  // stop sentinel
      (void)r->published.load(std::memory_order_acquire);
      complete(r, res);
    }
  }

  void complete(Request* r, int res) {
    if (res < 0) {
      report_error();
      return finish(r, status_of_errno(-res, r->op));
    }
    if (r->op != Op::kFlush) {
      if (res == 0) {  // no progress: the file shrank under us
        report_error();
        return finish(r, NvmeStatus::of(StatusCode::kInternalError));
      }
      r->done_bytes += static_cast<std::size_t>(res);
      if (r->done_bytes < r->length) {  // short transfer: continue in the same slot
        int rc;
        {
          std::lock_guard lock(sq_mu_);
          rc = push_locked(r);
        }
        if (rc < 0) finish(r, status_of_errno(-rc, r->op));
        return;
      }
    }
    finish(r, NvmeStatus::success());
  }

  // Runs the callback, then frees the slot (so the destructor, which waits for
  // the slots, knows every callback has returned).
  void finish(Request* r, NvmeStatus status) {
    IoDone done = std::move(r->done);
    delete r;
    done(status);
    std::lock_guard lock(sq_mu_);
    --inflight_;
    room_.notify_all();
  }

  const int fd_;
  const unsigned depth_;
  io_uring ring_{};
  bool ring_ready_ = false;
  std::mutex sq_mu_;  // guards the ring's submission side and inflight_
  std::condition_variable room_;
  unsigned inflight_ = 0;
  std::thread reaper_;
};

// The size in bytes of what fd is: st_size, or BLKGETSIZE64 for a block device.
Result<std::uint64_t> size_of(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return make_error(errno, fmt::format("fstat {}: {}", path, std::strerror(errno)));
  if (S_ISREG(st.st_mode)) return static_cast<std::uint64_t>(st.st_size);
  if (S_ISBLK(st.st_mode)) {
    std::uint64_t bytes = 0;
    if (::ioctl(fd, BLKGETSIZE64, &bytes) != 0)
      return make_error(errno, fmt::format("BLKGETSIZE64 {}: {}", path, std::strerror(errno)));
    return bytes;
  }
  return make_error(EINVAL, fmt::format("{} is neither a regular file nor a block device", path));
}

}  // namespace

Result<std::unique_ptr<Namespace>> open_file_namespace(const std::string& path,
                                                       const FileNamespaceOptions& options) {
  if (options.queue_depth == 0 || options.queue_depth > 4096)
    return make_error(EINVAL, fmt::format("queue depth {} outside 1..4096", options.queue_depth));
  if (auto ok = check_geometry(options.block_size, options.create_blocks ? options.create_blocks : 1);
      !ok)
    return std::unexpected(ok.error());

  const int flags = O_RDWR | O_CLOEXEC | (options.create_blocks ? O_CREAT : 0);
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) return make_error(errno, fmt::format("open {}: {}", path, std::strerror(errno)));
  auto fail = [fd](Error e) {
    ::close(fd);
    return std::unexpected(std::move(e));
  };

  if (options.create_blocks) {
    struct stat st {};
    if (::fstat(fd, &st) == 0 && !S_ISREG(st.st_mode))
      return fail({EINVAL, fmt::format("create_blocks set but {} is not a regular file", path)});
    const auto bytes = static_cast<off_t>(options.create_blocks * options.block_size);
    if (::ftruncate(fd, bytes) != 0)
      return fail({errno, fmt::format("ftruncate {} to {} bytes: {}", path, bytes,
                                      std::strerror(errno))});
  }
  auto bytes = size_of(fd, path);
  if (!bytes) return fail(bytes.error());
  const std::uint64_t blocks = *bytes / options.block_size;
  if (auto ok = check_geometry(options.block_size, blocks); !ok)
    return fail({EINVAL, fmt::format("{} ({} bytes): {}", path, *bytes, ok.error().reason)});

  auto ns = std::make_unique<FileNamespace>(options.block_size, blocks, fd, options.queue_depth);
  if (const int rc = ns->start(); rc < 0) {
    const int err = -rc;
    return make_error(err, fmt::format(
                               "io_uring is unavailable: io_uring_queue_init: {} ({}); the file "
                               "backend needs it (a kernel before 5.5, a seccomp filter or "
                               "container that forbids io_uring, or sysctl "
                               "kernel.io_uring_disabled) -- use a RAM namespace instead",
                               std::strerror(err), errno_name(err)));
  }
  return ns;
}

}  // namespace srdma::nvmf
