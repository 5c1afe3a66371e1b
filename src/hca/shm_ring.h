// A one-way ring of frames in shared memory, between two processes of one
// user on one host (the same-host path, hca/same_host.h).
//
// The producer creates it: a memfd (no name anywhere a third process could
// open), sized once and sealed against shrinking and growing, so that the
// consumer that maps it can never be made to fault by a truncation. The
// data area is mapped twice, back to back, so that every record is
// contiguous in memory however it wraps.
//
// Layout: a 4 KiB header page (the producer's head on one cache line, the
// consumer's tail and its "parked" flag on another), then the data area,
// a power of two. A record is a 16-byte header (its length, the frame's
// length, TTL and TOS) and the frame, padded to 64 bytes.
//
// Neither side trusts the other's words: the consumer keeps its own tail
// and reads each record's header once into its own memory, checking it
// against what the producer published; the producer checks the tail it
// reads against its own head. A word out of range marks the ring broken,
// and nothing more is read from or written to it. The frame's bytes
// themselves are the producer's to choose, as a datagram's are: the
// receiver parses a private copy of the headers (roce_frame.h), so a
// producer that rewrites a frame after publishing it changes only payload.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include "srdma/status.h"

namespace srdma::hca {

struct ShmRecord {
  std::span<const std::byte> frame;  // in the ring: valid until pop()
  std::uint8_t ttl = 64;
  std::uint8_t tos = 0;
  std::uint8_t flags = 0;  // kShmCorrupted, kShmTrain
};
// An impairing link's corrupted frame: the receiver drops it as the wire's
// ICRC check would.
inline constexpr std::uint8_t kShmCorrupted = 1;
// A whole train (hca/ring_train.h), not one frame.
inline constexpr std::uint8_t kShmTrain = 2;

class ShmRing {
 public:
  static constexpr std::size_t kHeaderPage = 4096;
  static constexpr std::size_t kRecordHeader = 16;
  static constexpr std::size_t kAlign = 64;
  static constexpr std::size_t kMinBytes = std::size_t{1} << 16;
  static constexpr std::size_t kMaxBytes = std::size_t{1} << 26;

  ShmRing() = default;
  ~ShmRing();
  ShmRing(ShmRing&& o) noexcept;
  ShmRing& operator=(ShmRing&& o) noexcept;
  ShmRing(const ShmRing&) = delete;
  ShmRing& operator=(const ShmRing&) = delete;

  // The producer's side: a new sealed memfd of `data_bytes` (a power of two
  // in [kMinBytes, kMaxBytes]) and its mapping.
  static Result<ShmRing> create(std::size_t data_bytes);
  // The consumer's side, from the producer's memfd (taken: closed here on
  // failure). EPROTO for a memfd that is not sealed, not of `data_bytes`,
  // or not a memfd at all.
  static Result<ShmRing> attach(int memfd, std::size_t data_bytes);

  int fd() const { return fd_; }
  std::size_t data_bytes() const { return size_; }
  bool broken() const { return broken_; }

  // Producer. Copies the pieces (one frame) into the next record, which
  // the consumer sees once published. false: no room (the ring is full, or
  // broken).
  bool push(std::span<const std::span<const std::byte>> pieces, std::uint8_t ttl, std::uint8_t tos,
            std::uint8_t flags = 0);
  // Producer: makes the records pushed so far visible (one full fence per
  // call, so a batch of frames pays it once).
  void publish();
  bool unpublished() const { return head_ != published_; }
  // Producer, after a publish: whether the consumer sleeps and must be
  // woken (its eventfd). True at most once per sleep.
  bool take_wakeup();

  // Consumer. The oldest record, checked, or false: none (or the ring is
  // broken: broken() says which).
  bool peek(ShmRecord& out);
  // Consumer: releases the record peek() returned.
  void pop();
  // Consumer: announces a sleep. false: records wait (do not sleep).
  bool park();
  void unpark();
  bool empty() const;

 private:
  struct Header;
  ShmRing(int fd, std::byte* map, std::size_t size);
  Header* header() const;
  std::byte* data() const { return map_ + kHeaderPage; }
  void release();

  int fd_ = -1;
  std::byte* map_ = nullptr;  // header page + data + data again
  std::size_t size_ = 0;
  // The side's own copy of its index (never read back from the shared page).
  std::uint64_t head_ = 0;  // producer
  std::uint64_t published_ = 0;  // producer: head_ as the consumer sees it
  std::uint64_t tail_ = 0;  // consumer
  std::uint64_t peeked_ = 0;  // consumer: the record peek() returned, its length
  bool broken_ = false;
};

}  // namespace srdma::hca
