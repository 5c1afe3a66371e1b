// NVMe in-band authentication: DH-HMAC-CHAP (NVMe Base Specification 2.0
// section 8.13, TP 8006), as Linux's nvme-cli / nvme-fabrics host and nvmet
// target speak it, over OpenSSL 3.
//
// The pieces, each usable alone:
//   nvmf/auth_wire.h      identifiers, the AUTH_Send/AUTH_Receive SQE and the
//                         message layouts; Connect's AUTHREQ bits; SQE build/parse
//   nvmf/auth_messages.h  the message codec (hostile input: total, no overread)
//   nvmf/auth_crypto.h    hashes, HMACs, key transform, responses, FFDHE (OpenSSL)
//   nvmf/auth_dhchap.h    HostAuth / ControllerAuth: the pure state machines
//   nvmf/auth.h (here)    secrets in nvme-cli's text form, config checks, and
//                         how a target and a host drive the machines
//
// -------------------------------------------------------------- secrets --
//
// A secret is written the way `nvme gen-dhchap-key` prints it:
//     DHHC-1:XX:<base64 of key || CRC-32(key), little-endian>:
// XX is the transform: 00 none, 01/02/03 the key is first transformed with
// SHA-256/384/512 and the holder's NQN (auth_crypto.h, transform_key). The key
// is 32, 48 or 64 bytes with any transform (Linux allows the mix since 6.7).
// The host's secret is `nvme connect --dhchap-secret` (nvmet: the host's
// dhchap_key), the controller's `--dhchap-ctrl-secret` (nvmet: dhchap_ctrl_key).
//
// --------------------------------------------------- driving: the target --
//
// Per queue (admin and every I/O queue; Linux authenticates each), when the
// host's entry has a secret:
//  1. Connect succeeds as before, and the response's DW0 carries
//     kConnectAuthreqAtr (bit 17) next to the CNTLID. Create a
//     ControllerAuth{host_nqn from the Connect data, the subsystem NQN, the
//     host's secret, optional controller secret, the allowed hashes/groups}.
//  2. Until controller_auth.authenticated(), every command on the queue but
//     AUTH_Send and AUTH_Receive (Connect is already a sequence error) is
//     answered kAuthenticationRequired (SCT 1h, SC 91h, DNR), without running.
//  3. AUTH_Send (fctype 05h): parse_auth_command() (or the capsule parser's
//     equivalent) checks SECP/SPSP0/SPSP1/TL; fetch TL bytes (in-capsule data
//     or an RDMA READ of the keyed SGL, which must describe exactly TL bytes),
//     complete the command with controller_auth.on_send(bytes).
//  4. AUTH_Receive (fctype 06h): r = controller_auth.on_receive(AL); on
//     kSuccess RDMA WRITE r.data (<= AL bytes) to the host's buffer, then
//     complete with success; else complete with r.status.
//  5. When result().failed() after a Failure1 went out or a Failure2 came in,
//     tear the controller down as Linux does (nvmet_ctrl_fatal_error), or at
//     least keep answering kAuthenticationRequired. Time each step (Linux:
//     KATO, else 120 s) and call expire() when it runs out.
//
// ----------------------------------------------------- driving: the host --
//
// When a queue's Connect response has kConnectAuthreqAtr set (and no
// kConnectAuthreqAscr, which needs TLS: refuse the connection), before any
// other command on that queue:
//     HostAuth auth(config, t_id);            // t_id: a per-controller counter
//     HostStep step = auth.start();
//     while (!step.send.empty() || step.receive) {
//       if (!step.send.empty())  AUTH_Send(make_auth_send(cid, step.send.size(), sgl), step.send)
//       if (!step.receive) break;
//       data = AUTH_Receive(make_auth_receive(cid, kAuthReceiveLength, sgl))
//       step = auth.on_receive(data);
//     }
// Any command error: auth.on_command_failed(what). Then auth.result():
// authenticated() -> go on (Property Get/Set, Identify, ...); else fail the
// connect with result().detail. A host with a secret whose Connect response
// lacks ATR may go on unauthenticated (Linux does) or refuse; one without a
// secret whose response has ATR cannot connect.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "nvmf/auth_crypto.h"
#include "nvmf/auth_dhchap.h"
#include "nvmf/auth_messages.h"
#include "nvmf/auth_wire.h"
#include "srdma/status.h"

namespace srdma::nvmf::auth {

// Parses `DHHC-1:XX:<base64>:` (the final colon may be missing, as Linux
// allows). EINVAL, with the reason, for a wrong prefix or transform, bad
// base64, a decoded length other than 36/52/68 bytes, or a CRC mismatch.
Result<DhchapKey> parse_dhchap_secret(std::string_view text);

// The text form of `key`, as nvme gen-dhchap-key writes it. EINVAL for a key
// that is not 32/48/64 bytes or a transform above 3.
Result<std::string> format_dhchap_secret(const DhchapKey& key);

// A random secret (RAND_bytes) of `length` 32, 48 or 64 bytes, for
// `transform` 0..3: nvme gen-dhchap-key --key-length --hmac.
Result<DhchapKey> generate_dhchap_secret(std::size_t length, std::uint8_t transform);

// check_config() as Result: EINVAL with the reason.
Result<void> validate(const HostConfig& config);
Result<void> validate(const ControllerConfig& config);

}  // namespace srdma::nvmf::auth
