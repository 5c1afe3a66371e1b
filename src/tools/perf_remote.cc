// `srdma perf` between processes: the server and the client of perftest,
// each with its own RoCEv2 device, talking over a TCP side channel
// (side_channel.h).
//
// The exchange, in order (every message a JSON object):
//   client -> server  hello: the test and its parameters (the client's
//                     settings rule, as perftest's client's do), the MTU,
//                     and per QP its QPN, PSN, rkey and buffer address,
//                     with the device's GID
//   server -> client  the same of the server's QPs, now at RTS, and the
//                     path MTU both ports carry; or {"error": why}
//   per size: client "run" -> server "ready" (its receives or its side of
//             the ping-pong going) -> the client measures -> client "end"
//             (the WRs it posted per QP, its row) -> server "done" (all
//             receives in, --verify's checks passed) or {"error": why}
//   client "bye" -> server: its transport counters.
// Whatever the peer sends is checked before use: the hello's parameters go
// through the same validation as a command line.
#include <arpa/inet.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <limits>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include "srdma/net.h"
#include "tools/address_option.h"
#include "tools/link_options.h"
#include "tools/perf.h"
#include "tools/perf_side.h"
#include "tools/side_channel.h"
#include "tools/transport_report.h"

namespace srdma::tools {
namespace {

using namespace perf;
using nlohmann::json;

constexpr int kHelloTimeoutMs = 30'000;  // a client that connects and says nothing
constexpr int kReplyTimeoutMs = 30'000;  // the server's answers outside a run
// After "end": the server drains what is still in flight; the transport
// gives up on a dead peer well within this.
constexpr int kDoneTimeoutMs = 60'000;
constexpr std::uint32_t kVerifySlots = 4;  // send_bw --verify: receive buffers per QP

// The peer's device from the GID it sent: of this device's family (an
// IPv4 device's peers are IPv4-mapped), and then a link address (an IPv6
// one enters the process's table: the QPs' AV names it).
Result<std::uint64_t> peer_address_of_gid(const std::string& g, std::uint64_t mine) {
  Gid gid{};
  if (inet_pton(AF_INET6, g.c_str(), gid.data()) != 1)
    return make_error(EPROTO, fmt::format("GID '{}' is not IPv6 text", g));
  if (is_ipv4_mapped(gid) != is_roce_address(mine))
    return make_error(EPROTO, fmt::format("the peer's GID {} is {}, this device's ({}) is not", g,
                                          is_ipv4_mapped(gid) ? "IPv4-mapped" : "IPv6", gid_str(mine)));
  auto a = roce_address_of_gid(gid);
  if (!a) return make_error(a.error().code == EINVAL ? EPROTO : a.error().code,
                            fmt::format("GID '{}': {}", g, a.error().reason));
  return *a;
}

// A field of the peer's message, of the type asked for, or EPROTO.
template <class T>
Result<T> field(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end()) return make_error(EPROTO, fmt::format("the peer's message has no '{}'", key));
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return make_error(EPROTO, fmt::format("'{}' is not a boolean", key));
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return make_error(EPROTO, fmt::format("'{}' is not a string", key));
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number()) return make_error(EPROTO, fmt::format("'{}' is not a number", key));
  } else {
    if (!it->is_number_unsigned() || it->get<std::uint64_t>() > std::numeric_limits<T>::max())
      return make_error(EPROTO, fmt::format("'{}' is not a count that fits {} bits", key, 8 * sizeof(T)));
  }
  return it->get<T>();
}

// The peer's error message, if this is one.
std::optional<Error> peer_error(const json& j, const char* who) {
  const auto it = j.find("error");
  if (it == j.end()) return std::nullopt;
  return Error{ECONNREFUSED, fmt::format("the {} refused: {}", who, it->is_string() ? it->get<std::string>() : "?")};
}

json qps_json(const Side& side) {
  json a = json::array();
  for (std::size_t i = 0; i < side.qps.size(); ++i)
    a.push_back({{"qpn", side.qps[i]->qp_num()},
                 {"psn", side.psn[i]},
                 {"rkey", side.mrs[i].rkey()},
                 {"addr", side.addr(i)}});
  return a;
}

