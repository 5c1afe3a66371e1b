// The DH-HMAC-CHAP state machines: one for the host, one for the controller.
// Pure: message bytes in, message bytes out, no I/O, no clock, no threads
// (one machine per queue, driven by that queue's thread). nvmf/auth.h says
// how a target and a host drive them with AUTH_Send / AUTH_Receive.
//
// The exchange (NVMe Base 2.0 section 8.13.5), T_ID chosen by the host:
//
//   host                                         controller
//   AUTH_Send    AUTH_Negotiate (hashes, groups) ->  picks a hash and a group
//   AUTH_Receive                             <- DH-HMAC-CHAP_Challenge (C1, S1, g^y)
//   AUTH_Send    DH-HMAC-CHAP_Reply (R1, [C2, S2], g^x) ->  checks R1
//   AUTH_Receive                             <- DH-HMAC-CHAP_Success1 ([R2])
//   AUTH_Send    DH-HMAC-CHAP_Success2       ->  (bidirectional only: R2 checked)
//
// A side that refuses a message answers with an AUTH_Failure carrying a
// reason code explanation: the controller with AUTH_Failure1 at the next
// AUTH_Receive, the host with AUTH_Failure2 in an AUTH_Send. The transaction
// is then over; the result says why.
//
// Not srdma::Result on purpose (clang 14 builds this for the fuzzer); the
// Result-returning helpers (secret parsing, config checks) are in nvmf/auth.h.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "nvmf/auth_crypto.h"
#include "nvmf/auth_messages.h"
#include "nvmf/auth_wire.h"

namespace srdma::nvmf::auth {

inline constexpr HashId kAllHashes[] = {HashId::kSha256, HashId::kSha384, HashId::kSha512};
// What Linux's host offers, in its order.
inline constexpr DhGroup kAllDhGroups[] = {DhGroup::kNull, DhGroup::kFfdhe2048, DhGroup::kFfdhe3072,
                                           DhGroup::kFfdhe4096, DhGroup::kFfdhe6144, DhGroup::kFfdhe8192};
// A controller's default preference: a DH exchange (ffdhe2048 is the
// cheapest) before plain HMAC-CHAP, which a host offering only null still gets.
inline constexpr DhGroup kControllerDhPreference[] = {DhGroup::kFfdhe2048, DhGroup::kFfdhe3072,
                                                      DhGroup::kFfdhe4096, DhGroup::kFfdhe6144,
                                                      DhGroup::kFfdhe8192, DhGroup::kNull};

// The longest NQN (NVMe Base 2.0 section 4.5): 223 bytes of UTF-8.
inline constexpr std::size_t kMaxNqnLength = 223;

struct HostConfig {
  std::string host_nqn;       // NQNh
  std::string subsystem_nqn;  // NQNc
  DhchapKey host_key;         // required (nvme connect --dhchap-secret)
  // Set: bidirectional, the host also authenticates the controller
  // (--dhchap-ctrl-secret). Empty: unidirectional.
  DhchapKey controller_key;
  // Offered in AUTH_Negotiate, in this order (the controller picks).
  std::vector<HashId> hashes{std::begin(kAllHashes), std::end(kAllHashes)};
  std::vector<DhGroup> dh_groups{std::begin(kAllDhGroups), std::end(kAllDhGroups)};
};

struct ControllerConfig {
  std::string host_nqn;       // the host being authenticated (its Connect data's HOSTNQN)
  std::string subsystem_nqn;  // this controller's subsystem (SUBNQN)
  DhchapKey host_key;         // the host's secret, required (nvmet's dhchap_key)
  // Answers a host that asks for bidirectional authentication (nvmet's
  // dhchap_ctrl_key). Empty: such a host is refused (Failure1, "failed").
  DhchapKey controller_key;
  // Acceptable, most preferred first: the first one the host offers is used.
  std::vector<HashId> hashes{std::begin(kAllHashes), std::end(kAllHashes)};
  std::vector<DhGroup> dh_groups{std::begin(kControllerDhPreference), std::end(kControllerDhPreference)};
};

// nullptr if the configuration is usable, else what is wrong with it (NQNs
// empty, too long or holding a NUL; a key not 32/48/64 bytes or with a
// transform id above 3; an empty or unknown hash or group list).
const char* check_config(const HostConfig& config);
const char* check_config(const ControllerConfig& config);

enum class AuthStatus : std::uint8_t { kInProgress, kAuthenticated, kFailed };

struct AuthResult {
  AuthStatus status = AuthStatus::kInProgress;
  // kFailed: the reason code explanation, ours or the one the peer sent.
  std::uint8_t reason = 0;
  bool reported_by_peer = false;  // the peer's AUTH_Failure ended it
  std::string detail;             // one sentence for a log line
  // What the transaction uses, once the Challenge is out (controller) or in (host).
  bool negotiated = false;
  HashId hash = HashId::kSha256;
  DhGroup group = DhGroup::kNull;
  bool bidirectional = false;

