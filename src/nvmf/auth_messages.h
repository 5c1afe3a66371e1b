// The DH-HMAC-CHAP message codec: bytes -> a decoded message, or the reason
// (an AUTH_Failure reason code explanation) it is malformed; and the
// encoders for every message either side sends.
//
// The parser never reads outside its input and checks everything that can
// be checked from the message alone: the type and id pair, every length
// against the buffer, the hash and DH group ids and the lengths they imply,
// flag values. What needs the transaction's state (is the T_ID ours, is this
// the message we wait for, is the hash one we offered) is the state
// machines' job (nvmf/auth_dhchap.h). A controller or a host may send
// anything: fuzz/auth_fuzz.cc holds the parser to that.
//
// Trailing bytes after a message are ignored: an AUTH_Receive buffer is AL
// bytes (Linux's target copies all of them, zero-padded), so the message's
// own lengths, not the transfer's, say where it ends.
//
// Not srdma::Result on purpose (clang 14 builds this for the fuzzer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "nvmf/auth_wire.h"

namespace srdma::nvmf::auth {

// Views of message contents (challenges, responses, DH values) as the
// OpenSSL calls take them; valid while the parsed buffer is.
using ByteView = std::span<const std::uint8_t>;

struct Negotiate {
  std::uint16_t t_id = 0;
  std::uint8_t sc_c = 0;
  // The first DH-HMAC-CHAP descriptor's lists as sent, unknown ids included
  // (the controller picks from what it knows).
  ByteView hash_ids;
  ByteView dh_group_ids;
};

struct Challenge {
  std::uint16_t t_id = 0;
  HashId hash = HashId::kSha256;
  DhGroup group = DhGroup::kNull;
  std::uint32_t seqnum = 0;  // S1
  ByteView challenge;        // C1, hash_length(hash) bytes
  ByteView dh_value;         // dh_value_length(group) bytes (none for null)
};

struct Reply {
  std::uint16_t t_id = 0;
  std::uint8_t hl = 0;       // 32, 48 or 64
  bool cvalid = false;
  std::uint32_t seqnum = 0;  // S2
  ByteView response;         // R1, hl bytes
  ByteView challenge;        // C2, hl bytes (meaningful when cvalid)
  ByteView dh_value;         // DHVLEN bytes
};

struct Success1 {
  std::uint16_t t_id = 0;
  std::uint8_t hl = 0;
  bool rvalid = false;
  ByteView response;  // R2, hl bytes when rvalid, else empty
};

struct Success2 {
  std::uint16_t t_id = 0;
};

struct Failure {
  MessageId id = MessageId::kFailure1;  // kFailure1 or kFailure2
  std::uint16_t t_id = 0;
  std::uint8_t rescode = 0;
  std::uint8_t rescode_exp = 0;  // FailureReason, as sent (may be unknown)
};

// Not a message we can take: what to say in the AUTH_Failure that answers it.
struct Malformed {
  FailureReason reason = FailureReason::kIncorrectPayload;
  bool t_id_valid = false;  // the input was long enough to carry a T_ID
  std::uint16_t t_id = 0;
  const char* what = "";    // one phrase for a log line
};

using Message = std::variant<Negotiate, Challenge, Reply, Success1, Success2, Failure, Malformed>;

// Total: any byte string gives one of the alternatives. Views point into `bytes`.
Message parse_message(std::span<const std::byte> bytes);

// "AUTH_Negotiate", "DH-HMAC-CHAP_Challenge" ... for log lines.
const char* message_name(const Message& m);

// Encoders. The arguments are the sender's own values and are trusted:
// lists longer than 30 ids are cut to 30; `challenge` and `dh_value` must
// have the lengths the hash and group imply.
std::vector<std::byte> encode_negotiate(std::uint16_t t_id, std::span<const HashId> hashes,
                                        std::span<const DhGroup> groups);
std::vector<std::byte> encode_challenge(std::uint16_t t_id, HashId hash, DhGroup group,
                                        std::uint32_t seqnum, ByteView challenge, ByteView dh_value);
// `challenge2` empty: CVALID 0 and HL zero bytes in its place (as Linux sends).
std::vector<std::byte> encode_reply(std::uint16_t t_id, ByteView response, ByteView challenge2,
                                    std::uint32_t seqnum, ByteView dh_value);
// `response` empty: RVALID 0, the header alone.
std::vector<std::byte> encode_success1(std::uint16_t t_id, std::uint8_t hl, ByteView response);
std::vector<std::byte> encode_success2(std::uint16_t t_id);
// `id` is kFailure1 (controller) or kFailure2 (host).
std::vector<std::byte> encode_failure(MessageId id, std::uint16_t t_id, FailureReason reason);

}  // namespace srdma::nvmf::auth