// The peer's QPs from its message: exactly `n` of them, every field checked.
Result<PeerBuffers> peer_of(const json& j, std::uint32_t n, std::uint64_t mine) {
  auto gid = field<std::string>(j, "gid");
  if (!gid) return std::unexpected(gid.error());
  auto dev_addr = peer_address_of_gid(*gid, mine);
  if (!dev_addr) return std::unexpected(dev_addr.error());
  auto half = field<std::uint64_t>(j, "half");
  if (!half) return std::unexpected(half.error());
  const auto it = j.find("qps");
  if (it == j.end() || !it->is_array() || it->size() != n)
    return make_error(EPROTO, fmt::format("the peer's message must list {} QPs", n));
  PeerBuffers p;
  p.dev_addr = *dev_addr;
  p.half = *half;
  for (const json& q : *it) {
    if (!q.is_object()) return make_error(EPROTO, "a QP entry is not an object");
    auto qpn = field<std::uint32_t>(q, "qpn");
    auto psn = field<std::uint32_t>(q, "psn");
    auto rkey = field<std::uint32_t>(q, "rkey");
    auto addr = field<std::uint64_t>(q, "addr");
    if (!qpn || !psn || !rkey || !addr) return make_error(EPROTO, "a QP entry lacks qpn, psn, rkey or addr");
    if (*qpn == 0 || *qpn > 0xffffff || *psn > 0xffffff)
      return make_error(EPROTO, fmt::format("QPN {:#x} / PSN {:#x}: 24-bit values (QPN not 0)", *qpn, *psn));
    p.qpn.push_back(*qpn);
    p.psn.push_back(*psn);
    p.rkey.push_back(*rkey);
    p.addr.push_back(*addr);
  }
  return p;
}

Result<void> connect_qps(Side& me, const PeerBuffers& peer, std::uint32_t mtu, std::uint8_t timeout) {
  for (std::size_t i = 0; i < me.qps.size(); ++i)
    if (auto r = bring_up(*me.qps[i], me.psn[i], peer.dev_addr, peer.qpn[i], peer.psn[i], mtu, timeout); !r)
      return std::unexpected(r.error());
  return {};
}

json row_json(const BwRow& b) {
  return {{"bytes", b.bytes},           {"iterations", b.iterations},   {"bw_peak_mib_s", b.bw_peak_mib_s},
          {"bw_avg_mib_s", b.bw_avg_mib_s}, {"msg_rate_mpps", b.msg_rate_mpps}, {"memcpy_mib_s", b.memcpy_mib_s},
          {"loop_mib_s", b.loop_mib_s}, {"copy_bw_mib_s", b.copy_bw_mib_s}, {"bw_over_copy", b.bw_over_copy}};
}
json row_json(const LatRow& l) {
  return {{"bytes", l.bytes},         {"iterations", l.iterations},     {"t_min_us", l.t_min_us},
          {"t_max_us", l.t_max_us},   {"t_typical_us", l.t_typical_us}, {"t_avg_us", l.t_avg_us},
          {"t_stdev_us", l.t_stdev_us}, {"t_p50_us", l.t_p50_us},       {"t_p99_us", l.t_p99_us},
          {"t_p999_us", l.t_p999_us}};
}
double num(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0;
}
BwRow bw_row_of(const json& j) {
  BwRow b;
  b.bytes = static_cast<std::uint64_t>(num(j, "bytes"));
  b.iterations = static_cast<std::uint64_t>(num(j, "iterations"));
  b.bw_peak_mib_s = num(j, "bw_peak_mib_s");
  b.bw_avg_mib_s = num(j, "bw_avg_mib_s");
  b.msg_rate_mpps = num(j, "msg_rate_mpps");
  b.memcpy_mib_s = num(j, "memcpy_mib_s");
  b.loop_mib_s = num(j, "loop_mib_s");
  b.copy_bw_mib_s = num(j, "copy_bw_mib_s");
  b.bw_over_copy = num(j, "bw_over_copy");
  return b;
}
LatRow lat_row_of(const json& j) {
  LatRow l;
  l.bytes = static_cast<std::uint64_t>(num(j, "bytes"));
  l.iterations = static_cast<std::uint64_t>(num(j, "iterations"));
  l.t_min_us = num(j, "t_min_us");
  l.t_max_us = num(j, "t_max_us");
  l.t_typical_us = num(j, "t_typical_us");
  l.t_avg_us = num(j, "t_avg_us");
  l.t_stdev_us = num(j, "t_stdev_us");
  l.t_p50_us = num(j, "t_p50_us");
  l.t_p99_us = num(j, "t_p99_us");
  l.t_p999_us = num(j, "t_p999_us");
  return l;
}

