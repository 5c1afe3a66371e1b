// Parsing and printing of impairment specs (the --impair option's text).
#include "srdma/impair.h"

#include <charconv>
#include <utility>

#include <fmt/format.h>

namespace srdma {
namespace {

constexpr std::string_view kForm =
    "loss=P,dup=P,reorder=P,corrupt=P,seed=N,depth=K,rate=GBPS,queue=N,ecn=N,kmax=N,pmax=P";

Result<double> parse_probability(std::string_view key, std::string_view value) {
  double p = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), p);
  // !(p >= 0 && p < 1) also refuses NaN, which from_chars accepts.
  if (value.empty() || ec != std::errc{} || end != value.data() + value.size() || !(p >= 0 && p < 1))
    return make_error(EINVAL, fmt::format("{}={:?} is not a probability in [0, 1)", key, value));
  return p;
}

Result<std::uint64_t> parse_unsigned(std::string_view key, std::string_view value, std::uint64_t lo,
                                     std::uint64_t hi) {
  std::uint64_t n = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (value.empty() || ec != std::errc{} || end != value.data() + value.size() || n < lo || n > hi)
    return make_error(EINVAL, fmt::format("{}={:?} is not an integer in {}..{}", key, value, lo, hi));
  return n;
}

}  // namespace

Result<ImpairSpec> parse_impair(std::string_view text) {
  if (text.empty()) return make_error(EINVAL, fmt::format("empty impairment spec (expected {})", kForm));
  ImpairSpec spec;
  unsigned seen = 0;  // one bit per key: a key given twice is a typo, not an override
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = text.substr(pos, comma - pos);
    pos = comma + 1;
    std::size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      return make_error(EINVAL, fmt::format("{:?} is not key=value (expected {})", item, kForm));
    std::string_view key = item.substr(0, eq);
    std::string_view value = item.substr(eq + 1);
    static constexpr std::string_view kKeys[] = {"loss", "dup",  "reorder", "corrupt", "seed", "depth",
                                                 "rate", "queue", "ecn",    "kmax",    "pmax"};
    unsigned bit = 0;
    while (bit < std::size(kKeys) && kKeys[bit] != key) ++bit;
    if (bit == std::size(kKeys))
      return make_error(EINVAL, fmt::format("unknown impairment key {:?} (expected {})", key, kForm));
    if (seen & (1u << bit)) return make_error(EINVAL, fmt::format("{} given twice", key));
    seen |= 1u << bit;
    if (bit < 4) {
      auto p = parse_probability(key, value);
      if (!p) return std::unexpected(p.error());
      double* field[] = {&spec.loss, &spec.dup, &spec.reorder, &spec.corrupt};
      *field[bit] = *p;
    } else if (key == "rate") {
      double g = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), g);
      if (value.empty() || ec != std::errc{} || end != value.data() + value.size() || !(g > 0 && g <= kMaxBottleneckGbps))
        return make_error(EINVAL, fmt::format("rate={:?} is not a rate in Gb/s in (0, {}]", value, kMaxBottleneckGbps));
      spec.rate_gbps = g;
    } else if (key == "pmax") {
      double pm = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), pm);
      if (value.empty() || ec != std::errc{} || end != value.data() + value.size() || !(pm > 0 && pm <= 1))
        return make_error(EINVAL, fmt::format("pmax={:?} is not a probability in (0, 1]", value));
      spec.ecn_pmax = pm;
    } else if (key == "queue" || key == "ecn" || key == "kmax") {
      auto n = parse_unsigned(key, value, key == "queue" ? 1 : 0, kMaxQueuePackets);
      if (!n) return std::unexpected(n.error());
      (key == "queue" ? spec.queue_packets : key == "ecn" ? spec.ecn_packets : spec.ecn_max_packets) =
          static_cast<std::uint32_t>(*n);
    } else if (key == "seed") {
      auto n = parse_unsigned(key, value, 0, UINT64_MAX);
      if (!n) return std::unexpected(n.error());
      spec.seed = *n;
    } else {
      auto n = parse_unsigned(key, value, 1, kMaxReorderDepth);
      if (!n) return std::unexpected(n.error());
      spec.reorder_depth = static_cast<std::uint32_t>(*n);
    }
  }
  if (spec.rate_gbps == 0 && (seen & (15u << 7)))
    return make_error(EINVAL, "queue=, ecn=, kmax= and pmax= describe a bottleneck: they need rate=");
  if (spec.ecn_packets > spec.queue_packets)
    return make_error(EINVAL, fmt::format("ecn={} is above queue={}: it would never mark", spec.ecn_packets,
                                          spec.queue_packets));
  if (spec.ecn_packets == 0 && (seen & (3u << 9)))
    return make_error(EINVAL, "kmax= and pmax= shape ECN marking: they need ecn= (Kmin)");
  if ((seen & (1u << 10)) && spec.ecn_max_packets == 0)
    return make_error(EINVAL, "pmax= is the marking probability at kmax=: it needs kmax=");
  if (spec.ecn_max_packets != 0 &&
      (spec.ecn_max_packets < spec.ecn_packets || spec.ecn_max_packets > spec.queue_packets))
    return make_error(EINVAL, fmt::format("kmax={} is not in ecn..queue ({}..{})", spec.ecn_max_packets,
                                          spec.ecn_packets, spec.queue_packets));
  return spec;
}

