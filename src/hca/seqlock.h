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
  T load(std::uint64_t* version = nullptr) const {
    std::array<std::uint64_t, kWords> w;
    for (;;) {
      std::uint64_t s1 = seq().load(std::memory_order_acquire);
      if (s1 & 1) continue;  // a writer is inside
      for (std::size_t i = 0; i < kWords; ++i)
        w[i] = std::atomic_ref<const std::uint64_t>(words_[i]).load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (seq().load(std::memory_order_relaxed) == s1) {
        if (version) *version = s1;
        break;
      }
    }
    T out;
    std::memcpy(&out, w.data(), sizeof(T));
    return out;
  }

  // The current version (even when stable).
  std::uint64_t version() const { return seq().load(std::memory_order_acquire); }

  // Stores `v`, waiting for a concurrent writer to finish.
  void store(const T& v) {
    std::uint64_t s = seq().load(std::memory_order_relaxed);
    while (!try_begin(s)) s = seq().load(std::memory_order_relaxed);
    write_and_publish(v, s);
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
    std::array<std::uint64_t, kWords> w;
    std::memcpy(w.data(), &v, sizeof(T));
    std::atomic_thread_fence(std::memory_order_release);
    for (std::size_t i = 0; i < kWords; ++i)
      std::atomic_ref<std::uint64_t>(words_[i]).store(w[i], std::memory_order_relaxed);
    seq().store(s + 2, std::memory_order_release);
  }

  alignas(8) std::uint64_t seq_ = 0;
  std::uint64_t words_[kWords] = {};
};

}  // namespace srdma::hca