Result<NetConfig> net_for(const std::string& ip) {
  auto net = NetConfig::from_env();  // SRDMA_ICRC, SRDMA_BUSY_POLL_US ... apply here too
  if (!net) return std::unexpected(net.error());
  if (!ip.empty()) {
    auto a = parse_ip_option("--ip", ip);
    if (!a) return std::unexpected(a.error());
    net->ip = ip_str(*a);  // ::ffff:a.b.c.d is a.b.c.d
  } else if (auto a = parse_ip(net->ip)) {
    net->ip = ip_str(*a);
  }
  return net;
}

// The peer's settings from its hello, through the command line's checks.
// The server keeps its own link options (--impair, -e).
Result<PerfSettings> settings_of_hello(const json& h, const PerfSettings& mine, const PerfOptions& my_opts) {
  auto test = field<std::string>(h, "test");
  if (!test) return std::unexpected(test.error());
  if (*test != perf_test_name(mine.test))
    return make_error(EINVAL, fmt::format("the server runs {}, the client asked for {}", perf_test_name(mine.test), *test));
  const auto sizes = h.find("sizes");
  if (sizes == h.end() || !sizes->is_array() || sizes->empty() || sizes->size() > 64)
    return make_error(EPROTO, "the hello must list 1 .. 64 sizes");
  PerfOptions o;
  o.test = *test;
  std::vector<std::uint64_t> want;
  for (const json& z : *sizes) {
    if (!z.is_number_unsigned()) return make_error(EPROTO, "a size is not a count");
    want.push_back(z.get<std::uint64_t>());
  }
  if (want.size() == 1)
    o.size = want[0];
  else
    o.all_sizes = true;
  if ((my_opts.size || my_opts.all_sizes) && want != mine.sizes)
    return make_error(EINVAL, fmt::format("the server was given size(s) {}, the client {}", fmt::join(mine.sizes, ","),
                                          fmt::join(want, ",")));
  auto iters = field<std::uint64_t>(h, "iterations");
  auto secs = field<double>(h, "duration_s");
  auto qps = field<std::uint32_t>(h, "num_qps");
  auto tx = field<std::uint32_t>(h, "tx_depth");
  auto mod = field<std::uint32_t>(h, "cq_mod");
  auto inl = field<std::uint32_t>(h, "inline_size");
  auto verify = field<bool>(h, "verify");
  if (!iters || !secs || !qps || !tx || !mod || !inl || !verify)
    return make_error(EPROTO, "the hello lacks a parameter (iterations, duration_s, num_qps, tx_depth, cq_mod, "
                              "inline_size, verify)");
  if (*secs > 0)
    o.duration_s = *secs;
  else
    o.iterations = *iters;
  o.num_qps = *qps;
  o.tx_depth = *tx;
  o.cq_mod = *mod;
  o.inline_size = *inl;
  o.verify = *verify;
  o.use_events = my_opts.use_events;
  o.impair = my_opts.impair;
  o.copy_budget_ms = 0;  // the client measures the copy
  auto s = resolve_perf_options(o);
  if (!s) return make_error(EINVAL, fmt::format("the client's parameters: {}", s.error().reason));
  if (want != s->sizes)
    return make_error(EPROTO, "the hello's sizes are neither one size nor the -a list");
  if (s->test == PerfTest::kSendBw && s->verify) s->rx_depth = kVerifySlots;
  return s;
}

