// The target's command capsule parser: bytes received on a queue -> either a
// decoded, validated command, or the NVMe status to answer it with.
//
// What it checks is what can be checked from the capsule and the queue alone
// (form, opcode for this queue type, sequence, SGL, in-capsule bounds, field
// ranges). What needs the controller's state -- does the namespace exist, is
// the command id in use, does the SGL length match nlb * block size, is the
// subsystem NQN known -- is the target's job after a successful parse
// (`check_transfer_length` helps with the length).
//
// It never crashes and never reads outside `capsule`, whatever the bytes:
// a libFuzzer target (fuzz/capsule_fuzz.cc) holds it to that.
//
// Not srdma::Result on purpose: this file is also built by clang 14 for the
// fuzz target, which cannot use libstdc++ 12's <expected>.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <variant>

#include "nvmf/status.h"
#include "nvmf/wire.h"

namespace srdma::nvmf {

enum class QueueType : std::uint8_t { kAdmin, kIo };

// What the parser needs to know about the queue a capsule arrived on.
struct QueueContext {
  QueueType type = QueueType::kAdmin;
  // Has this queue's Connect succeeded? Before it, only Connect is accepted;
  // after it, Connect is a sequence error (NVMe-oF 1.1 section 3.3).
  bool connected = false;
  // Bytes of in-capsule data the queue accepts after the 64-byte SQE: for an
  // I/O queue IOCCSZ * 16 - 64; 0 means no in-capsule data.
  std::uint32_t in_capsule_data_size = 0;
  // Largest queue size (entries) a Connect may ask for: CAP.MQES + 1.
  std::uint32_t max_queue_size = 128;
};

enum class CommandKind : std::uint8_t {
  kConnect,
  kPropertyGet,
  kPropertySet,
  kIdentify,
  kGetLogPage,
  kKeepAlive,
  kFlush,
  kWrite,
  kRead,
  kAuthSend,     // AUTH_Send (Fabrics 05h): DH-HMAC-CHAP message, host to controller
  kAuthReceive,  // AUTH_Receive (Fabrics 06h): the controller's next message
};
std::string_view command_kind_name(CommandKind k);

// Where a command's data is.
struct DataDescriptor {
  enum class Kind : std::uint8_t {
    kNone,       // no data (Keep Alive, Flush, Property Get/Set)
    kKeyed,      // remote memory: RDMA READ (host to controller) or WRITE from the target
    kInCapsule,  // the bytes came with the command
  };
  Kind kind = Kind::kNone;
  std::uint64_t addr = 0;    // keyed: remote virtual address
  std::uint32_t length = 0;  // bytes, either kind
  std::uint32_t key = 0;     // keyed: the rkey
  bool invalidate = false;   // keyed, subtype Fh: answer with send-with-invalidate of `key`
  // In-capsule: the data, a view into the parsed capsule (valid while it is).
  std::span<const std::byte> in_capsule;
};

struct ConnectFields {
  std::uint16_t recfmt = 0;
  std::uint16_t qid = 0;
  std::uint32_t queue_size = 0;  // entries (SQSIZE + 1)
  std::uint8_t cattr = 0;
  std::uint32_t kato_ms = 0;
};
struct PropertyFields {
  Property property = Property::kCap;
  std::uint8_t size = 4;    // bytes
  std::uint64_t value = 0;  // Property Set
};
struct IdentifyFields {
  Cns cns = Cns::kController;
  std::uint16_t cntid = 0;
};
struct GetLogPageFields {
  std::uint8_t lid = 0;
  std::uint64_t offset = 0;  // bytes into the log, dword aligned
  std::uint32_t length = 0;  // bytes (NUMD + 1 dwords)
};
struct ReadWriteFields {
  std::uint64_t slba = 0;
  std::uint32_t nlb = 0;  // blocks, 1..65536 (the wire's 0's based value + 1)
  bool fua = false;       // force unit access (CDW12 bit 30)
};

// A decoded, validated command. Only the fields of its kind are meaningful.
struct Command {
  CommandKind kind = CommandKind::kKeepAlive;
  std::uint16_t cid = 0;
  std::uint32_t nsid = 0;
  DataDescriptor data;
  ConnectFields connect;
  PropertyFields property;
  IdentifyFields identify;
  GetLogPageFields log;
  ReadWriteFields rw;
  std::uint32_t auth_length = 0;  // AUTH_Send TL / AUTH_Receive AL: the data SGL describes exactly this
};

// A refused capsule: answer `cid` with `status` (and `dw0` in the result).
struct Refusal {
  bool cid_valid = true;  // false if the capsule was too short to carry a command id
  std::uint16_t cid = 0;
  NvmeStatus status;
  std::uint32_t dw0 = 0;  // Connect Invalid Parameters: IATTR (bit 16) and IPO (15:0)
  const char* reason = "";  // one phrase for a log line
};

using ParseResult = std::variant<Command, Refusal>;

// Parses one command capsule (SQE plus any in-capsule data) received on a
// queue described by `ctx`. Total: any byte string gives a Command or a
// Refusal. The Command's in-capsule data view points into `capsule`.
// Thread-safe (pure).
ParseResult parse_command(std::span<const std::byte> capsule, const QueueContext& ctx);

// For Read/Write: the data descriptor must cover nlb * block_size bytes
// exactly (NVMe base: Data SGL Length Invalid when it is short; we refuse a
// longer one too, as Linux's nvmet_check_transfer_len does).
NvmeStatus check_transfer_length(const Command& cmd, std::uint32_t block_size);

// Connect data, validated: both NQNs NUL-terminated inside their fields.
// Views into the data passed to parse_connect_data.
struct ConnectInfo {
  std::array<std::uint8_t, 16> hostid{};
  std::uint16_t cntlid = 0;
  std::string_view subnqn;
  std::string_view hostnqn;
};
// Refusals carry Connect Invalid Parameters with IATTR = 1 (the data) and the
// offending offset; cid_valid is false (the caller knows the Connect's cid).
std::variant<ConnectInfo, Refusal> parse_connect_data(std::span<const std::byte> data);

// Connect Invalid Parameters result: IATTR bit 16 (1 = in the Connect data), IPO 15:0.
constexpr std::uint32_t connect_ipo(bool in_data, std::uint16_t offset) {
  return (in_data ? 1u << 16 : 0u) | offset;
}

}  // namespace srdma::nvmf
