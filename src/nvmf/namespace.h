// A namespace: the blocks a subsystem exports under one nsid.
//
// `Namespace` is the interface the target's I/O queues call: asynchronous
// read, write and flush into and out of caller memory, each finished by a
// callback carrying the NVMe status the target sends back. The range and
// buffer checks every backend needs are done here, once (non-virtual entry
// points, virtual do_* for the backend), so a refusal is the same status from
// every backend:
//   nlb == 0                          -> Invalid Field in Command
//   slba + nlb > block_count          -> LBA Out of Range
//   buffer size != nlb * block_size   -> Data SGL Length Invalid
//
// Backends: RAM (the default; lazily zeroed anonymous memory) and a file or
// block device through io_uring (file_namespace.cc).
//
// Thread safety: every entry point may be called from several threads at
// once. Overlapping concurrent writes leave each block holding one of the
// writers' data (NVMe promises no more without atomic write units).
// Lifetime: buffers must stay valid until the callback has run; a namespace
// must outlive its in-flight I/O (the file backend's destructor waits for it).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "nvmf/status.h"
#include "nvmf/wire.h"
#include "srdma/status.h"

namespace srdma::nvmf {

// Runs exactly once per submitted I/O. Where it runs: see each backend.
using IoDone = std::move_only_function<void(NvmeStatus)>;

// Counters a user would ask for ("how many reads failed?").
struct NamespaceCounters {
  std::uint64_t reads = 0, writes = 0, flushes = 0;
  std::uint64_t bytes_read = 0, bytes_written = 0;
  std::uint64_t refused = 0;  // failed the checks above
  std::uint64_t errors = 0;   // the backend failed (I/O error)
};

class Namespace {
 public:
  virtual ~Namespace() = default;
  Namespace(const Namespace&) = delete;
  Namespace& operator=(const Namespace&) = delete;

  std::uint32_t block_size() const { return block_size_; }
  std::uint64_t block_count() const { return block_count_; }
  virtual std::string_view backend() const = 0;  // "ram", "file"

  // Reads blocks [slba, slba + nlb) into `dst`.
  void read(std::uint64_t slba, std::uint32_t nlb, std::span<std::byte> dst, IoDone done);
  // Writes `src` to blocks [slba, slba + nlb).
  void write(std::uint64_t slba, std::uint32_t nlb, std::span<const std::byte> src, IoDone done);
  // Makes every completed write durable (volatile write cache flush).
  void flush(IoDone done);

  NamespaceCounters counters() const;

 protected:
  Namespace(std::uint32_t block_size, std::uint64_t block_count)
      : block_size_(block_size), block_count_(block_count) {}

  // Called with checked arguments (offset and size in bytes, within the
  // namespace). Must call `done` exactly once, and report_error() first if
  // the backend failed.
  virtual void do_read(std::uint64_t offset, std::span<std::byte> dst, IoDone done) = 0;
  virtual void do_write(std::uint64_t offset, std::span<const std::byte> src, IoDone done) = 0;
  virtual void do_flush(IoDone done) = 0;
  void report_error() { errors_.fetch_add(1, std::memory_order_relaxed); }

 private:
  NvmeStatus check(std::uint64_t slba, std::uint32_t nlb, std::size_t buffer) const;

  const std::uint32_t block_size_;
  const std::uint64_t block_count_;
  std::atomic<std::uint64_t> reads_{0}, writes_{0}, flushes_{0}, bytes_read_{0}, bytes_written_{0},
      refused_{0}, errors_{0};
};

// EINVAL unless block_size is a power of two in 512..65536 (LBADS 9..16) and
// block_count is not 0 and the size fits the address space.
Result<void> check_geometry(std::uint32_t block_size, std::uint64_t block_count);

// RAM-backed: `block_count` blocks of `block_size`, reading zeros until
// written. Memory is reserved lazily (pages appear when written). Callbacks
// run in the submitting thread, before read/write/flush return.
// ENOMEM if the address space cannot be reserved.
Result<std::unique_ptr<Namespace>> make_ram_namespace(std::uint64_t block_count,
                                                      std::uint32_t block_size = 512);

struct FileNamespaceOptions {
  std::uint32_t block_size = 512;
  // 0: use the file or device as it is (its size, rounded down to whole
  // blocks). Otherwise: create the regular file if missing and size it to
  // exactly this many blocks.
  std::uint64_t create_blocks = 0;
  unsigned queue_depth = 64;  // io_uring entries, 1..4096; more submitters wait
};

// A regular file or block device through io_uring: one ring per namespace,
// submissions from any thread (serialised on the ring's submission side), one
// reaper thread that takes completions and runs the callbacks -- so `done`
// runs on the reaper thread and must not block for long. Flush is fdatasync.
// Errors: the open/stat errno (ENOENT, EACCES ...), EINVAL for bad options or
// a file smaller than one block, and ENOSYS/EPERM when io_uring itself is
// unavailable (an old kernel, a seccomp filter or container that forbids it,
// or kernel.io_uring_disabled) -- the reason says which.
Result<std::unique_ptr<Namespace>> open_file_namespace(const std::string& path,
                                                       const FileNamespaceOptions& options = {});

// The Identify Namespace data a target returns for `ns` (one LBA format).
IdentifyNamespace identify_namespace(const Namespace& ns);

}  // namespace srdma::nvmf