// Watches the side channel while a run is on: the peer has nothing to say
// until the run ends, so anything readable means it is gone (or broke the
// protocol): `ctl` is told to stop.
class PeerWatch {
 public:
  PeerWatch(const SideChannel& ch, Control& ctl)
      : thread_([this, fd = ch.fd(), &ctl] {
          while (!done_.load(std::memory_order_acquire)) {
            pollfd p{fd, POLLIN, 0};
            if (::poll(&p, 1, 50) > 0) {
              gone_.store(true, std::memory_order_release);
              int expected = 0;
              ctl.state.compare_exchange_strong(expected, 2);
              return;
            }
          }
        }) {}
  ~PeerWatch() {
    done_.store(true, std::memory_order_release);
    thread_.join();
  }
  bool gone() const { return gone_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> done_{false}, gone_{false};
  std::thread thread_;
};

// ---------------------------------------------------------------------------
// The server

// The server's share of one size.
class ServerRun {
 public:
  ServerRun(Side& side, const PeerBuffers& client, const PerfSettings& s, Endpoint& pong)
      : side_(side), client_(client), s_(s), pong_(pong) {}

  // Starts what this size needs: the receive drain (send_bw) or the
  // answering side of a ping-pong (write_lat, send_lat).
  void start(std::uint64_t size) {
    size_ = size;
    ctl_.state.store(0);
    expected_.store(std::numeric_limits<std::uint64_t>::max());
    received_ = 0;
    std::fill(per_qp_.begin(), per_qp_.end(), 0);
    per_qp_.resize(s_.num_qps, 0);
    error_.reset();
    if (s_.test == PerfTest::kSendBw) {
      worker_ = std::thread([this] { drain(); });
    } else if (s_.test == PerfTest::kWriteLat || s_.test == PerfTest::kSendLat) {
      setup_endpoint(pong_, side_, client_, opcode_of(s_.test), size, size <= s_.inline_size ? SEND_INLINE : 0u);
      worker_ = std::thread([this] { answer(); });
    }
  }
  // The client posted `total` WRs: waits for the rest to arrive (send_bw)
  // or stops the ping-pong. The run's error, if any.
  std::optional<Error> finish(std::uint64_t total) {
    drain_deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(kDoneTimeoutMs);
    expected_.store(total, std::memory_order_release);
    if (s_.test != PerfTest::kSendBw) ctl_.state.store(1);
    if (worker_.joinable()) worker_.join();
    return error_;
  }
  // The client is gone: stop whatever runs.
  void abort() {
    ctl_.state.store(2);
    expected_.store(0);
    if (worker_.joinable()) worker_.join();
  }
  bool failed() const { return failed_.load(std::memory_order_acquire); }

  // Receives for send_bw: kVerifySlots slots per QP with --verify (each
  // message checked where it landed), else all on the buffer's start.
  Result<void> post_receives(std::uint64_t max_size) {
    slot_bytes_ = s_.verify ? round_up(max_size, 64) : 0;
    for (std::uint32_t i = 0; i < s_.num_qps; ++i)
      for (std::uint32_t j = 0; j < s_.rx_depth; ++j)
        if (auto r = post_receive(i, s_.verify ? j : 0, max_size); !r) return r;
    max_size_ = max_size;
    return {};
  }

 private:
  Result<void> post_receive(std::uint32_t qp, std::uint32_t slot, std::uint64_t length) {
    Sge sge{side_.addr(qp, slot * slot_bytes_), static_cast<std::uint32_t>(length), side_.mrs[qp].lkey()};
    RecvWr wr;
    wr.wr_id = (std::uint64_t{slot} << 16) | qp;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    auto r = side_.qps[qp]->post_recv(wr);
    if (!r) return make_error(r.error().code, "post_recv: " + r.error().reason);
    return {};
  }

  void fail(Error e) {
    if (!error_) error_ = std::move(e);
    failed_.store(true, std::memory_order_release);
  }

