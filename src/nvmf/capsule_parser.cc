#include "nvmf/capsule_parser.h"

#include <cstring>

#include "nvmf/auth_wire.h"

namespace srdma::nvmf {
namespace {

enum class Direction : std::uint8_t { kHostToController, kControllerToHost };

// The most of a log page one Get Log Page reads (the discovery log of 1023
// subsystem ports).
constexpr std::uint64_t kMaxLogPageBytes = 1u << 20;

Refusal refuse(std::uint16_t cid, StatusCode code, const char* reason, std::uint32_t dw0 = 0) {
  return Refusal{true, cid, NvmeStatus::of(code), dw0, reason};
}

// Decodes SGL1 for a command that moves data in `dir`. Returns nullptr and
// fills `data`, or the reason and code of a refusal.
struct SglError {
  StatusCode code;
  const char* reason;
};

const SglError* parse_sgl(const NvmeSgl& sgl, Direction dir, std::span<const std::byte> capsule,
                          const QueueContext& ctx, DataDescriptor& data) {
  static constexpr SglError kBadType{StatusCode::kSglDescriptorTypeInvalid,
                                     "SGL1 is neither a keyed data block nor an in-capsule offset"};
  static constexpr SglError kBadKeyedSubtype{StatusCode::kSglDescriptorTypeInvalid,
                                             "keyed SGL subtype is not address (0h) or invalidate (Fh)"};
  static constexpr SglError kInCapsuleRead{
      StatusCode::kInvalidField, "in-capsule data is only for host-to-controller transfers"};
  static constexpr SglError kNoInCapsule{StatusCode::kSglDescriptorTypeInvalid,
                                         "this queue accepts no in-capsule data"};
  static constexpr SglError kBadOffset{StatusCode::kSglOffsetInvalid,
                                       "in-capsule offset beyond the in-capsule data"};
  static constexpr SglError kBadLength{StatusCode::kDataSglLengthInvalid,
                                       "in-capsule data extends beyond the capsule"};

  switch (sgl.raw_type()) {
    case static_cast<std::uint8_t>(SglType::kKeyedDataBlock): {
      // NVMe base 4.4, Figure "Keyed SGL Data Block descriptor".
      const std::uint8_t st = sgl.subtype();
      if (st != static_cast<std::uint8_t>(SglSubtype::kAddress) &&
          st != static_cast<std::uint8_t>(SglSubtype::kInvalidate))
        return &kBadKeyedSubtype;
      data.kind = DataDescriptor::Kind::kKeyed;
      data.addr = sgl.addr;
      data.length = sgl.keyed_length();
      data.key = sgl.key();
      data.invalidate = st == static_cast<std::uint8_t>(SglSubtype::kInvalidate);
      return nullptr;
    }
    case static_cast<std::uint8_t>(SglType::kDataBlock): {
      // NVMe-oF 1.1 section 2.2: in-capsule data is described by a data block
      // descriptor whose subtype is Offset; the offset counts from the start
      // of the in-capsule data (ICDOFF = 0 for us).
      if (sgl.subtype() != static_cast<std::uint8_t>(SglSubtype::kOffset)) return &kBadType;
      if (dir != Direction::kHostToController) return &kInCapsuleRead;
      if (ctx.in_capsule_data_size == 0) return &kNoInCapsule;
      const std::uint64_t offset = sgl.addr;
      const std::uint64_t length = sgl.unkeyed_length();
      const std::uint64_t received = capsule.size() - kCommandCapsuleHeader;
      // Offset first (SGL Offset Invalid), then the end (Data SGL Length
      // Invalid); 64-bit sums cannot wrap: offset is checked against a
      // 32-bit bound before it is added to a 32-bit length.
      if (offset > ctx.in_capsule_data_size || offset > received) return &kBadOffset;
      if (offset + length > ctx.in_capsule_data_size || offset + length > received)
        return &kBadLength;
      data.kind = DataDescriptor::Kind::kInCapsule;
      data.addr = offset;
      data.length = static_cast<std::uint32_t>(length);
      data.in_capsule = capsule.subspan(kCommandCapsuleHeader + offset, length);
      return nullptr;
    }
    default:
      // Bit bucket, segments, transport-specific: not on this transport's SGL1.
      return &kBadType;
  }
}

ParseResult parse_connect(const NvmeCommand& sqe, std::span<const std::byte> capsule,
                          const QueueContext& ctx) {
  ConnectCommand c;
  std::memcpy(&c, capsule.data(), sizeof c);
  if (ctx.connected)
    return refuse(c.cid, StatusCode::kCommandSequenceError, "Connect on a connected queue");
  // NVMe-oF 1.1 Figure 20: record format 0 is the only one defined.
  if (c.recfmt != 0)
    return refuse(c.cid, StatusCode::kConnectIncompatibleFormat, "Connect RECFMT is not 0");
  const bool admin = ctx.type == QueueType::kAdmin;
  if (admin ? c.qid != 0 : c.qid == 0)
    return refuse(c.cid, StatusCode::kConnectInvalidParameters,
                  admin ? "Connect QID is not 0 on the admin queue"
                        : "Connect QID 0 on an I/O queue",
                  connect_ipo(false, offsetof(ConnectCommand, qid)));
  // SQSIZE is 0's based; a queue has at least two entries (NVMe base 3.3.1).
  const std::uint32_t size = std::uint32_t{c.sqsize} + 1;
  if (c.sqsize == 0 || size > ctx.max_queue_size)
    return refuse(c.cid, StatusCode::kConnectInvalidParameters,
                  "Connect SQSIZE out of range for this queue",
                  connect_ipo(false, offsetof(ConnectCommand, sqsize)));
  Command cmd;
  cmd.kind = CommandKind::kConnect;
  cmd.cid = c.cid;
  if (const SglError* e = parse_sgl(sqe.dptr, Direction::kHostToController, capsule, ctx, cmd.data))
    return refuse(c.cid, e->code, e->reason);
  if (cmd.data.length != sizeof(ConnectData))
    return refuse(c.cid, StatusCode::kDataSglLengthInvalid, "Connect data is not 1024 bytes");
  cmd.connect = ConnectFields{c.recfmt, c.qid, size, c.cattr, c.kato};
  return cmd;
}

ParseResult parse_property(std::span<const std::byte> capsule, const QueueContext& ctx,
                           bool set) {
  PropertyCommand p;
  std::memcpy(&p, capsule.data(), sizeof p);
  // NVMe-oF 1.1 section 3.4: Property Get/Set are admin queue commands.
  if (ctx.type != QueueType::kAdmin)
    return refuse(p.cid, StatusCode::kInvalidQueueType, "Property Get/Set on an I/O queue");
  std::uint8_t size = 0;
  switch (p.attrib & 0x7) {
    case 0: size = 4; break;
    case 1: size = 8; break;
    default: return refuse(p.cid, StatusCode::kInvalidField, "property size is neither 4 nor 8");
  }
  const PropertyInfo* info = nullptr;
  for (const PropertyInfo& row : kProperties)
    if (static_cast<std::uint32_t>(row.property) == p.offset) info = &row;
  if (info == nullptr) return refuse(p.cid, StatusCode::kInvalidField, "unknown property offset");
  if (info->size != size)
    return refuse(p.cid, StatusCode::kInvalidField, "property size does not match the property");
  if (set && !info->writable)
    return refuse(p.cid, StatusCode::kInvalidField, "Property Set of a read-only property");
  Command cmd;
  cmd.kind = set ? CommandKind::kPropertySet : CommandKind::kPropertyGet;
  cmd.cid = p.cid;
  cmd.property = PropertyFields{info->property, size, size == 4 ? p.value & 0xFFFFFFFFu : p.value};
  return cmd;
}

// AUTH_Send / AUTH_Receive (NVMe base 2.0 6.3, 8.13): SECP, SPSP0/1 and
// TL/AL as auth::parse_auth_command checks them, and a data SGL of exactly
// TL/AL bytes, as nvmet's nvmet_check_transfer_len.
ParseResult parse_auth(const NvmeCommand& sqe, std::span<const std::byte> capsule, const QueueContext& ctx) {
  const auto parsed = auth::parse_auth_command(capsule.first(sizeof(NvmeCommand)));
  if (const auto* e = std::get_if<auth::AuthCommandError>(&parsed)) return refuse(sqe.cid, e->code, e->reason);
  const auto& f = std::get<auth::AuthCommandFields>(parsed);
  Command cmd;
  cmd.kind = f.send ? CommandKind::kAuthSend : CommandKind::kAuthReceive;
  cmd.cid = sqe.cid;
  cmd.auth_length = f.length;
  const Direction dir = f.send ? Direction::kHostToController : Direction::kControllerToHost;
  if (const SglError* e = parse_sgl(sqe.dptr, dir, capsule, ctx, cmd.data)) return refuse(sqe.cid, e->code, e->reason);
  if (cmd.data.length != f.length)
    return refuse(sqe.cid, StatusCode::kDataSglLengthInvalid, "the data SGL is not TL/AL bytes");
  return cmd;
}

ParseResult parse_fabrics(const NvmeCommand& sqe, std::span<const std::byte> capsule,
                          const QueueContext& ctx) {
  const auto fctype = static_cast<std::uint8_t>(capsule[offsetof(FabricsCommand, fctype)]);
  switch (fctype) {
    case static_cast<std::uint8_t>(FabricsType::kConnect):
      return parse_connect(sqe, capsule, ctx);
    case static_cast<std::uint8_t>(FabricsType::kPropertyGet):
    case static_cast<std::uint8_t>(FabricsType::kPropertySet):
      if (!ctx.connected)
        return refuse(sqe.cid, StatusCode::kCommandSequenceError, "command before Connect");
      return parse_property(capsule, ctx,
                            fctype == static_cast<std::uint8_t>(FabricsType::kPropertySet));
    case static_cast<std::uint8_t>(FabricsType::kAuthenticationSend):
    case static_cast<std::uint8_t>(FabricsType::kAuthenticationReceive):
      if (!ctx.connected)
        return refuse(sqe.cid, StatusCode::kCommandSequenceError, "command before Connect");
      return parse_auth(sqe, capsule, ctx);
    default:
      // Linux's nvmet answers an unknown fctype the same way.
      return refuse(sqe.cid, StatusCode::kInvalidOpcode, "unsupported Fabrics command type");
  }
}

ParseResult parse_admin(const NvmeCommand& sqe, std::span<const std::byte> capsule,
                        const QueueContext& ctx) {
  Command cmd;
  cmd.cid = sqe.cid;
  cmd.nsid = sqe.nsid;
  switch (sqe.opcode) {
    case static_cast<std::uint8_t>(AdminOpcode::kKeepAlive):
      cmd.kind = CommandKind::kKeepAlive;
      return cmd;
    case static_cast<std::uint8_t>(AdminOpcode::kGetLogPage): {
      cmd.kind = CommandKind::kGetLogPage;
      cmd.log.lid = static_cast<std::uint8_t>(sqe.cdw10 & 0xFF);
      // NUMD (0's based dwords) is NUMDU:NUMDL over CDW11 and CDW10; the
      // offset LPOU:LPOL over CDW13 and CDW12.
      const std::uint64_t numd = ((std::uint64_t{sqe.cdw11 & 0xFFFF} << 16) | (sqe.cdw10 >> 16)) + 1;
      cmd.log.offset = (std::uint64_t{sqe.cdw13} << 32) | sqe.cdw12;
      if (cmd.log.offset % 4) return refuse(sqe.cid, StatusCode::kInvalidField, "log page offset not dword aligned");
      if (numd * 4 > kMaxLogPageBytes) return refuse(sqe.cid, StatusCode::kInvalidField, "log page read above 1 MiB");
      cmd.log.length = static_cast<std::uint32_t>(numd * 4);
      if (const SglError* e = parse_sgl(sqe.dptr, Direction::kControllerToHost, capsule, ctx, cmd.data))
        return refuse(sqe.cid, e->code, e->reason);
      if (cmd.data.length < cmd.log.length)
        return refuse(sqe.cid, StatusCode::kDataSglLengthInvalid, "Get Log Page buffer shorter than NUMD");
      return cmd;
    }
    case static_cast<std::uint8_t>(AdminOpcode::kIdentify): {
      cmd.kind = CommandKind::kIdentify;
      const auto cns = static_cast<std::uint8_t>(sqe.cdw10 & 0xFF);
      cmd.identify.cntid = static_cast<std::uint16_t>(sqe.cdw10 >> 16);
      switch (cns) {
        case static_cast<std::uint8_t>(Cns::kNamespace):
          // nsid 0 names nothing; FFFFFFFFh needs namespace management.
          if (sqe.nsid == 0 || sqe.nsid == kNsidBroadcast)
            return refuse(sqe.cid, StatusCode::kInvalidNamespace, "Identify Namespace of nsid 0 or FFFFFFFFh");
          break;
        case static_cast<std::uint8_t>(Cns::kController):
          break;
        case static_cast<std::uint8_t>(Cns::kActiveNamespaceList):
          // NVMe base 5.15.2: FFFFFFFEh and FFFFFFFFh are invalid starting points.
          if (sqe.nsid >= 0xFFFFFFFEu)
            return refuse(sqe.cid, StatusCode::kInvalidNamespace, "active namespace list from nsid >= FFFFFFFEh");
          break;
        default:
          return refuse(sqe.cid, StatusCode::kInvalidField, "unsupported Identify CNS");
      }
      cmd.identify.cns = static_cast<Cns>(cns);
      if (const SglError* e = parse_sgl(sqe.dptr, Direction::kControllerToHost, capsule, ctx, cmd.data))
        return refuse(sqe.cid, e->code, e->reason);
      if (cmd.data.length < kIdentifyDataSize)
        return refuse(sqe.cid, StatusCode::kDataSglLengthInvalid, "Identify buffer under 4096 bytes");
      return cmd;
    }
    default:
      return refuse(sqe.cid, StatusCode::kInvalidOpcode, "unsupported admin opcode");
  }
}

ParseResult parse_io(const NvmeCommand& sqe, std::span<const std::byte> capsule,
                     const QueueContext& ctx) {
  Command cmd;
  cmd.cid = sqe.cid;
  cmd.nsid = sqe.nsid;
  switch (sqe.opcode) {
    case static_cast<std::uint8_t>(IoOpcode::kFlush):
      // FFFFFFFFh flushes every namespace; 0 names none.
      if (sqe.nsid == 0) return refuse(sqe.cid, StatusCode::kInvalidNamespace, "Flush of nsid 0");
      cmd.kind = CommandKind::kFlush;
      return cmd;
    case static_cast<std::uint8_t>(IoOpcode::kRead):
    case static_cast<std::uint8_t>(IoOpcode::kWrite): {
      const bool write = sqe.opcode == static_cast<std::uint8_t>(IoOpcode::kWrite);
      cmd.kind = write ? CommandKind::kWrite : CommandKind::kRead;
      if (sqe.nsid == 0 || sqe.nsid == kNsidBroadcast)
        return refuse(sqe.cid, StatusCode::kInvalidNamespace, "Read/Write of nsid 0 or FFFFFFFFh");
      cmd.rw.slba = sqe.cdw10 | (std::uint64_t{sqe.cdw11} << 32);
      cmd.rw.nlb = (sqe.cdw12 & 0xFFFF) + 1;
      cmd.rw.fua = (sqe.cdw12 >> 30) & 1;
      // An end past 2^64 is out of range for any namespace (and would wrap).
      if (cmd.rw.slba > UINT64_MAX - cmd.rw.nlb)
        return refuse(sqe.cid, StatusCode::kLbaOutOfRange, "SLBA + NLB wraps");
      const Direction dir = write ? Direction::kHostToController : Direction::kControllerToHost;
      if (const SglError* e = parse_sgl(sqe.dptr, dir, capsule, ctx, cmd.data))
        return refuse(sqe.cid, e->code, e->reason);
      return cmd;
    }
    default:
      return refuse(sqe.cid, StatusCode::kInvalidOpcode, "unsupported I/O opcode");
  }
}

}  // namespace

std::string_view command_kind_name(CommandKind k) {
  switch (k) {
    case CommandKind::kConnect: return "Connect";
    case CommandKind::kPropertyGet: return "Property Get";
    case CommandKind::kPropertySet: return "Property Set";
    case CommandKind::kIdentify: return "Identify";
    case CommandKind::kGetLogPage: return "Get Log Page";
    case CommandKind::kKeepAlive: return "Keep Alive";
    case CommandKind::kFlush: return "Flush";
    case CommandKind::kWrite: return "Write";
    case CommandKind::kRead: return "Read";
    case CommandKind::kAuthSend: return "AUTH_Send";
    case CommandKind::kAuthReceive: return "AUTH_Receive";
  }
  return "unknown";
}

ParseResult parse_command(std::span<const std::byte> capsule, const QueueContext& ctx) {
  if (capsule.size() < 4)
    return Refusal{false, 0, NvmeStatus::of(StatusCode::kInvalidField), 0,
                   "capsule too short for a command id"};
  if (capsule.size() < kCommandCapsuleHeader) {
    std::uint16_t cid;
    std::memcpy(&cid, capsule.data() + offsetof(NvmeCommand, cid), sizeof cid);
    return refuse(cid, StatusCode::kInvalidField, "capsule shorter than a 64-byte SQE");
  }
  NvmeCommand sqe;
  std::memcpy(&sqe, capsule.data(), sizeof sqe);

  // NVMe base 4.2: fused operations are not supported by this controller.
  if (sqe.flags & kFlagsFuseMask)
    return refuse(sqe.cid, StatusCode::kInvalidField, "fused operation");
  // NVMe-oF 1.1 section 2.3.1: PSDT shall be 01b on fabrics.
  if ((sqe.flags & kFlagsPsdtMask) != kPsdtSglMetaBuffer)
    return refuse(sqe.cid, StatusCode::kInvalidField, "PSDT is not 01b (SGL)");

  if (sqe.opcode == kFabricsOpcode) return parse_fabrics(sqe, capsule, ctx);
  // NVMe-oF 1.1 section 3.3: the first command on a queue is Connect.
  if (!ctx.connected)
    return refuse(sqe.cid, StatusCode::kCommandSequenceError, "command before Connect");
  // The same opcode means different commands on the two queue types (02h is
  // Get Log Page on the admin queue, Read on an I/O queue), so the queue
  // type selects the table.
  return ctx.type == QueueType::kAdmin ? parse_admin(sqe, capsule, ctx) : parse_io(sqe, capsule, ctx);
}

NvmeStatus check_transfer_length(const Command& cmd, std::uint32_t block_size) {
  if (cmd.kind != CommandKind::kRead && cmd.kind != CommandKind::kWrite) return NvmeStatus::success();
  if (std::uint64_t{cmd.rw.nlb} * block_size != cmd.data.length)
    return NvmeStatus::of(StatusCode::kDataSglLengthInvalid);
  return NvmeStatus::success();
}

std::variant<ConnectInfo, Refusal> parse_connect_data(std::span<const std::byte> data) {
  auto bad = [](std::uint16_t offset, const char* reason) {
    return Refusal{false, 0, NvmeStatus::of(StatusCode::kConnectInvalidParameters),
                   connect_ipo(true, offset), reason};
  };
  if (data.size() != sizeof(ConnectData))
    return Refusal{false, 0, NvmeStatus::of(StatusCode::kDataSglLengthInvalid), 0,
                   "Connect data is not 1024 bytes"};
  ConnectInfo info;
  std::memcpy(info.hostid.data(), data.data(), 16);
  std::memcpy(&info.cntlid, data.data() + offsetof(ConnectData, cntlid), 2);
  auto nqn = [&](std::size_t offset) -> std::string_view {
    const char* p = reinterpret_cast<const char*>(data.data() + offset);
    const void* nul = std::memchr(p, 0, 256);
    return nul ? std::string_view(p, static_cast<const char*>(nul) - p) : std::string_view();
  };
  info.subnqn = nqn(offsetof(ConnectData, subnqn));
  info.hostnqn = nqn(offsetof(ConnectData, hostnqn));
  if (info.subnqn.empty())
    return bad(offsetof(ConnectData, subnqn), "SUBNQN empty or not NUL-terminated");
  if (info.hostnqn.empty())
    return bad(offsetof(ConnectData, hostnqn), "HOSTNQN empty or not NUL-terminated");
  return info;
}

}  // namespace srdma::nvmf
