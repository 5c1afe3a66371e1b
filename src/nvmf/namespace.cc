#include "nvmf/namespace.h"

#include <fmt/format.h>

#include <bit>

namespace srdma::nvmf {

NvmeStatus Namespace::check(std::uint64_t slba, std::uint32_t nlb, std::size_t buffer) const {
  if (nlb == 0) return NvmeStatus::of(StatusCode::kInvalidField);
  // NVM command set: a range that ends past NSZE is LBA Out of Range.
  // Written so that it cannot wrap: nlb <= block_count is checked first.
  if (nlb > block_count_ || slba > block_count_ - nlb)
    return NvmeStatus::of(StatusCode::kLbaOutOfRange);
  if (std::uint64_t{nlb} * block_size_ != buffer)
    return NvmeStatus::of(StatusCode::kDataSglLengthInvalid);
  return NvmeStatus::success();
}

void Namespace::read(std::uint64_t slba, std::uint32_t nlb, std::span<std::byte> dst, IoDone done) {
  if (NvmeStatus s = check(slba, nlb, dst.size()); !s.ok()) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return done(s);
  }
  reads_.fetch_add(1, std::memory_order_relaxed);
  bytes_read_.fetch_add(dst.size(), std::memory_order_relaxed);
  do_read(slba * block_size_, dst, std::move(done));
}

void Namespace::write(std::uint64_t slba, std::uint32_t nlb, std::span<const std::byte> src,
                      IoDone done) {
  if (NvmeStatus s = check(slba, nlb, src.size()); !s.ok()) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return done(s);
  }
  writes_.fetch_add(1, std::memory_order_relaxed);
  bytes_written_.fetch_add(src.size(), std::memory_order_relaxed);
  do_write(slba * block_size_, src, std::move(done));
}

void Namespace::flush(IoDone done) {
  flushes_.fetch_add(1, std::memory_order_relaxed);
  do_flush(std::move(done));
}

NamespaceCounters Namespace::counters() const {
  constexpr auto r = std::memory_order_relaxed;
  return NamespaceCounters{reads_.load(r),      writes_.load(r),        flushes_.load(r),
                           bytes_read_.load(r), bytes_written_.load(r), refused_.load(r),
                           errors_.load(r)};
}

Result<void> check_geometry(std::uint32_t block_size, std::uint64_t block_count) {
  if (!std::has_single_bit(block_size) || block_size < 512 || block_size > 65536)
    return make_error(EINVAL, fmt::format("block size {} is not a power of two in 512..65536",
                                          block_size));
  if (block_count == 0) return make_error(EINVAL, "a namespace needs at least one block");
  if (block_count > (std::uint64_t{1} << 62) / block_size)
    return make_error(EINVAL, fmt::format("{} blocks of {} bytes overflow a 64-bit byte offset",
                                          block_count, block_size));
  return {};
}

IdentifyNamespace identify_namespace(const Namespace& ns) {
  IdentifyNamespace id;
  id.nsze = id.ncap = id.nuse = ns.block_count();
  id.nlbaf = 0;  // one format (0's based)
  id.flbas = 0;
  id.lbaf[0].lbads = static_cast<std::uint8_t>(std::countr_zero(ns.block_size()));
  return id;
}

}  // namespace srdma::nvmf