  void drain() {
    Wc wc[32];
    while (received_ < expected_.load(std::memory_order_acquire)) {
      if (ctl_.state.load(std::memory_order_relaxed) == 2) return;
      // Once the client has said how many it sent, what has not come by
      // the deadline is not coming (its QPs would have failed by then).
      if (expected_.load(std::memory_order_acquire) != std::numeric_limits<std::uint64_t>::max() &&
          std::chrono::steady_clock::now() > drain_deadline_)
        return fail(Error{ETIMEDOUT, fmt::format("send_bw: {} of {} messages arrived", received_,
                                                 expected_.load(std::memory_order_relaxed))});
      const int n = side_.recv_w.next(wc);
      if (n < 0) return fail(side_.recv_w.error());
      for (int j = 0; j < n; ++j) {
        if (wc[j].status != WcStatus::kSuccess) return fail(wc_error(wc[j], "server"));
        const auto qp = static_cast<std::uint32_t>(wc[j].wr_id & 0xffff);
        const auto slot = static_cast<std::uint32_t>(wc[j].wr_id >> 16);
        if (qp >= s_.num_qps) return fail(Error{EIO, "a receive completion for no QP of ours"});
        const std::uint64_t k = ++per_qp_[qp];
        if (s_.verify) {
          if (wc[j].byte_len != size_)
            return fail(Error{EIO, fmt::format("verify: QP {} message {}: {} bytes, expected {}", qp, k,
                                               wc[j].byte_len, size_)});
          if (auto r = check_pattern(side_.buf(qp) + slot * slot_bytes_, size_, k, qp); !r) return fail(r.error());
        }
        if (auto r = post_receive(qp, slot, max_size_); !r) return fail(r.error());
      }
      received_ += static_cast<std::uint64_t>(n);
    }
  }

  void answer() {
    const bool timed = s_.duration_s > 0;
    for (std::uint64_t k = 1; timed || k <= s_.iterations; ++k) {
      auto r = pong_.receive(k, ctl_);
      if (r && *r) r = pong_.send(k, ctl_);
      if (!r) return fail(r.error());
      if (!*r) return;  // told to stop
    }
  }

  Side& side_;
  const PeerBuffers& client_;
  const PerfSettings& s_;
  Endpoint& pong_;
  std::uint64_t size_ = 0, max_size_ = 0, received_ = 0;
  std::size_t slot_bytes_ = 0;
  std::vector<std::uint64_t> per_qp_;
  std::atomic<std::uint64_t> expected_{0};
  std::chrono::steady_clock::time_point drain_deadline_{};  // written before expected_ (release)
  Control ctl_;
  std::thread worker_;
  std::optional<Error> error_;
  std::atomic<bool> failed_{false};
};

}  // namespace

