#include "hca/comp_channel.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace srdma::hca {

Result<std::unique_ptr<CompChannel>> CompChannel::create() {
  // Blocking, so that a program's fcntl(O_NONBLOCK) on it is what tells
  // ibv_get_cq_event not to wait; the channel reads it only when non-zero.
  const int fd = ::eventfd(0, EFD_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return make_error(err, std::string("create_comp_channel: eventfd: ") + std::strerror(err));
  }
  return std::unique_ptr<CompChannel>(new CompChannel(fd));
}

CompChannel::~CompChannel() {
  if (fd_ >= 0) ::close(fd_);
}

int CompChannel::fd() const {
  std::lock_guard lk(mu_);
  return fd_;
}

thread_local const CompChannel* CompChannel::taker_ = nullptr;

void CompChannel::signal_locked() {
  if (signalled_) return;
  const std::uint64_t one = 1;
  // Cannot fail short of a counter overflow, which one pending 1 excludes.
  [[maybe_unused]] const ssize_t r = ::write(fd_, &one, sizeof(one));
  signalled_ = true;
}

void CompChannel::unsignal_locked() {
  if (!signalled_) return;
  std::uint64_t v;
  [[maybe_unused]] const ssize_t r = ::read(fd_, &v, sizeof(v));  // back to 0
  signalled_ = false;
}

void CompChannel::notify(Cq* cq) {
  std::lock_guard lk(mu_);
  if (fd_ < 0) return;
  queue_.push_back(cq);
  notified_.fetch_add(1, std::memory_order_relaxed);
  if (taker_ != this) signal_locked();  // (a taker takes it itself: see Taking)
}

Result<Cq*> CompChannel::get_event(bool block) {
  for (;;) {
    int fd;
    {
      std::lock_guard lk(mu_);
      fd = fd_;
      if (fd < 0) return make_error(EBADF, "get_cq_event: the completion channel is closed");
      if (!queue_.empty()) {
        Cq* cq = queue_.front();
        queue_.pop_front();
        ++unacked_[cq];
        ++total_unacked_;
        if (queue_.empty())
          unsignal_locked();
        else
          signal_locked();  // a taker's other events wait for whoever polls the fd
        return cq;
      }
      if (!block) return make_error(EAGAIN, "get_cq_event: no completion event waiting");
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, -1) < 0) {
      // A signal ends the wait, as it ends libibverbs' read(2) of the
      // channel's fd: programs (qperf's SIGALRM at the end of a test) count
      // on ibv_get_cq_event failing with EINTR to notice their flag.
      const int err = errno;
      if (err == EINTR) return make_error(EINTR, "get_cq_event: interrupted by a signal");
      return make_error(err, std::string("get_cq_event: poll: ") + std::strerror(err));
    }
  }
}

void CompChannel::ack_events(Cq* cq, unsigned n) {
  std::lock_guard lk(mu_);
  auto it = unacked_.find(cq);
  if (it == unacked_.end()) return;
  const std::uint64_t k = std::min<std::uint64_t>(n, it->second);
  it->second -= k;
  total_unacked_ -= k;
  if (it->second == 0) unacked_.erase(it);
}

std::uint64_t CompChannel::unacked(Cq* cq) const {
  std::lock_guard lk(mu_);
  auto it = unacked_.find(cq);
  return it == unacked_.end() ? 0 : it->second;
}

void CompChannel::forget(Cq* cq) {
  std::lock_guard lk(mu_);
  if (std::erase(queue_, cq) > 0 && queue_.empty() && fd_ >= 0) unsignal_locked();
}

Result<void> CompChannel::close() {
  std::lock_guard lk(mu_);
  if (fd_ < 0) return {};
  if (const int n = usecnt.load(std::memory_order_acquire); n > 0)
    return make_error(EBUSY, "destroy_comp_channel: " + std::to_string(n) + " CQs still use it");
  if (total_unacked_ > 0)
    return make_error(EBUSY, "destroy_comp_channel: " + std::to_string(total_unacked_) +
                                 " events not acknowledged");
  ::close(fd_);
  fd_ = -1;
  queue_.clear();
  return {};
}

}  // namespace srdma::hca
