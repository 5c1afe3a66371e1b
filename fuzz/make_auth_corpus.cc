// Writes the DH-HMAC-CHAP fuzzer's seed corpus: each message of a real
// exchange (bidirectional, ffdhe2048, and the null group), an AUTH_Failure,
// and the AUTH_Send / AUTH_Receive SQEs, each behind the mode byte that sends
// it where it belongs (fuzz/auth_fuzz.cc), so the fuzzer starts past the
// header checks. The challenges and DH values are random: each run writes
// other bytes of the same shapes.
// usage: make_auth_corpus <dir>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <variant>
#include <vector>

#include "nvmf/auth_dhchap.h"
#include "nvmf/auth_messages.h"

using namespace srdma::nvmf::auth;

namespace {

std::string dir;

void write(const std::string& name, std::uint8_t mode, const std::vector<std::byte>& bytes,
           bool message = true) {
  // Check what we write: a seed the parser refuses would be no seed.
  if (message && std::holds_alternative<Malformed>(parse_message(bytes))) {
    std::fprintf(stderr, "make_auth_corpus: %s does not parse\n", name.c_str());
    std::exit(1);
  }
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.put(static_cast<char>(mode));
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

DhchapKey key(std::uint8_t transform, std::uint8_t fill) {
  DhchapKey k;
  k.transform = transform;
  k.key.assign(32, fill);
  return k;
}

// One exchange; the messages in order (Negotiate, Challenge, Reply, Success1, Success2).
std::vector<std::vector<std::byte>> exchange(DhGroup group) {
  HostConfig hc;
  hc.host_nqn = "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6";
  hc.subsystem_nqn = "nqn.2024-01.io.softrdma:fuzz";
  hc.host_key = key(1, 0x11);
  hc.controller_key = key(2, 0x22);
  ControllerConfig cc;
  cc.host_nqn = hc.host_nqn;
  cc.subsystem_nqn = hc.subsystem_nqn;
  cc.host_key = hc.host_key;
  cc.controller_key = hc.controller_key;
  cc.dh_groups = {group};
  HostAuth host(hc, 0x2A);
  ControllerAuth ctrl(cc);
  std::vector<std::vector<std::byte>> wire;
  HostStep step = host.start();
  while (true) {
    if (!step.send.empty()) {
      wire.push_back(step.send);
      ctrl.on_send(step.send);
    }
    if (!step.receive) break;
    ControllerReceive r = ctrl.on_receive(kAuthReceiveLength);
    wire.push_back(r.data);
    step = host.on_receive(r.data);
  }
  if (!host.result().authenticated() || !ctrl.authenticated() || wire.size() != 5) {
    std::fprintf(stderr, "make_auth_corpus: the exchange failed: %s\n", host.result().detail.c_str());
    std::exit(1);
  }
  return wire;
}

std::vector<std::byte> sqe(const AuthCommand& c) {
  const auto* p = reinterpret_cast<const std::byte*>(&c);
  return std::vector<std::byte>(p, p + sizeof c);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_auth_corpus <dir>\n");
    return 2;
  }
  dir = argv[1];
  const auto dh = exchange(DhGroup::kFfdhe2048);
  const auto null = exchange(DhGroup::kNull);
  const char* names[] = {"negotiate", "challenge", "reply", "success1", "success2"};
  for (std::size_t i = 0; i < dh.size(); ++i) {
    write(std::string("parse_") + names[i] + "_ffdhe2048", 0, dh[i]);
    write(std::string("parse_") + names[i] + "_null", 0, null[i]);
  }
  write("controller_negotiate", 1, null[0]);
  write("controller_reply_null", 2, null[2]);
  write("host_challenge_null", 3, null[1]);
  write("host_challenge_ffdhe2048", 3, dh[1]);
  write("host_failure1", 3, encode_failure(MessageId::kFailure1, 0x2A, FailureReason::kHashUnusable));
  write("controller_failure2", 2, encode_failure(MessageId::kFailure2, 0x2A, FailureReason::kFailed));
  const srdma::nvmf::NvmeSgl sgl = srdma::nvmf::NvmeSgl::keyed(0x1000, 72, 0x1234, false);
  write("sqe_auth_send", 0, sqe(make_auth_send(1, 72, sgl)), false);
  write("sqe_auth_receive", 0, sqe(make_auth_receive(2, kAuthReceiveLength, sgl)), false);
  return 0;
}
