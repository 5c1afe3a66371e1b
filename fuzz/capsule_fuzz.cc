// libFuzzer target for the target's capsule parser: any byte string, on every
// kind of queue, must give a Command or a Refusal -- no crash, no read outside
// the input (ASan), no undefined behaviour (UBSan) -- and what it accepts must
// keep the parser's promises (checked below; a broken promise traps).
//
// Built by scripts/fuzz.sh with clang++ -fsanitize=fuzzer,address,undefined.
#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>

#include "nvmf/capsule_parser.h"

namespace {

using namespace srdma::nvmf;

void check(bool promise) {
  if (!promise) __builtin_trap();
}

void parse_on(std::span<const std::byte> capsule, const QueueContext& ctx) {
  ParseResult r = parse_command(capsule, ctx);
  if (const auto* f = std::get_if<Refusal>(&r)) {
    check(!f->status.ok());  // a refusal always carries an error
    check(f->reason != nullptr && *f->reason != '\0');
    return;
  }
  const Command& c = std::get<Command>(r);
  check(capsule.size() >= kCommandCapsuleHeader);
  // Only a connected queue runs anything but Connect; Connect only unconnected.
  check(ctx.connected == (c.kind != CommandKind::kConnect));
  const bool admin_kind = c.kind == CommandKind::kIdentify || c.kind == CommandKind::kKeepAlive ||
                          c.kind == CommandKind::kPropertyGet || c.kind == CommandKind::kPropertySet;
  const bool io_kind = c.kind == CommandKind::kRead || c.kind == CommandKind::kWrite ||
                       c.kind == CommandKind::kFlush;
  if (ctx.type == QueueType::kAdmin) check(!io_kind);
  if (ctx.type == QueueType::kIo) check(!admin_kind);
  if (c.data.kind == DataDescriptor::Kind::kInCapsule) {
    // The view lies inside the capsule, after the SQE, within the queue's limit.
    const std::byte* begin = capsule.data() + kCommandCapsuleHeader;
    const std::byte* end = capsule.data() + capsule.size();
    check(c.data.in_capsule.data() >= begin);
    check(c.data.in_capsule.data() + c.data.in_capsule.size() <= end);
    check(c.data.in_capsule.size() == c.data.length);
    check(c.data.length <= ctx.in_capsule_data_size);
    check(c.kind != CommandKind::kRead && c.kind != CommandKind::kIdentify);
    volatile std::byte sink{};
    for (std::byte b : c.data.in_capsule) sink = b;  // ASan: every byte is readable
    (void)sink;
    if (c.kind == CommandKind::kConnect) {
      auto info = parse_connect_data(c.data.in_capsule);
      if (const auto* ci = std::get_if<ConnectInfo>(&info)) {
        check(!ci->subnqn.empty() && ci->subnqn.size() < 256);
        check(!ci->hostnqn.empty() && ci->hostnqn.size() < 256);
      }
    }
  }
  if (c.kind == CommandKind::kRead || c.kind == CommandKind::kWrite) {
    check(c.rw.nlb >= 1 && c.rw.nlb <= 65536);
    check(c.nsid != 0 && c.nsid != kNsidBroadcast);
    (void)check_transfer_length(c, 512);
  }
  if (c.kind == CommandKind::kConnect) check(c.connect.queue_size >= 2);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> capsule(reinterpret_cast<const std::byte*>(data), size);
  for (bool connected : {false, true}) {
    parse_on(capsule, QueueContext{QueueType::kAdmin, connected, 0, 32});
    parse_on(capsule, QueueContext{QueueType::kAdmin, connected, 8192, 32});
    parse_on(capsule, QueueContext{QueueType::kIo, connected, 4096, 1024});
    parse_on(capsule, QueueContext{QueueType::kIo, connected, 0, 65536});
  }
  (void)parse_connect_data(capsule);
  return 0;
}
