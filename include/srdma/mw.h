// A memory window: an owning, move-only handle (like ib_mw / ibv_mw).
//
// A window grants a peer remote access to part of a memory region through
// an rkey of its own, bound and unbound without re-registering (IBA
// 10.6.7). The region must be registered with ACCESS_MW_BIND.
//
//   Type 1: bound with QueuePair::bind_mw (a bind on the send queue; each
//   bind advances the key byte and rkey() is the new key); rebinding moves
//   it, a bind of length 0 unbinds it. Usable through any QP of its PD.
//   Type 2 (2B): bound by a kBindMw work request naming the rkey it is to
//   carry (next_rkey()); usable only through the QP that bound it; freed by
//   LOCAL_INV or the peer's SEND_WITH_INV, and only then bound again.
//
// While a window is bound to a region, the region cannot be deregistered
// (EINVAL, as rxe). dealloc() of a bound window invalidates it first.
// Thread safety: one handle is not to be used from two threads at once.
#pragma once

#include <cstdint>
#include <memory>

#include "srdma/status.h"

namespace srdma {

namespace detail {
struct PdImpl;
struct MwAccess;
}  // namespace detail

enum class MwType : std::uint8_t { kType1 = 1, kType2 = 2 };

class MemoryWindow {
 public:
  MemoryWindow() = default;
  MemoryWindow(MemoryWindow&&) noexcept;
  MemoryWindow& operator=(MemoryWindow&&) noexcept;
  MemoryWindow(const MemoryWindow&) = delete;
  MemoryWindow& operator=(const MemoryWindow&) = delete;
  // Deallocates if still allocated.
  ~MemoryWindow();

  // Frees the window, bound or not; its keys fail before this returns.
  // EINVAL on an empty handle.
  Result<void> dealloc();

  bool valid() const { return pd_ != nullptr; }
  MwType type() const { return type_; }
  // The window's key: alloc's, then (type 1) the last bind's. A type 2
  // window carries the rkey its bind WR named (see next_rkey).
  std::uint32_t rkey() const { return rkey_; }
  // rkey() with the next key byte (ib_inc_rkey): what a type 2 bind names.
  std::uint32_t next_rkey() const { return ((rkey_ + 1) & 0xffu) | (rkey_ & ~0xffu); }
  // A type 2 window's key once its bind WR was posted (the consumer's
  // bookkeeping, as ibv_mw.rkey is the consumer's for type 2).
  void set_rkey(std::uint32_t rkey) { rkey_ = (rkey & 0xffu) | (rkey_ & ~0xffu); }
  std::uint32_t pd_num() const;

 private:
  friend class ProtectionDomain;
  friend struct detail::MwAccess;
  MemoryWindow(std::shared_ptr<detail::PdImpl> pd, std::uint32_t key, MwType type)
      : pd_(std::move(pd)), alloc_key_(key), rkey_(key), type_(type) {}

  std::shared_ptr<detail::PdImpl> pd_;
  std::uint32_t alloc_key_ = 0;  // the key the device allocated: names the window
  std::uint32_t rkey_ = 0;
  MwType type_ = MwType::kType1;
};

}  // namespace srdma
