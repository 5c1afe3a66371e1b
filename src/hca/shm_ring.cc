#include "hca/shm_ring.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

#include <fmt/format.h>

namespace srdma::hca {

struct ShmRing::Header {
  alignas(64) std::atomic<std::uint64_t> head;  // producer writes
  alignas(64) std::atomic<std::uint64_t> tail;  // consumer writes
  std::atomic<std::uint32_t> parked;            // consumer sets, producer takes
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);  // shared between processes

namespace {

constexpr unsigned kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

bool valid_size(std::size_t n) { return n >= ShmRing::kMinBytes && n <= ShmRing::kMaxBytes && std::has_single_bit(n); }

// The header page and the data area, and the data area again right after
// it: a record that wraps reads as one span.
std::byte* map_twice(int fd, std::size_t size) {
  const std::size_t total = ShmRing::kHeaderPage + 2 * size;
  void* base = ::mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  auto* b = static_cast<std::byte*>(base);
  void* first = ::mmap(b, ShmRing::kHeaderPage + size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  void* second = first == MAP_FAILED ? MAP_FAILED
                                     : ::mmap(b + ShmRing::kHeaderPage + size, size, PROT_READ | PROT_WRITE,
                                              MAP_SHARED | MAP_FIXED, fd, ShmRing::kHeaderPage);
  if (second == MAP_FAILED) {
    ::munmap(base, total);
    return nullptr;
  }
  return b;
}

std::uint64_t align_up(std::uint64_t n) { return (n + ShmRing::kAlign - 1) & ~std::uint64_t{ShmRing::kAlign - 1}; }

}  // namespace

ShmRing::ShmRing(int fd, std::byte* map, std::size_t size) : fd_(fd), map_(map), size_(size) {}

ShmRing::~ShmRing() { release(); }

ShmRing::ShmRing(ShmRing&& o) noexcept { *this = std::move(o); }

ShmRing& ShmRing::operator=(ShmRing&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = std::exchange(o.fd_, -1);
    map_ = std::exchange(o.map_, nullptr);
    size_ = std::exchange(o.size_, 0);
    head_ = o.head_;
    published_ = o.published_;
    tail_ = o.tail_;
    peeked_ = o.peeked_;
    broken_ = o.broken_;
  }
  return *this;
}

void ShmRing::release() {
  if (map_ != nullptr) ::munmap(map_, kHeaderPage + 2 * size_);
  if (fd_ >= 0) ::close(fd_);
  map_ = nullptr;
  fd_ = -1;
}

ShmRing::Header* ShmRing::header() const {
  static_assert(sizeof(Header) <= kHeaderPage);
  return std::launder(reinterpret_cast<Header*>(map_)); }

Result<ShmRing> ShmRing::create(std::size_t data_bytes) {
  if (!valid_size(data_bytes)) return make_error(EINVAL, fmt::format("a ring of {} bytes", data_bytes));
  const int fd = ::memfd_create("srdma-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return make_error(errno, fmt::format("memfd_create: {}", std::strerror(errno)));
  if (::ftruncate(fd, static_cast<off_t>(kHeaderPage + data_bytes)) != 0 || ::fcntl(fd, F_ADD_SEALS, kSeals) != 0) {
    const int e = errno;
    ::close(fd);
    return make_error(e, fmt::format("sizing and sealing the ring: {}", std::strerror(e)));
  }
  std::byte* map = map_twice(fd, data_bytes);
  if (map == nullptr) {
    const int e = errno;
    ::close(fd);
    return make_error(e, fmt::format("mapping the ring: {}", std::strerror(e)));
  }
  // A fresh memfd reads as zeros: head, tail 0; the consumer starts parked,
  // so that the first record wakes it.
  ShmRing r(fd, map, data_bytes);
  r.header()->parked.store(1, std::memory_order_relaxed);
  return r;
}

Result<ShmRing> ShmRing::attach(int memfd, std::size_t data_bytes) {
  struct stat st {};
  const int seals = ::fcntl(memfd, F_GET_SEALS);
  if (!valid_size(data_bytes) || ::fstat(memfd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<std::size_t>(st.st_size) != kHeaderPage + data_bytes || seals < 0 ||
      (static_cast<unsigned>(seals) & kSeals) != kSeals) {
    ::close(memfd);
    return make_error(EPROTO, "the peer's ring is not a sealed memfd of the size it announced");
  }
  std::byte* map = map_twice(memfd, data_bytes);
  if (map == nullptr) {
    const int e = errno;
    ::close(memfd);
    return make_error(e, fmt::format("mapping the peer's ring: {}", std::strerror(e)));
  }
  // A ring's life starts at 0 (the producer may have pushed already); the
  // consumer's tail is its own from here on.
  return ShmRing(memfd, map, data_bytes);
}

bool ShmRing::push(std::span<const std::span<const std::byte>> pieces, std::uint8_t ttl, std::uint8_t tos,
                   std::uint8_t flags) {
  if (broken_ || map_ == nullptr) return false;
  std::size_t bytes = 0;
  for (std::span<const std::byte> p : pieces) bytes += p.size();
  const std::uint64_t tail = header()->tail.load(std::memory_order_acquire);
  const std::uint64_t used = head_ - tail;
  if (used > size_ || (tail & (kAlign - 1)) != 0) {  // a tail we never gave it room for: the consumer lies
    broken_ = true;
    return false;
  }
  const std::uint64_t need = align_up(kRecordHeader + bytes);
  if (need > size_ - used) return false;
  std::byte* rec = data() + (head_ & (size_ - 1));
  const auto rec_len = static_cast<std::uint32_t>(need);
  const auto frame_len = static_cast<std::uint32_t>(bytes);
  std::memcpy(rec, &rec_len, 4);
  std::memcpy(rec + 4, &frame_len, 4);
  rec[8] = static_cast<std::byte>(ttl);
  rec[9] = static_cast<std::byte>(tos);
  rec[10] = static_cast<std::byte>(flags);
  std::byte* out = rec + kRecordHeader;
  for (std::span<const std::byte> p : pieces) {
    std::memcpy(out, p.data(), p.size());
    out += p.size();
  }
  head_ += need;
  return true;
}

void ShmRing::publish() {
  if (map_ == nullptr || head_ == published_) return;
  published_ = head_;
  // seq_cst: a Dekker pair with the consumer's park() (store parked, load
  // head) and take_wakeup() (load parked).
  header()->head.store(head_, std::memory_order_seq_cst);
}

bool ShmRing::take_wakeup() {
  if (map_ == nullptr) return false;
  std::atomic<std::uint32_t>& parked = header()->parked;
  return parked.load(std::memory_order_seq_cst) != 0 && parked.exchange(0, std::memory_order_seq_cst) != 0;
}

bool ShmRing::peek(ShmRecord& out) {
  if (broken_ || map_ == nullptr) return false;
  const std::uint64_t head = header()->head.load(std::memory_order_acquire);
  const std::uint64_t avail = head - tail_;
  if (avail == 0) return false;
  if (avail > size_ || (avail & (kAlign - 1)) != 0) {
    broken_ = true;
    return false;
  }
  // The record's header, read once into our own memory and checked.
  const std::byte* rec = data() + (tail_ & (size_ - 1));
  std::byte h[kRecordHeader];
  std::memcpy(h, rec, kRecordHeader);
  std::uint32_t rec_len = 0, frame_len = 0;
  std::memcpy(&rec_len, h, 4);
  std::memcpy(&frame_len, h + 4, 4);
  if (rec_len < kAlign || rec_len > avail || (rec_len & (kAlign - 1)) != 0 ||
      frame_len > rec_len - kRecordHeader || align_up(kRecordHeader + frame_len) != rec_len) {
    broken_ = true;
    return false;
  }
  out.frame = std::span<const std::byte>(rec + kRecordHeader, frame_len);
  out.ttl = std::to_integer<std::uint8_t>(h[8]);
  out.tos = std::to_integer<std::uint8_t>(h[9]);
  out.flags = std::to_integer<std::uint8_t>(h[10]);
  peeked_ = rec_len;
  return true;
}

void ShmRing::pop() {
  if (peeked_ == 0 || map_ == nullptr) return;
  tail_ += peeked_;
  peeked_ = 0;
  header()->tail.store(tail_, std::memory_order_release);
}

bool ShmRing::park() {
  if (map_ == nullptr || broken_) return true;
  header()->parked.store(1, std::memory_order_seq_cst);
  if (header()->head.load(std::memory_order_seq_cst) != tail_) {
    header()->parked.store(0, std::memory_order_relaxed);
    return false;
  }
  return true;
}

void ShmRing::unpark() {
  if (map_ != nullptr) header()->parked.store(0, std::memory_order_relaxed);
}

bool ShmRing::empty() const {
  return map_ == nullptr || broken_ || header()->head.load(std::memory_order_acquire) == tail_;
}

}  // namespace srdma::hca