  bool authenticated() const { return status == AuthStatus::kAuthenticated; }
  bool failed() const { return status == AuthStatus::kFailed; }
};

// What the host does next.
struct HostStep {
  std::vector<std::byte> send;  // non-empty: AUTH_Send these bytes (TL = their size)
  bool receive = false;         // then AUTH_Receive (AL = kAuthReceiveLength) and on_receive()
};

class HostAuth {
 public:
  // `t_id` is the transaction id (Linux counts them per controller).
  HostAuth(HostConfig config, std::uint16_t t_id);

  // The first step: AUTH_Negotiate, then an AUTH_Receive. Nothing to send
  // (and result() failed) if the configuration is unusable.
  HostStep start();
  // The data of an AUTH_Receive: the Challenge, then Success1 (or a
  // Failure1). The next step: Reply then receive; Success2, Failure2 or
  // nothing, and done.
  HostStep on_receive(std::span<const std::byte> data);
  // An AUTH_Send or AUTH_Receive that completed with an error (NVMe status
  // or transport): the transaction is over.
  void on_command_failed(std::string what);

  const AuthResult& result() const { return result_; }
  bool done() const { return result_.status != AuthStatus::kInProgress; }
  std::uint16_t t_id() const { return t_id_; }

 private:
  enum class State : std::uint8_t { kIdle, kWaitChallenge, kWaitSuccess1, kDone };

  HostStep on_challenge(std::span<const std::byte> data);
  HostStep on_success1(std::span<const std::byte> data);
  HostStep fail(FailureReason reason, std::string detail);  // sends Failure2
  HostStep peer_failed(const Failure& f);

  HostConfig config_;
  std::uint16_t t_id_;
  State state_ = State::kIdle;
  AuthResult result_;
  SecretBytes kh_;  // transformed host key
  SecretBytes kc_;  // transformed controller key (bidirectional)
  SecretBytes session_key_;
  Bytes c2_;
  std::uint32_t s2_ = 0;
};

// What the controller answers an AUTH_Receive with.
struct ControllerReceive {
  // The AUTH_Receive's completion status: kSuccess with `data`, or a refusal
  // of the command itself (AL too small for the message, no transaction).
  StatusCode status = StatusCode::kSuccess;
  std::vector<std::byte> data;  // at most AL bytes: copy these to the host
};

class ControllerAuth {
 public:
  explicit ControllerAuth(ControllerConfig config);

  // The data of an AUTH_Send (TL bytes). The status to complete the
  // AUTH_Send with is always success: a refused message is answered by the
  // Failure1 the next AUTH_Receive returns (as Linux's nvmet does). A new
  // AUTH_Negotiate starts a new transaction at any time (re-authentication).
  StatusCode on_send(std::span<const std::byte> data);
  // An AUTH_Receive with allocation length `al`.
  ControllerReceive on_receive(std::uint32_t al);
  // The integrator's timer ran out (Linux: KATO, else 120 s, per step):
  // the transaction fails; a new Negotiate may start another.
  void expire();

  const AuthResult& result() const { return result_; }
  // May this queue run commands other than Connect and AUTH_Send/Receive?
  bool authenticated() const { return result_.status == AuthStatus::kAuthenticated; }

 private:
  enum class State : std::uint8_t {
    kWaitNegotiate,
    kSendChallenge,
    kWaitReply,
    kSendSuccess1,
    kWaitSuccess2,
    kSendFailure1,
    kAuthenticated,
    kFailed,
  };

  void on_negotiate(const Negotiate& n);
  void on_reply(const Reply& r);
  // Ends the transaction; the next AUTH_Receive gets a Failure1.
  void fail(FailureReason reason, std::string detail);
  // Hands `pending_` to an AUTH_Receive of `al` bytes and moves to `next`.
  ControllerReceive deliver(std::uint32_t al, State next);

  ControllerConfig config_;
  const char* config_error_;
  State state_ = State::kWaitNegotiate;
  AuthResult result_;
  std::uint16_t t_id_ = 0;
  SecretBytes kh_;
  SecretBytes kc_;
  Bytes c1_;
  std::uint32_t s1_ = 0;
  std::optional<DhKey> dh_;
  Bytes r2_;  // Success1's response, when bidirectional
  std::vector<std::byte> pending_;  // the message the next AUTH_Receive returns
};

}  // namespace srdma::nvmf::auth
