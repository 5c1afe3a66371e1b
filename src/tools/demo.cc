#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "srdma/access.h"
#include "srdma/device.h"
#include "tools/commands.h"

namespace srdma::tools {
namespace {

void show(std::ostream& out, const char* what, const std::expected<Translation, Refusal>& t) {
  if (!t) {
    fmt::print(out, "  {:<44} refused: {} ({})\n", what, refusal_name(t.error()), refusal_reason(t.error()));
    return;
  }
  fmt::print(out, "  {:<44} ok, {} bytes in", what, t->length());
  auto pieces = t->pieces();
  if (pieces.empty()) fmt::print(out, " no pieces (zero length touches nothing)");
  for (const auto& p : pieces) fmt::print(out, " [{}+{}]", fmt::ptr(p.addr), p.length);
  fmt::print(out, "\n");
}

void show(std::ostream& out, const char* what, const Result<MemoryRegion>& r) {
  if (r) fmt::print(out, "  {:<44} ok, lkey {:#010x}\n", what, r->lkey());
  else fmt::print(out, "  {:<44} {}\n", what, r.error().to_string());
}

}  // namespace

Result<void> demo(std::ostream& out) {
  Profile small;
  small.num_mpt = 1 << 10;
  small.num_mtt_segs = 1 << 12;
  small.fmr_reserved_mtt_segs = 1 << 10;
  auto dev = Device::open(small, "srdma-demo");
  if (!dev) return std::unexpected(dev.error());
  auto pd = dev->alloc_pd();
  auto other_pd = dev->alloc_pd();
  if (!pd || !other_pd) return std::unexpected(pd ? other_pd.error() : pd.error());

  const std::size_t page = 4096, len = 3 * page;
  // The buffer, a read-only page after it, and a hole after that.
  void* mem = ::mmap(nullptr, len + 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return make_error(errno, "mmap failed");
  auto* buf = static_cast<std::byte*>(mem);
  ::mprotect(buf + len, page, PROT_READ);
  ::munmap(buf + len + page, page);
  std::memset(buf, 0xab, len);

  fmt::print(out, "device {}: {} MPTs, {} MTT segments of {} entries\n", dev->name(), dev->profile().num_mpt,
             dev->profile().num_mtt_segs, 1 << dev->profile().log_mtts_per_seg);
  fmt::print(out, "registration (buffer at {}, {} bytes, 1 read-only page after it)\n", fmt::ptr(buf), len);
  const std::uint32_t rw = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
  auto mr = pd->reg_mr(buf + 100, len - 100, rw);
  show(out, "reg_mr(buf+100, LOCAL_WRITE|REMOTE_*)", mr);
  if (!mr) return std::unexpected(mr.error());
  show(out, "reg_mr(read-only page, LOCAL_WRITE)", pd->reg_mr(buf + len, page, ACCESS_LOCAL_WRITE));
  show(out, "reg_mr(read-only page, REMOTE_READ)", pd->reg_mr(buf + len, page, ACCESS_REMOTE_READ));
  show(out, "reg_mr(REMOTE_WRITE without LOCAL_WRITE)", pd->reg_mr(buf, page, ACCESS_REMOTE_WRITE));
  show(out, "reg_mr(unmapped address)", pd->reg_mr(buf + len + page, page, 0));
  show(out, "reg_mr(length 0)", pd->reg_mr(buf, 0, 0));

  const std::uint32_t key = mr->rkey(), pdn = mr->pd_num();
  const std::uint64_t va = reinterpret_cast<std::uint64_t>(buf) + 100;
  fmt::print(out, "translations of key {:#010x} (MPT index {}, key byte {:#04x})\n", key,
             (key >> 8) & (dev->profile().num_mpt - 1), key & 0xff);
  show(out, "remote write of 8 KiB at the start", dev->translate(key, va, 8192, ACCESS_REMOTE_WRITE, pdn));
  show(out, "local read of the last byte", dev->translate(key, va + len - 101, 1, 0, pdn));
  show(out, "remote read one byte past the end", dev->translate(key, va + len - 100, 1, ACCESS_REMOTE_READ, pdn));
  show(out, "remote read one byte before the start", dev->translate(key, va - 1, 1, ACCESS_REMOTE_READ, pdn));
  show(out, "remote atomic (not granted)", dev->translate(key, va, 8, ACCESS_REMOTE_ATOMIC, pdn));
  show(out, "from another PD", dev->translate(key, va, 8, ACCESS_REMOTE_READ, other_pd->pd_num()));
  show(out, "key byte changed", dev->translate(key ^ 0x1, va, 8, ACCESS_REMOTE_READ, pdn));
  show(out, "an index with no region", dev->translate(key + 0x100, va, 8, ACCESS_REMOTE_READ, pdn));
  show(out, "zero length with a bogus key", dev->translate(0xdeadbeef, 0, 0, ACCESS_REMOTE_WRITE, pdn));

  (void)mr->dereg();
  auto again = pd->reg_mr(buf, len, rw);
  show(out, "re-register the same slot", again);
  show(out, "the old key after re-registration", dev->translate(key, va, 8, ACCESS_REMOTE_READ, pdn));
  if (again)
    show(out, "the new key", dev->translate(again->rkey(), va, 8, ACCESS_REMOTE_READ, pdn));
  auto stats = dev->tpt_stats();
  fmt::print(out, "translation cache: {} hits, {} misses\n", stats.hits, stats.misses);
  auto busy = pd->dealloc();
  fmt::print(out, "dealloc_pd with a live region: {}\n", busy ? "ok" : busy.error().to_string());
  if (again) (void)again->dereg();
  ::munmap(mem, len + page);
  return {};
}

}  // namespace srdma::tools
