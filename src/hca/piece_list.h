// A list of memory pieces with room for a few inline: a translation of one
// SGE of a registered buffer is usually one piece, so the data path builds
// and passes these without touching the heap.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <vector>

#include "srdma/translation.h"

namespace srdma::hca {

class PieceList {
 public:
  static constexpr std::size_t kInline = 4;

  // The inline slots are left uninitialized (only [0, size_) is ever read):
  // a Packet is built per packet, and zeroing four pieces is most
  // of its construction.
  PieceList() {}
  // Copies only the slots in use: the rest were never written.
  PieceList(const PieceList& o) : spill_(o.spill_), size_(o.size_) { copy_inline(o); }
  PieceList(PieceList&& o) noexcept : spill_(std::move(o.spill_)), size_(o.size_) { copy_inline(o); }
  PieceList& operator=(const PieceList& o) {
    if (this != &o) {
      spill_ = o.spill_;
      size_ = o.size_;
      copy_inline(o);
    }
    return *this;
  }
  PieceList& operator=(PieceList&& o) noexcept {
    if (this != &o) {
      spill_ = std::move(o.spill_);
      size_ = o.size_;
      copy_inline(o);
    }
    return *this;
  }

  void push_back(MemPiece p) {
    if (size_ < kInline) [[likely]] {
      inline_[size_++] = p;
      return;
    }
    push_back_spilled(p);
  }
  void clear() {
    size_ = 0;
    spill_.clear();
  }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const MemPiece& front() const { return data()[0]; }
  const MemPiece* data() const { return size_ <= kInline ? inline_ : spill_.data(); }
  operator std::span<const MemPiece>() const { return {data(), size_}; }

 private:
  [[gnu::noinline]] void push_back_spilled(MemPiece p) {
    if (size_ == kInline) spill_.assign(inline_, inline_ + kInline);
    spill_.push_back(p);
    ++size_;
  }
  void copy_inline(const PieceList& o) {
    for (std::size_t i = 0; i < std::min(size_, kInline); ++i) inline_[i] = o.inline_[i];
  }

  union {
    MemPiece inline_[kInline];  // [0, min(size_, kInline)) are written
  };
  std::vector<MemPiece> spill_;  // all pieces, once there are more than kInline
  std::size_t size_ = 0;
};

// Walks a list of pieces front to back, handing out consecutive slices:
// how a message's translated memory is cut into packets.
class PieceCursor {
 public:
  explicit PieceCursor(std::span<const MemPiece> pieces) : pieces_(pieces) {}
  // Appends the next `len` bytes (fewer if the pieces run out) to `out`.
  void take(std::size_t len, PieceList& out) {
    while (len > 0 && index_ < pieces_.size()) {
      const MemPiece& p = pieces_[index_];
      const std::size_t n = std::min<std::size_t>(len, p.length - offset_);
      out.push_back(MemPiece{p.addr + offset_, n});
      len -= n;
      offset_ += n;
      if (offset_ == p.length) {
        ++index_;
        offset_ = 0;
      }
    }
  }

 private:
  std::span<const MemPiece> pieces_;
  std::size_t index_ = 0;
  std::size_t offset_ = 0;
};

}  // namespace srdma::hca
