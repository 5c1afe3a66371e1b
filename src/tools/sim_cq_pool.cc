#include <string>

#include <fmt/format.h>

#include "core/cq_pool.h"
#include "tools/sim.h"

namespace srdma::tools {
namespace {

// CQs that exist only as numbers: the pool's policy is all that runs.
class SimBackend final : public core::CqPool::Backend {
 public:
  Result<void*> create_cq(std::uint32_t, std::uint32_t, PollContext) override {
    return reinterpret_cast<void*>(++made_);
  }
  void destroy_cq(void*) override {}

 private:
  std::uintptr_t made_ = 0;
};

void print_cq(std::ostream& out, const core::PoolCq& cq) {
  out << fmt::format("ok cq={} vector={} cqe={} used={}\n", cq.id, cq.vector, cq.cqe, cq.cqe_used);
}

std::optional<std::uint32_t> u32(std::string_view w) {
  auto v = parse_u64(w);
  if (!v || *v > 0xffffffffu) return std::nullopt;
  return static_cast<std::uint32_t>(*v);
}

}  // namespace

Result<void> sim_cq_pool(std::uint32_t vectors, std::uint32_t cpus, std::uint32_t max_cqe, std::istream& in,
                         std::ostream& out) {
  SimBackend backend;
  core::CqPool pool(backend, vectors, cpus, max_cqe);
  std::string line;
  auto bad = [&](std::string_view why) {
    print_error(out, Error{EINVAL, fmt::format("cannot parse '{}': {}", printable(line), why)});
  };
  while (std::getline(in, line)) {
    auto w = split_words(line);
    if (w.empty()) continue;  // blank lines are not operations
    if (w[0] == "get" && w.size() == 4) {
      auto nr = u32(w[1]);
      auto hint = parse_i64(w[2]);
      auto ctx = parse_poll_context(w[3]);
      if (!nr || !hint || *hint < INT32_MIN || *hint > INT32_MAX || !ctx) {
        bad("expected 'get NR_CQE HINT CTX' (CTX: softirq, workqueue, unbound, direct)");
        continue;
      }
      auto r = pool.get(*nr, static_cast<int>(*hint), *ctx);
      if (r) print_cq(out, *r);
      else print_error(out, r.error());
    } else if (w[0] == "put" && w.size() == 3) {
      auto id = u32(w[1]);
      auto nr = u32(w[2]);
      if (!id || !nr) {
        bad("expected 'put CQ NR_CQE'");
        continue;
      }
      auto r = pool.put(*id, *nr);
      if (r) print_cq(out, *r);
      else print_error(out, r.error());
    } else if (w[0] == "destroy" && w.size() == 2) {
      auto id = u32(w[1]);
      if (!id) {
        bad("expected 'destroy CQ'");
        continue;
      }
      auto r = pool.destroy(*id);
      if (r) out << "ok\n";
      else print_error(out, r.error());
    } else if (w[0] == "resize" && w.size() == 3) {
      auto id = u32(w[1]);
      auto cqe = u32(w[2]);
      if (!id || !cqe) {
        bad("expected 'resize CQ CQE'");
        continue;
      }
      auto r = pool.resize(*id, *cqe);
      if (r) out << "ok\n";
      else print_error(out, r.error());
    } else if (w[0] == "trim" && w.size() == 1) {
      out << "ok freed=" << pool.trim() << '\n';
    } else {
      bad("expected get, put, destroy, resize or trim");
    }
  }
  out.flush();
  return {};
}

}  // namespace srdma::tools
