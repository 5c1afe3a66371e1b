// DH-HMAC-CHAP's computations over OpenSSL 3 (libcrypto): the hashes and
// HMACs, the secret's transformation, the augmented challenge, the two
// responses, the FFDHE exchange and the random challenges. Every primitive is
// OpenSSL's; this file only arranges the bytes the way NVMe Base 2.0 section
// 8.13.5 (and Linux's drivers/nvme/common/auth.c, host/auth.c, target/auth.c)
// feed them in.
//
// Failures of OpenSSL itself (out of memory, a broken provider) come back as
// empty results; the state machines turn them into an AUTH_Failure. Not
// srdma::Result on purpose (clang 14 builds this for the fuzzer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "nvmf/auth_messages.h"
#include "nvmf/auth_wire.h"

struct evp_pkey_st;  // OpenSSL's EVP_PKEY

namespace srdma::nvmf::auth {

// OPENSSL_cleanse: zeroes `bytes` in a way the compiler cannot drop.
void secure_wipe(void* p, std::size_t bytes);

// Wipes what it held before freeing it: secrets, transformed keys and DH
// session keys do not linger in freed heap.
template <class T>
struct CleansingAllocator {
  using value_type = T;
  CleansingAllocator() = default;
  template <class U>
  CleansingAllocator(const CleansingAllocator<U>&) {}
  T* allocate(std::size_t n) { return std::allocator<T>().allocate(n); }
  void deallocate(T* p, std::size_t n) {
    secure_wipe(p, n * sizeof(T));
    std::allocator<T>().deallocate(p, n);
  }
  friend bool operator==(const CleansingAllocator&, const CleansingAllocator&) { return true; }
};
using SecretBytes = std::vector<std::uint8_t, CleansingAllocator<std::uint8_t>>;
using Bytes = std::vector<std::uint8_t>;

// A DH-HMAC-CHAP secret as configured (nvme-cli's --dhchap-secret, the
// `DHHC-1:XX:...:` text; nvmf/auth.h parses it): the key and the hash its
// holder transforms it with before use.
struct DhchapKey {
  std::uint8_t transform = 0;  // DHHC-1's XX: 0 = used as is, else a HashId value
  SecretBytes key;             // 32, 48 or 64 bytes

  bool empty() const { return key.empty(); }
};

// H(data), hash_length(h) bytes.
Bytes digest(HashId h, ByteView data);

// HMAC-H(key, parts[0] || parts[1] || ...), hash_length(h) bytes.
Bytes hmac(HashId h, ByteView key, std::initializer_list<ByteView> parts);

// The key a holder answers with (NVMe Base 2.0 section 8.13.5.7, Linux's
// nvme_auth_transform_key): transform 0 is the secret itself, else
// HMAC-H(secret, NQN || "NVMe-over-Fabrics") with the transform's hash, as
// long as that hash (whatever the secret's length). The host's secret takes
// the host NQN, the controller's secret the subsystem NQN. Empty if the
// transform id is not a hash or OpenSSL fails.
SecretBytes transform_key(const DhchapKey& key, std::string_view nqn);

// With a DH group, the challenge a response covers is augmented with the
// session key (8.13.5.5): C' = HMAC-H(H(g^xy mod p), C).
Bytes augmented_challenge(HashId h, ByteView session_key, ByteView challenge);

enum class Role : std::uint8_t { kHost, kController };

// The responses (8.13.5.4 and 8.13.5.6):
//   R1 = HMAC-H(Kh, C1 || LE32(S1) || LE16(T_ID) || 00h || "HostHost" || NQNh || 00h || NQNc)
//   R2 = HMAC-H(Kc, C2 || LE32(S2) || LE16(T_ID) || 00h || "Controller" || NQNc || 00h || NQNh)
// `key` is the transformed key (Kh or Kc), `challenge` C or, with a DH
// group, C'. The NQNs go in without their terminating NUL.
Bytes dhchap_response(Role role, HashId h, ByteView key, ByteView challenge, std::uint32_t seqnum,
                      std::uint16_t t_id, std::string_view host_nqn, std::string_view subsystem_nqn);

// Equal lengths and bytes, in time independent of where they differ.
bool constant_time_equal(ByteView a, ByteView b);

// RAND_bytes; false if the DRBG cannot give them.
bool random_bytes(std::span<std::uint8_t> out);
// A random sequence number; never 0 (0 means "no bidirectional
// authentication" in a Reply). 0 only if the DRBG fails.
std::uint32_t random_seqnum();

// One side's Diffie-Hellman key pair in an RFC 7919 FFDHE group (OpenSSL's
// named groups ffdhe2048 ... ffdhe8192).
class DhKey {
 public:
  // A fresh key pair; nullopt if `group` is kNull or OpenSSL fails.
  static std::optional<DhKey> generate(DhGroup group);
  // The pair of a given private exponent x (big-endian): for known-answer
  // tests. nullopt if x is out of range or OpenSSL fails.
  static std::optional<DhKey> from_private(DhGroup group, ByteView private_key);

  DhGroup group() const { return group_; }
  // g^x mod p, big-endian, padded to dh_value_length(group) bytes.
  Bytes public_value() const;
  // g^xy mod p from the peer's g^y, big-endian, padded to the group's size
  // (as Linux's kpp gives it). Empty if `peer_value` is not a valid public
  // value of the group (OpenSSL's full check: 1 < y < p - 1 and y^q = 1
  // mod p) or is not exactly the group's size.
  SecretBytes shared_secret(ByteView peer_value) const;

 private:
  struct Free {
    void operator()(evp_pkey_st* p) const;
  };
  DhKey(DhGroup group, evp_pkey_st* pkey) : group_(group), pkey_(pkey) {}

  DhGroup group_ = DhGroup::kNull;
  std::unique_ptr<evp_pkey_st, Free> pkey_;
};

// OpenSSL's name of a group ("ffdhe2048"); nullptr for kNull.
const char* openssl_group_name(DhGroup group);

}  // namespace srdma::nvmf::auth
