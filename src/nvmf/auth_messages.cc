#include "nvmf/auth_messages.h"

#include <algorithm>
#include <cstring>

namespace srdma::nvmf::auth {

const char* hash_name(HashId h) {
  switch (h) {
    case HashId::kSha256: return "SHA-256";
    case HashId::kSha384: return "SHA-384";
    case HashId::kSha512: return "SHA-512";
  }
  return "unknown";
}

const char* dh_group_name(DhGroup g) {
  switch (g) {
    case DhGroup::kNull: return "null";
    case DhGroup::kFfdhe2048: return "ffdhe2048";
    case DhGroup::kFfdhe3072: return "ffdhe3072";
    case DhGroup::kFfdhe4096: return "ffdhe4096";
    case DhGroup::kFfdhe6144: return "ffdhe6144";
    case DhGroup::kFfdhe8192: return "ffdhe8192";
  }
  return "unknown";
}

const char* failure_reason_name(std::uint8_t rescode_exp) {
  switch (rescode_exp) {
    case 0x01: return "authentication failed";
    case 0x02: return "authentication protocol not usable";
    case 0x03: return "secure channel concatenation mismatch";
    case 0x04: return "hash function not usable";
    case 0x05: return "DH group not usable";
    case 0x06: return "incorrect payload";
    case 0x07: return "incorrect protocol message";
    default: return "unknown";
  }
}

// ------------------------------------------------------------- commands --

namespace {

AuthCommand make_auth_command(FabricsType type, std::uint16_t cid, std::uint32_t length,
                              const NvmeSgl& dptr) {
  AuthCommand c;
  c.cid = cid;
  c.fctype = static_cast<std::uint8_t>(type);
  c.dptr = dptr;
  c.spsp0 = kSpsp0;
  c.spsp1 = kSpsp1;
  c.secp = kSecpNvmeAuth;
  c.length = length;
  return c;
}

}  // namespace

AuthCommand make_auth_send(std::uint16_t cid, std::uint32_t tl, const NvmeSgl& dptr) {
  return make_auth_command(FabricsType::kAuthenticationSend, cid, tl, dptr);
}

AuthCommand make_auth_receive(std::uint16_t cid, std::uint32_t al, const NvmeSgl& dptr) {
  return make_auth_command(FabricsType::kAuthenticationReceive, cid, al, dptr);
}

std::variant<AuthCommandFields, AuthCommandError> parse_auth_command(std::span<const std::byte> sqe) {
  if (sqe.size() < sizeof(AuthCommand))
    return AuthCommandError{StatusCode::kInvalidField, 0, "AUTH command shorter than an SQE"};
  AuthCommand c;
  std::memcpy(&c, sqe.data(), sizeof c);
  if (c.opcode != kFabricsOpcode)
    return AuthCommandError{StatusCode::kInvalidOpcode, offsetof(AuthCommand, opcode), "not a Fabrics command"};
  const bool send = c.fctype == static_cast<std::uint8_t>(FabricsType::kAuthenticationSend);
  if (!send && c.fctype != static_cast<std::uint8_t>(FabricsType::kAuthenticationReceive))
    return AuthCommandError{StatusCode::kInvalidOpcode, offsetof(AuthCommand, fctype),
                            "fctype is neither AUTH_Send nor AUTH_Receive"};
  if (c.secp != kSecpNvmeAuth)
    return AuthCommandError{StatusCode::kInvalidField, offsetof(AuthCommand, secp),
                            "SECP is not E9h (NVMe in-band authentication)"};
  if (c.spsp0 != kSpsp0)
    return AuthCommandError{StatusCode::kInvalidField, offsetof(AuthCommand, spsp0), "SPSP0 is not 01h"};
  if (c.spsp1 != kSpsp1)
    return AuthCommandError{StatusCode::kInvalidField, offsetof(AuthCommand, spsp1), "SPSP1 is not 01h"};
  if (c.length == 0)
    return AuthCommandError{StatusCode::kInvalidField, offsetof(AuthCommand, length),
                            send ? "AUTH_Send TL is 0" : "AUTH_Receive AL is 0"};
  if (send && c.length > kMaxAuthSendLength)
    return AuthCommandError{StatusCode::kInvalidField, offsetof(AuthCommand, length),
                            "AUTH_Send TL above the largest message"};
  return AuthCommandFields{send, c.cid, c.length, c.dptr};
}

// ------------------------------------------------------------- messages --

namespace {

ByteView view(std::span<const std::byte> bytes, std::size_t offset, std::size_t length) {
  return ByteView(reinterpret_cast<const std::uint8_t*>(bytes.data()) + offset, length);
}

template <class Header>
Header load(std::span<const std::byte> bytes) {
  Header h;
  std::memcpy(&h, bytes.data(), sizeof h);
  return h;
}

Malformed malformed(std::span<const std::byte> bytes, FailureReason reason, const char* what) {
  Malformed m;
  m.reason = reason;
  m.what = what;
  if (bytes.size() >= 6) {
    m.t_id_valid = true;
    std::memcpy(&m.t_id, bytes.data() + 4, 2);
  }
  return m;
}

Message parse_negotiate(std::span<const std::byte> bytes) {
  if (bytes.size() < sizeof(NegotiateHeader))
    return malformed(bytes, FailureReason::kIncorrectPayload, "AUTH_Negotiate shorter than its header");
  const auto h = load<NegotiateHeader>(bytes);
  if (h.napd == 0)
    return malformed(bytes, FailureReason::kProtocolUnusable, "AUTH_Negotiate without protocol descriptors");
  // Every descriptor NAPD announces must be there (8 + 255 * 64 at most: no overflow).
  if (bytes.size() < sizeof(NegotiateHeader) + std::size_t{h.napd} * sizeof(ProtocolDescriptor))
    return malformed(bytes, FailureReason::kIncorrectPayload, "AUTH_Negotiate shorter than NAPD descriptors");
  for (std::size_t i = 0; i < h.napd; ++i) {
    const std::size_t at = sizeof(NegotiateHeader) + i * sizeof(ProtocolDescriptor);
    ProtocolDescriptor d;
    std::memcpy(&d, bytes.data() + at, sizeof d);
    if (d.authid != kAuthIdDhchap) continue;
    if (d.halen > kMaxHashIds || d.dhlen > kMaxDhGroupIds)
      return malformed(bytes, FailureReason::kIncorrectPayload, "HALEN or DHLEN above 30");
    Negotiate n;
    n.t_id = h.t_id;
    n.sc_c = h.sc_c;
    const std::size_t ids = at + offsetof(ProtocolDescriptor, idlist);
    n.hash_ids = view(bytes, ids, d.halen);
    n.dh_group_ids = view(bytes, ids + kDhGroupIdsOffset, d.dhlen);
    return n;
  }
  return malformed(bytes, FailureReason::kProtocolUnusable, "no DH-HMAC-CHAP protocol descriptor");
}

Message parse_challenge(std::span<const std::byte> bytes) {
  if (bytes.size() < sizeof(ChallengeHeader))
    return malformed(bytes, FailureReason::kIncorrectPayload, "Challenge shorter than its header");
  const auto h = load<ChallengeHeader>(bytes);
  if (!is_known_hash(h.hashid))
    return malformed(bytes, FailureReason::kHashUnusable, "Challenge with an unknown hash id");
  if (!is_known_dh_group(h.dhgid))
    return malformed(bytes, FailureReason::kDhGroupUnusable, "Challenge with an unknown DH group id");
  Challenge c;
  c.t_id = h.t_id;
  c.hash = static_cast<HashId>(h.hashid);
  c.group = static_cast<DhGroup>(h.dhgid);
  c.seqnum = h.seqnum;
  if (h.hl != hash_length(c.hash))
    return malformed(bytes, FailureReason::kIncorrectPayload, "Challenge HL is not the hash's length");
  if (h.dhvlen != dh_value_length(c.group))
    return malformed(bytes, FailureReason::kIncorrectPayload, "Challenge DHVLEN is not the DH group's size");
  if (bytes.size() < sizeof h + h.hl + std::size_t{h.dhvlen})
    return malformed(bytes, FailureReason::kIncorrectPayload, "Challenge shorter than HL + DHVLEN");
  c.challenge = view(bytes, sizeof h, h.hl);
  c.dh_value = view(bytes, sizeof h + h.hl, h.dhvlen);
  return c;
}

Message parse_reply(std::span<const std::byte> bytes) {
  if (bytes.size() < sizeof(ReplyHeader))
    return malformed(bytes, FailureReason::kIncorrectPayload, "Reply shorter than its header");
  const auto h = load<ReplyHeader>(bytes);
  if (!is_hash_length(h.hl))
    return malformed(bytes, FailureReason::kIncorrectPayload, "Reply HL is no hash's length");
  if (h.cvalid > 1) return malformed(bytes, FailureReason::kIncorrectPayload, "Reply CVALID is neither 0 nor 1");
  if (h.dhvlen > kMaxDhValueLength)
    return malformed(bytes, FailureReason::kIncorrectPayload, "Reply DHVLEN above the largest DH group");
  if (bytes.size() < sizeof h + 2 * std::size_t{h.hl} + h.dhvlen)
    return malformed(bytes, FailureReason::kIncorrectPayload, "Reply shorter than 2 * HL + DHVLEN");
  Reply r;
  r.t_id = h.t_id;
  r.hl = h.hl;
  r.cvalid = h.cvalid == 1;
  r.seqnum = h.seqnum;
  r.response = view(bytes, sizeof h, h.hl);
  r.challenge = view(bytes, sizeof h + h.hl, h.hl);
  r.dh_value = view(bytes, sizeof h + 2 * std::size_t{h.hl}, h.dhvlen);
  return r;
}

Message parse_success1(std::span<const std::byte> bytes) {
  if (bytes.size() < sizeof(Success1Header))
    return malformed(bytes, FailureReason::kIncorrectPayload, "Success1 shorter than its header");
  const auto h = load<Success1Header>(bytes);
  if (!is_hash_length(h.hl))
    return malformed(bytes, FailureReason::kIncorrectPayload, "Success1 HL is no hash's length");
  if (h.rvalid > 1) return malformed(bytes, FailureReason::kIncorrectPayload, "Success1 RVALID is neither 0 nor 1");
  Success1 s;
  s.t_id = h.t_id;
  s.hl = h.hl;
  s.rvalid = h.rvalid == 1;
  if (s.rvalid) {
    if (bytes.size() < sizeof h + h.hl)
      return malformed(bytes, FailureReason::kIncorrectPayload, "Success1 shorter than its response");
    s.response = view(bytes, sizeof h, h.hl);
  }
  return s;
}

}  // namespace

Message parse_message(std::span<const std::byte> bytes) {
  if (bytes.size() < 2)
    return malformed(bytes, FailureReason::kIncorrectPayload, "message shorter than its type and id");
  const auto type = static_cast<std::uint8_t>(bytes[0]);
  const auto id = static_cast<std::uint8_t>(bytes[1]);
  if (type == static_cast<std::uint8_t>(AuthType::kCommon)) {
    switch (id) {
      case static_cast<std::uint8_t>(MessageId::kNegotiate):
        return parse_negotiate(bytes);
      case static_cast<std::uint8_t>(MessageId::kFailure1):
      case static_cast<std::uint8_t>(MessageId::kFailure2): {
        if (bytes.size() < sizeof(FailureMessage))
          return malformed(bytes, FailureReason::kIncorrectPayload, "AUTH_Failure shorter than 8 bytes");
        const auto m = load<FailureMessage>(bytes);
        return Failure{static_cast<MessageId>(id), m.t_id, m.rescode, m.rescode_exp};
      }
      default:
        break;
    }
  } else if (type == static_cast<std::uint8_t>(AuthType::kDhchap)) {
    switch (id) {
      case static_cast<std::uint8_t>(MessageId::kChallenge): return parse_challenge(bytes);
      case static_cast<std::uint8_t>(MessageId::kReply): return parse_reply(bytes);
      case static_cast<std::uint8_t>(MessageId::kSuccess1): return parse_success1(bytes);
      case static_cast<std::uint8_t>(MessageId::kSuccess2): {
        if (bytes.size() < sizeof(Success2Header))
          return malformed(bytes, FailureReason::kIncorrectPayload, "Success2 shorter than 16 bytes");
        return Success2{load<Success2Header>(bytes).t_id};
      }
      default:
        break;
    }
  }
  return malformed(bytes, FailureReason::kIncorrectMessage, "unknown message type or id");
}

const char* message_name(const Message& m) {
  struct Namer {
    const char* operator()(const Negotiate&) const { return "AUTH_Negotiate"; }
    const char* operator()(const Challenge&) const { return "DH-HMAC-CHAP_Challenge"; }
    const char* operator()(const Reply&) const { return "DH-HMAC-CHAP_Reply"; }
    const char* operator()(const Success1&) const { return "DH-HMAC-CHAP_Success1"; }
    const char* operator()(const Success2&) const { return "DH-HMAC-CHAP_Success2"; }
    const char* operator()(const Failure& f) const {
      return f.id == MessageId::kFailure1 ? "AUTH_Failure1" : "AUTH_Failure2";
    }
    const char* operator()(const Malformed&) const { return "malformed message"; }
  };
  return std::visit(Namer{}, m);
}

// ------------------------------------------------------------- encoders --

namespace {

template <class Header>
std::vector<std::byte> with_header(const Header& h, std::size_t extra) {
  std::vector<std::byte> out(sizeof h + extra);
  std::memcpy(out.data(), &h, sizeof h);
  return out;
}

void put(std::vector<std::byte>& out, std::size_t at, ByteView bytes) {
  if (!bytes.empty()) std::memcpy(out.data() + at, bytes.data(), bytes.size());
}

}  // namespace

std::vector<std::byte> encode_negotiate(std::uint16_t t_id, std::span<const HashId> hashes,
                                        std::span<const DhGroup> groups) {
  NegotiateHeader h;
  h.auth_type = static_cast<std::uint8_t>(AuthType::kCommon);
  h.auth_id = static_cast<std::uint8_t>(MessageId::kNegotiate);
  h.t_id = t_id;
  h.sc_c = kScNone;
  h.napd = 1;
  ProtocolDescriptor d;
  d.authid = kAuthIdDhchap;
  d.halen = static_cast<std::uint8_t>(std::min(hashes.size(), kMaxHashIds));
  d.dhlen = static_cast<std::uint8_t>(std::min(groups.size(), kMaxDhGroupIds));
  for (std::size_t i = 0; i < d.halen; ++i) d.idlist[i] = static_cast<std::uint8_t>(hashes[i]);
  for (std::size_t i = 0; i < d.dhlen; ++i)
    d.idlist[kDhGroupIdsOffset + i] = static_cast<std::uint8_t>(groups[i]);
  auto out = with_header(h, sizeof d);
  std::memcpy(out.data() + sizeof h, &d, sizeof d);
  return out;
}

std::vector<std::byte> encode_challenge(std::uint16_t t_id, HashId hash, DhGroup group,
                                        std::uint32_t seqnum, ByteView challenge, ByteView dh_value) {
  ChallengeHeader h;
  h.auth_type = static_cast<std::uint8_t>(AuthType::kDhchap);
  h.auth_id = static_cast<std::uint8_t>(MessageId::kChallenge);
  h.t_id = t_id;
  h.hl = static_cast<std::uint8_t>(challenge.size());
  h.hashid = static_cast<std::uint8_t>(hash);
  h.dhgid = static_cast<std::uint8_t>(group);
  h.dhvlen = static_cast<std::uint16_t>(dh_value.size());
  h.seqnum = seqnum;
  auto out = with_header(h, challenge.size() + dh_value.size());
  put(out, sizeof h, challenge);
  put(out, sizeof h + challenge.size(), dh_value);
  return out;
}

std::vector<std::byte> encode_reply(std::uint16_t t_id, ByteView response, ByteView challenge2,
                                    std::uint32_t seqnum, ByteView dh_value) {
  ReplyHeader h;
  h.auth_type = static_cast<std::uint8_t>(AuthType::kDhchap);
  h.auth_id = static_cast<std::uint8_t>(MessageId::kReply);
  h.t_id = t_id;
  h.hl = static_cast<std::uint8_t>(response.size());
  h.cvalid = challenge2.empty() ? 0 : 1;
  h.dhvlen = static_cast<std::uint16_t>(dh_value.size());
  h.seqnum = seqnum;
  auto out = with_header(h, 2 * response.size() + dh_value.size());
  put(out, sizeof h, response);
  put(out, sizeof h + response.size(), challenge2);  // else HL zero bytes
  put(out, sizeof h + 2 * response.size(), dh_value);
  return out;
}

std::vector<std::byte> encode_success1(std::uint16_t t_id, std::uint8_t hl, ByteView response) {
  Success1Header h;
  h.auth_type = static_cast<std::uint8_t>(AuthType::kDhchap);
  h.auth_id = static_cast<std::uint8_t>(MessageId::kSuccess1);
  h.t_id = t_id;
  h.hl = hl;
  h.rvalid = response.empty() ? 0 : 1;
  auto out = with_header(h, response.size());
  put(out, sizeof h, response);
  return out;
}

std::vector<std::byte> encode_success2(std::uint16_t t_id) {
  Success2Header h;
  h.auth_type = static_cast<std::uint8_t>(AuthType::kDhchap);
  h.auth_id = static_cast<std::uint8_t>(MessageId::kSuccess2);
  h.t_id = t_id;
  return with_header(h, 0);
}

std::vector<std::byte> encode_failure(MessageId id, std::uint16_t t_id, FailureReason reason) {
  FailureMessage m;
  m.auth_type = static_cast<std::uint8_t>(AuthType::kCommon);
  m.auth_id = static_cast<std::uint8_t>(id);
  m.t_id = t_id;
  m.rescode = kReasonAuthenticationFailure;
  m.rescode_exp = static_cast<std::uint8_t>(reason);
  return with_header(m, 0);
}

}  // namespace srdma::nvmf::auth