Result<PerfReport> run_perf_server(const PerfSettings& mine, const PerfOptions& o, std::ostream* live) {
  auto net = net_for(o.ip);
  if (!net) return std::unexpected(net.error());
  auto listener = SideListener::listen(net->ip, o.port);
  if (!listener) return std::unexpected(listener.error());
  // The device before the client comes: a bind that fails is the server's
  // to report, and an open device waits idle (its receive thread asleep).
  auto dev = Device::open(side_profile(), "srdma0", *net);
  if (!dev) return std::unexpected(dev.error());
  const std::uint32_t active = dev->query_port().active_mtu;
  auto own_mtu = path_mtu_option(o.mtu, active);
  if (!own_mtu) return std::unexpected(own_mtu.error());
  const IpAddress my_ip = parse_ip(net->ip).value();
  if (live) {
    fmt::print(*live, "waiting for a client on {}\n", host_port_str(my_ip, o.port));
    live->flush();
  }
  auto ch = listener->accept(-1);
  if (!ch) return std::unexpected(ch.error());
  auto hello = ch->receive(kHelloTimeoutMs);
  if (!hello) return std::unexpected(hello.error());
  auto refuse = [&](Error e) -> Result<PerfReport> {
    (void)ch->send({{"error", e.reason}});
    return std::unexpected(std::move(e));
  };
  auto s = settings_of_hello(*hello, mine, o);
  if (!s) return refuse(s.error());
  auto client_mtu = field<std::uint32_t>(*hello, "mtu");
  if (!client_mtu) return refuse(client_mtu.error());
  if (auto r = check_mtu_option(*client_mtu); !r) return refuse(r.error());
  const std::uint32_t mtu = std::min(*client_mtu, *own_mtu);
  s->mtu = mtu;
  auto client = peer_of(*hello, s->num_qps, dev->address());
  if (!client) return refuse(client.error());

  std::size_t half = 0;
  std::size_t bytes = side_buffer_bytes(*s, &half);
  const std::uint64_t max_size = *std::max_element(s->sizes.begin(), s->sizes.end());
  if (s->test == PerfTest::kSendBw && s->verify) bytes = kVerifySlots * round_up(max_size, 64);
  if (s->verify && s->test != PerfTest::kSendBw) bytes = 2 * round_up(max_size, 64);
  auto side = open_side(*s, "srdma0", bytes, &*net, 0, &*dev);
  if (!side) return refuse(side.error());
  Side& me = **side;
  me.half = half;
  if (auto r = connect_qps(me, *client, mtu, mine.qp_timeout); !r) return refuse(r.error());  // the server's own

  Endpoint pong;
  pong.side = &me;
  pong.name = "server";
  pong.cq_mod = s->cq_mod;
  Receives pong_rx;
  ServerRun run(me, *client, *s, pong);
  if (s->test == PerfTest::kSendBw) {
    if (auto r = run.post_receives(max_size); !r) return refuse(r.error());
  } else if (s->test == PerfTest::kSendLat) {
    pong_rx.build(me, half, max_size);
    for (std::uint32_t j = 0; j < s->rx_depth; ++j)
      if (auto r = pong_rx.post(me, 0); !r) return refuse(r.error());
    pong.rx = &pong_rx;
  }
  if (auto r = ch->send({{"gid", gid_str(me.dev.address())},
                         {"half", half},
                         {"mtu", mtu},
                         {"qps", qps_json(me)}});
      !r)
    return std::unexpected(r.error());

  PerfReport report;
  report.settings = *s;
  report.role = "server";
  report.device = me.dev.name();
  report.loop_name = copy_vector_loop_name();
  report.link = fmt::format("RoCEv2 (UDP {}) {} <- {}", net->port, net->ip, ip_str(ip_of_roce_address(client->dev_addr)));
  report.exchange = fmt::format("TCP side channel ({})", host_port_str(my_ip, o.port));
  report.active_mtu = active;
  report.local_gid = gid_str(me.dev.address());
  report.remote_gid = gid_str(client->dev_addr);
  report.local = PerfEndpoint{me.qps[0]->qp_num(), me.psn[0], me.mrs[0].rkey(), me.addr(0)};
  report.remote = PerfEndpoint{client->qpn[0], client->psn[0], client->rkey[0], client->addr[0]};
  if (live) print_header(report, *live);

  for (;;) {
    auto m = ch->receive(-1);
    if (!m) return std::unexpected(Error{m.error().code, fmt::format("the client went away: {}", m.error().reason)});
    if (m->contains("bye")) {
      report.transport = {device_transport("server", me.dev)};
      (void)ch->send({{"transport", to_json(report.transport[0].counters)},
                      {"impair", to_json(report.transport[0].impair)},
                      {"wire", to_json(report.transport)["server"].value("wire", json::object())}});
      break;
    }
    auto size = field<std::uint64_t>(*m, "run");
    if (!size || std::find(s->sizes.begin(), s->sizes.end(), *size) == s->sizes.end())
      return refuse(Error{EPROTO, "expected 'run' with one of the hello's sizes, or 'bye'"});
    run.start(*size);
    if (auto r = ch->send({{"ready", true}}); !r) {
      run.abort();
      return std::unexpected(r.error());
    }
    // The run: the client says "end" when it is done; meanwhile a failure
    // of ours ends it early (the client's QPs then time out).
    Result<json> end;
    for (;;) {
      end = ch->receive(100);
      if (end || end.error().code != ETIMEDOUT) break;
      if (run.failed()) {
        run.abort();
        return std::unexpected(*run.finish(0));
      }
    }
    if (!end) {
      run.abort();
      return std::unexpected(Error{end.error().code, fmt::format("the client went away during the {}-byte run: {}",
                                                                 *size, end.error().reason)});
    }
    std::uint64_t total = 0;
    const auto posted = end->find("posted");
    bool counts_ok = posted != end->end() && posted->is_array() && posted->size() == s->num_qps;
    for (std::size_t i = 0; counts_ok && i < posted->size(); ++i) {
      const json& n = (*posted)[i];
      // A count the run cannot have posted would keep the drain waiting.
      counts_ok = n.is_number_unsigned() && n.get<std::uint64_t>() <= (s->duration_s > 0 ? (1ull << 40) : s->iterations);
      if (counts_ok) total += n.get<std::uint64_t>();
    }
    if (!counts_ok) {
      run.abort();
      return refuse(Error{EPROTO, "'end' must list, per QP, the WRs it posted (at most the iterations)"});
    }
    if (auto e = run.finish(total)) {
      (void)ch->send({{"error", e->reason}});
      return std::unexpected(*e);
    }
    if (auto r = ch->send({{"done", true}}); !r) return std::unexpected(r.error());
    if (const auto row = end->find("row"); row != end->end() && row->is_object()) {
      if (is_bandwidth(s->test))
        report.bw.push_back(bw_row_of(*row));
      else
        report.lat.push_back(lat_row_of(*row));
      if (live) print_row(report, is_bandwidth(s->test) ? report.bw.size() - 1 : report.lat.size() - 1, *live);
    }
  }
  if (live) print_footer(report, *live);
  return report;
}

