// A plain vector copy loop: 32-byte AVX2 moves where the CPU has them, a
// 32-byte block loop the compiler vectorises elsewhere; and `rep movsb`.
// The engine's copy (hca/copy.h) picks one of them or memcpy per machine;
// `srdma perf` measures the vector loop and memcpy as the reference copy
// rate.
#pragma once

#include <cstddef>

namespace srdma {

void vector_copy(void* dst, const void* src, std::size_t n);
// "avx2" or "32-byte loop": what vector_copy runs on this CPU.
const char* vector_copy_name();
// True when vector_copy runs explicit vector moves (AVX2) here; the
// portable loop is no reason to prefer it over memcpy.
bool vector_copy_accelerated();

// `rep movsb` on x86-64 (memcpy elsewhere): one instruction whose speed is
// the CPU's business. Fast where the CPU has ERMS/FSRM, and even then not
// on every such CPU in every access pattern (docs/BENCHMARKS.md).
void movsb_copy(void* dst, const void* src, std::size_t n);
// CPUID leaf 7: enhanced `rep movsb` (ERMS) and fast short `rep movsb` (FSRM).
bool cpu_has_erms();
bool cpu_has_fsrm();

}  // namespace srdma
