#include "nvmf/host_identity.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/secure_random.h"

namespace srdma::nvmf {
namespace {

// The application ID the machine ID is keyed with: softrdma's own, so the
// NQN is not any other program's app-specific ID either.
constexpr unsigned char kAppId[16] = {0x5b, 0x1f, 0x9e, 0x03, 0x7a, 0x44, 0x4c, 0x2d,
                                      0x8e, 0x61, 0x0c, 0x93, 0xd2, 0x57, 0xa1, 0x6e};

std::string read_first_line(std::string_view path) {
  std::ifstream f{std::string(path)};
  std::string line;
  if (!f || !std::getline(f, line)) return {};
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  std::size_t start = 0;
  while (start < line.size() && std::isspace(static_cast<unsigned char>(line[start]))) ++start;
  return line.substr(start);
}

bool valid_nqn(const std::string& s) {
  // NVMe base 4.5: "nqn." and at most 223 bytes of UTF-8; no control bytes.
  if (s.size() < 5 || s.size() > 223 || s.compare(0, 4, "nqn.") != 0) return false;
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f) return false;
  return true;
}

bool parse_machine_id(const std::string& s, unsigned char (&out)[16]) {
  if (s.size() != 32) return false;
  for (int i = 0; i < 16; ++i) {
    unsigned v = 0;
    for (int j = 0; j < 2; ++j) {
      const char c = s[static_cast<std::size_t>(2 * i + j)];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
      else return false;
    }
    out[i] = static_cast<unsigned char>(v);
  }
  return true;
}

// A UUID of version 4 and the RFC 4122 variant, from 16 bytes.
void make_v4(unsigned char (&u)[16]) {
  u[6] = static_cast<unsigned char>((u[6] & 0x0F) | 0x40);
  u[8] = static_cast<unsigned char>((u[8] & 0x3F) | 0x80);
}

}  // namespace

std::string uuid_host_nqn(const unsigned char (&u)[16]) {
  char buf[80];
  std::snprintf(buf, sizeof buf,
                "nqn.2014-08.org.nvmexpress:uuid:%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return buf;
}

std::string default_host_nqn(std::string_view hostnqn_file, std::string_view machine_id_file) {
  if (std::string nqn = read_first_line(hostnqn_file); valid_nqn(nqn)) return nqn;
  unsigned char uuid[16];
  unsigned char machine[16];
  if (parse_machine_id(read_first_line(machine_id_file), machine)) {
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (HMAC(EVP_sha256(), machine, sizeof machine, kAppId, sizeof kAppId, mac, &len) && len >= 16) {
      std::memcpy(uuid, mac, 16);
      make_v4(uuid);
      return uuid_host_nqn(uuid);
    }
  }
  secure_random_bytes(std::as_writable_bytes(std::span(uuid)));
  make_v4(uuid);
  return uuid_host_nqn(uuid);
}

}  // namespace srdma::nvmf
