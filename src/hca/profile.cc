#include "srdma/profile.h"

#include <algorithm>
#include <bit>
#include <optional>
#include <thread>

#include <fmt/format.h>

namespace srdma {
namespace {

// Each field with its name, for tools and error messages.
template <class P, class F>
void for_each_field(P& p, F&& f) {
  f("num_qp", p.num_qp);
  f("num_cq", p.num_cq);
  f("num_mpt", p.num_mpt);
  f("num_mtt_segs", p.num_mtt_segs);
  f("fmr_reserved_mtt_segs", p.fmr_reserved_mtt_segs);
  f("num_pd", p.num_pd);
  f("log_mtts_per_seg", p.log_mtts_per_seg);
  f("num_comp_vectors", p.num_comp_vectors);
  f("max_cqe", p.max_cqe);
  f("max_qp_wr", p.max_qp_wr);
  f("max_sge", p.max_sge);
  f("max_inline_data", p.max_inline_data);
  f("congestion_control", p.congestion_control);
  f("reserved_qps", p.reserved_qps);
  f("reserved_cqs", p.reserved_cqs);
  f("reserved_mrws", p.reserved_mrws);
  f("reserved_mtt_segs", p.reserved_mtt_segs);
  f("reserved_pds", p.reserved_pds);
}

std::int64_t online_cpus() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : std::min<std::int64_t>(n, 1024);
}

// Upper bounds beyond which a table cannot be built (not repairable).
constexpr std::int64_t kMaxQpCq = 1 << 24;    // QPNs and CQNs are 24 bits
constexpr std::int64_t kMaxMpt = 1 << 24;     // key bits 31..8 hold the index
constexpr std::int64_t kMaxMttSegs = 1 << 30; // the buddy's largest max_order
constexpr std::int64_t kMaxPd = 1 << 24;
constexpr std::int64_t kMaxCompVectors = 1024;
constexpr std::int64_t kMaxCqe = (1 << 22) - 1;
constexpr std::int64_t kMaxQpWr = 1 << 20;
constexpr std::int64_t kMaxSge = 256;
constexpr std::int64_t kMaxInline = 1 << 16;
constexpr std::int64_t kMaxMttEntries = std::int64_t{1} << 30;  // 8 GiB of MTT address space

}  // namespace

std::vector<std::pair<std::string, std::int64_t>> Profile::fields() const {
  std::vector<std::pair<std::string, std::int64_t>> out;
  for_each_field(*this, [&](const char* name, std::int64_t v) { out.emplace_back(name, v); });
  return out;
}

Result<void> Profile::set(const std::string& name, std::int64_t value) {
  bool found = false;
  for_each_field(*this, [&](const char* n, std::int64_t& v) {
    if (name == n) {
      v = value;
      found = true;
    }
  });
  if (!found) return make_error(EINVAL, fmt::format("unknown profile field '{}'", name));
  return {};
}

