// Identifiers a stranger on the network could otherwise guess (starting
// PSNs, comm IDs, key bytes, QPN high bits, controller IDs) come from the
// kernel's CSPRNG (getrandom(2)), never from a seeded library generator:
// one observed output of minstd_rand or mt19937 reveals the rest.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace srdma {

// Fills `out` from getrandom(2) (blocking only until the kernel's pool is
// initialised at boot). Aborts if the kernel refuses: there is no safe
// fallback for an identifier that must not be guessed.
void secure_random_bytes(std::span<std::byte> out);
std::uint32_t secure_random_u32();
std::uint64_t secure_random_u64();
// A starting PSN: 24 random bits (IBA 9.7.1: the PSN space is 2^24).
inline std::uint32_t random_psn() { return secure_random_u32() & 0xFFFFFF; }

}  // namespace srdma
