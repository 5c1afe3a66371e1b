// A fixed-size array of trivially copyable T that starts all zero and costs
// no resident memory until a page of it is written.
//
// Large device tables (MTTs, MPTs, allocator bitmaps) are sized by the
// profile but mostly untouched. Large arrays are anonymous mappings of
// their own (fresh zero pages, never written by us); calloc would not do:
// once glibc raises its mmap threshold it serves them from the heap and
// clears them with memset, touching every page.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <type_traits>

namespace srdma::alloc {

template <class T>
class ZeroedArray {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  ZeroedArray() = default;
  explicit ZeroedArray(std::size_t n) : size_(n) {
    if (n == 0) return;
    if (n > (~std::size_t{0}) / sizeof(T)) throw std::bad_alloc();
    const std::size_t bytes = n * sizeof(T);
    void* p;
    if (bytes >= kMapThreshold) {
      p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
    } else {
      p = std::calloc(n, sizeof(T));
      if (p == nullptr) throw std::bad_alloc();
    }
    data_ = std::unique_ptr<T, Release>(static_cast<T*>(p), Release{bytes});
  }

  T& operator[](std::size_t i) { return data_.get()[i]; }
  const T& operator[](std::size_t i) const { return data_.get()[i]; }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }

 private:
  static constexpr std::size_t kMapThreshold = 64 * 1024;
  struct Release {
    std::size_t bytes = 0;
    void operator()(T* p) const {
      if (bytes >= kMapThreshold)
        ::munmap(p, bytes);
      else
        std::free(p);
    }
  };
  std::unique_ptr<T, Release> data_;
  std::size_t size_ = 0;
};

}  // namespace srdma::alloc
