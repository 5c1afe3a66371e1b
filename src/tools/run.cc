#include "tools/run.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "srdma/net.h"
#include "tools/address_option.h"

// Set for this file by the build (CMakeLists.txt).
#ifndef SRDMA_BUILD_DROPIN_DIR
#error "SRDMA_BUILD_DROPIN_DIR: the build tree's lib/softrdma"
#endif
#ifndef SRDMA_INSTALL_LIBDIR
#error "SRDMA_INSTALL_LIBDIR: CMAKE_INSTALL_LIBDIR"
#endif

namespace srdma::tools {

namespace fs = std::filesystem;

namespace {

constexpr const char* kDropin = "libibverbs.so.1";

void add_unique(std::vector<std::string>& dirs, const fs::path& p) {
  std::error_code ec;
  fs::path canon = fs::weakly_canonical(p, ec);
  std::string s = (ec ? p.lexically_normal() : canon).string();
  for (const auto& d : dirs)
    if (d == s) return;
  dirs.push_back(std::move(s));
}

}  // namespace

std::vector<std::string> dropin_search_dirs() {
  std::vector<std::string> dirs;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path prefix = exe.parent_path().parent_path();
    add_unique(dirs, prefix / "lib" / "softrdma");
    add_unique(dirs, prefix / SRDMA_INSTALL_LIBDIR / "softrdma");
  }
  add_unique(dirs, SRDMA_BUILD_DROPIN_DIR);
  return dirs;
}

Result<std::string> find_dropin_dir() {
  auto dirs = dropin_search_dirs();
  std::string searched;
  for (const auto& d : dirs) {
    std::error_code ec;
    if (fs::exists(fs::path(d) / kDropin, ec)) return d;
    searched += (searched.empty() ? "" : ", ") + d;
  }
  return make_error(ENOENT, std::string("no softrdma ") + kDropin + " (the libibverbs drop-in) in " + searched);
}

RunFailure run_program(const std::string& ip, const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0].empty())
    return {Error{EINVAL, "run needs a program: srdma run [--ip ADDR] -- PROGRAM ARGS..."}};
  std::string addr;  // SRDMA_ADDR: IPv4 or IPv6 text (::ffff:a.b.c.d as a.b.c.d)
  if (!ip.empty()) {
    auto a = parse_ip_option("--ip", ip);
    if (!a) return {a.error()};
    addr = ip_str(*a);
  }
  auto dir = find_dropin_dir();
  if (!dir) return {dir.error()};

  // An empty element of LD_LIBRARY_PATH means the current directory: none is added.
  std::string path = *dir;
  if (const char* old = std::getenv("LD_LIBRARY_PATH"); old && *old) path += std::string(":") + old;
  if (::setenv("LD_LIBRARY_PATH", path.c_str(), 1) != 0 ||
      (!addr.empty() && ::setenv("SRDMA_ADDR", addr.c_str(), 1) != 0))
    return {Error{errno, std::string("setenv: ") + std::strerror(errno)}};

  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  int err = errno;
  return {Error{err, std::strerror(err)}, true};
}

}  // namespace srdma::tools
