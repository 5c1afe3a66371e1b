#include "nvmf/auth_crypto.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/dh.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/rand.h>

#include <cstring>

namespace srdma::nvmf::auth {

void secure_wipe(void* p, std::size_t bytes) { OPENSSL_cleanse(p, bytes); }

namespace {

// OpenSSL's digest names (the HMAC's DIGEST parameter, EVP_MD_fetch).
const char* digest_name(HashId h) {
  switch (h) {
    case HashId::kSha256: return "SHA256";
    case HashId::kSha384: return "SHA384";
    case HashId::kSha512: return "SHA512";
  }
  return nullptr;
}

template <class T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const { F(p); }
};
using MacPtr = std::unique_ptr<EVP_MAC, Deleter<EVP_MAC, EVP_MAC_free>>;
using MacCtxPtr = std::unique_ptr<EVP_MAC_CTX, Deleter<EVP_MAC_CTX, EVP_MAC_CTX_free>>;
using PkeyCtxPtr = std::unique_ptr<EVP_PKEY_CTX, Deleter<EVP_PKEY_CTX, EVP_PKEY_CTX_free>>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using BnPtr = std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_clear_free>>;
using BnCtxPtr = std::unique_ptr<BN_CTX, Deleter<BN_CTX, BN_CTX_free>>;
using ParamBldPtr = std::unique_ptr<OSSL_PARAM_BLD, Deleter<OSSL_PARAM_BLD, OSSL_PARAM_BLD_free>>;
using ParamPtr = std::unique_ptr<OSSL_PARAM, Deleter<OSSL_PARAM, OSSL_PARAM_free>>;

void put_le32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

ByteView text(std::string_view s) {
  return ByteView(reinterpret_cast<const std::uint8_t*>(s.data()), s.size());
}

// A DH key of `group` from OSSL_PARAMs (EVP_PKEY_fromdata).
PkeyPtr dh_from_params(const OSSL_PARAM* params, int selection) {
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_name(nullptr, "DH", nullptr));
  if (!ctx || EVP_PKEY_fromdata_init(ctx.get()) <= 0) return nullptr;
  EVP_PKEY* key = nullptr;
  if (EVP_PKEY_fromdata(ctx.get(), &key, selection, const_cast<OSSL_PARAM*>(params)) <= 0) return nullptr;
  return PkeyPtr(key);
}

}  // namespace

Bytes digest(HashId h, ByteView data) {
  const char* name = digest_name(h);
  if (name == nullptr) return {};
  Bytes out(EVP_MAX_MD_SIZE);
  unsigned int len = 0;
  const EVP_MD* md = EVP_get_digestbyname(name);
  if (md == nullptr || EVP_Digest(data.data(), data.size(), out.data(), &len, md, nullptr) != 1) return {};
  out.resize(len);
  return out;
}

Bytes hmac(HashId h, ByteView key, std::initializer_list<ByteView> parts) {
  const char* name = digest_name(h);
  if (name == nullptr) return {};
  MacPtr mac(EVP_MAC_fetch(nullptr, "HMAC", nullptr));
  if (!mac) return {};
  MacCtxPtr ctx(EVP_MAC_CTX_new(mac.get()));
  if (!ctx) return {};
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, const_cast<char*>(name), 0),
      OSSL_PARAM_construct_end()};
  // A null key would mean "keep the previous one": pass a real pointer even
  // for an empty key.
  static const std::uint8_t kNoKey = 0;
  if (EVP_MAC_init(ctx.get(), key.empty() ? &kNoKey : key.data(), key.size(), params) != 1) return {};
  for (ByteView part : parts)
    if (!part.empty() && EVP_MAC_update(ctx.get(), part.data(), part.size()) != 1) return {};
  Bytes out(EVP_MAX_MD_SIZE);
  std::size_t len = 0;
  if (EVP_MAC_final(ctx.get(), out.data(), &len, out.size()) != 1) return {};
  out.resize(len);
  return out;
}

