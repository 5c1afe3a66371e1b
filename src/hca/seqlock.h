// A sequence lock around a small trivially copyable value: lock-free readers,
// one writer at a time.
//
// Invariants / memory ordering: `seq_` is even when the value is stable and
// odd while a writer rewrites it. A writer takes the cell by moving seq_ from
// even to odd with a CAS (acquire), stores the words (relaxed), and publishes
// with seq_ + 1 (release). A reader loads seq_ (acquire), copies the words
// (relaxed), fences (acquire) and re-reads seq_: equal and even means the copy
// is a consistent snapshot. Every word is accessed through atomic_ref, so the
// racing copy is defined behaviour (and clean under ThreadSanitizer).
//
// The cell is plain words, so an array of cells may live in zeroed memory:
// all-zero is a valid, stable, zero value.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace srdma::hca {

template <class T>
class Seqlock {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) % 8 == 0);
  static constexpr std::size_t kWords = sizeof(T) / 8;

 public:
  // A consistent snapshot; also returns the version it was taken at.
  //
  // Each word is loaded straight into its place in the result (an 8-byte
  // store per word, read back by narrower or equal loads of the fields), not
  // staged in a temporary array and copied again: a wide copy out of freshly
  // stored narrow words is a store-forwarding stall.
  T load(std::uint64_t* version = nullptr) const {
    T out;
    auto* dst = reinterpret_cast<unsigned char*>(static_cast<void*>(&out));
    for (;;) {
      std::uint64_t s1 = seq().load(std::memory_order_acquire);
      if (s1 & 1) [[unlikely]] {  // a writer is inside
        cpu_relax();
        continue;
      }
#pragma GCC unroll 8
      for (std::size_t i = 0; i < kWords; ++i) {
        std::uint64_t w = std::atomic_ref<const std::uint64_t>(words_[i]).load(std::memory_order_relaxed);
        std::memcpy(dst + 8 * i, &w, 8);
      }
      std::atomic_thread_fence(std::memory_order_acquire);
      if (seq().load(std::memory_order_relaxed) == s1) [[likely]] {
        if (version) *version = s1;
        return out;
      }
    }
  }

  // The current version (even when stable).
  std::uint64_t version() const { return seq().load(std::memory_order_acquire); }

  // Stores `v`, waiting for a concurrent writer to finish.
  void store(const T& v) {
    std::uint64_t s = seq().load(std::memory_order_relaxed);
    while (!try_begin(s)) s = seq().load(std::memory_order_relaxed);
    write_and_publish(v, s);
  }

  // Stores `v` only if nothing was stored since version() returned
  // `version`; true if stored. Lets a reader that decided what to store from
  // other data refuse to overwrite a newer store.
  bool try_store_if_unchanged(std::uint64_t version, const T& v) {
    if (!try_begin(version)) return false;
    write_and_publish(v, version);
    return true;
  }

  // Stores `v` unless another writer is inside; true if stored.
  bool try_store(const T& v) {
    std::uint64_t s = seq().load(std::memory_order_relaxed);
    if (!try_begin(s)) return false;
    write_and_publish(v, s);
    return true;
  }

 private:
  std::atomic_ref<std::uint64_t> seq() const {
    return std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(seq_));
  }
  bool try_begin(std::uint64_t s) {
    return (s & 1) == 0 &&
           seq().compare_exchange_weak(s, s + 1, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void write_and_publish(const T& v, std::uint64_t s) {
    const auto* src = reinterpret_cast<const unsigned char*>(static_cast<const void*>(&v));
    std::atomic_thread_fence(std::memory_order_release);
    for (std::size_t i = 0; i < kWords; ++i) {
      std::uint64_t w;
      std::memcpy(&w, src + 8 * i, 8);
      std::atomic_ref<std::uint64_t>(words_[i]).store(w, std::memory_order_relaxed);
    }
    seq().store(s + 2, std::memory_order_release);
  }
  static void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  alignas(8) std::uint64_t seq_ = 0;
  std::uint64_t words_[kWords] = {};
};

}  // namespace srdma::hca
