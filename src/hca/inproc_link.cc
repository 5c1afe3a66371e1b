#include "hca/inproc_link.h"

#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "hca/soft_hca.h"

namespace srdma::hca {
namespace {

struct Registry {
  mutable std::shared_mutex mu;  // guards devices
  std::unordered_map<std::uint64_t, std::weak_ptr<SoftHca>> devices;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

InprocLink& InprocLink::instance() {
  static InprocLink link;
  return link;
}

void InprocLink::attach(std::uint64_t addr, std::weak_ptr<SoftHca> dev) {
  std::unique_lock lock(registry().mu);
  registry().devices[addr] = std::move(dev);
}

void InprocLink::detach(std::uint64_t addr) {
  std::unique_lock lock(registry().mu);
  registry().devices.erase(addr);
}

bool InprocLink::knows(std::uint64_t addr) const {
  std::shared_lock lock(registry().mu);
  return registry().devices.count(addr) != 0;
}

bool InprocLink::send(Message&& msg) {
  std::shared_ptr<SoftHca> dst;
  {
    std::shared_lock lock(registry().mu);
    auto it = registry().devices.find(msg.dst_addr);
    if (it != registry().devices.end()) dst = it->second.lock();
  }
  if (!dst) return false;
  dst->receive(std::move(msg));  // the shared_ptr keeps the peer open meanwhile
  return true;
}

}  // namespace srdma::hca
