#include "common/secure_random.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace srdma {

void secure_random_bytes(std::span<std::byte> out) {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = getrandom(out.data() + done, out.size() - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "srdma: getrandom: %s\n", std::strerror(errno));
      std::abort();
    }
    done += static_cast<std::size_t>(n);
  }
}

std::uint32_t secure_random_u32() {
  std::uint32_t v;
  secure_random_bytes(std::as_writable_bytes(std::span(&v, 1)));
  return v;
}

std::uint64_t secure_random_u64() {
  std::uint64_t v;
  secure_random_bytes(std::as_writable_bytes(std::span(&v, 1)));
  return v;
}

}  // namespace srdma