Result<Profile> validate_profile(const Profile& requested, std::vector<std::string>* repairs) {
  const Profile defaults;
  Profile p = requested;
  auto note = [&](std::string s) {
    if (repairs) repairs->push_back(std::move(s));
  };

  // Table sizes: <= 0 -> default; round up to a power of two; bounded.
  auto size = [&](const char* name, std::int64_t& v, std::int64_t def,
                  std::int64_t max) -> Result<void> {
    if (v <= 0) {
      note(fmt::format("{} {} -> default {}", name, v, def));
      v = def;
    }
    if (v > max) return make_error(EINVAL, fmt::format("{} {} exceeds the limit {}", name, v, max));
    auto rounded = static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(v)));
    if (rounded != v) {
      note(fmt::format("{} {} -> {} (power of two)", name, v, rounded));
      v = rounded;
    }
    return {};
  };
  // Limits: <= 0 -> default; bounded.
  auto limit = [&](const char* name, std::int64_t& v, std::int64_t def,
                   std::int64_t max) -> Result<void> {
    if (v <= 0) {
      note(fmt::format("{} {} -> default {}", name, v, def));
      v = def;
    }
    if (v > max) return make_error(EINVAL, fmt::format("{} {} exceeds the limit {}", name, v, max));
    return {};
  };

  // Reserved entries cannot be guessed: out of range is an error.
  auto reserved = [&](const char* name, std::int64_t v, const char* table,
                      std::int64_t n) -> Result<void> {
    if (v < 0 || v >= n)
      return make_error(EINVAL, fmt::format("{} {} outside 0..{} ({} is {})", name, v, n - 1,
                                            table, n));
    return {};
  };

  // The first error wins; later checks only add repair notes.
  std::optional<Error> error;
  auto check = [&](Result<void> r) {
    if (!r && !error) error = r.error();
  };

  check(size("num_qp", p.num_qp, defaults.num_qp, kMaxQpCq));
  check(size("num_cq", p.num_cq, defaults.num_cq, kMaxQpCq));
  check(size("num_mpt", p.num_mpt, defaults.num_mpt, kMaxMpt));
  check(size("num_mtt_segs", p.num_mtt_segs, defaults.num_mtt_segs, kMaxMttSegs));
  check(size("fmr_reserved_mtt_segs", p.fmr_reserved_mtt_segs, defaults.fmr_reserved_mtt_segs,
             kMaxMttSegs));
  check(size("num_pd", p.num_pd, defaults.num_pd, kMaxPd));
  if (error) return std::unexpected(*error);

  if (p.fmr_reserved_mtt_segs >= p.num_mtt_segs) {
    note(fmt::format("fmr_reserved_mtt_segs {} >= num_mtt_segs {} -> {}", p.fmr_reserved_mtt_segs,
                     p.num_mtt_segs, p.num_mtt_segs / 2));
    p.fmr_reserved_mtt_segs = p.num_mtt_segs / 2;  // 0 with a one-segment table: no reservation
  }
  if (p.log_mtts_per_seg < 1 || p.log_mtts_per_seg > 5) {
    note(fmt::format("log_mtts_per_seg {} outside 1..5 -> 3", p.log_mtts_per_seg));
    p.log_mtts_per_seg = 3;
  }

  if (!error && (p.num_mtt_segs << p.log_mtts_per_seg) > kMaxMttEntries)
    check(make_error(EINVAL, fmt::format("num_mtt_segs {} x 2^log_mtts_per_seg {} exceeds {} MTT entries",
                                         p.num_mtt_segs, p.log_mtts_per_seg, kMaxMttEntries)));
  check(limit("num_comp_vectors", p.num_comp_vectors, online_cpus(), kMaxCompVectors));
  check(limit("max_cqe", p.max_cqe, defaults.max_cqe, kMaxCqe));
  check(limit("max_qp_wr", p.max_qp_wr, defaults.max_qp_wr, kMaxQpWr));
  check(limit("max_sge", p.max_sge, defaults.max_sge, kMaxSge));
  check(limit("max_inline_data", p.max_inline_data, defaults.max_inline_data, kMaxInline));
  if (p.congestion_control != 0 && p.congestion_control != 1)
    check(make_error(EINVAL, fmt::format("congestion_control {} is neither 0 (off) nor 1 (on)", p.congestion_control)));

  check(reserved("reserved_qps", p.reserved_qps, "num_qp", p.num_qp));
  check(reserved("reserved_cqs", p.reserved_cqs, "num_cq", p.num_cq));
  check(reserved("reserved_mrws", p.reserved_mrws, "num_mpt", p.num_mpt));
  check(reserved("reserved_pds", p.reserved_pds, "num_pd", p.num_pd));
  // mthca takes the reserved MTTs as one block out of the buddy FMRs use
  // (the FMR buddy, or the main one without a reservation): it must fit
  // there with room to spare.
  if (p.fmr_reserved_mtt_segs > 0)
    check(reserved("reserved_mtt_segs", p.reserved_mtt_segs, "fmr_reserved_mtt_segs",
                   p.fmr_reserved_mtt_segs));
  else
    check(reserved("reserved_mtt_segs", p.reserved_mtt_segs, "num_mtt_segs", p.num_mtt_segs));
  if (error) return std::unexpected(*error);
  return p;
}

}  // namespace srdma
