// Device clients and device removal.
#include "srdma/client.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "core/device_impl.h"
#include "srdma/device.h"

namespace srdma {
namespace detail {

// The process's clients and open devices. Callbacks run without the lock
// (they create and destroy verbs objects), one registration or removal at
// a time (`serial`), so a client never sees a device twice or after remove.
struct Registry {
  std::mutex serial;  // serialises register/unregister/open/remove
  std::mutex mu;      // guards clients, devices, next_id
  struct Entry {
    ClientId id;
    Client client;
    std::vector<DeviceImpl*> added;  // devices add() ran for
  };
  std::vector<Entry> clients;
  std::vector<std::weak_ptr<DeviceImpl>> devices;
  ClientId next_id = 1;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: devices may close after static destruction
  return *r;
}

void announce_device(const std::shared_ptr<DeviceImpl>& dev) {
  Registry& r = registry();
  std::lock_guard serial(r.serial);
  std::vector<std::pair<ClientId, std::function<void(Device&)>>> adds;
  {
    std::lock_guard lock(r.mu);
    r.devices.push_back(dev);
    for (auto& e : r.clients) {
      adds.emplace_back(e.id, e.client.add);
      e.added.push_back(dev.get());
    }
  }
  for (auto& [id, add] : adds) {
    Device d = ClientAccess::handle(dev);
    if (add) add(d);
  }
}

void forget_device(const DeviceImpl* dev) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  for (auto& e : r.clients) std::erase(e.added, dev);
  std::erase_if(r.devices, [](const auto& w) { return w.expired(); });
}

DeviceImpl::~DeviceImpl() { forget_device(this); }

}  // namespace detail

ClientId register_client(Client client) {
  auto& r = detail::registry();
  std::lock_guard serial(r.serial);
  std::vector<std::shared_ptr<detail::DeviceImpl>> present;
  ClientId id;
  {
    std::lock_guard lock(r.mu);
    id = r.next_id++;
    detail::Registry::Entry e{id, client, {}};
    for (auto& w : r.devices)
      if (auto d = w.lock(); d && !d->removed) {
        present.push_back(d);
        e.added.push_back(d.get());
      }
    r.clients.push_back(std::move(e));
  }
  for (auto& d : present) {
    Device h = detail::ClientAccess::handle(d);
    if (client.add) client.add(h);
  }
  return id;
}

void unregister_client(ClientId id) {
  auto& r = detail::registry();
  std::lock_guard serial(r.serial);
  Client client;
  std::vector<std::shared_ptr<detail::DeviceImpl>> added;
  {
    std::lock_guard lock(r.mu);
    auto it = std::find_if(r.clients.begin(), r.clients.end(), [&](const auto& e) { return e.id == id; });
    if (it == r.clients.end()) return;
    client = std::move(it->client);
    for (auto& w : r.devices)
      if (auto d = w.lock(); d && std::count(it->added.begin(), it->added.end(), d.get())) added.push_back(d);
    r.clients.erase(it);
  }
  for (auto& d : added) {
    Device h = detail::ClientAccess::handle(d);
    if (client.remove) client.remove(h);
  }
}

bool Device::removed() const { return state_->removed; }

Result<void> Device::remove() {
  auto& r = detail::registry();
  std::lock_guard serial(r.serial);
  if (state_->removed) return make_error(EINVAL, "the device is already removed");
  std::vector<std::function<void(Device&)>> removes;
  {
    std::lock_guard lock(r.mu);
    // Clients in reverse order of registration, as the kernel does.
    for (auto it = r.clients.rbegin(); it != r.clients.rend(); ++it) {
      auto pos = std::find(it->added.begin(), it->added.end(), state_.get());
      if (pos == it->added.end()) continue;
      it->added.erase(pos);
      removes.push_back(it->client.remove);
    }
    std::erase_if(r.devices, [&](const auto& w) {
      auto d = w.lock();
      return !d || d == state_;
    });
  }
  for (auto& remove_fn : removes) {
    Device h = share();
    if (remove_fn) remove_fn(h);
  }
  state_->removed = true;
  // Then the pool (ib_cq_pool_cleanup): whatever is still reserved is a
  // client that did not give its entries back.
  std::uint32_t reserved = 0;
  for (const auto& cq : state_->cq_pool->snapshot()) reserved += cq.cqe_used;
  state_->cq_pool->trim();
  if (reserved)
    return make_error(EBUSY, fmt::format("removed, but {} pool CQ entries were still reserved by clients", reserved));
  return {};
}

}  // namespace srdma
