#include "nvmf/rdma_cm.h"

#include <fmt/format.h>

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

ConnectionManager& ConnectionManager::instance() {
  static ConnectionManager cm;
  return cm;
}

Result<void> ConnectionManager::listen(std::uint64_t addr, std::uint16_t port, CmListener* listener) {
  if (!listener) return make_error(EINVAL, "no listener");
  std::lock_guard lock(mu_);
  auto [it, inserted] = listeners_.try_emplace({addr, port}, Entry{listener, 0});
  if (!inserted) return make_error(EADDRINUSE, fmt::format("device {} port {} already has a listener", addr, port));
  return {};
}

void ConnectionManager::stop_listening(std::uint64_t addr, std::uint16_t port) {
  std::unique_lock lock(mu_);
  auto it = listeners_.find({addr, port});
  if (it == listeners_.end()) return;
  it->second.listener = nullptr;  // no new requests reach it
  idle_.wait(lock, [&] { return it->second.running == 0; });
  listeners_.erase(it);
}

bool ConnectionManager::listening(std::uint64_t addr, std::uint16_t port) {
  std::lock_guard lock(mu_);
  auto it = listeners_.find({addr, port});
  return it != listeners_.end() && it->second.listener != nullptr;
}

Result<std::pair<CmReply, std::shared_ptr<CmConnection>>> ConnectionManager::connect(std::uint64_t addr,
                                                                                     std::uint16_t port,
                                                                                     const CmRequest& req) {
  CmListener* l = nullptr;
  {
    std::lock_guard lock(mu_);
    auto it = listeners_.find({addr, port});
    if (it == listeners_.end() || !it->second.listener)
      return make_error(ECONNREFUSED, fmt::format("nothing listens on device {} port {}", addr, port));
    l = it->second.listener;
    ++it->second.running;
  }
  auto conn = std::make_shared<CmConnection>();
  auto reply = l->on_connect_request(req, conn);
  {
    std::lock_guard lock(mu_);
    auto it = listeners_.find({addr, port});
    if (--it->second.running == 0) idle_.notify_all();
  }
  if (!reply) return std::unexpected(reply.error());
  conn->mark_established();  // in process, the requester is who it says
  return std::pair{std::move(*reply), std::move(conn)};
}

}  // namespace srdma::nvmf
