#include "nvmf/auth_dhchap.h"

#include <algorithm>
#include <variant>

namespace srdma::nvmf::auth {
namespace {

const char* check_nqn(const std::string& nqn, const char* empty, const char* too_long, const char* nul) {
  if (nqn.empty()) return empty;
  if (nqn.size() > kMaxNqnLength) return too_long;
  if (nqn.find('\0') != std::string::npos) return nul;
  return nullptr;
}

const char* check_key(const DhchapKey& key, const char* bad_length, const char* bad_transform) {
  if (!is_hash_length(key.key.size())) return bad_length;
  if (key.transform > 3) return bad_transform;
  return nullptr;
}

template <class Config>
const char* check_common(const Config& c) {
  if (const char* e = check_nqn(c.host_nqn, "host NQN is empty", "host NQN is longer than 223 bytes",
                                "host NQN holds a NUL"))
    return e;
  if (const char* e = check_nqn(c.subsystem_nqn, "subsystem NQN is empty",
                                "subsystem NQN is longer than 223 bytes", "subsystem NQN holds a NUL"))
    return e;
  if (const char* e = check_key(c.host_key, "host secret is not 32, 48 or 64 bytes",
                                "host secret's transform is not 0..3"))
    return e;
  if (!c.controller_key.empty())
    if (const char* e = check_key(c.controller_key, "controller secret is not 32, 48 or 64 bytes",
                                  "controller secret's transform is not 0..3"))
      return e;
  if (c.hashes.empty() || c.hashes.size() > kMaxHashIds) return "hash list is empty or longer than 30";
  for (HashId h : c.hashes)
    if (!is_known_hash(static_cast<std::uint8_t>(h))) return "hash list holds an unknown hash id";
  if (c.dh_groups.empty() || c.dh_groups.size() > kMaxDhGroupIds)
    return "DH group list is empty or longer than 30";
  for (DhGroup g : c.dh_groups)
    if (!is_known_dh_group(static_cast<std::uint8_t>(g))) return "DH group list holds an unknown group id";
  return nullptr;
}

bool contains(ByteView ids, std::uint8_t id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

struct TidOf {
  std::optional<std::uint16_t> operator()(const Malformed& x) const {
    return x.t_id_valid ? std::optional<std::uint16_t>(x.t_id) : std::nullopt;
  }
  std::optional<std::uint16_t> operator()(const auto& x) const { return x.t_id; }
};

std::optional<std::uint16_t> t_id_of(const Message& m) { return std::visit(TidOf{}, m); }

std::string peer_failure_detail(const char* who, const Failure& f) {
  return std::string(who) + " sent " + (f.id == MessageId::kFailure1 ? "AUTH_Failure1" : "AUTH_Failure2") +
         ": " + failure_reason_name(f.rescode_exp);
}

}  // namespace

const char* check_config(const HostConfig& config) { return check_common(config); }
const char* check_config(const ControllerConfig& config) { return check_common(config); }

// ------------------------------------------------------------------ host --

HostAuth::HostAuth(HostConfig config, std::uint16_t t_id) : config_(std::move(config)), t_id_(t_id) {}

HostStep HostAuth::start() {
  if (state_ != State::kIdle) return {};
  if (const char* e = check_config(config_)) {
    state_ = State::kDone;
    result_.status = AuthStatus::kFailed;
    result_.reason = static_cast<std::uint8_t>(FailureReason::kFailed);
    result_.detail = std::string("host configuration: ") + e;
    return {};
  }
  kh_ = transform_key(config_.host_key, config_.host_nqn);
  if (!config_.controller_key.empty()) kc_ = transform_key(config_.controller_key, config_.subsystem_nqn);
  state_ = State::kWaitChallenge;
  return HostStep{encode_negotiate(t_id_, config_.hashes, config_.dh_groups), true};
}

HostStep HostAuth::on_receive(std::span<const std::byte> data) {
  switch (state_) {
    case State::kWaitChallenge: return on_challenge(data);
    case State::kWaitSuccess1: return on_success1(data);
    case State::kIdle:
    case State::kDone:
      break;
  }
  return {};
}

void HostAuth::on_command_failed(std::string what) {
  if (state_ == State::kDone) return;
  state_ = State::kDone;
  result_.status = AuthStatus::kFailed;
  result_.reason = static_cast<std::uint8_t>(FailureReason::kFailed);
  result_.detail = std::move(what);
}

HostStep HostAuth::fail(FailureReason reason, std::string detail) {
  state_ = State::kDone;
  result_.status = AuthStatus::kFailed;
  result_.reason = static_cast<std::uint8_t>(reason);
  result_.detail = std::move(detail);
  return HostStep{encode_failure(MessageId::kFailure2, t_id_, reason), false};
}

HostStep HostAuth::peer_failed(const Failure& f) {
  state_ = State::kDone;
  result_.status = AuthStatus::kFailed;
  result_.reason = f.rescode_exp;
  result_.reported_by_peer = true;
  result_.detail = peer_failure_detail("controller", f);
  return {};
}

HostStep HostAuth::on_challenge(std::span<const std::byte> data) {
  const Message m = parse_message(data);
  if (const auto* f = std::get_if<Failure>(&m); f && f->id == MessageId::kFailure1) return peer_failed(*f);
  if (const auto* bad = std::get_if<Malformed>(&m)) return fail(bad->reason, bad->what);
  const auto* c = std::get_if<Challenge>(&m);
  if (c == nullptr)
    return fail(FailureReason::kIncorrectMessage, std::string("expected a Challenge, got ") + message_name(m));
  if (c->t_id != t_id_) return fail(FailureReason::kIncorrectPayload, "Challenge T_ID is not the transaction's");
  if (std::find(config_.hashes.begin(), config_.hashes.end(), c->hash) == config_.hashes.end())
    return fail(FailureReason::kHashUnusable, std::string("controller chose ") + hash_name(c->hash) +
                                                  ", which the host did not offer");
  if (std::find(config_.dh_groups.begin(), config_.dh_groups.end(), c->group) == config_.dh_groups.end())
    return fail(FailureReason::kDhGroupUnusable, std::string("controller chose ") + dh_group_name(c->group) +
                                                     ", which the host did not offer");
  // S1 = 0 is no sequence number (Linux never sends it).
  if (c->seqnum == 0) return fail(FailureReason::kIncorrectPayload, "Challenge sequence number is 0");
  result_.negotiated = true;
  result_.hash = c->hash;
  result_.group = c->group;

  Bytes dh_public;
  Bytes c1(c->challenge.begin(), c->challenge.end());
  if (c->group != DhGroup::kNull) {
    std::optional<DhKey> key = DhKey::generate(c->group);
    if (!key) return fail(FailureReason::kFailed, "DH key generation failed");
    session_key_ = key->shared_secret(c->dh_value);
    if (session_key_.empty()) return fail(FailureReason::kIncorrectPayload, "controller's DH value is invalid");
    dh_public = key->public_value();
    c1 = augmented_challenge(c->hash, session_key_, c->challenge);
  }
  const Bytes r1 = dhchap_response(Role::kHost, c->hash, kh_, c1, c->seqnum, t_id_, config_.host_nqn,
                                   config_.subsystem_nqn);
  if (r1.empty() || (c->group != DhGroup::kNull && dh_public.empty()))
    return fail(FailureReason::kFailed, "response computation failed");

  Bytes challenge2;
  s2_ = 0;
  if (!config_.controller_key.empty()) {
    result_.bidirectional = true;
    c2_.resize(hash_length(c->hash));
    s2_ = random_seqnum();
    if (!random_bytes(c2_) || s2_ == 0) return fail(FailureReason::kFailed, "no random challenge");
    challenge2 = c2_;
  }
  state_ = State::kWaitSuccess1;
  return HostStep{encode_reply(t_id_, r1, challenge2, s2_, dh_public), true};
}

HostStep HostAuth::on_success1(std::span<const std::byte> data) {
  const Message m = parse_message(data);
  if (const auto* f = std::get_if<Failure>(&m); f && f->id == MessageId::kFailure1) return peer_failed(*f);
  if (const auto* bad = std::get_if<Malformed>(&m)) return fail(bad->reason, bad->what);
  const auto* s = std::get_if<Success1>(&m);
  if (s == nullptr)
    return fail(FailureReason::kIncorrectMessage, std::string("expected a Success1, got ") + message_name(m));
  if (s->t_id != t_id_) return fail(FailureReason::kIncorrectPayload, "Success1 T_ID is not the transaction's");
  if (s->hl != hash_length(result_.hash))
    return fail(FailureReason::kIncorrectPayload, "Success1 HL is not the negotiated hash's");
  if (!result_.bidirectional) {
    if (s->rvalid) return fail(FailureReason::kIncorrectPayload, "Success1 carries a response nobody asked for");
    state_ = State::kDone;
    result_.status = AuthStatus::kAuthenticated;
    result_.detail = "authenticated to the controller";
    return {};
  }
  if (!s->rvalid) return fail(FailureReason::kFailed, "controller did not answer the host's challenge");
  Bytes c2 = c2_;
  if (result_.group != DhGroup::kNull) c2 = augmented_challenge(result_.hash, session_key_, c2_);
  const Bytes expected = dhchap_response(Role::kController, result_.hash, kc_, c2, s2_, t_id_,
                                         config_.host_nqn, config_.subsystem_nqn);
  if (expected.empty()) return fail(FailureReason::kFailed, "response computation failed");
  if (!constant_time_equal(expected, s->response))
    return fail(FailureReason::kFailed, "controller's response does not verify (wrong controller secret?)");
  state_ = State::kDone;
  result_.status = AuthStatus::kAuthenticated;
  result_.detail = "host and controller authenticated each other";
  return HostStep{encode_success2(t_id_), false};
}

// ------------------------------------------------------------ controller --

ControllerAuth::ControllerAuth(ControllerConfig config)
    : config_(std::move(config)), config_error_(check_config(config_)) {
  if (config_error_ == nullptr) {
    kh_ = transform_key(config_.host_key, config_.host_nqn);
    if (!config_.controller_key.empty()) kc_ = transform_key(config_.controller_key, config_.subsystem_nqn);
  }
}

void ControllerAuth::fail(FailureReason reason, std::string detail) {
  state_ = State::kSendFailure1;
  result_.status = AuthStatus::kFailed;
  result_.reason = static_cast<std::uint8_t>(reason);
  result_.reported_by_peer = false;
  result_.detail = std::move(detail);
  pending_ = encode_failure(MessageId::kFailure1, t_id_, reason);
}

void ControllerAuth::expire() {
  if (state_ == State::kAuthenticated || state_ == State::kFailed || state_ == State::kWaitNegotiate) return;
  fail(FailureReason::kFailed, "authentication transaction timed out");
  state_ = State::kFailed;
}

StatusCode ControllerAuth::on_send(std::span<const std::byte> data) {
  const Message m = parse_message(data);
  if (const auto* n = std::get_if<Negotiate>(&m)) {
    on_negotiate(*n);
    return StatusCode::kSuccess;
  }
  if (const auto* f = std::get_if<Failure>(&m); f && f->id == MessageId::kFailure2) {
    // The host gave up (it refused our Challenge or our response).
    state_ = State::kFailed;
    pending_.clear();
    result_.status = AuthStatus::kFailed;
    result_.reason = f->rescode_exp;
    result_.reported_by_peer = true;
    result_.detail = peer_failure_detail("host", *f);
    return StatusCode::kSuccess;
  }
  switch (state_) {
    case State::kWaitReply:
      if (const auto* r = std::get_if<Reply>(&m)) {
        on_reply(*r);
        return StatusCode::kSuccess;
      }
      break;
    case State::kWaitSuccess2:
      if (const auto* s = std::get_if<Success2>(&m)) {
        if (s->t_id != t_id_) {
          fail(FailureReason::kIncorrectPayload, "Success2 T_ID is not the transaction's");
        } else {
          state_ = State::kAuthenticated;
          result_.status = AuthStatus::kAuthenticated;
          result_.detail = "host and controller authenticated each other";
        }
        return StatusCode::kSuccess;
      }
      break;
    case State::kWaitNegotiate:
      // No transaction yet: answer with the T_ID the stray message carried.
      if (std::optional<std::uint16_t> t = t_id_of(m)) t_id_ = *t;
      break;
    case State::kFailed:
      return StatusCode::kSuccess;  // over; only a Negotiate starts again
    case State::kSendChallenge:
    case State::kSendSuccess1:
    case State::kSendFailure1:
    case State::kAuthenticated:
      break;
  }
  if (const auto* bad = std::get_if<Malformed>(&m)) {
    fail(bad->reason, bad->what);
  } else {
    fail(FailureReason::kIncorrectMessage, std::string("unexpected ") + message_name(m));
  }
  return StatusCode::kSuccess;
}

void ControllerAuth::on_negotiate(const Negotiate& n) {
  // A Negotiate starts over, whatever came before.
  result_ = AuthResult{};
  t_id_ = n.t_id;
  dh_.reset();
  r2_.clear();
  pending_.clear();
  if (config_error_ != nullptr)
    return fail(FailureReason::kFailed, std::string("controller configuration: ") + config_error_);
  if (n.sc_c != kScNone)
    return fail(FailureReason::kConcatMismatch, "host asks for secure channel concatenation");
  const auto hash = std::find_if(config_.hashes.begin(), config_.hashes.end(), [&](HashId h) {
    return contains(n.hash_ids, static_cast<std::uint8_t>(h));
  });
  if (hash == config_.hashes.end()) return fail(FailureReason::kHashUnusable, "no hash function in common");
  const auto group = std::find_if(config_.dh_groups.begin(), config_.dh_groups.end(), [&](DhGroup g) {
    return contains(n.dh_group_ids, static_cast<std::uint8_t>(g));
  });
  if (group == config_.dh_groups.end()) return fail(FailureReason::kDhGroupUnusable, "no DH group in common");
  result_.negotiated = true;
  result_.hash = *hash;
  result_.group = *group;

  c1_.assign(hash_length(*hash), 0);
  s1_ = random_seqnum();
  if (!random_bytes(c1_) || s1_ == 0) return fail(FailureReason::kFailed, "no random challenge");
  Bytes dh_public;
  if (*group != DhGroup::kNull) {
    dh_ = DhKey::generate(*group);
    if (dh_) dh_public = dh_->public_value();
    if (dh_public.empty()) return fail(FailureReason::kFailed, "DH key generation failed");
  }
  pending_ = encode_challenge(t_id_, *hash, *group, s1_, c1_, dh_public);
  state_ = State::kSendChallenge;
}

void ControllerAuth::on_reply(const Reply& r) {
  const HashId h = result_.hash;
  if (r.t_id != t_id_) return fail(FailureReason::kIncorrectPayload, "Reply T_ID is not the transaction's");
  if (r.hl != hash_length(h)) return fail(FailureReason::kIncorrectPayload, "Reply HL is not the negotiated hash's");
  if (r.dh_value.size() != dh_value_length(result_.group))
    return fail(FailureReason::kIncorrectPayload, "Reply DHVLEN is not the DH group's size");
  SecretBytes session;
  Bytes c1 = c1_;
  if (result_.group != DhGroup::kNull) {
    session = dh_->shared_secret(r.dh_value);
    if (session.empty()) return fail(FailureReason::kIncorrectPayload, "host's DH value is invalid");
    c1 = augmented_challenge(h, session, c1_);
  }
  const Bytes expected =
      dhchap_response(Role::kHost, h, kh_, c1, s1_, t_id_, config_.host_nqn, config_.subsystem_nqn);
  if (expected.empty()) return fail(FailureReason::kFailed, "response computation failed");
  if (!constant_time_equal(expected, r.response))
    return fail(FailureReason::kFailed, "host's response does not verify (wrong host secret?)");

  // SEQNUM 0 with CVALID is a C2 for a secure channel's PSK, not a request
  // to authenticate the controller (Linux's nvmet reads it so too).
  result_.bidirectional = r.cvalid && r.seqnum != 0;
  if (result_.bidirectional) {
    if (kc_.empty()) return fail(FailureReason::kFailed, "host asks the controller to authenticate and it has no secret");
    Bytes c2(r.challenge.begin(), r.challenge.end());
    if (result_.group != DhGroup::kNull) c2 = augmented_challenge(h, session, r.challenge);
    r2_ = dhchap_response(Role::kController, h, kc_, c2, r.seqnum, t_id_, config_.host_nqn,
                          config_.subsystem_nqn);
    if (r2_.empty()) return fail(FailureReason::kFailed, "response computation failed");
  }
  pending_ = encode_success1(t_id_, static_cast<std::uint8_t>(hash_length(h)), r2_);
  state_ = State::kSendSuccess1;
}

ControllerReceive ControllerAuth::deliver(std::uint32_t al, State next) {
  // Too small a buffer refuses the command; the message stays for a retry.
  if (al < pending_.size()) return ControllerReceive{StatusCode::kInvalidField, {}};
  ControllerReceive out{StatusCode::kSuccess, pending_};
  state_ = next;
  return out;
}

ControllerReceive ControllerAuth::on_receive(std::uint32_t al) {
  switch (state_) {
    case State::kSendChallenge:
      return deliver(al, State::kWaitReply);
    case State::kSendSuccess1: {
      const bool bidirectional = result_.bidirectional;
      ControllerReceive out = deliver(al, bidirectional ? State::kWaitSuccess2 : State::kAuthenticated);
      if (out.status == StatusCode::kSuccess && !bidirectional) {
        result_.status = AuthStatus::kAuthenticated;
        result_.detail = "host authenticated";
      }
      return out;
    }
    case State::kSendFailure1:
      return deliver(al, State::kFailed);
    case State::kFailed:
      // The Failure1 again, to a host that asks twice; nothing after a Failure2.
      if (pending_.empty()) return ControllerReceive{StatusCode::kCommandSequenceError, {}};
      return deliver(al, State::kFailed);
    case State::kWaitReply:
    case State::kWaitSuccess2:
      // The host asks for a message when it owes one.
      fail(FailureReason::kIncorrectMessage, "AUTH_Receive when the controller waits for an AUTH_Send");
      return deliver(al, State::kFailed);
    case State::kWaitNegotiate:
    case State::kAuthenticated:
      break;
  }
  return ControllerReceive{StatusCode::kCommandSequenceError, {}};
}

}  // namespace srdma::nvmf::auth
