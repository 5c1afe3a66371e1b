// `srdma perf`: the front. Two devices in this process (the client and the
// server), connected over the in-process link through the public verbs, run
// by the engine (perf_engine.cc); or one side of a run between processes
// (perf_remote.cc). Everything a loop posts is built once per size and reused.

#include <algorithm>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "tools/link_options.h"
#include "tools/perf.h"
#include "tools/perf_side.h"

namespace srdma::tools {

namespace perf {
namespace {

struct Pair {
  std::unique_ptr<Side> client, server;
};

Result<Pair> open_pair(const PerfSettings& s) {
  std::size_t half = 0;
  const std::size_t bytes = side_buffer_bytes(s, &half);
  Pair p;
  auto c = open_side(s, "srdma0", bytes);
  if (!c) return std::unexpected(c.error());
  auto v = open_side(s, "srdma1", bytes);
  if (!v) return std::unexpected(v.error());
  p.client = std::move(*c);
  p.server = std::move(*v);
  p.client->half = p.server->half = half;
  for (std::uint32_t i = 0; i < s.num_qps; ++i) {
    auto& cq = *p.client->qps[i];
    auto& sq = *p.server->qps[i];
    if (auto r = bring_up(cq, p.client->psn[i], p.server->dev.address(), sq.qp_num(), p.server->psn[i], s.mtu, s.qp_timeout);
        !r)
      return std::unexpected(r.error());
    if (auto r = bring_up(sq, p.server->psn[i], p.client->dev.address(), cq.qp_num(), p.client->psn[i], s.mtu, s.qp_timeout);
        !r)
      return std::unexpected(r.error());
  }
  return p;
}

}  // namespace
}  // namespace perf


// ---------------------------------------------------------------------------

Result<PerfReport> run_perf(const PerfOptions& options, std::ostream* live) {
  using namespace perf;
  auto settings = resolve_perf_options(options);
  if (!settings) return std::unexpected(settings.error());
  const PerfSettings& s = *settings;
  if (!options.ip.empty() || !options.server.empty()) {
    if (s.single_thread) return make_error(EINVAL, "--single-thread: the two sides are in two processes");
    if (s.before_verify) return make_error(EINVAL, "before_verify: the destination is in another process");
    return options.server.empty() ? run_perf_server(s, options, live) : run_perf_client(s, options, live);
  }
  auto pair = open_pair(s);
  if (!pair) return std::unexpected(pair.error());
  Pair& p = *pair;

  PerfReport report;
  report.settings = s;
  report.device = p.client->dev.name();
  report.loop_name = copy_vector_loop_name();
  report.local = PerfEndpoint{p.client->qps[0]->qp_num(), p.client->psn[0], p.client->mrs[0].rkey(), p.client->addr(0)};
  report.remote = PerfEndpoint{p.server->qps[0]->qp_num(), p.server->psn[0], p.server->mrs[0].rkey(), p.server->addr(0)};
  if (live) print_header(report, *live);

  const std::uint64_t max_size = *std::max_element(s.sizes.begin(), s.sizes.end());
  if (is_bandwidth(s.test)) {
    Receives rx;
    if (s.test == PerfTest::kSendBw) {
      rx.build(*p.server, 0, max_size);
      for (std::uint32_t i = 0; i < s.num_qps; ++i)
        for (std::uint32_t j = 0; j < s.rx_depth; ++j)
          if (auto r = rx.post(*p.server, i); !r) return std::unexpected(r.error());
    }
    CopyBuffers copy;
    auto buffers = CopyBuffers::of(max_size);
    if (!buffers) return std::unexpected(buffers.error());
    copy = std::move(*buffers);
    for (auto size : s.sizes) {
      auto row = run_bw(*p.client, PeerBuffers::of(*p.server), p.server.get(), s, size, rx, copy);
      if (!row) return std::unexpected(row.error());
      report.bw.push_back(*row);
      if (live) print_row(report, report.bw.size() - 1, *live);
    }
  } else {
    Receives crx, srx;
    Endpoint a, b;
    a.side = p.client.get();
    b.side = p.server.get();
    a.name = "client";
    b.name = "server";
    a.cq_mod = b.cq_mod = s.cq_mod;
    if (s.test == PerfTest::kSendLat) {
      crx.build(*p.client, p.client->half, max_size);
      srx.build(*p.server, p.server->half, max_size);
      for (std::uint32_t j = 0; j < s.rx_depth; ++j) {
        if (auto r = crx.post(*p.client, 0); !r) return std::unexpected(r.error());
        if (auto r = srx.post(*p.server, 0); !r) return std::unexpected(r.error());
      }
      a.rx = &crx;
      b.rx = &srx;
    }
    for (auto size : s.sizes) {
      auto row = run_lat(*p.client, PeerBuffers::of(*p.server), p.server.get(), s, size, a, b);
      if (!row) return std::unexpected(row.error());
      report.lat.push_back(*row);
      if (live) print_row(report, report.lat.size() - 1, *live);
    }
  }
  report.transport = {device_transport("client", p.client->dev), device_transport("server", p.server->dev)};
  if (live) print_footer(report, *live);
  return report;
}

}  // namespace srdma::tools
