// srdma: the softrdma command line.
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tools/commands.h"
#include "tools/sim.h"

namespace {

using srdma::Error;

int fail(const Error& e) {
  std::cerr << "srdma: " << e.to_string() << '\n';
  return 1;
}

// A 32-bit number from the command line (decimal or 0x hex).
srdma::Result<std::uint32_t> u32_option(const char* name, const std::string& s) {
  auto v = srdma::tools::parse_u64(s);
  if (!v || *v > 0xffffffffu)
    return srdma::make_error(EINVAL, std::string(name) + " '" + s + "' is not a 32-bit number");
  return static_cast<std::uint32_t>(*v);
}

}  // namespace

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  CLI::App app{"softrdma: a user-space RDMA stack with a software HCA"};
  app.require_subcommand(1);

  // srdma info
  auto* info = app.add_subcommand("info", "Show the device attributes, its tables and their occupancy");
  std::vector<std::string> settings;
  info->add_option("-p,--profile", settings, "Profile field as NAME=VALUE (repeatable), e.g. num_mpt=4096");

  // srdma demo
  auto* demo = app.add_subcommand("demo", "Register memory and show translations and refusals");

  // srdma sim bitmap | buddy
  auto* sim = app.add_subcommand("sim", "Replay allocator operations from stdin (one per line)");
  sim->require_subcommand(1);
  auto* bitmap = sim->add_subcommand(
      "bitmap", "The index allocator (mthca_alloc): lines 'alloc' or 'free VALUE'");
  std::string num = "0", reserved = "0", mask = "0xffffffff";
  bitmap->add_option("--num", num, "Entries (a power of two)")->required();
  bitmap->add_option("--reserved", reserved, "Low entries never handed out")->required();
  bitmap->add_option("--mask", mask, "Mask of the rotating high bits")->capture_default_str();
  auto* buddy = sim->add_subcommand(
      "buddy", "The MTT buddy allocator (mthca_buddy): lines 'alloc ORDER', 'free SEG ORDER', 'reserve SEG ORDER'");
  int max_order = 0;
  buddy->add_option("--max-order", max_order, "Order of the whole table (2^K segments)")->required();

  CLI11_PARSE(app, argc, argv);

  if (*info) {
    srdma::Profile profile;
    for (const auto& s : settings) {
      auto eq = s.find('=');
      auto value = eq == std::string::npos ? std::nullopt : srdma::tools::parse_i64(s.substr(eq + 1));
      if (!value) return fail({EINVAL, "--profile '" + s + "' is not NAME=INTEGER"});
      if (auto r = profile.set(s.substr(0, eq), *value); !r) return fail(r.error());
    }
    if (auto r = srdma::tools::info(profile, std::cout); !r) return fail(r.error());
  } else if (*demo) {
    if (auto r = srdma::tools::demo(std::cout); !r) return fail(r.error());
  } else if (*bitmap) {
    auto n = u32_option("--num", num);
    auto r = u32_option("--reserved", reserved);
    auto m = u32_option("--mask", mask);
    if (!n) return fail(n.error());
    if (!r) return fail(r.error());
    if (!m) return fail(m.error());
    if (auto ok = srdma::tools::sim_bitmap(*n, *r, *m, std::cin, std::cout); !ok) return fail(ok.error());
  } else if (*buddy) {
    if (auto ok = srdma::tools::sim_buddy(max_order, std::cin, std::cout); !ok) return fail(ok.error());
  }
  return 0;
}
