// Memory access rights, as IBTA defines them (the IB_ACCESS_* bits of verbs).
#pragma once

#include <cstdint>
#include <string>

namespace srdma {

enum AccessFlags : std::uint32_t {
  ACCESS_LOCAL_WRITE = 1u << 0,
  ACCESS_REMOTE_WRITE = 1u << 1,
  ACCESS_REMOTE_READ = 1u << 2,
  ACCESS_REMOTE_ATOMIC = 1u << 3,
  // A region's right to have memory windows bound to it (IBA 10.6.7.2.1,
  // C10-73); it grants no access by itself.
  ACCESS_MW_BIND = 1u << 4,
  // A window's addresses are offsets from its first byte (IBA 10.6.7.2.3:
  // a zero-based type 2 window); not a region attribute here.
  ACCESS_ZERO_BASED = 1u << 5,
  // An on-demand paging region (IB_ACCESS_ON_DEMAND's bit): its pages need
  // not be mapped at registration; each access faults them in when it
  // runs, and an access to an unmapped or wrongly protected page ends in a
  // protection error, never a crash (hca/page_fault.h). A region
  // attribute, kept in the MPT entry with the rights.
  ACCESS_ON_DEMAND = 1u << 6,
};
// Local read is always granted to the owner of an lkey (IBA 10.6.3.1); an
// access request of 0 means "local read".
inline constexpr std::uint32_t kAccessAll =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
// What a memory region may be registered with: the rights and MW_BIND.
inline constexpr std::uint32_t kMrAccessAll = kAccessAll | ACCESS_MW_BIND;
// What a memory window may grant when bound: remote rights only (a window
// key is an R_Key, never an L_Key), and whether it is zero-based.
inline constexpr std::uint32_t kRemoteAccess = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
inline constexpr std::uint32_t kMwAccessAll = kRemoteAccess | ACCESS_ZERO_BASED;

// "LOCAL_WRITE|REMOTE_READ", or "LOCAL_READ" for 0.
std::string access_to_string(std::uint32_t access);

}  // namespace srdma
