// The engine's memory copy. glibc's memcpy on some machines (AMD EPYC with
// glibc 2.36) takes `rep movsb` for 4-64 KiB copies and runs far below the
// vector units' speed there; on others it is the fastest there is. So the
// first copy times both on this machine, per size class, and every copy
// uses the faster: the vector loop (common/vector_copy.h) or memcpy.
#pragma once

#include <cstddef>
#include <span>

#include "srdma/translation.h"

namespace srdma::hca {

void copy_bytes(void* dst, const void* src, std::size_t n);

// "memcpy" or the vector loop's name: what copy_bytes uses for n bytes here.
const char* copy_routine_for(std::size_t n);

// Copies min(total of dst, total of src) bytes from the src pieces into the
// dst pieces, in order. Returns the bytes copied.
std::size_t copy_pieces(std::span<const MemPiece> dst, std::span<const MemPiece> src);

}  // namespace srdma::hca
