#include "nvmf/subsystem.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>

namespace srdma::nvmf {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool is_alnum(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

bool is_uuid(std::string_view s) {  // 8-4-4-4-12
  if (s.size() != 36) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : !is_hex(s[i])) return false;
  }
  return true;
}

bool printable_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c <= 0x7E; });
}

}  // namespace

Result<void> validate_nqn(std::string_view nqn) {
  auto bad = [&](std::string_view why) {
    return make_error(EINVAL, fmt::format("\"{}\" is not an NQN: {}", nqn.substr(0, 64), why));
  };
  if (nqn.size() > kMaxNqnLength)
    return bad(fmt::format("{} bytes, the limit is {}", nqn.size(), kMaxNqnLength));
  if (nqn.find('\0') != nqn.npos) return bad("contains NUL");
  constexpr std::string_view kUuidPrefix = "nqn.2014-08.org.nvmexpress:uuid:";
  if (nqn.starts_with(kUuidPrefix)) {
    if (!is_uuid(nqn.substr(kUuidPrefix.size())))
      return bad("the UUID form needs an 8-4-4-4-12 hex UUID");
    return {};
  }
  // nqn.yyyy-mm.
  if (!nqn.starts_with("nqn.")) return bad("does not start with \"nqn.\"");
  std::string_view rest = nqn.substr(4);
  if (rest.size() < 8 || !is_digit(rest[0]) || !is_digit(rest[1]) || !is_digit(rest[2]) ||
      !is_digit(rest[3]) || rest[4] != '-' || !is_digit(rest[5]) || !is_digit(rest[6]) ||
      rest[7] != '.')
    return bad("no yyyy-mm. date after \"nqn.\"");
  const int month = (rest[5] - '0') * 10 + (rest[6] - '0');
  if (month < 1 || month > 12) return bad("month outside 01..12");
  rest = rest.substr(8);
  // Reverse domain up to the first ':' (or the end: the discovery NQN has none).
  const std::string_view domain = rest.substr(0, rest.find(':'));
  if (domain.empty()) return bad("empty reverse domain name");
  if (domain.front() == '.' || domain.back() == '.' || domain.find("..") != domain.npos)
    return bad("empty label in the reverse domain name");
  for (char c : domain)
    if (!is_alnum(c) && c != '-' && c != '.')
      return bad("the reverse domain name allows letters, digits, '-' and '.'");
  if (domain.size() < rest.size() && domain.size() + 1 == rest.size())
    return bad("nothing after ':'");
  return {};
}

Result<std::shared_ptr<Subsystem>> Subsystem::create(std::string nqn, std::string serial,
                                                     std::string model) {
  if (auto ok = validate_nqn(nqn); !ok) return std::unexpected(ok.error());
  if (serial.empty() || serial.size() > sizeof IdentifyController{}.sn || !printable_ascii(serial))
    return make_error(EINVAL, fmt::format("serial \"{}\" must be 1..20 printable ASCII bytes", serial));
  if (model.empty() || model.size() > sizeof IdentifyController{}.mn || !printable_ascii(model))
    return make_error(EINVAL, fmt::format("model \"{}\" must be 1..40 printable ASCII bytes", model));
  return std::shared_ptr<Subsystem>(new Subsystem(std::move(nqn), std::move(serial), std::move(model)));
}

Result<std::uint32_t> Subsystem::add_namespace(std::shared_ptr<Namespace> ns) {
  if (!ns) return make_error(EINVAL, "add_namespace of a null namespace");
  std::unique_lock lock(mu_);
  std::uint32_t nsid = 1;
  for (const auto& [id, _] : namespaces_) {  // ordered: the first gap is the lowest free
    if (id != nsid) break;
    ++nsid;
  }
  if (nsid > kMaxNamespaces)
    return make_error(ENOSPC, fmt::format("subsystem {} already has {} namespaces", nqn_,
                                          kMaxNamespaces));
  namespaces_.emplace(nsid, std::move(ns));
  return nsid;
}

Result<void> Subsystem::remove_namespace(std::uint32_t nsid) {
  std::unique_lock lock(mu_);
  if (namespaces_.erase(nsid) == 0)
    return make_error(ENOENT, fmt::format("subsystem {} has no namespace {}", nqn_, nsid));
  return {};
}

std::shared_ptr<Namespace> Subsystem::find_namespace(std::uint32_t nsid) const {
  std::shared_lock lock(mu_);
  auto it = namespaces_.find(nsid);
  return it == namespaces_.end() ? nullptr : it->second;
}

