// Checks that a range of this process's memory is mapped with the rights a
// registration asks for, the way ib_umem_get's get_user_pages fails with
// EFAULT -- so a bad buffer is refused at reg_mr, never a crash later.
#pragma once

#include <cstddef>
#include <cstdint>

#include "srdma/status.h"

namespace srdma::core {

// EFAULT naming the first address that is unmapped, unreadable or (when
// `writable`) not writable.
Result<void> check_mapping(std::uintptr_t addr, std::size_t length, bool writable);

}  // namespace srdma::core
