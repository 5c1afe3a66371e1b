#include "nvmf/rdma_cm.h"

namespace srdma::nvmf {

void CmConnection::set_disconnect_handler(Side side, Handler h) {
  std::unique_lock lock(mu_);
  const bool clearing = !h;
  handlers_[side] = std::move(h);
  if (clearing) idle_.wait(lock, [&] { return running_[side] == 0; });
}

void CmConnection::disconnect(Side from) {
  const Side other = from == kActive ? kPassive : kActive;
  Handler h;
  {
    std::lock_guard lock(mu_);
    if (disconnected_) return;
    disconnected_ = true;
    h = handlers_[other];
    if (!h) return;
    ++running_[other];
  }
  h();
  std::lock_guard lock(mu_);
  if (--running_[other] == 0) idle_.notify_all();
}

bool CmConnection::disconnected() const {
  std::lock_guard lock(mu_);
  return disconnected_;
}

}  // namespace srdma::nvmf
