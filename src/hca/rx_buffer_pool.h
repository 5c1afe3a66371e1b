// Receive buffers for a link's batches, handed back when the last packet
// that refers to one is done with it.
//
// A frame's payload is read in place: a READ response a QP keeps for later
// (its inbox) keeps its batch's buffer alive through Packet::owned, so the
// next batch needs another. With UDP_GRO a batch's buffer is a megabyte;
// allocating (and zeroing) one per batch cost more than the receive. The
// pool keeps a few that came back; the deleter that returns one holds the
// pool, so a packet may outlive the link that received it.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace srdma::hca {

class RxBufferPool : public std::enable_shared_from_this<RxBufferPool> {
 public:
  using Buffer = std::shared_ptr<std::vector<std::byte>>;

  static std::shared_ptr<RxBufferPool> make(std::size_t bytes, std::size_t keep) {
    return std::shared_ptr<RxBufferPool>(new RxBufferPool(bytes, keep));
  }

  // A buffer of `bytes()` no packet refers to.
  Buffer take() {
    std::unique_ptr<std::vector<std::byte>> b;
    {
      std::lock_guard lock(mu_);
      if (!free_.empty()) {
        b = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!b) b = std::make_unique<std::vector<std::byte>>(bytes_);
    // The mutex in give_back orders the last reader's reads before the next
    // batch's writes.
    return Buffer(b.release(), [pool = shared_from_this()](std::vector<std::byte>* v) { pool->give_back(v); });
  }
  std::size_t bytes() const { return bytes_; }
  std::size_t kept() {
    std::lock_guard lock(mu_);
    return free_.size();
  }

 private:
  RxBufferPool(std::size_t bytes, std::size_t keep) : bytes_(bytes), keep_(keep) {}
  void give_back(std::vector<std::byte>* v) {
    std::unique_ptr<std::vector<std::byte>> b(v);
    std::lock_guard lock(mu_);
    if (free_.size() < keep_) free_.push_back(std::move(b));
  }

  const std::size_t bytes_, keep_;
  std::mutex mu_;
  std::vector<std::unique_ptr<std::vector<std::byte>>> free_;
};

}  // namespace srdma::hca