SecretBytes transform_key(const DhchapKey& key, std::string_view nqn) {
  if (key.transform == 0) return key.key;
  if (!is_known_hash(key.transform)) return {};
  static constexpr std::string_view kLabel = "NVMe-over-Fabrics";
  Bytes k = hmac(static_cast<HashId>(key.transform), key.key, {text(nqn), text(kLabel)});
  SecretBytes out(k.begin(), k.end());
  OPENSSL_cleanse(k.data(), k.size());
  return out;
}

Bytes augmented_challenge(HashId h, ByteView session_key, ByteView challenge) {
  Bytes hashed = digest(h, session_key);
  if (hashed.empty()) return {};
  Bytes out = hmac(h, hashed, {challenge});
  OPENSSL_cleanse(hashed.data(), hashed.size());
  return out;
}

Bytes dhchap_response(Role role, HashId h, ByteView key, ByteView challenge, std::uint32_t seqnum,
                      std::uint16_t t_id, std::string_view host_nqn, std::string_view subsystem_nqn) {
  std::uint8_t seq[4];
  put_le32(seq, seqnum);
  const std::uint8_t tid[2] = {static_cast<std::uint8_t>(t_id), static_cast<std::uint8_t>(t_id >> 8)};
  static constexpr std::uint8_t kZero[1] = {0};
  const bool host = role == Role::kHost;
  const std::string_view label = host ? "HostHost" : "Controller";
  // The responder's own NQN first.
  const std::string_view first = host ? host_nqn : subsystem_nqn;
  const std::string_view second = host ? subsystem_nqn : host_nqn;
  return hmac(h, key,
              {challenge, ByteView(seq), ByteView(tid), ByteView(kZero), text(label), text(first),
               ByteView(kZero), text(second)});
}

bool constant_time_equal(ByteView a, ByteView b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool random_bytes(std::span<std::uint8_t> out) {
  if (out.empty()) return true;
  return RAND_bytes(out.data(), static_cast<int>(out.size())) == 1;
}

std::uint32_t random_seqnum() {
  for (int tries = 0; tries < 8; ++tries) {
    std::uint8_t b[4];
    if (!random_bytes(b)) return 0;
    const std::uint32_t v = b[0] | (std::uint32_t{b[1]} << 8) | (std::uint32_t{b[2]} << 16) |
                            (std::uint32_t{b[3]} << 24);
    if (v != 0) return v;
  }
  return 0;
}

// ------------------------------------------------------------------- DH --

const char* openssl_group_name(DhGroup group) {
  switch (group) {
    case DhGroup::kNull: return nullptr;
    case DhGroup::kFfdhe2048: return "ffdhe2048";
    case DhGroup::kFfdhe3072: return "ffdhe3072";
    case DhGroup::kFfdhe4096: return "ffdhe4096";
    case DhGroup::kFfdhe6144: return "ffdhe6144";
    case DhGroup::kFfdhe8192: return "ffdhe8192";
  }
  return nullptr;
}

void DhKey::Free::operator()(evp_pkey_st* p) const { EVP_PKEY_free(p); }

std::optional<DhKey> DhKey::generate(DhGroup group) {
  const char* name = openssl_group_name(group);
  if (name == nullptr) return std::nullopt;
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_name(nullptr, "DH", nullptr));
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) <= 0) return std::nullopt;
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, const_cast<char*>(name), 0),
      OSSL_PARAM_construct_end()};
  if (EVP_PKEY_CTX_set_params(ctx.get(), params) <= 0) return std::nullopt;
  EVP_PKEY* key = nullptr;
  if (EVP_PKEY_generate(ctx.get(), &key) <= 0) return std::nullopt;
  return DhKey(group, key);
}

