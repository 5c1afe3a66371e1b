#include "core/memory_map.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace srdma::core {
namespace {

std::string read_maps() {
  std::string out;
  int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

bool parse_hex(std::string_view s, std::uint64_t& v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

Result<void> check_mapping(std::uintptr_t addr, std::size_t length, bool writable) {
  const std::uint64_t end = std::uint64_t{addr} + length;
  std::uint64_t cursor = addr;  // first byte not yet known to be mapped
  const std::string maps = read_maps();
  std::string_view rest = maps;
  // Lines are "start-end perms offset dev inode path", sorted by address.
  while (!rest.empty() && cursor < end) {
    std::size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
    std::size_t dash = line.find('-'), sp = line.find(' ');
    if (dash == std::string_view::npos || sp == std::string_view::npos || sp < dash || line.size() < sp + 3)
      continue;
    std::uint64_t lo = 0, hi = 0;
    if (!parse_hex(line.substr(0, dash), lo) || !parse_hex(line.substr(dash + 1, sp - dash - 1), hi))
      continue;
    if (hi <= cursor) continue;
    if (lo > cursor) break;  // a hole at cursor
    bool r = line[sp + 1] == 'r', w = line[sp + 2] == 'w';
    if (!r) return make_error(EFAULT, fmt::format("address {:#x} is not readable", cursor));
    if (writable && !w)
      return make_error(EFAULT, fmt::format("address {:#x} is not writable, and the access asks for writes",
                                            cursor));
    cursor = hi;
  }
  if (cursor < end) return make_error(EFAULT, fmt::format("address {:#x} is not mapped", cursor));
  return {};
}

}  // namespace srdma::core
