// libFuzzer target for NVMe in-band authentication (DH-HMAC-CHAP): the
// message parser and the AUTH_Send/Receive SQE parser on any bytes, and the
// host and controller state machines fed those bytes at each step where a
// hostile peer could send them. No crash, no read outside the input (ASan),
// no undefined behaviour (UBSan), and the promises checked below (a broken
// one traps): what the parser accepts has the lengths it says, whatever the
// machines send parses, and garbage never authenticates anybody.
//
// The first input byte picks where the rest goes:
//   0  the parsers only
//   1  a fresh controller: AUTH_Send(rest), AUTH_Receive, twice
//   2  a controller that has sent its Challenge: the rest as the host's Reply
//   3  a host that has sent AUTH_Negotiate: the rest as the controller's Challenge
//
// Built by scripts/fuzz.sh with clang++ -fsanitize=fuzzer,address,undefined
// and -lcrypto.
#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "nvmf/auth_dhchap.h"
#include "nvmf/auth_messages.h"

namespace {

using namespace srdma::nvmf::auth;
using srdma::nvmf::StatusCode;

void check(bool promise) {
  if (!promise) __builtin_trap();
}

// A view the parser returned lies inside the input, and every byte is readable.
void inside(ByteView v, std::span<const std::byte> input) {
  const auto* begin = reinterpret_cast<const std::uint8_t*>(input.data());
  if (v.empty()) return;
  check(v.data() >= begin && v.data() + v.size() <= begin + input.size());
  volatile std::uint8_t sink = 0;
  for (std::uint8_t b : v) sink = b;
  (void)sink;
}

void check_parse(std::span<const std::byte> input) {
  const Message m = parse_message(input);
  check(message_name(m) != nullptr);
  if (const auto* bad = std::get_if<Malformed>(&m)) {
    check(bad->what != nullptr && *bad->what != '\0');
    check(!bad->t_id_valid || input.size() >= 6);
  } else if (const auto* n = std::get_if<Negotiate>(&m)) {
    check(n->hash_ids.size() <= kMaxHashIds && n->dh_group_ids.size() <= kMaxDhGroupIds);
    check(input.size() >= sizeof(NegotiateHeader) + sizeof(ProtocolDescriptor));
    inside(n->hash_ids, input);
    inside(n->dh_group_ids, input);
  } else if (const auto* c = std::get_if<Challenge>(&m)) {
    check(c->challenge.size() == hash_length(c->hash));
    check(c->dh_value.size() == dh_value_length(c->group));
    inside(c->challenge, input);
    inside(c->dh_value, input);
  } else if (const auto* r = std::get_if<Reply>(&m)) {
    check(is_hash_length(r->hl) && r->response.size() == r->hl && r->challenge.size() == r->hl);
    check(r->dh_value.size() <= kMaxDhValueLength);
    inside(r->response, input);
    inside(r->challenge, input);
    inside(r->dh_value, input);
  } else if (const auto* s = std::get_if<Success1>(&m)) {
    check(is_hash_length(s->hl));
    check(s->rvalid ? s->response.size() == s->hl : s->response.empty());
    inside(s->response, input);
  } else if (const auto* f = std::get_if<Failure>(&m)) {
    check(f->id == MessageId::kFailure1 || f->id == MessageId::kFailure2);
    check(input.size() >= sizeof(FailureMessage));
  } else {
    check(input.size() >= sizeof(Success2Header));
  }
}

// What our own machines send is always a message the parser takes.
void check_emitted(const std::vector<std::byte>& bytes) {
  if (bytes.empty()) return;
  check(!std::holds_alternative<Malformed>(parse_message(bytes)));
  check(bytes.size() <= kMaxMessageLength);
}

DhchapKey fixed_key(std::uint8_t transform, std::uint8_t fill) {
  DhchapKey k;
  k.transform = transform;
  k.key.assign(32, fill);
  return k;
}

const char kHostNqn[] = "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6";
const char kSubsystemNqn[] = "nqn.2024-01.io.softrdma:fuzz";

ControllerConfig controller_config(bool null_group_only) {
  ControllerConfig c;
  c.host_nqn = kHostNqn;
  c.subsystem_nqn = kSubsystemNqn;
  c.host_key = fixed_key(1, 0x11);
  c.controller_key = fixed_key(2, 0x22);
  // DH key generation costs a millisecond: only where the input asks for it.
  if (null_group_only) c.dh_groups = {DhGroup::kNull};
  return c;
}

HostConfig host_config(bool bidirectional) {
  HostConfig c;
  c.host_nqn = kHostNqn;
  c.subsystem_nqn = kSubsystemNqn;
  c.host_key = fixed_key(1, 0x11);
  if (bidirectional) c.controller_key = fixed_key(2, 0x22);
  return c;
}

void receive(ControllerAuth& ctrl, std::uint32_t al) {
  ControllerReceive r = ctrl.on_receive(al);
  check(r.status == StatusCode::kSuccess || r.data.empty());
  check(r.data.size() <= al);
  check_emitted(r.data);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::span<const std::byte> input(reinterpret_cast<const std::byte*>(data), size);
  const std::span<const std::byte> msg = input.subspan(1);
  check_parse(msg);
  const std::uint32_t al = size > 2 ? data[size - 1] * 8u : kAuthReceiveLength;
  switch (data[0] % 4) {
    case 0: {
      auto sqe = parse_auth_command(msg);
      if (const auto* f = std::get_if<AuthCommandFields>(&sqe)) {
        check(msg.size() >= sizeof(AuthCommand) && f->length != 0);
        check(!f->send || f->length <= kMaxAuthSendLength);
      } else {
        check(*std::get<AuthCommandError>(sqe).reason != '\0');
      }
      break;
    }
    case 1: {
      static const ControllerConfig config = controller_config(false);
      ControllerAuth ctrl(config);
      check(ctrl.on_send(msg) == StatusCode::kSuccess);
      receive(ctrl, al);
      check(ctrl.on_send(msg) == StatusCode::kSuccess);
      receive(ctrl, kAuthReceiveLength);
      check(!ctrl.authenticated());
      break;
    }
    case 2: {
      static const ControllerConfig config = controller_config(true);
      static const std::vector<std::byte> negotiate = encode_negotiate(0x2A, kAllHashes, kAllDhGroups);
      ControllerAuth ctrl(config);
      ctrl.on_send(negotiate);
      receive(ctrl, kAuthReceiveLength);  // the Challenge: C1 is random, unknown to the input
      check(ctrl.on_send(msg) == StatusCode::kSuccess);
      receive(ctrl, al);
      check(!ctrl.authenticated());
      break;
    }
    case 3: {
      static const HostConfig uni = host_config(false);
      static const HostConfig bi = host_config(true);
      HostAuth host(size % 2 ? bi : uni, 0x2A);
      check_emitted(host.start().send);
      const HostStep step = host.on_receive(msg);
      check_emitted(step.send);
      // A Reply goes out only for a Challenge it took; a Failure2 ends it.
      check(step.receive == !host.done());
      check(!host.result().authenticated());
      // The next message is anything too: it never completes a bidirectional run.
      const HostStep next = host.on_receive(msg);
      check_emitted(next.send);
      if (size % 2) check(!host.result().authenticated());
      break;
    }
  }
  return 0;
}