Result<void> validate_impair(const ImpairSpec& s) {
  const std::pair<const char*, double> probabilities[] = {
      {"loss", s.loss}, {"dup", s.dup}, {"reorder", s.reorder}, {"corrupt", s.corrupt}};
  for (auto [key, p] : probabilities)
    if (!(p >= 0 && p < 1))
      return make_error(EINVAL, fmt::format("impair spec: {}={} is not a probability in [0, 1)", key, p));
  if (s.reorder_depth < 1 || s.reorder_depth > kMaxReorderDepth)
    return make_error(EINVAL, fmt::format("impair spec: depth={} is not an integer in 1..{}", s.reorder_depth,
                                          kMaxReorderDepth));
  if (!(s.rate_gbps >= 0 && s.rate_gbps <= kMaxBottleneckGbps))
    return make_error(EINVAL, fmt::format("impair spec: rate={} is not in [0, {}]", s.rate_gbps, kMaxBottleneckGbps));
  if (s.queue_packets < 1 || s.queue_packets > kMaxQueuePackets || s.ecn_packets > s.queue_packets)
    return make_error(EINVAL, fmt::format("impair spec: queue={} ecn={}: ecn <= queue, 1 <= queue <= {}", s.queue_packets,
                                          s.ecn_packets, kMaxQueuePackets));
  if (s.ecn_max_packets != 0 && (s.ecn_max_packets < s.ecn_packets || s.ecn_max_packets > s.queue_packets))
    return make_error(EINVAL, fmt::format("impair spec: kmax={} is not in ecn..queue ({}..{})", s.ecn_max_packets,
                                          s.ecn_packets, s.queue_packets));
  if (!(s.ecn_pmax > 0 && s.ecn_pmax <= 1))
    return make_error(EINVAL, fmt::format("impair spec: pmax={} is not a probability in (0, 1]", s.ecn_pmax));
  return {};
}

std::string to_string(const ImpairSpec& s) {
  // fmt's {} for a double is the shortest text that reads back exactly.
  std::string out = fmt::format("loss={},dup={},reorder={},corrupt={},seed={},depth={}", s.loss, s.dup, s.reorder,
                                s.corrupt, s.seed, s.reorder_depth);
  if (s.rate_gbps > 0) out += fmt::format(",rate={},queue={},ecn={}", s.rate_gbps, s.queue_packets, s.ecn_packets);
  if (s.rate_gbps > 0 && s.ecn_max_packets != 0) out += fmt::format(",kmax={},pmax={}", s.ecn_max_packets, s.ecn_pmax);
  return out;
}

}  // namespace srdma
