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
};
// Local read is always granted to the owner of an lkey (IBA 10.6.3.1); an
// access request of 0 means "local read".
inline constexpr std::uint32_t kAccessAll =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;

// "LOCAL_WRITE|REMOTE_READ", or "LOCAL_READ" for 0.
std::string access_to_string(std::uint32_t access);

}  // namespace srdma
