#include "srdma/access.h"

namespace srdma {

std::string access_to_string(std::uint32_t access) {
  static constexpr struct {
    std::uint32_t bit;
    const char* name;
  } kNames[] = {{ACCESS_LOCAL_WRITE, "LOCAL_WRITE"},
                {ACCESS_REMOTE_WRITE, "REMOTE_WRITE"},
                {ACCESS_REMOTE_READ, "REMOTE_READ"},
                {ACCESS_REMOTE_ATOMIC, "REMOTE_ATOMIC"},
                {ACCESS_MW_BIND, "MW_BIND"},
                {ACCESS_ZERO_BASED, "ZERO_BASED"},
                {ACCESS_ON_DEMAND, "ON_DEMAND"}};
  if (access == 0) return "LOCAL_READ";
  std::string out;
  for (const auto& n : kNames) {
    if (!(access & n.bit)) continue;
    if (!out.empty()) out += '|';
    out += n.name;
  }
  if (access & ~(kMrAccessAll | ACCESS_ZERO_BASED | ACCESS_ON_DEMAND)) out += (out.empty() ? "" : "|") + std::string("UNKNOWN");
  return out;
}

}  // namespace srdma
