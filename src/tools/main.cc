// srdma: the softrdma command line.
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "nvmf/auth.h"
#include "tools/blk_bench.h"
#include "tools/cli_docs.h"
#include "tools/commands.h"
#include "tools/cq_pool_bench.h"
#include "tools/devnode.h"
#include "tools/nvmf_discover.h"
#include "tools/nvmf_target.h"
#include "tools/perf.h"
#include "tools/run.h"
#include "tools/sim.h"
#include "tools/version.h"

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
  CLI::App app{"softrdma: a user-space RDMA stack with a software HCA", "srdma"};
  app.require_subcommand(1);
  app.set_version_flag("--version", srdma::tools::version_text());

  // srdma info
  auto* info = app.add_subcommand("info", "Show the device attributes, its tables and their occupancy");
  std::vector<std::string> settings;
  info->add_option("-p,--profile", settings, "Profile field as NAME=VALUE (repeatable), e.g. num_mpt=4096");
  std::string info_ip;
  info->add_option("--ip", info_ip, "Open the device on this IPv4 or IPv6 address (RoCEv2) and show its port");

  // srdma demo
  auto* demo = app.add_subcommand("demo", "Register memory and show translations and refusals");

  // srdma cq-pool-bench
  auto* poolbench = app.add_subcommand(
      "cq-pool-bench", "Private CQs against pool CQs: completions per interrupt, interrupts/s, operations/s");
  srdma::tools::CqPoolBenchOptions pbo;
  poolbench->add_option("--pairs", pbo.pairs,
                        "RC QP pairs (thousands run: each device's profile is sized for them, see --profile)")
      ->capture_default_str();
  poolbench->add_option("--depth", pbo.depth, "Messages in flight per pair")->capture_default_str();
  poolbench->add_option("--vectors", pbo.vectors, "Completion vectors per device")->capture_default_str();
  poolbench->add_option("-D,--duration", pbo.seconds, "Seconds per mode")->capture_default_str();
  poolbench->add_option("-s,--size", pbo.size, "Message size in bytes")->capture_default_str();
  poolbench->add_option("--rounds", pbo.rounds, "Alternate the modes this many times and compare medians")
      ->capture_default_str();
  poolbench->add_option("--service-us", pbo.service_us,
                        "0: the target answers from its completion handler; N: a target thread answers in "
                        "batches after N us (storage-like bursts)")
      ->capture_default_str();
  poolbench->add_flag("!--no-dim", pbo.dim, "No adaptive completion-event moderation (an event per completion when armed)");
  std::string pool_mode = "both";
  poolbench->add_option("--mode", pool_mode, "both, or only private or pool (for profiling)")
      ->check(CLI::IsMember({"both", "private", "pool"}))
      ->capture_default_str()
      ->each([&](const std::string& m) {
        pbo.run_private = m != "pool";
        pbo.run_pool = m != "private";
      });
  std::vector<std::string> pool_settings;
  poolbench->add_option("-p,--profile", pool_settings,
                        "Profile field as NAME=VALUE (repeatable) over the sizing from --pairs; a run it cannot hold "
                        "is refused naming the field");
  poolbench->add_option("--json", pbo.json, "Write the rows and the medians as JSON to FILE");

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

  // srdma perf TEST
  auto* perf = app.add_subcommand("perf", "Bandwidth and latency tests in the style of perftest, between two devices");
  srdma::tools::PerfOptions popt;
  std::uint64_t psize = 0, piters = 0;
  double pdur = 0;
  std::uint32_t ptx = 0, pinline = 0;
  std::string pjson;
  perf->add_option("test", popt.test,
                   "write_bw, read_bw, send_bw, write_lat, read_lat, send_lat or atomic_lat")->required();
  auto* o_size = perf->add_option("-s,--size", psize, "Message size in bytes (default 65536 bandwidth, 2 latency)");
  perf->add_flag("-a,--all", popt.all_sizes, "All sizes 2 .. 8 MiB (powers of two)");
  auto* o_iters = perf->add_option("-n,--iters", piters, "Iterations per QP (default 5000 bandwidth, 1000 latency)");
  auto* o_dur = perf->add_option("-D,--duration", pdur, "Run for this many seconds instead of -n");
  perf->add_option("-q,--qp", popt.num_qps, "Number of QP pairs (bandwidth tests)")->capture_default_str();
  auto* o_tx = perf->add_option("-t,--tx-depth", ptx, "Outstanding WRs per QP (default 128 bandwidth, 1 latency)");
  perf->add_option("-Q,--cq-mod", popt.cq_mod, "Signal every Nth WR (CQ moderation)")->capture_default_str();
  auto* o_inline = perf->add_option("-I,--inline-size", pinline, "Inline messages up to this size (default 0 bandwidth, 236 latency)");
  perf->add_flag("-e,--events", popt.use_events, "Wait for completions on a completion channel instead of busy polling");
  perf->add_flag("--verify", popt.verify,
                 "Bandwidth tests: each WR moves a pattern of its own, checked when it completes (one WR in flight "
                 "per QP); a mismatch is an error");
  perf->add_option("--json", pjson, "Write the results as JSON to FILE");
  perf->add_flag("--single-thread", popt.single_thread,
                 "Ping-pong and send_bw: run the server side in the client's thread, alternating");
  perf->add_option("--copy-ms", popt.copy_budget_ms, "Milliseconds spent measuring each copy routine per size")
      ->capture_default_str();
  std::uint32_t pmtu = 0;
  perf->add_option("server", popt.server,
                   "Between processes: the server's IPv4 or IPv6 address, of --ip's family (this side is then "
                   "the client; without it, --ip makes this side the server, which waits for one client)");
  perf->add_option("--ip", popt.ip, "Between processes: this side's device address, IPv4 or IPv6 (RoCEv2, UDP 4791; "
                                    "the side channel's TCP on the same family); default SRDMA_ADDR or 127.0.0.1");
  perf->add_option("-p,--port", popt.port, "The side channel's TCP port")->capture_default_str();
  auto* o_mtu = perf->add_option("--mtu", pmtu, "Path MTU of the QPs: 256, 512, 1024, 2048 or 4096 (default 4096)");
  perf->add_option("-u,--qp-timeout", popt.qp_timeout,
                   "The QPs' local ACK timeout, 4.096 us x 2^N, 0..31 (perftest's -u; each side its own)")
      ->capture_default_str();
  perf->add_option("--impair", popt.impair,
                   "Both devices send through a link that loses, duplicates, reorders or corrupts packets, "
                   "or meets a bottleneck port that queues, tail-drops and marks CE: KEY=VALUE pairs joined by commas, "
                   "any subset of loss=P dup=P reorder=P corrupt=P (P in [0, 1)) seed=N depth=K rate=GBPS "
                   "queue=PACKETS ecn=THRESHOLD");

  auto* cq_pool = sim->add_subcommand(
      "cq-pool", "The shared CQ pool: lines 'get NR_CQE HINT CTX', 'put CQ NR_CQE', 'destroy CQ', "
                 "'resize CQ CQE', 'trim' (CTX: softirq, workqueue, unbound, direct)");
  std::uint32_t pool_vectors = 0, pool_cpus = 0, pool_max_cqe = static_cast<std::uint32_t>(srdma::Profile{}.max_cqe);
  cq_pool->add_option("--vectors", pool_vectors, "Completion vectors of the device")->required();
  auto* cpus_opt = cq_pool->add_option("--cpus", pool_cpus, "Online CPUs (default: --vectors)");
  cq_pool->add_option("--max-cqe", pool_max_cqe, "The device's max_cqe")->capture_default_str();

  // srdma blk bench
  auto* blk = app.add_subcommand("blk", "NVMe-oF-style block storage over softrdma");
  blk->require_subcommand(1);
  auto* blkbench = blk->add_subcommand(
      "bench", "fio-like load on an NVMe-oF target and host in this process: private CQs against the shared CQ pool");
  srdma::tools::BlkBenchOptions bo;
  blkbench->add_option("--controllers", bo.controllers, "Host controllers: in process one subsystem and namespace each; with --connect (default 1) all on --nqn, each its own slice of the namespace")
      ->capture_default_str();
  blkbench->add_option("--queues", bo.queues, "I/O queues per controller (0: one per CPU)")->capture_default_str();
  blkbench->add_option("--qd", bo.qd, "I/Os in flight per queue")->capture_default_str();
  blkbench->add_option("--bs", bo.bs, "Bytes per I/O (a multiple of 4096)")->capture_default_str();
  blkbench->add_option("--rw", bo.rw, "randread, randwrite or randrw")->capture_default_str();
  blkbench->add_option("--rwmix", bo.rwmix, "randrw: percent reads")->capture_default_str();
  blkbench->add_option("--size", bo.size, "Bytes per namespace")->capture_default_str();
  blkbench->add_option("--runtime", bo.runtime, "Seconds per mode")->capture_default_str();
  blkbench->add_option("--ios", bo.ios, "I/Os per mode (instead of --runtime)");
  blkbench->add_flag("--verify", bo.verify, "Check every read against the LBA and generation last written");
  blkbench->add_option("--cq", bo.cq, "private, pool or both")->capture_default_str();
  blkbench->add_option("--reg", bo.reg, "Data registration: frwr or fmr")->capture_default_str();
  blkbench->add_option("--backend", bo.backend, "Namespaces in ram or in file:PATH (io_uring)")->capture_default_str();
  blkbench->add_option("--json", bo.json, "Write the results as JSON to FILE");
  blkbench->add_option("--plot", bo.plot, "Write an SVG chart of IOPS and interrupts/s to FILE");
  blkbench->add_flag("!--no-progress", bo.progress, "No progress line");
  blkbench->add_flag("!--no-dim", bo.dim, "No adaptive completion-event moderation (an event per completion when armed)");
  blkbench->add_option("--inject-corruption", bo.inject_corruption_after,
                       "Testing --verify: corrupt one written block after N I/Os");
  blkbench->add_option("--mtu", bo.mtu,
                       "Path MTU of the NVMe-oF queues' QPs: 256, 512, 1024, 2048 or 4096 (default: the port's active MTU)");
  blkbench->add_option("--impair", bo.impair,
                       "Host and target send through a link that loses, duplicates, reorders or corrupts packets, "
                       "or meets a bottleneck port that queues, tail-drops and marks CE: KEY=VALUE pairs joined by commas, "
                   "any subset of loss=P dup=P reorder=P corrupt=P (P in [0, 1)) seed=N depth=K rate=GBPS "
                   "queue=PACKETS ecn=THRESHOLD");
  blkbench->add_option("--connect", bo.connect,
                       "Run only the host, against the target at ADDR[:PORT] (srdma nvmf target; port 4420 by "
                       "default; IPv6 as [ADDR]:PORT), through the CM on the wire");
  blkbench->add_option("--ip", bo.ip, "With --connect: the host's device address (RoCEv2), of the target's family");
  blkbench->add_option("--nqn", bo.nqn, "With --connect: the subsystem to connect to");
  blkbench->add_option("--hostnqn", bo.hostnqn, "With --connect: the host NQN (default: this machine's)");
  blkbench->add_option("--dhchap-secret", bo.dhchap_secret,
                       "With --connect: authenticate with this DH-HMAC-CHAP secret (DHHC-1:XX:...:)");
  blkbench->add_option("--dhchap-ctrl-secret", bo.dhchap_ctrl_secret,
                       "With --connect: require the target to prove this secret (bidirectional DH-HMAC-CHAP)");
  blkbench->add_option("--reconnect-delay", bo.reconnect_delay,
                       "With --connect: seconds between attempts to connect again after the target went away")
      ->capture_default_str();
  blkbench->add_option("--ctrl-loss-tmo", bo.ctrl_loss_tmo,
                       "With --connect: seconds after a loss until waiting I/O fails")
      ->capture_default_str();

  // srdma nvmf target --ip ADDR [--port 4420] --nqn NQN [--backend ram|file:PATH] [--size BYTES]
  auto* nvmf = app.add_subcommand("nvmf", "NVMe-oF over softrdma between processes");
  nvmf->require_subcommand(1);
  auto* nvmf_target = nvmf->add_subcommand(
      "target", "Serve subsystems to hosts in other processes and on other hosts until SIGINT or SIGTERM");
  nvmf_target->footer(
      "Signals: SIGINT or SIGTERM disconnects the hosts, lets the I/O in flight finish and exits 0; SIGUSR1 logs "
      "the counters (refusals, evictions, authentication); SIGHUP reads the --config file again: subsystems and "
      "allowed hosts are added and removed, the connections that stay allowed go on, and a host no longer "
      "allowed is disconnected and refused from then on. A config that does not parse, or that changes what "
      "only a restart can (ip, port, pool_cqs, the namespaces of a subsystem it keeps), is logged and the "
      "running configuration stays.\n\n"
      "As a service: srdma-nvmf-target.service runs srdma nvmf target --config /etc/srdma/nvmf-target.json "
      "(Type=notify: READY=1 once it listens; systemctl reload sends SIGHUP; systemctl stop, SIGTERM). File "
      "namespaces go under /var/lib/srdma, the one place the service may write.");
  srdma::tools::NvmfTargetOptions to;
  nvmf_target->add_option("--config", to.config, "The whole configuration from a JSON file (see the README)");
  nvmf_target->add_option("--ip", to.ip, "The target device's address, IPv4 or IPv6 (RoCEv2, UDP 4791)");
  nvmf_target->add_option("--port", to.port, "The NVMe-oF port hosts connect to")->capture_default_str();
  nvmf_target->add_option("--nqn", to.nqn, "The subsystem's NQN");
  nvmf_target->add_option("--allow-host", to.allowed_hosts, "A host NQN allowed to connect (repeatable; none: any)");
  nvmf_target->add_option("--dhchap-secret", to.dhchap_secret,
                          "DH-HMAC-CHAP: the allowed hosts must authenticate with this secret (DHHC-1:XX:...:)");
  nvmf_target->add_option("--dhchap-ctrl-secret", to.dhchap_ctrl_secret,
                          "DH-HMAC-CHAP: the target's own secret, for hosts that authenticate it (bidirectional)");
  nvmf_target->add_option("--backend", to.backend, "The namespace in ram or in file:PATH (io_uring)")
      ->capture_default_str();
  nvmf_target->add_option("--size", to.size, "Bytes of the namespace")->capture_default_str();
  nvmf_target->add_flag("!--private-cqs", to.pool_cqs, "One CQ per queue instead of the shared CQ pool");
  // srdma nvmf gen-dhchap-key [--key-length 32|48|64] [--hmac 0..3]
  auto* gen_key = nvmf->add_subcommand("gen-dhchap-key", "Print a new DH-HMAC-CHAP secret, as nvme gen-dhchap-key does");
  std::size_t key_length = 32;
  unsigned key_hmac = 0;
  gen_key->add_option("--key-length", key_length, "Bytes of key: 32, 48 or 64")->capture_default_str();
  gen_key->add_option("--hmac", key_hmac, "The transform the secret names: 0 none, 1 SHA-256, 2 SHA-384, 3 SHA-512")
      ->capture_default_str();
  // srdma nvmf discover --ip ADDR TARGET[:PORT]
  auto* nvmf_discover = nvmf->add_subcommand("discover", "List what a target's discovery controller offers this host");
  srdma::tools::NvmfDiscoverOptions dopt;
  nvmf_discover->add_option("--ip", dopt.ip, "This host's device address (RoCEv2), of the target's family")->required();
  nvmf_discover->add_option("--hostnqn", dopt.hostnqn, "The host NQN to ask as");
  nvmf_discover->add_option("target", dopt.target, "The target's ADDR[:PORT] (4420; IPv6 as [ADDR]:PORT)")->required();

  // srdma devnode [--remove]
  auto* devnode = app.add_subcommand(
      "devnode", "Create (or --remove) /dev/infiniband/srdma0, the node UCX needs to see before it uses a verbs device");
  bool devnode_remove = false;
  devnode->add_flag("--remove", devnode_remove, "Remove the node (only if it is softrdma's), and its directory if empty");
  devnode->footer("UCX keeps a verbs device only if /dev/infiniband/<dev_name> is a character device it can read and "
                  "write; softrdma's libibverbs.so.1 names srdma0 and never creates it. The node has the null "
                  "device's numbers (1:3, mode 0666): nothing opens it, and anything that did would read EOF. "
                  "Needs root.");

  // srdma run [--ip ADDR] -- PROGRAM ARGS...
  auto* run = app.add_subcommand(
      "run", "Run a verbs program on softrdma's libibverbs.so.1: srdma run [--ip ADDR] -- PROGRAM ARGS...");
  std::string run_ip;
  std::vector<std::string> run_argv;
  run->add_option("--ip", run_ip, "The program's devices open on this IPv4 or IPv6 address (RoCEv2): sets SRDMA_ADDR");
  run->footer("What follows -- is the program and its arguments, never srdma's options (without --, "
              "what follows the first word srdma does not know).");
  run->prefix_command();  // the first word srdma does not know starts the program
  // CLI11 does not stop at "--" under prefix_command(): split it off here.
  int cli_argc = argc;
  bool run_dashdash = false;
  if (argc > 1 && std::string_view(argv[1]) == "run")
    for (int i = 2; i < argc; ++i)
      if (std::string_view(argv[i]) == "--") {
        run_argv.assign(argv + i + 1, argv + argc);
        cli_argc = i;
        run_dashdash = true;
        break;
      }

  // After the subcommands: CLI11 gives a subcommand its parent's footer
  // when it is added.
  app.footer(
      "Each subcommand has --help, and a manual page: srdma-info(1), srdma-nvmf-target(1) for srdma nvmf target, "
      "and so on.\n\n"
      "Environment: a device opened without an address of its own (softrdma's libibverbs.so.1, srdma info) "
      "opens on SRDMA_ADDR (RoCEv2 over UDP port SRDMA_PORT, 4791 by default); SRDMA_COPY=avx2|movsb|memcpy "
      "forces the data path's copy routine.\n\n"
      "Exit status: 0; 1 with \"srdma: CODE: reason\" on stderr when the command fails; srdma run exits with "
      "the program's status (127 if it cannot be run).");

  // Build steps (cmake/cli_docs.cmake): the man pages and the completion
  // from this very definition; not options of srdma's.
  if (argc == 3 && std::string_view(argv[1]) == "--generate-man") {
    if (auto r = srdma::tools::write_man_pages(app, argv[2], srdma::tools::version_number()); !r) return fail(r.error());
    return 0;
  }
  if (argc == 2 && std::string_view(argv[1]) == "--generate-bash-completion") {
    std::cout << srdma::tools::bash_completion(app);
    return 0;
  }

  CLI11_PARSE(app, cli_argc, argv);

  if (*run) {
    auto before = run->remaining();
    if (run_dashdash && !before.empty())
      return fail({EINVAL, "'" + before[0] + "' before --; usage: srdma run [--ip ADDR] -- PROGRAM ARGS..."});
    if (!run_dashdash) run_argv = std::move(before);
    auto f = srdma::tools::run_program(run_ip, run_argv);
    if (!f.exec_failed) return fail(f.error);
    std::cerr << "srdma run: " << run_argv[0] << ": " << f.error.reason << '\n';
    return 127;
  }

  if (*devnode) {
    auto r = devnode_remove ? srdma::tools::devnode_remove(std::cout) : srdma::tools::devnode_create(std::cout);
    return r ? 0 : fail(r.error());
  }

  if (*info) {
    srdma::Profile profile;
    for (const auto& s : settings) {
      auto eq = s.find('=');
      auto value = eq == std::string::npos ? std::nullopt : srdma::tools::parse_i64(s.substr(eq + 1));
      if (!value) return fail({EINVAL, "--profile '" + s + "' is not NAME=INTEGER"});
      if (auto r = profile.set(s.substr(0, eq), *value); !r) return fail(r.error());
    }
    if (auto r = srdma::tools::info(profile, std::cout, info_ip); !r) return fail(r.error());
  } else if (*gen_key) {
    auto key = srdma::nvmf::auth::generate_dhchap_secret(key_length, static_cast<std::uint8_t>(std::min(key_hmac, 255u)));
    if (!key) return fail(key.error());
    auto text = srdma::nvmf::auth::format_dhchap_secret(*key);
    if (!text) return fail(text.error());
    std::cout << *text << "\n";
  } else if (*nvmf_discover) {
    if (auto r = srdma::tools::nvmf_discover(dopt, std::cout); !r) return fail(r.error());
  } else if (*nvmf_target) {
    auto config = srdma::tools::nvmf_target_config(to);
    if (!config) return fail(config.error());
    if (auto r = srdma::tools::nvmf_target(*config, std::cout, to.config); !r) return fail(r.error());
  } else if (*blkbench) {
    // Against a target elsewhere: one controller unless asked otherwise.
    if (!bo.connect.empty() && blkbench->get_option("--controllers")->count() == 0) bo.controllers = 1;
    if (auto r = srdma::tools::blk_bench(bo, std::cout); !r) return fail(r.error());
  } else if (*poolbench) {
    for (const auto& setting : pool_settings) {
      const auto eq = setting.find('=');
      auto value = eq == std::string::npos ? std::nullopt : srdma::tools::parse_i64(setting.substr(eq + 1));
      if (!value) return fail({EINVAL, "--profile '" + setting + "' is not NAME=INTEGER"});
      pbo.profile.emplace_back(setting.substr(0, eq), *value);
    }
    if (auto r = srdma::tools::cq_pool_bench(pbo, std::cout); !r) return fail(r.error());
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
  } else if (*perf) {
    if (o_size->count()) popt.size = psize;
    if (o_iters->count()) popt.iterations = piters;
    if (o_dur->count()) popt.duration_s = pdur;
    if (o_tx->count()) popt.tx_depth = ptx;
    if (o_inline->count()) popt.inline_size = pinline;
    if (o_mtu->count()) popt.mtu = pmtu;
    auto report = srdma::tools::run_perf(popt, &std::cout);
    if (!report) return fail(report.error());
    if (!pjson.empty())
      if (auto r = srdma::tools::write_json(*report, pjson); !r) return fail(r.error());
  } else if (*buddy) {
    if (auto ok = srdma::tools::sim_buddy(max_order, std::cin, std::cout); !ok) return fail(ok.error());
  } else if (*cq_pool) {
    if (cpus_opt->count() == 0) pool_cpus = pool_vectors;
    if (auto ok = srdma::tools::sim_cq_pool(pool_vectors, pool_cpus, pool_max_cqe, std::cin, std::cout); !ok)
      return fail(ok.error());
  }
  return 0;
}
