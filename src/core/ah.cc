#include "srdma/ah.h"

#include <fmt/format.h>

#include "core/ah_impl.h"
#include "srdma/pd.h"

namespace srdma {

AddressHandle::AddressHandle(std::unique_ptr<detail::AhImpl> s) : state_(std::move(s)) {}

AddressHandle::~AddressHandle() { state_->pd->usecnt.fetch_sub(1); }

const AhAttr& AddressHandle::attr() const { return state_->attr; }

Result<std::unique_ptr<AddressHandle>> ProtectionDomain::create_ah(const AhAttr& attr) {
  if (!state_) return make_error(EINVAL, "the protection domain is deallocated");
  auto* dev = state_->device.get();
  if (dev->removed) return make_error(ENODEV, "the device has been removed");
  if (attr.flow_label > 0xfffff) return make_error(EINVAL, "flow_label is a 20-bit field");
  if (attr.sl > 15) return make_error(EINVAL, "sl is a 4-bit field");
  if (!dev->hca->engine().link_knows(attr.dest_addr))
    return make_error(EINVAL, fmt::format("the device's link reaches no device at address {:#x}", attr.dest_addr));
  // On RoCEv2 the GRH is the IPv4 header: a DGID must name the same host.
  if (attr.is_global && is_roce_address(attr.dest_addr)) {
    auto ip = ipv4_of_gid(attr.dgid);
    if (!ip || *ip != roce_ipv4(attr.dest_addr))
      return make_error(EINVAL, fmt::format("dgid is not the IPv4-mapped GID of {}", ipv4_str(roce_ipv4(attr.dest_addr))));
  }
  // Over IPv6 the DGID is the peer's IPv6 address.
  if (attr.is_global && is_roce6_address(attr.dest_addr) && attr.dgid != gid_of_roce_address(attr.dest_addr))
    return make_error(EINVAL, fmt::format("dgid is not {}, the GID of the destination",
                                          ip_str(ip_of_roce_address(attr.dest_addr))));
  auto s = std::make_unique<detail::AhImpl>();
  s->pd = state_;
  s->attr = attr;
  state_->usecnt.fetch_add(1);
  return std::unique_ptr<AddressHandle>(new AddressHandle(std::move(s)));
}

}  // namespace srdma
