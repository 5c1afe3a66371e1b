// An address handle (like ib_ah / ibv_ah): where a UD send goes. A UD
// SendWr names one (SendWr::ud.ah) with the destination QPN and Q_Key;
// the address is read when the WR is posted, so an AH may be destroyed
// while WRs that named it are outstanding.
//
// An AddressHandle is a stable object owned through std::unique_ptr; it
// keeps its PD and device alive and counts in the PD's usecnt.
#pragma once

#include <cstdint>
#include <memory>

#include "srdma/net.h"

namespace srdma {

namespace detail {
struct AhImpl;
struct AhAccess;
}

struct AhAttr {
  std::uint64_t dest_addr = 0;  // Device::address() of the destination (as QpAttr::dest_addr)
  std::uint8_t hop_limit = 64;  // the IPv4 TTL (GRH hop limit)
  std::uint8_t traffic_class = 0;
  std::uint32_t flow_label = 0;  // 20 bits
  std::uint8_t sl = 0;           // 4 bits
  bool is_global = false;        // a GRH (on RoCEv2 every packet has one: its IP header)
  Gid dgid{};
};

class AddressHandle {
 public:
  ~AddressHandle();
  AddressHandle(const AddressHandle&) = delete;
  AddressHandle& operator=(const AddressHandle&) = delete;

  const AhAttr& attr() const;

 private:
  friend class ProtectionDomain;
  friend struct detail::AhAccess;
  explicit AddressHandle(std::unique_ptr<detail::AhImpl> s);
  std::unique_ptr<detail::AhImpl> state_;
};

}  // namespace srdma
