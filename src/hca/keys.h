// Memory keys in the mem-free (Arbel) layout of mthca: the table index in
// bits 31..8 and a rotating key byte in bits 7..0.
//
// The MPT index allocator hands out `index | top` with the rotating `top` in
// the high bits; rotating that value left by 8 gives the key, so a reused
// MPT slot comes back with another key and a stale key does not match.
#pragma once

#include <cstdint>

namespace srdma::hca {

constexpr std::uint32_t hw_index_to_key(std::uint32_t v) { return (v >> 24) | (v << 8); }
constexpr std::uint32_t key_to_hw_index(std::uint32_t k) { return (k << 24) | (k >> 8); }

static_assert(key_to_hw_index(hw_index_to_key(0x12345678)) == 0x12345678);
static_assert(hw_index_to_key(5) == 0x500);                 // index 5, key byte 0
static_assert(hw_index_to_key(5 | (1u << 24)) == 0x501);    // same index, next key byte

}  // namespace srdma::hca
