#include "hca/page_fault.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace srdma::hca {
namespace {

std::uintptr_t page_size() {
  static const auto size = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

}  // namespace

bool fault_in(const void* addr, std::uint64_t length, bool write) {
  if (length == 0) return true;
  const auto start = reinterpret_cast<std::uintptr_t>(addr);
  if (start + length < start) return false;  // wraps: no such pages
  const std::uintptr_t mask = page_size() - 1;
  const std::uintptr_t first = start & ~mask;
  const std::uintptr_t end = (start + length + mask) & ~mask;
  if (end <= first) return false;  // the last page is the address space's
  const int advice = write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
  for (;;) {
    // ENOMEM: a hole; EINVAL: a page without the permission (or PROT_NONE);
    // EFAULT: a fault that would raise SIGBUS. EINTR only restarts.
    if (::madvise(reinterpret_cast<void*>(first), end - first, advice) == 0) return true;
    if (errno != EINTR) return false;
  }
}

bool fault_in_available() {
  static const bool available = [] {
    // A page of our own, surely mapped and writable.
    static unsigned char probe[1];
    return fault_in(probe, 1, true) && fault_in(probe, 1, false);
  }();
  return available;
}

}  // namespace srdma::hca
