#include "nvmf/auth.h"

#include <openssl/evp.h>
#include <zlib.h>

#include <cstdio>

namespace srdma::nvmf::auth {
namespace {

constexpr std::string_view kPrefix = "DHHC-1:";

bool is_base64_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/';
}

// zlib's crc32 is the CRC-32 Linux's ~crc32(~0, ...) computes.
std::uint32_t crc32_of(const std::uint8_t* p, std::size_t n) {
  return static_cast<std::uint32_t>(crc32(0L, p, static_cast<uInt>(n)));
}

}  // namespace

Result<DhchapKey> parse_dhchap_secret(std::string_view text) {
  if (!text.starts_with(kPrefix))
    return make_error(EINVAL, "DH-HMAC-CHAP secret does not start with \"DHHC-1:\"");
  text.remove_prefix(kPrefix.size());
  if (text.size() < 3 || text[0] != '0' || text[1] < '0' || text[1] > '3' || text[2] != ':')
    return make_error(EINVAL, "DH-HMAC-CHAP secret's transform is not 00, 01, 02 or 03 followed by ':'");
  DhchapKey key;
  key.transform = static_cast<std::uint8_t>(text[1] - '0');
  text.remove_prefix(3);
  // One ':' ends the base64; nothing may follow it.
  if (const auto colon = text.find(':'); colon != std::string_view::npos) {
    if (colon + 1 != text.size())
      return make_error(EINVAL, "DH-HMAC-CHAP secret has text after its final ':'");
    text.remove_suffix(1);
  }
  if (text.empty() || text.size() % 4 != 0)
    return make_error(EINVAL, "DH-HMAC-CHAP secret's base64 is empty or not a multiple of 4 characters");
  std::size_t padding = 0;
  while (padding < 2 && text[text.size() - 1 - padding] == '=') ++padding;
  for (std::size_t i = 0; i < text.size() - padding; ++i)
    if (!is_base64_char(text[i]))
      return make_error(EINVAL, "DH-HMAC-CHAP secret's base64 holds a character outside A-Z a-z 0-9 + / "
                                "(or '=' before the end)");
  SecretBytes raw(text.size() / 4 * 3);
  const int n = EVP_DecodeBlock(raw.data(), reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0 || static_cast<std::size_t>(n) != raw.size())
    return make_error(EINVAL, "DH-HMAC-CHAP secret's base64 does not decode");
  raw.resize(raw.size() - padding);  // EVP_DecodeBlock counts the padding as zero bytes
  if (raw.size() != 36 && raw.size() != 52 && raw.size() != 68)
    return make_error(EINVAL, "DH-HMAC-CHAP secret decodes to " + std::to_string(raw.size()) +
                                  " bytes; a 32, 48 or 64-byte key and its CRC are 36, 52 or 68");
  const std::size_t len = raw.size() - 4;
  const std::uint32_t stored = raw[len] | (std::uint32_t{raw[len + 1]} << 8) |
                               (std::uint32_t{raw[len + 2]} << 16) | (std::uint32_t{raw[len + 3]} << 24);
  const std::uint32_t computed = crc32_of(raw.data(), len);
  if (stored != computed) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "DH-HMAC-CHAP secret's CRC-32 is %08x, its key's is %08x", stored, computed);
    return make_error(EINVAL, buf);
  }
  key.key.assign(raw.begin(), raw.begin() + static_cast<std::ptrdiff_t>(len));
  return key;
}

Result<std::string> format_dhchap_secret(const DhchapKey& key) {
  if (!is_hash_length(key.key.size()))
    return make_error(EINVAL, "DH-HMAC-CHAP key is not 32, 48 or 64 bytes");
  if (key.transform > 3) return make_error(EINVAL, "DH-HMAC-CHAP key's transform is not 0..3");
  SecretBytes raw(key.key.begin(), key.key.end());
  const std::uint32_t crc = crc32_of(key.key.data(), key.key.size());
  for (int i = 0; i < 4; ++i) raw.push_back(static_cast<std::uint8_t>(crc >> (8 * i)));
  std::string b64(4 * ((raw.size() + 2) / 3) + 1, '\0');  // EVP_EncodeBlock adds a NUL
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()), raw.data(),
                                static_cast<int>(raw.size()));
  b64.resize(static_cast<std::size_t>(n));
  char xx[8];
  std::snprintf(xx, sizeof xx, "%02u:", static_cast<unsigned>(key.transform));
  return std::string(kPrefix) + xx + b64 + ":";
}

Result<DhchapKey> generate_dhchap_secret(std::size_t length, std::uint8_t transform) {
  if (!is_hash_length(length)) return make_error(EINVAL, "DH-HMAC-CHAP key length is not 32, 48 or 64");
  if (transform > 3) return make_error(EINVAL, "DH-HMAC-CHAP transform is not 0..3");
  DhchapKey key;
  key.transform = transform;
  key.key.resize(length);
  if (!random_bytes(key.key)) return make_error(EIO, "RAND_bytes could not generate a DH-HMAC-CHAP key");
  return key;
}

Result<void> validate(const HostConfig& config) {
  if (const char* e = check_config(config)) return make_error(EINVAL, e);
  return {};
}

Result<void> validate(const ControllerConfig& config) {
  if (const char* e = check_config(config)) return make_error(EINVAL, e);
  return {};
}

}  // namespace srdma::nvmf::auth
