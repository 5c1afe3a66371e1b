// NVMe in-band authentication on the wire: the AUTH_Send / AUTH_Receive
// Fabrics commands and the DH-HMAC-CHAP messages they carry (NVMe Base
// Specification 2.0 section 8.13 and the Fabrics command set, TP 8006; the
// same layouts as Linux's include/linux/nvme.h, nvmf_auth_*).
//
// Every struct here is exactly the bytes on the wire, little-endian, with no
// padding (the static_asserts are the proof), like nvmf/wire.h. The message
// structs are the fixed headers; the variable parts (challenge, response,
// DH value, protocol descriptors) follow them.
//
// Not srdma::Result on purpose: this header and the message codec are also
// built by clang 14 for the libFuzzer target (fuzz/auth_fuzz.cc).
#pragma once

#include <cstddef>
#include <bit>
#include <cstdint>
#include <span>
#include <type_traits>
#include <variant>

#include "nvmf/status.h"
#include "nvmf/wire.h"

namespace srdma::nvmf::auth {

// ------------------------------------------------------------ identifiers --

// AUTH_Send / AUTH_Receive CDW10: SECP (security protocol) E9h is "NVMe
// in-band authentication"; SPSP0 and SPSP1 are 01h for DH-HMAC-CHAP.
inline constexpr std::uint8_t kSecpNvmeAuth = 0xE9;
inline constexpr std::uint8_t kSpsp0 = 0x01;
inline constexpr std::uint8_t kSpsp1 = 0x01;

// Message byte 0: common messages (AUTH_Negotiate, AUTH_Failure1/2) or the
// protocol's own (DH-HMAC-CHAP_*).
enum class AuthType : std::uint8_t {
  kCommon = 0x00,
  kDhchap = 0x01,
};

// Message byte 1.
enum class MessageId : std::uint8_t {
  kNegotiate = 0x00,  // host -> controller (AUTH_Send), common
  kChallenge = 0x01,  // controller -> host (AUTH_Receive)
  kReply = 0x02,      // host -> controller
  kSuccess1 = 0x03,   // controller -> host
  kSuccess2 = 0x04,   // host -> controller, bidirectional only
  kFailure2 = 0xF0,   // host -> controller, common
  kFailure1 = 0xF1,   // controller -> host, common
};

// The protocol descriptor's AUTHID for DH-HMAC-CHAP (the only one defined).
inline constexpr std::uint8_t kAuthIdDhchap = 0x01;

// SC_C, secure channel concatenation: only "none" here (no TLS).
inline constexpr std::uint8_t kScNone = 0x00;

enum class HashId : std::uint8_t {
  kSha256 = 0x01,
  kSha384 = 0x02,
  kSha512 = 0x03,
};

enum class DhGroup : std::uint8_t {
  kNull = 0x00,  // no Diffie-Hellman exchange: plain HMAC-CHAP
  kFfdhe2048 = 0x01,
  kFfdhe3072 = 0x02,
  kFfdhe4096 = 0x03,
  kFfdhe6144 = 0x04,
  kFfdhe8192 = 0x05,
};

// Digest (and HMAC) length of a hash function: the HL of every message.
constexpr std::size_t hash_length(HashId h) {
  switch (h) {
    case HashId::kSha256: return 32;
    case HashId::kSha384: return 48;
    case HashId::kSha512: return 64;
  }
  return 0;
}
constexpr bool is_known_hash(std::uint8_t id) { return id >= 0x01 && id <= 0x03; }
// A hash length some hash function has (HL of a Reply or Success1).
constexpr bool is_hash_length(std::size_t hl) { return hl == 32 || hl == 48 || hl == 64; }

// Bytes of a DH value (the group's prime): 0 for the null group.
constexpr std::size_t dh_value_length(DhGroup g) {
  switch (g) {
    case DhGroup::kNull: return 0;
    case DhGroup::kFfdhe2048: return 256;
    case DhGroup::kFfdhe3072: return 384;
    case DhGroup::kFfdhe4096: return 512;
    case DhGroup::kFfdhe6144: return 768;
    case DhGroup::kFfdhe8192: return 1024;
  }
  return 0;
}
constexpr bool is_known_dh_group(std::uint8_t id) { return id <= 0x05; }

// "SHA-256", "ffdhe2048", "null"; "unknown" for values outside the enums.
const char* hash_name(HashId h);
const char* dh_group_name(DhGroup g);
// The specification's words for a reason code explanation, "unknown" if none.
const char* failure_reason_name(std::uint8_t rescode_exp);

// AUTH_Failure reason code (byte 6): the only one defined.
inline constexpr std::uint8_t kReasonAuthenticationFailure = 0x01;

// AUTH_Failure reason code explanation (byte 7).
enum class FailureReason : std::uint8_t {
  kFailed = 0x01,             // the response did not verify (wrong secret)
  kProtocolUnusable = 0x02,   // no DH-HMAC-CHAP descriptor
  kConcatMismatch = 0x03,     // secure channel concatenation asked for
  kHashUnusable = 0x04,       // no common hash function
  kDhGroupUnusable = 0x05,    // no common DH group
  kIncorrectPayload = 0x06,   // a field or a length is wrong
  kIncorrectMessage = 0x07,   // a message out of sequence
};

// ------------------------------------------------------- Connect response --

// Connect response DW0 bits 31:16 are AUTHREQ (Linux NVME_CONNECT_AUTHREQ_*):
// ATR, "authentication transaction required": the host shall authenticate
// this queue with AUTH_Send/AUTH_Receive before anything else runs on it.
inline constexpr std::uint32_t kConnectAuthreqAtr = 1u << 17;
// ASCR, "authentication and secure channel required" (TLS): never set here.
inline constexpr std::uint32_t kConnectAuthreqAscr = 1u << 18;

// Command specific status (SCT 1, SC 91h) for any command but Connect,
// AUTH_Send and AUTH_Receive on a queue that has not authenticated yet
// (Linux NVME_SC_AUTH_REQUIRED).
inline constexpr StatusCode kAuthenticationRequired = StatusCode::kAuthenticationRequired;

// ------------------------------------------------------------- commands --

// AUTH_Send (fctype 05h) and AUTH_Receive (fctype 06h): the Fabrics command
// layout with CDW10 = SECP 31:24, SPSP1 23:16, SPSP0 15:8, NSSF 7:0 and
// CDW11 = TL (transfer length, Send) or AL (allocation length, Receive).
struct AuthCommand {
  std::uint8_t opcode = kFabricsOpcode;
  std::uint8_t flags = kPsdtSglMetaBuffer;  // PSDT 01b: SGLs, as on every fabrics SQE
  std::uint16_t cid = 0;
  std::uint8_t fctype = 0;
  std::uint8_t rsvd5[19] = {};
  NvmeSgl dptr;
  std::uint8_t nssf = 0;  // reserved on fabrics
  std::uint8_t spsp0 = 0;
  std::uint8_t spsp1 = 0;
  std::uint8_t secp = 0;
  std::uint32_t length = 0;  // TL or AL, bytes
  std::uint8_t rsvd48[16] = {};
};
static_assert(sizeof(AuthCommand) == 64);
static_assert(offsetof(AuthCommand, fctype) == 4);
static_assert(offsetof(AuthCommand, dptr) == 24);
static_assert(offsetof(AuthCommand, spsp0) == 41);
static_assert(offsetof(AuthCommand, spsp1) == 42);
static_assert(offsetof(AuthCommand, secp) == 43);
static_assert(offsetof(AuthCommand, length) == 44);

// The largest AUTH_Send a target takes: an AUTH_Negotiate with 255 protocol
// descriptors (8 + 255 * 64 bytes). Every other message is far smaller; a
// cap keeps a hostile TL from sizing the target's buffer.
inline constexpr std::uint32_t kMaxAuthSendLength = 16384;
// The AL a host gives AUTH_Receive (Linux's CHAP_BUF_SIZE): room for the
// largest controller message, a Challenge with an ffdhe8192 value (1104).
inline constexpr std::uint32_t kAuthReceiveLength = 4096;

static_assert(std::is_trivially_copyable_v<AuthCommand>);

AuthCommand make_auth_send(std::uint16_t cid, std::uint32_t tl, const NvmeSgl& dptr);
AuthCommand make_auth_receive(std::uint16_t cid, std::uint32_t al, const NvmeSgl& dptr);

// The same 64 bytes as the SQE a host queue submits.
inline NvmeCommand as_nvme_command(const AuthCommand& c) { return std::bit_cast<NvmeCommand>(c); }

// A validated AUTH_Send or AUTH_Receive SQE.
struct AuthCommandFields {
  bool send = false;         // AUTH_Send (data host -> controller) or AUTH_Receive
  std::uint16_t cid = 0;
  std::uint32_t length = 0;  // TL or AL, 1..: the data SGL must describe exactly this
  NvmeSgl dptr;
};
// A refused one: the status to complete it with and the byte offset of the
// offending field in the SQE (the error information log's parameter location).
struct AuthCommandError {
  StatusCode code = StatusCode::kInvalidField;
  std::uint16_t offset = 0;
  const char* reason = "";
};
// Checks opcode, fctype (05h or 06h), SECP, SPSP0/1 and a non-zero TL/AL as
// Linux's nvmet_execute_auth_send/receive do, and TL <= kMaxAuthSendLength.
// Total: any 64 bytes (shorter input is refused too).
std::variant<AuthCommandFields, AuthCommandError> parse_auth_command(std::span<const std::byte> sqe);

// ------------------------------------------------------------- messages --

// AUTH_Negotiate: this header, then NAPD protocol descriptors.
struct NegotiateHeader {
  std::uint8_t auth_type = 0;  // kCommon
  std::uint8_t auth_id = 0;    // kNegotiate
  std::uint16_t rsvd2 = 0;
  std::uint16_t t_id = 0;      // transaction identifier, chosen by the host
  std::uint8_t sc_c = 0;       // secure channel concatenation
  std::uint8_t napd = 0;       // number of protocol descriptors
};
static_assert(sizeof(NegotiateHeader) == 8);
static_assert(offsetof(NegotiateHeader, t_id) == 4);

// The DH-HMAC-CHAP protocol descriptor: HALEN hash ids in idlist[0..29],
// DHLEN DH group ids in idlist[30..59].
struct ProtocolDescriptor {
  std::uint8_t authid = 0;  // kAuthIdDhchap
  std::uint8_t rsvd1 = 0;
  std::uint8_t halen = 0;
  std::uint8_t dhlen = 0;
  std::uint8_t idlist[60] = {};
};
static_assert(sizeof(ProtocolDescriptor) == 64);
inline constexpr std::size_t kMaxHashIds = 30;
inline constexpr std::size_t kMaxDhGroupIds = 30;
inline constexpr std::size_t kDhGroupIdsOffset = 30;  // in idlist

// DH-HMAC-CHAP_Challenge: this header, then HL bytes of challenge C1, then
// DHVLEN bytes of the controller's DH value g^y mod p (big-endian, the
// group's size).
struct ChallengeHeader {
  std::uint8_t auth_type = 0;  // kDhchap
  std::uint8_t auth_id = 0;    // kChallenge
  std::uint16_t rsvd2 = 0;
  std::uint16_t t_id = 0;
  std::uint8_t hl = 0;         // hash length: 32, 48 or 64
  std::uint8_t rsvd7 = 0;
  std::uint8_t hashid = 0;
  std::uint8_t dhgid = 0;
  std::uint16_t dhvlen = 0;
  std::uint32_t seqnum = 0;    // S1
};
static_assert(sizeof(ChallengeHeader) == 16);
static_assert(offsetof(ChallengeHeader, hl) == 6 && offsetof(ChallengeHeader, hashid) == 8);
static_assert(offsetof(ChallengeHeader, dhvlen) == 10 && offsetof(ChallengeHeader, seqnum) == 12);

// DH-HMAC-CHAP_Reply: this header, then HL bytes of response R1, HL bytes of
// challenge C2 (meaningful when CVALID), DHVLEN bytes of the host's g^x mod p.
struct ReplyHeader {
  std::uint8_t auth_type = 0;  // kDhchap
  std::uint8_t auth_id = 0;    // kReply
  std::uint16_t rsvd2 = 0;
  std::uint16_t t_id = 0;
  std::uint8_t hl = 0;
  std::uint8_t rsvd7 = 0;
  std::uint8_t cvalid = 0;     // 1: C2 is valid, the host authenticates the controller
  std::uint8_t rsvd9 = 0;
  std::uint16_t dhvlen = 0;
  std::uint32_t seqnum = 0;    // S2; 0 when not bidirectional
};
static_assert(sizeof(ReplyHeader) == 16);
static_assert(offsetof(ReplyHeader, cvalid) == 8 && offsetof(ReplyHeader, dhvlen) == 10 &&
              offsetof(ReplyHeader, seqnum) == 12);

// DH-HMAC-CHAP_Success1: this header, then HL bytes of response R2 when RVALID.
struct Success1Header {
  std::uint8_t auth_type = 0;  // kDhchap
  std::uint8_t auth_id = 0;    // kSuccess1
  std::uint16_t rsvd2 = 0;
  std::uint16_t t_id = 0;
  std::uint8_t hl = 0;
  std::uint8_t rsvd7 = 0;
  std::uint8_t rvalid = 0;     // 1: R2 follows
  std::uint8_t rsvd9[7] = {};
};
static_assert(sizeof(Success1Header) == 16);
static_assert(offsetof(Success1Header, rvalid) == 8);

// DH-HMAC-CHAP_Success2: the host's acknowledgement of a valid R2.
struct Success2Header {
  std::uint8_t auth_type = 0;  // kDhchap
  std::uint8_t auth_id = 0;    // kSuccess2
  std::uint16_t rsvd2 = 0;
  std::uint16_t t_id = 0;
  std::uint8_t rsvd6[10] = {};
};
static_assert(sizeof(Success2Header) == 16);

// AUTH_Failure1 (controller) / AUTH_Failure2 (host).
struct FailureMessage {
  std::uint8_t auth_type = 0;  // kCommon
  std::uint8_t auth_id = 0;    // kFailure1 or kFailure2
  std::uint16_t rsvd2 = 0;
  std::uint16_t t_id = 0;
  std::uint8_t rescode = 0;      // kReasonAuthenticationFailure
  std::uint8_t rescode_exp = 0;  // FailureReason
};
static_assert(sizeof(FailureMessage) == 8);
static_assert(offsetof(FailureMessage, rescode) == 6);

// The largest DH value (ffdhe8192) and the largest message either side
// builds: a Reply with SHA-512 and ffdhe8192 (16 + 2 * 64 + 1024).
inline constexpr std::size_t kMaxDhValueLength = 1024;
inline constexpr std::size_t kMaxMessageLength = sizeof(ReplyHeader) + 2 * 64 + kMaxDhValueLength;

}  // namespace srdma::nvmf::auth