std::optional<DhKey> DhKey::from_private(DhGroup group, ByteView private_key) {
  const char* name = openssl_group_name(group);
  if (name == nullptr || private_key.empty()) return std::nullopt;
  // The group's p and g, from a parameters-only key of the named group.
  const OSSL_PARAM group_params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, const_cast<char*>(name), 0),
      OSSL_PARAM_construct_end()};
  PkeyPtr params = dh_from_params(group_params, EVP_PKEY_KEY_PARAMETERS);
  if (!params) return std::nullopt;
  BIGNUM* p_raw = nullptr;
  BIGNUM* g_raw = nullptr;
  if (EVP_PKEY_get_bn_param(params.get(), OSSL_PKEY_PARAM_FFC_P, &p_raw) != 1) return std::nullopt;
  BnPtr p(p_raw);
  if (EVP_PKEY_get_bn_param(params.get(), OSSL_PKEY_PARAM_FFC_G, &g_raw) != 1) return std::nullopt;
  BnPtr g(g_raw);
  BnPtr x(BN_bin2bn(private_key.data(), static_cast<int>(private_key.size()), nullptr));
  BnPtr y(BN_new());
  BnCtxPtr bn_ctx(BN_CTX_new());
  if (!x || !y || !bn_ctx || BN_is_zero(x.get()) || BN_cmp(x.get(), p.get()) >= 0) return std::nullopt;
  // y = g^x mod p: the import takes both halves of the pair.
  if (BN_mod_exp(y.get(), g.get(), x.get(), p.get(), bn_ctx.get()) != 1) return std::nullopt;
  ParamBldPtr bld(OSSL_PARAM_BLD_new());
  if (!bld || OSSL_PARAM_BLD_push_utf8_string(bld.get(), OSSL_PKEY_PARAM_GROUP_NAME, name, 0) != 1 ||
      OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_PRIV_KEY, x.get()) != 1 ||
      OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, y.get()) != 1)
    return std::nullopt;
  ParamPtr pair_params(OSSL_PARAM_BLD_to_param(bld.get()));
  if (!pair_params) return std::nullopt;
  PkeyPtr pair = dh_from_params(pair_params.get(), EVP_PKEY_KEYPAIR);
  if (!pair) return std::nullopt;
  return DhKey(group, pair.release());
}

Bytes DhKey::public_value() const {
  BIGNUM* raw = nullptr;
  if (!pkey_ || EVP_PKEY_get_bn_param(pkey_.get(), OSSL_PKEY_PARAM_PUB_KEY, &raw) != 1) return {};
  BnPtr y(raw);
  Bytes out(dh_value_length(group_));
  if (BN_bn2binpad(y.get(), out.data(), static_cast<int>(out.size())) < 0) return {};
  return out;
}

SecretBytes DhKey::shared_secret(ByteView peer_value) const {
  const char* name = openssl_group_name(group_);
  if (!pkey_ || name == nullptr || peer_value.size() != dh_value_length(group_)) return {};
  BnPtr y(BN_bin2bn(peer_value.data(), static_cast<int>(peer_value.size()), nullptr));
  ParamBldPtr bld(OSSL_PARAM_BLD_new());
  if (!y || !bld || OSSL_PARAM_BLD_push_utf8_string(bld.get(), OSSL_PKEY_PARAM_GROUP_NAME, name, 0) != 1 ||
      OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, y.get()) != 1)
    return {};
  ParamPtr params(OSSL_PARAM_BLD_to_param(bld.get()));
  if (!params) return {};
  PkeyPtr peer = dh_from_params(params.get(), EVP_PKEY_PUBLIC_KEY);
  if (!peer) return {};
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_pkey(nullptr, pkey_.get(), nullptr));
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) <= 0) return {};
  // Padded to the prime's size, as the kernel's DH gives g^xy: a shared
  // secret with leading zero bytes must hash the same on both sides.
  if (EVP_PKEY_CTX_set_dh_pad(ctx.get(), 1) <= 0) return {};
  // validate_peer = 1: EVP_PKEY_public_check, the full range and subgroup check.
  if (EVP_PKEY_derive_set_peer_ex(ctx.get(), peer.get(), 1) <= 0) return {};
  std::size_t len = 0;
  if (EVP_PKEY_derive(ctx.get(), nullptr, &len) <= 0) return {};
  SecretBytes out(len);
  if (EVP_PKEY_derive(ctx.get(), out.data(), &len) <= 0) return {};
  out.resize(len);
  if (out.size() != dh_value_length(group_)) return {};
  return out;
}

}  // namespace srdma::nvmf::auth
