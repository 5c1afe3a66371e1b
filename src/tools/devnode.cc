#include "tools/devnode.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace srdma::tools {

namespace {

// The null device's numbers (Documentation/admin-guide/devices.txt).
constexpr unsigned kMajor = 1;
constexpr unsigned kMinor = 3;

bool is_ours(const struct stat& st) {
  return S_ISCHR(st.st_mode) && major(st.st_rdev) == kMajor && minor(st.st_rdev) == kMinor;
}

Error sys_error(int e, const std::string& what) { return Error{e, what + ": " + std::strerror(e)}; }

}  // namespace

Result<void> devnode_create(std::ostream& out, const std::string& path) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!is_ours(st)) return make_error(EEXIST, path + " exists and is not softrdma's node (a 1:3 character device)");
    out << path << ": already there\n";
    return {};
  }
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return std::unexpected(sys_error(ec.value(), "mkdir " + dir.string()));
  const mode_t old = ::umask(0);
  const int r = ::mknod(path.c_str(), S_IFCHR | 0666, makedev(kMajor, kMinor));
  const int e = errno;
  ::umask(old);
  if (r != 0) return std::unexpected(sys_error(e, "mknod " + path + " (as root)"));
  out << path << ": created (character device 1:3, mode 0666); `srdma devnode --remove` removes it\n";
  return {};
}

Result<void> devnode_remove(std::ostream& out, const std::string& path) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return std::unexpected(sys_error(errno, "stat " + path));
    out << path << ": not there\n";
    return {};
  }
  if (!is_ours(st)) return make_error(EEXIST, path + " is not softrdma's node (a 1:3 character device): left alone");
  if (::unlink(path.c_str()) != 0) return std::unexpected(sys_error(errno, "unlink " + path));
  const std::string dir = std::filesystem::path(path).parent_path().string();
  (void)::rmdir(dir.c_str());  // only if empty: another device's nodes stay
  out << path << ": removed\n";
  return {};
}

}  // namespace srdma::tools
