// What a memory key means for one access: the pieces of process memory that
// (key, iova, length) covers, or the exact reason the device refuses it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace srdma {

// Why translate() refused an access, in the order the checks run.
enum class Refusal : std::uint8_t {
  kUnknownIndex,  // no memory region or window at the key's MPT index (or a reserved one)
  kKeyMismatch,   // the key byte (or high index bits) differ: a stale or forged key
  kNotHwOwned,    // the MPT is software-owned (being built, or an unmapped FMR)
  kPdMismatch,    // the region belongs to another protection domain
  kQpMismatch,    // a type 2 memory window bound through another QP (IBA 10.6.7.2.2)
  kAccessDenied,  // the region does not grant the access asked for
  kOutOfBounds,   // [iova, iova + length) is not inside the region
  kPageFault,     // an ODP region's page could not be faulted in (unmapped, wrong protection)
};

std::string_view refusal_name(Refusal r);    // "key_mismatch"
std::string_view refusal_reason(Refusal r);  // a sentence

// A contiguous run of process memory.
struct MemPiece {
  std::byte* addr = nullptr;
  std::uint64_t length = 0;
};

// A successful translation. It reads the device's MTT entries when iterated,
// so it is valid only while the key stays registered (as on hardware, a DMA
// racing a deregistration is the consumer's bug).
class Translation {
 public:
  Translation() = default;  // zero length: touches nothing
  // `contiguous`: the MTT entries are consecutive pages (MPT_FLAG_CONTIGUOUS).
  Translation(const std::uint64_t* mtt, std::uint64_t offset, std::uint64_t length,
              std::uint8_t page_shift, bool contiguous = false)
      : mtt_(mtt), offset_(offset), length_(length), page_shift_(page_shift), contiguous_(contiguous) {}

  // A translation with no MTTs: the bytes at addr .. addr + length, one
  // piece (a region with MPT_FLAG_PHYSICAL: implicit ODP, device memory).
  static Translation direct(std::byte* addr, std::uint64_t length) {
    Translation t;
    t.offset_ = reinterpret_cast<std::uintptr_t>(addr);
    t.length_ = length;
    return t;
  }

  std::uint64_t length() const { return length_; }

  // Calls f(MemPiece) for each run of contiguous memory, in order.
  template <class F>
  void for_each_piece(F&& f) const {
    const std::uint64_t page_size = std::uint64_t{1} << page_shift_;
    std::uint64_t off = offset_, left = length_;
    if (left == 0) return;
    if (mtt_ == nullptr) [[unlikely]] {  // direct(): offset_ is the address
      f(MemPiece{reinterpret_cast<std::byte*>(offset_), left});
      return;
    }
    if (const std::uint64_t in_page = off & (page_size - 1); contiguous_ || in_page + left <= page_size) [[likely]] {
      // Inside one page (a small message), or over pages that follow each
      // other: one piece, from the page the access starts in.
      const std::uint64_t entry =
          std::atomic_ref<const std::uint64_t>(mtt_[off >> page_shift_]).load(std::memory_order_relaxed);
      f(MemPiece{reinterpret_cast<std::byte*>((entry & ~(page_size - 1)) + in_page), left});
      return;
    }
    MemPiece run;
    while (left > 0) {
      std::uint64_t in_page = off & (page_size - 1);
      std::uint64_t entry =
          std::atomic_ref<const std::uint64_t>(mtt_[off >> page_shift_]).load(std::memory_order_relaxed);
      auto* addr = reinterpret_cast<std::byte*>((entry & ~std::uint64_t{page_size - 1}) + in_page);
      std::uint64_t n = std::min(left, page_size - in_page);
      if (run.length > 0 && run.addr + run.length == addr) {
        run.length += n;
      } else {
        if (run.length > 0) f(run);
        run = MemPiece{addr, n};
      }
      off += n;
      left -= n;
    }
    if (run.length > 0) f(run);
  }

  std::vector<MemPiece> pieces() const {
    std::vector<MemPiece> out;
    for_each_piece([&](MemPiece p) { out.push_back(p); });
    return out;
  }

 private:
  const std::uint64_t* mtt_ = nullptr;  // the region's first MTT entry (null: direct)
  std::uint64_t offset_ = 0;            // from the start of the first page (direct: the address)
  std::uint64_t length_ = 0;
  std::uint8_t page_shift_ = 12;
  bool contiguous_ = false;
};

}  // namespace srdma
