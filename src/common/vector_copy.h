// A plain vector copy loop: 32-byte AVX2 moves where the CPU has them, a
// 32-byte block loop the compiler vectorises elsewhere. The engine's copy
// picks between it and memcpy; `srdma perf` measures both as the reference
// copy rate.
#pragma once

#include <cstddef>

namespace srdma {

void vector_copy(void* dst, const void* src, std::size_t n);
// "avx2" or "32-byte loop": what vector_copy runs on this CPU.
const char* vector_copy_name();
// True when vector_copy runs explicit vector moves (AVX2) here; the
// portable loop is no reason to prefer it over memcpy.
bool vector_copy_accelerated();

}  // namespace srdma
