// The RAM backend: the namespace's blocks in anonymous memory.
//
// Why mmap and not a vector: a large namespace (say 64 GiB of address space
// for a test target) costs nothing until written -- MAP_NORESERVE with zero
// pages appearing on first touch -- and reads of never-written blocks return
// zeros, as a freshly formatted namespace does.
//
// Concurrency: a shared_mutex keeps a reader from seeing a half-copied block
// of a concurrent writer (and keeps the copies race-free for TSan): reads
// share it, writes take it alone. A copy is a memcpy, so the writer's hold is
// short; striping by range can come if a benchmark asks for it.
#include <sys/mman.h>

#include <cstring>
#include <mutex>
#include <shared_mutex>

#include <fmt/format.h>

#include "nvmf/namespace.h"

namespace srdma::nvmf {
namespace {

class RamNamespace final : public Namespace {
 public:
  RamNamespace(std::uint32_t block_size, std::uint64_t block_count, std::byte* base)
      : Namespace(block_size, block_count), base_(base), bytes_(block_size * block_count) {}
  ~RamNamespace() override { ::munmap(base_, bytes_); }

  std::string_view backend() const override { return "ram"; }

 protected:
  void do_read(std::uint64_t offset, std::span<std::byte> dst, IoDone done) override {
    {
      std::shared_lock lock(mu_);
      std::memcpy(dst.data(), base_ + offset, dst.size());
    }
    done(NvmeStatus::success());
  }
  void do_write(std::uint64_t offset, std::span<const std::byte> src, IoDone done) override {
    {
      std::unique_lock lock(mu_);
      std::memcpy(base_ + offset, src.data(), src.size());
    }
    done(NvmeStatus::success());
  }
  // Memory has no volatile cache to flush.
  void do_flush(IoDone done) override { done(NvmeStatus::success()); }

 private:
  std::byte* const base_;
  const std::size_t bytes_;
  std::shared_mutex mu_;  // guards the bytes at base_ (see the file comment)
};

}  // namespace

Result<std::unique_ptr<Namespace>> make_ram_namespace(std::uint64_t block_count,
                                                      std::uint32_t block_size) {
  if (auto ok = check_geometry(block_size, block_count); !ok) return std::unexpected(ok.error());
  const std::uint64_t bytes = block_count * block_size;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return make_error(ENOMEM, fmt::format("cannot reserve {} bytes for a RAM namespace: {}", bytes,
                                          std::strerror(errno)));
  return std::make_unique<RamNamespace>(block_size, block_count, static_cast<std::byte*>(p));
}

}  // namespace srdma::nvmf