// ---------------------------------------------------------------------------
// The client

namespace {

// A run that failed (a completion error, a peer gone): its error, after the
// device's transport counters on stderr, which say how it got there
// (timeouts, retransmissions, drops and why) where the report that would
// have carried them is not printed.
std::unexpected<Error> failed_run(const Side& me, const PerfSettings& s, const Error& e) {
  std::cerr << "transport counters at the failure:\n";
  print_transport({device_transport("client", me.dev)}, s.impair, std::cerr, "  ");
  return std::unexpected(e);
}

}  // namespace

Result<PerfReport> run_perf_client(const PerfSettings& given, const PerfOptions& o, std::ostream* live) {
  auto net = net_for(o.ip);
  if (!net) return std::unexpected(net.error());
  auto server_ip = parse_ip_option("the server", o.server);
  if (!server_ip) return std::unexpected(server_ip.error());
  if (auto r = check_same_family("the server", *server_ip, "this side's device (--ip)", parse_ip(net->ip).value()); !r)
    return std::unexpected(r.error());
  const std::string server_str = ip_str(*server_ip);  // ::ffff:a.b.c.d is a.b.c.d
  PerfSettings s = given;
  const std::uint64_t max_size = *std::max_element(s.sizes.begin(), s.sizes.end());
  std::size_t half = 0;
  std::size_t bytes = side_buffer_bytes(s, &half);
  const bool read_back = s.verify && s.test != PerfTest::kSendBw;  // see run_bw
  if (read_back) bytes = 2 * round_up(max_size, 64);
  auto side = open_side(s, "srdma0", bytes, &*net, read_back ? 1 : 0);
  if (!side) return std::unexpected(side.error());
  Side& me = **side;
  me.half = half;
  const std::uint32_t active = me.dev.query_port().active_mtu;
  auto mtu = path_mtu_option(o.mtu, active);
  if (!mtu) return std::unexpected(mtu.error());

  auto ch = SideChannel::connect(server_str, o.port, 10'000);
  if (!ch) return std::unexpected(ch.error());
  json sizes = json::array();
  for (auto z : s.sizes) sizes.push_back(z);
  if (auto r = ch->send({{"srdma_perf", 1},
                         {"test", std::string(perf_test_name(s.test))},
                         {"sizes", sizes},
                         {"iterations", s.iterations},
                         {"duration_s", s.duration_s},
                         {"num_qps", s.num_qps},
                         {"tx_depth", s.tx_depth},
                         {"cq_mod", s.cq_mod},
                         {"inline_size", s.inline_size},
                         {"verify", s.verify},
                         {"mtu", *mtu},
                         {"gid", gid_str(me.dev.address())},
                         {"half", half},
                         {"qps", qps_json(me)}});
      !r)
    return std::unexpected(r.error());
  auto reply = ch->receive(kReplyTimeoutMs);
  if (!reply) return std::unexpected(reply.error());
  if (auto e = peer_error(*reply, "server")) return std::unexpected(*e);
  auto server = peer_of(*reply, s.num_qps, me.dev.address());
  if (!server) return std::unexpected(server.error());
  auto server_mtu = field<std::uint32_t>(*reply, "mtu");
  if (!server_mtu) return std::unexpected(server_mtu.error());
  if (auto r = check_mtu_option(*server_mtu); !r || *server_mtu > *mtu)
    return make_error(EPROTO, fmt::format("the server chose path MTU {} (we offered {})", *server_mtu, *mtu));
  s.mtu = *server_mtu;
  if (auto r = connect_qps(me, *server, s.mtu, s.qp_timeout); !r) return std::unexpected(r.error());

  PerfReport report;
  report.settings = s;
  report.device = me.dev.name();
  report.loop_name = copy_vector_loop_name();
  report.link = fmt::format("RoCEv2 (UDP {}) {} -> {}", net->port, net->ip, server_str);
  report.exchange = fmt::format("TCP side channel ({})", host_port_str(*server_ip, o.port));
  report.active_mtu = active;
  report.local_gid = gid_str(me.dev.address());
  report.remote_gid = gid_str(server->dev_addr);
  report.local = PerfEndpoint{me.qps[0]->qp_num(), me.psn[0], me.mrs[0].rkey(), me.addr(0)};
  report.remote = PerfEndpoint{server->qpn[0], server->psn[0], server->rkey[0], server->addr[0]};
  if (live) print_header(report, *live);

  Receives rx;  // send_bw: the server's; send_lat: ours
  CopyBuffers copy;
  Endpoint a, b;
  a.side = &me;
  a.name = "client";
  a.cq_mod = s.cq_mod;
  if (is_bandwidth(s.test)) {
    auto buffers = CopyBuffers::of(max_size);
    if (!buffers) return std::unexpected(buffers.error());
    copy = std::move(*buffers);
  } else if (s.test == PerfTest::kSendLat) {
    rx.build(me, half, max_size);
    for (std::uint32_t j = 0; j < s.rx_depth; ++j)
      if (auto r = rx.post(me, 0); !r) return std::unexpected(r.error());
    a.rx = &rx;
  }

  for (auto size : s.sizes) {
    if (auto r = ch->send({{"run", size}}); !r) return std::unexpected(r.error());
    auto ready = ch->receive(kReplyTimeoutMs);
    if (!ready) return std::unexpected(ready.error());
    if (auto e = peer_error(*ready, "server")) return std::unexpected(*e);
    json row;
    std::vector<std::uint64_t> posted(s.num_qps, 0);
    if (is_bandwidth(s.test)) {
      auto r = run_bw(me, *server, nullptr, s, size, rx, copy, &posted);
      if (!r) return failed_run(me, s, r.error());
      report.bw.push_back(*r);
      row = row_json(*r);
    } else {
      Control ctl;
      std::optional<PeerWatch> watch;
      watch.emplace(*ch, ctl);
      auto r = run_lat(me, *server, nullptr, s, size, a, b, &ctl);
      const bool gone = watch->gone();
      watch.reset();
      if (!r && gone)
        return make_error(ECONNRESET, fmt::format("the server stopped answering during the {}-byte run "
                                                  "(its side channel closed): {}",
                                                  size, r.error().reason));
      if (!r) return failed_run(me, s, r.error());
      report.lat.push_back(*r);
      row = row_json(*r);
      posted[0] = r->iterations;
    }
    if (auto r = ch->send({{"end", size}, {"posted", posted}, {"row", row}}); !r) return std::unexpected(r.error());
    auto done = ch->receive(kDoneTimeoutMs);
    if (!done) return std::unexpected(done.error());
    if (auto e = peer_error(*done, "server")) return make_error(EIO, e->reason);
    if (live) print_row(report, is_bandwidth(s.test) ? report.bw.size() - 1 : report.lat.size() - 1, *live);
  }
  report.transport = {device_transport("client", me.dev)};
  if (auto r = ch->send({{"bye", true}}); r) {
    if (auto t = ch->receive(kReplyTimeoutMs); t && t->contains("transport"))
      report.transport.push_back(DeviceTransport{"server", transport_from_json((*t)["transport"]),
                                                 impair_from_json(t->value("impair", json::object())),
                                                 wire_from_json(t->value("wire", json::object()))});
  }
  if (live) print_footer(report, *live);
  return report;
}

}  // namespace srdma::tools
