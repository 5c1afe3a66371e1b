// The engine's memory copy. glibc's memcpy on some machines takes `rep movsb`
// for 4-64 KiB copies and runs far below the vector units' speed there; this
// routine uses an AVX2 loop when the CPU has it, and memcpy otherwise.
#pragma once

#include <cstddef>
#include <span>

#include "srdma/translation.h"

namespace srdma::hca {

void copy_bytes(void* dst, const void* src, std::size_t n);

// Copies min(total of dst, total of src) bytes from the src pieces into the
// dst pieces, in order. Returns the bytes copied.
std::size_t copy_pieces(std::span<const MemPiece> dst, std::span<const MemPiece> src);

}  // namespace srdma::hca