std::vector<std::uint32_t> Subsystem::active_nsids(std::uint32_t after, std::size_t max) const {
  std::shared_lock lock(mu_);
  std::vector<std::uint32_t> out;
  for (auto it = namespaces_.upper_bound(after); it != namespaces_.end() && out.size() < max; ++it)
    out.push_back(it->first);
  return out;
}

void fill_identify_controller(const Subsystem& subsys, IdentifyController& id) {
  // SN, MN and FR are ASCII padded with spaces, not NUL-terminated.
  auto put = [](char* field, std::size_t width, std::string_view value) {
    std::memset(field, ' ', width);
    std::memcpy(field, value.data(), std::min(width, value.size()));
  };
  put(id.sn, sizeof id.sn, subsys.serial());
  put(id.mn, sizeof id.mn, subsys.model());
  std::memset(id.subnqn, 0, sizeof id.subnqn);
  std::memcpy(id.subnqn, subsys.nqn().data(), subsys.nqn().size());  // <= 223 < 256
  id.nn = Subsystem::kMaxNamespaces;
}

Result<void> SubsystemRegistry::add(std::shared_ptr<Subsystem> subsys) {
  if (!subsys) return make_error(EINVAL, "add of a null subsystem");
  std::unique_lock lock(mu_);
  auto [it, inserted] = by_nqn_.try_emplace(subsys->nqn(), subsys);
  if (!inserted) return make_error(EEXIST, fmt::format("subsystem {} is already registered", subsys->nqn()));
  return {};
}

Result<void> SubsystemRegistry::remove(std::string_view nqn) {
  std::unique_lock lock(mu_);
  auto it = by_nqn_.find(nqn);
  if (it == by_nqn_.end()) return make_error(ENOENT, fmt::format("no subsystem {}", nqn));
  by_nqn_.erase(it);
  return {};
}

std::shared_ptr<Subsystem> SubsystemRegistry::find(std::string_view nqn) const {
  std::shared_lock lock(mu_);
  auto it = by_nqn_.find(nqn);
  return it == by_nqn_.end() ? nullptr : it->second;
}

std::vector<std::string> SubsystemRegistry::nqns() const {
  std::shared_lock lock(mu_);
  std::vector<std::string> out;
  for (const auto& [nqn, _] : by_nqn_) out.push_back(nqn);
  return out;
}

namespace {
// What allow_host and set_hosts refuse.
Result<void> check_host(const std::string& hostnqn, const Subsystem::HostSecrets& secrets) {
  if (hostnqn.empty() || hostnqn.size() > 223) return make_error(EINVAL, "a host NQN is 1..223 bytes");
  if (secrets.dhchap_secret.empty() && !secrets.dhchap_ctrl_secret.empty())
    return make_error(EINVAL, "a controller secret needs a host secret (bidirectional DH-HMAC-CHAP)");
  return {};
}
}  // namespace

Result<void> Subsystem::allow_host(std::string hostnqn, HostSecrets secrets) {
  if (auto r = check_host(hostnqn, secrets); !r) return r;
  std::unique_lock lock(mu_);
  if (!secrets.dhchap_secret.empty()) secrets_[hostnqn] = std::move(secrets);
  allowed_hosts_.push_back(std::move(hostnqn));
  return {};
}

Result<void> Subsystem::set_hosts(HostList hosts) {
  std::vector<std::string> allowed;
  std::map<std::string, HostSecrets, std::less<>> secrets;
  for (auto& [hostnqn, s] : hosts) {
    if (auto r = check_host(hostnqn, s); !r) return r;
    if (!s.dhchap_secret.empty()) secrets[hostnqn] = std::move(s);
    allowed.push_back(std::move(hostnqn));
  }
  std::unique_lock lock(mu_);
  allowed_hosts_ = std::move(allowed);
  secrets_ = std::move(secrets);
  return {};
}

std::optional<Subsystem::HostSecrets> Subsystem::host_secrets(std::string_view hostnqn) const {
  std::shared_lock lock(mu_);
  auto it = secrets_.find(hostnqn);
  if (it == secrets_.end()) return std::nullopt;
  return it->second;
}

bool Subsystem::host_allowed(std::string_view hostnqn) const {
  std::shared_lock lock(mu_);
  return allowed_hosts_.empty() ||
         std::find(allowed_hosts_.begin(), allowed_hosts_.end(), hostnqn) != allowed_hosts_.end();
}

}  // namespace srdma::nvmf
